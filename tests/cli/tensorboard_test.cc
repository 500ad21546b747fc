// cli/tensorboard.h's pieces against known answers: CRC-32C's check value, and an event file's
// TFRecord framing (tests/python reads whole files back with TensorBoard's own reader).

#include "cli/tensorboard.h"

#include <cstring>

#include "gtest/gtest.h"

namespace cart::cli {
namespace {

TEST(TensorBoardTest, Crc32cMatchesTheCastagnoliCheckValue) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // the standard check value of CRC-32C
  EXPECT_EQ(Crc32c(""), 0u);
  const uint32_t crc = Crc32c("123456789");
  EXPECT_EQ(MaskedCrc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TensorBoardTest, RecordsAreFramedWithLengthsAndChecksums) {
  EventFileWriter writer(1'700'000'000.5);
  writer.AddScalars(7, 1'700'000'001.25, {{"loss", 2.5}, {"rho_max", 0.75}});
  const std::string& bytes = writer.bytes();
  size_t at = 0;
  int records = 0;
  while (at < bytes.size()) {
    ASSERT_GE(bytes.size() - at, 12u);
    uint64_t length = 0;
    std::memcpy(&length, bytes.data() + at, 8);
    uint32_t length_crc = 0;
    std::memcpy(&length_crc, bytes.data() + at + 8, 4);
    EXPECT_EQ(length_crc, MaskedCrc32c(std::string_view(bytes.data() + at, 8)));
    ASSERT_GE(bytes.size() - at - 12, length + 4);
    const std::string_view record(bytes.data() + at + 12, length);
    uint32_t record_crc = 0;
    std::memcpy(&record_crc, bytes.data() + at + 12 + length, 4);
    EXPECT_EQ(record_crc, MaskedCrc32c(record));
    if (records == 0) EXPECT_NE(record.find("brain.Event:2"), std::string_view::npos);
    if (records == 1) {
      EXPECT_NE(record.find("loss"), std::string_view::npos);
      EXPECT_NE(record.find("rho_max"), std::string_view::npos);
      EXPECT_EQ(static_cast<unsigned char>(record[0]), 0x09u);  // wall_time: field 1, fixed64
    }
    at += 12 + length + 4;
    ++records;
  }
  EXPECT_EQ(records, 2);
  EXPECT_EQ(writer.events(), 1);
}

}  // namespace
}  // namespace cart::cli
