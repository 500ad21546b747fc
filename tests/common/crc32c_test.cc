#include "common/crc32c.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

// common/crc32c checksums every training checkpoint (train/checkpoint.h); these are published
// values: the check value of the CRC catalogue and RFC 3720's appendix B.4.
namespace cart {
namespace {

uint32_t Of(const std::vector<unsigned char>& bytes) {
  return Crc32c(0, bytes.data(), bytes.size());
}

TEST(Crc32cTest, MatchesPublishedValues) {
  EXPECT_EQ(Crc32c(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c(0, "", 0), 0u);
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<unsigned char>(i);
    down[i] = static_cast<unsigned char>(31 - i);
  }
  EXPECT_EQ(Of(zeros), 0x8A9136AAu);
  EXPECT_EQ(Of(ones), 0x62A8AB43u);
  EXPECT_EQ(Of(up), 0x46DD794Eu);
  EXPECT_EQ(Of(down), 0x113FDB5Cu);
}

TEST(Crc32cTest, AnySplitAndAlignmentGiveTheSameValue) {
  std::string data;
  for (int i = 0; i < 4099; ++i) data += static_cast<char>((i * 131) % 251);
  const uint32_t whole = Crc32c(0, data.data(), data.size());
  for (size_t cut : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{13}, size_t{4096}}) {
    const uint32_t head = Crc32c(0, data.data(), cut);
    EXPECT_EQ(Crc32c(head, data.data() + cut, data.size() - cut), whole) << cut;
  }
  // Unaligned starts: the same bytes at each offset of a buffer.
  for (size_t offset = 1; offset < 8; ++offset) {
    std::string shifted(offset, 'x');
    shifted += data;
    EXPECT_EQ(Crc32c(0, shifted.data() + offset, data.size()), whole) << offset;
  }
  EXPECT_NE(Crc32c(0, data.data(), data.size() - 1), whole);
}

}  // namespace
}  // namespace cart
