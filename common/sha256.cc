#include "common/sha256.h"

#include <openssl/evp.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cart {

void Sha256::Free::operator()(evp_md_ctx_st* ctx) const { EVP_MD_CTX_free(ctx); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Failure here means libcrypto cannot allocate or has no SHA-256: nothing sensible remains.
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) std::abort();
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::Update(const void* data, size_t size) {
  if (size > 0) EVP_DigestUpdate(ctx_.get(), data, size);
}

std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx_.get(), digest, &length);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 0xF];
  }
  return out;
}

std::string Sha256File(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return "";
  Sha256 sha;
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) sha.Update(buf.data(), n);
  if (std::ferror(f.get())) return "";
  return sha.HexDigest();
}

}  // namespace cart
