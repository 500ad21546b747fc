// Data file identities (data/identity.h): what a run records of its data and checks on every
// attempt.

#include "data/identity.h"

#include <filesystem>
#include <fstream>

#include "common/sha256.h"
#include "common/strings.h"
#include "data/token_file.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::data {
namespace {

using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string WriteTokens(const std::string& path, const std::vector<int64_t>& ids,
                        const std::string& tokenizer = "bytes") {
  TokenFileInfo meta;
  meta.tokenizer = tokenizer;
  meta.vocab = 258;
  auto w = TokenFileWriter::Create(path, meta);
  EXPECT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(w->Append(ids).ok());
  auto info = w->Finish();
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? info->sha256 : "";
}

TEST(IdentityTest, ATokenFileIsItsBytesTokensAndTokenizer) {
  TempDir dir;
  const std::string path = dir.File("a.bin");
  const std::string sha = WriteTokens(path, {1, 2, 3, 4, 5});
  CART_ASSERT_OK_AND_ASSIGN(FileIdentity id, IdentifyTokenFile(path, nullptr));
  EXPECT_EQ(id.sha256, sha);
  EXPECT_EQ(id.sha256, Sha256File(path));
  EXPECT_EQ(id.size_bytes, 10);
  EXPECT_EQ(id.tokens, 5);
  EXPECT_EQ(id.tokenizer, "bytes");
  EXPECT_EQ(id.tokenizer_sha256.size(), 64u);
  // A plain file: bytes only.
  CART_ASSERT_OK_AND_ASSIGN(FileIdentity plain, IdentifyPlainFile(path, nullptr));
  EXPECT_EQ(plain.sha256, sha);
  EXPECT_EQ(plain.tokens, -1);
  EXPECT_TRUE(plain.tokenizer.empty());
}

TEST(IdentityTest, BytesThatNoLongerMatchTheirMetadataAreRefusedNamingBothHashes) {
  TempDir dir;
  const std::string path = dir.File("a.bin");
  const std::string sha = WriteTokens(path, {1, 2, 3, 4, 5});
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.put(9);
  }
  EXPECT_THAT(IdentifyTokenFile(path, nullptr),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(path), HasSubstr(sha), HasSubstr(Sha256File(path)),
                             HasSubstr("changed after `cart data prepare`"))));
  EXPECT_THAT(IdentifyTokenFile(dir.File("missing.bin"), nullptr),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.json")));
}

TEST(IdentityTest, TheCacheHashesOnceAndAgainWhenTheFileIsWrittenAgain) {
  TempDir dir;
  const std::string path = dir.File("a.bin");
  const std::string first = WriteTokens(path, {1, 2, 3});
  FileHashCache cache;
  CART_ASSERT_OK_AND_ASSIGN(auto a, cache.Sha256(path));
  EXPECT_EQ(a.first, first);
  // Another build of the file under the same name (renamed into place: a new inode and times).
  const std::string second = WriteTokens(path, {3, 2, 1});
  ASSERT_NE(first, second);
  CART_ASSERT_OK_AND_ASSIGN(auto b, cache.Sha256(path));
  EXPECT_EQ(b.first, second);
  // Rewritten in place, same size: the modification time moves.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.put(7);
  }
  CART_ASSERT_OK_AND_ASSIGN(auto c, cache.Sha256(path));
  EXPECT_EQ(c.first, Sha256File(path));
  EXPECT_NE(c.first, second);
  EXPECT_THAT(cache.Sha256(dir.path().string()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a regular file")));
}

TEST(IdentityTest, ATokenizersHashIsItsFilesWhereverTheyLie) {
  TempDir dir;
  for (const std::string sub : {"x", "y"}) {
    std::filesystem::create_directories(dir.File(sub));
    ::cart::testing::WriteFile(dir.File(sub + "/encoder.json"), "{\"a\": 0}");
    ::cart::testing::WriteFile(dir.File(sub + "/vocab.bpe"), "#version: 0.2\n");
  }
  const std::string x = TokenizerSha256("gpt2:" + dir.File("x"));
  EXPECT_EQ(x.size(), 64u);
  EXPECT_EQ(x, TokenizerSha256("gpt2:" + dir.File("y")));
  ::cart::testing::WriteFile(dir.File("y/vocab.bpe"), "#version: 0.2\na b\n");
  EXPECT_NE(x, TokenizerSha256("gpt2:" + dir.File("y")));
  EXPECT_EQ(TokenizerSha256("gpt2:" + dir.File("none")), "");
  EXPECT_EQ(TokenizerSha256(dir.File("none.model")), "");
  EXPECT_NE(TokenizerSha256("bytes"), TokenizerSha256("synth:32"));
}

TEST(IdentityTest, AMismatchNamesWhatDiffersOnBothSides) {
  FileIdentity recorded;
  recorded.sha256 = std::string(64, 'a');
  recorded.size_bytes = 4096;
  recorded.tokenizer = "gpt2:/a";
  recorded.tokenizer_sha256 = std::string(64, 'c');
  FileIdentity actual = recorded;
  actual.tokenizer = "gpt2:/elsewhere";  // the same tokenizer files in another directory
  EXPECT_EQ(IdentityMismatch(recorded, actual), std::nullopt);
  actual.tokenizer_sha256.clear();  // not readable here: not compared
  EXPECT_EQ(IdentityMismatch(recorded, actual), std::nullopt);
  actual.sha256 = std::string(64, 'b');
  actual.size_bytes = 2048;
  actual.tokenizer_sha256 = std::string(64, 'd');
  std::optional<std::string> why = IdentityMismatch(recorded, actual);
  ASSERT_TRUE(why.has_value());
  EXPECT_THAT(*why, HasSubstr(StrCat("sha256 ", std::string(64, 'b'), " here, ",
                                     std::string(64, 'a'), " recorded")));
  EXPECT_THAT(*why, HasSubstr("2048 bytes here, 4096 recorded"));
  EXPECT_THAT(*why, HasSubstr("tokenizer gpt2:/elsewhere (dddddddddddd…) here"));
}

}  // namespace
}  // namespace cart::data
