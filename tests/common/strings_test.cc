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

namespace cart {
namespace {

TEST(Utf8LengthTest, CountsCodePointsNotBytes) {
  EXPECT_EQ(Utf8Length(""), 0u);
  EXPECT_EQ(Utf8Length("abc"), 3u);
  EXPECT_EQ(Utf8Length("ρ ≈ 0.9"), 7u);  // ρ is 2 bytes, ≈ 3
  EXPECT_EQ(Utf8Length("😀"), 1u);        // 4 bytes
}

TEST(Utf8CutTest, CutsOnACharacterBoundaryAndMarksTheCut) {
  const std::string text = "aρρρ";  // 1 + 3 × 2 bytes
  EXPECT_EQ(Utf8Boundary(text, 100), text.size());
  EXPECT_EQ(Utf8Boundary(text, 4), 3u);  // byte 4 is inside the second ρ
  EXPECT_EQ(Utf8Boundary(text, 5), 5u);
  EXPECT_EQ(Utf8Cut(text, 7), text);
  EXPECT_EQ(Utf8Cut(text, 6), "aρ…");  // 6 - 3 bytes for "…" leaves 3, one whole ρ after a
  EXPECT_EQ(Utf8Cut("ρρρρ", 6), "ρ…");
  EXPECT_EQ(Utf8Cut("ρρρρ", 4), "…");  // 1 byte left would split a ρ
}

}  // namespace
}  // namespace cart
