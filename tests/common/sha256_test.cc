#include "common/sha256.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/support/test_support.h"

// common/sha256 checksums every token file (TokenFileInfo::sha256); these are its NIST checks.
namespace cart {
namespace {

std::string Digest(const std::string& s) {
  Sha256 sha;
  sha.Update(s);
  return sha.HexDigest();
}

// FIPS 180-4 / NIST CAVP example vectors.
TEST(Sha256Test, MatchesNistVectors) {
  EXPECT_EQ(Digest(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Digest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Digest(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256Test, StreamingInAnyPiecesEqualsOneShot) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += static_cast<char>((i * 131) % 251);
  const std::string want = Digest(data);
  for (size_t step : {1u, 3u, 63u, 64u, 65u, 200u}) {
    Sha256 sha;
    for (size_t pos = 0; pos < data.size(); pos += step) sha.Update(data.substr(pos, step));
    EXPECT_EQ(sha.HexDigest(), want) << "step " << step;
  }
}

TEST(Sha256Test, FileDigestEqualsDataDigest) {
  cart::testing::TempDir dir;
  cart::testing::WriteFile(dir.path() / "f", "abc");
  EXPECT_EQ(Sha256File(dir.File("f")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256File(dir.File("missing")), "");
}

}  // namespace
}  // namespace cart
