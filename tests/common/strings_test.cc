#include "common/strings.h"

#include "gtest/gtest.h"

namespace cart {
namespace {

TEST(FirstInvalidUtf8Test, FindsTheFirstBadByteOrNone) {
  EXPECT_EQ(FirstInvalidUtf8("ρ = 0.9 → 🙂"), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("caf\xe9"), 3u);       // Latin-1 é
  EXPECT_EQ(FirstInvalidUtf8("ok\xc0\xaf"), 2u);    // overlong '/'
  EXPECT_EQ(FirstInvalidUtf8("\xed\xa0\x80"), 0u);  // a UTF-16 surrogate
  EXPECT_EQ(FirstInvalidUtf8("ρ\xe2\x82"), 2u);     // cut short
}

TEST(ValidUtf8Test, KeepsWellFormedTextAndReplacesEveryBadByte) {
  EXPECT_EQ(ValidUtf8("plain ascii"), "plain ascii");
  EXPECT_EQ(ValidUtf8("ρ = 0.9 → 1 · 🙂"), "ρ = 0.9 → 1 · 🙂");
  EXPECT_EQ(ValidUtf8("caf\xe9.txt"), "caf?.txt");   // Latin-1 é
  EXPECT_EQ(ValidUtf8("\xc3"), "?");                 // truncated sequence
  EXPECT_EQ(ValidUtf8("a\x80z"), "a?z");             // stray continuation byte
  EXPECT_EQ(ValidUtf8("\xc0\xaf"), "??");            // overlong '/'
  EXPECT_EQ(ValidUtf8("\xed\xa0\x80"), "???");       // a UTF-16 surrogate
  EXPECT_EQ(ValidUtf8("\xf4\x90\x80\x80"), "????");  // past U+10FFFF
  EXPECT_EQ(ValidUtf8(std::string("nul\0ok", 6)), std::string("nul\0ok", 6));
}

}  // namespace
}  // namespace cart
