#pragma once

// Streaming SHA-256 over OpenSSL's EVP interface. OpenSSL is already in every cartd build (gRPC's
// TLS needs it; Debian's libgrpc-dev depends on libssl-dev), so the daemon uses the vetted,
// hardware-accelerated implementation instead of carrying its own.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace cart::server::internal {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(std::string_view bytes);
  // The digest as 64 lowercase hex characters. The object must not be updated afterwards.
  std::string HexDigest();

 private:
  struct Context;
  std::unique_ptr<Context> context_;
};

// SHA-256 of `bytes` as 64 lowercase hex characters.
std::string Sha256Hex(std::string_view bytes);

}  // namespace cart::server::internal
