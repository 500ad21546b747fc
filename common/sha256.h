#pragma once

// SHA-256 (FIPS 180-4), streaming. Small and dependency-free so that no module needs OpenSSL;
// checked against the NIST test vectors in tests/common/sha256_test.cc.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cart {

class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t size);
  void Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }
  // The digest as 64 lowercase hex characters. The object must not be updated afterwards.
  std::string HexDigest();

 private:
  void Compress(const uint8_t* block);

  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_;
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

// Digest of a whole file, streamed in 1 MiB reads; empty string when the file cannot be read.
std::string Sha256File(const std::string& path);

}  // namespace cart
