#include "common/crc32c.h"

#include <array>
#include <cstring>

#if defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#endif

namespace cart {
namespace {

constexpr uint32_t kReflectedPoly = 0x82F63B78u;

std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kReflectedPoly : c >> 1;
    table[i] = c;
  }
  return table;
}

uint32_t Portable(uint32_t state, const unsigned char* p, size_t n) {
  static const std::array<uint32_t, 256> table = MakeTable();
  for (size_t i = 0; i < n; ++i) state = table[(state ^ p[i]) & 0xffu] ^ (state >> 8);
  return state;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t Hardware(uint32_t state, const unsigned char* p,
                                                    size_t n) {
  uint64_t c = state;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}
bool HasHardware() { return __builtin_cpu_supports("sse4.2"); }
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
uint32_t Hardware(uint32_t state, const unsigned char* p, size_t n) {
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    state = __crc32cd(state, word);
  }
  for (; n > 0; --n, ++p) state = __crc32cb(state, *p);
  return state;
}
bool HasHardware() { return true; }
#else
uint32_t Hardware(uint32_t state, const unsigned char* p, size_t n) {
  return Portable(state, p, n);
}
bool HasHardware() { return false; }
#endif

}  // namespace

bool Crc32cInHardware() {
  static const bool hardware = HasHardware();
  return hardware;
}

uint32_t Crc32c(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  const uint32_t state = ~crc;
  return ~(Crc32cInHardware() ? Hardware(state, p, size) : Portable(state, p, size));
}

}  // namespace cart
