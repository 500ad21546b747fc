#include "data/internal/unicode.h"

#include <algorithm>

#include "data/internal/unicode_tables.h"

namespace cart::data::internal {
namespace {

constexpr uint32_t kInvalid = 0xFFFFFFFF;

bool InRanges(uint32_t cp, const CodePointRange* ranges, size_t n) {
  const CodePointRange* end = ranges + n;
  const CodePointRange* it = std::upper_bound(
      ranges, end, cp, [](uint32_t c, const CodePointRange& r) { return c < r.first; });
  if (it == ranges) return false;
  --it;
  return cp <= it->last;
}

}  // namespace

uint32_t DecodeUtf8(std::string_view text, size_t pos, size_t* len) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(pos);
  *len = 1;
  if (b0 < 0x80) return b0;
  size_t n;
  uint32_t cp;
  uint32_t min;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return kInvalid;
  }
  if (pos + n > text.size()) return kInvalid;
  for (size_t i = 1; i < n; ++i) {
    const uint8_t b = byte(pos + i);
    if ((b & 0xC0) != 0x80) return kInvalid;
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not valid UTF-8.
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return kInvalid;
  *len = n;
  return cp;
}

bool IsLetter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return InRanges(cp, kLetterRanges, kLetterRangesSize);
}

bool IsNumber(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return InRanges(cp, kNumberRanges, kNumberRangesSize);
}

bool IsSpace(uint32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace cart::data::internal
