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
TEST(CsvFieldTest, QuotesCommasQuotesAndBothLineBreaksOnly) {
  EXPECT_EQ(CsvField("plain 1.5"), "plain 1.5");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(CsvField("windows\r\nline"), "\"windows\r\nline\"");  // a bare \r breaks a row too
  EXPECT_EQ(CsvField(""), "");
}

TEST(SplitHostPortTest, SplitsAtTheLastColonAndDropsAnIpv6AddressesBrackets) {
  std::optional<HostPort> v4 = SplitHostPort("127.0.0.1:50051");
  ASSERT_TRUE(v4.has_value());
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 50051);
  std::optional<HostPort> v6 = SplitHostPort("[::1]:8080");
  ASSERT_TRUE(v6.has_value());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 8080);
  std::optional<HostPort> any = SplitHostPort(":0");
  ASSERT_TRUE(any.has_value());
  EXPECT_EQ(any->host, "");
  EXPECT_EQ(any->port, 0);
  EXPECT_FALSE(SplitHostPort("localhost").has_value());
  EXPECT_FALSE(SplitHostPort("host:http")->port.has_value());
}

TEST(ParseBoolTest, EveryFileSpellsYesAndNoTheSameWays) {
  for (const char* yes : {"true", "on", "yes", "1", "True", "ON"})
    EXPECT_EQ(ParseBool(yes), true) << yes;
  for (const char* no : {"false", "off", "no", "0", "FALSE", "Off"})
    EXPECT_EQ(ParseBool(no), false) << no;
  for (const char* neither : {"", "maybe", "2", "t", "truee"}) {
    EXPECT_FALSE(ParseBool(neither).has_value()) << neither;
  }
}

}  // namespace cart
