#pragma once

// SHA-256, streaming, computed by OpenSSL's libcrypto (already linked through gRPC's TLS); checked
// against the NIST test vectors in tests/common/sha256_test.cc.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX, kept out of this header

namespace cart {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void Update(const void* data, size_t size);
  void Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }
  // The digest as 64 lowercase hex characters. The object must not be updated afterwards.
  std::string HexDigest();

 private:
  struct Free {
    void operator()(evp_md_ctx_st* ctx) const;
  };
  std::unique_ptr<evp_md_ctx_st, Free> ctx_;
};

// Digest of a whole file, streamed in 1 MiB reads; empty string when the file cannot be read.
std::string Sha256File(const std::string& path);

}  // namespace cart
