#include "data/token_file.h"

#include <filesystem>
#include <thread>

#include "common/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::data {
namespace {

using ::cart::testing::IsOk;
using ::cart::testing::ReadFile;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::cart::testing::WriteFile;
using ::testing::HasSubstr;

TokenFileInfo Meta(int64_t vocab) {
  TokenFileInfo m;
  m.tokenizer = "synth:" + std::to_string(vocab);
  m.vocab = vocab;
  m.sources = {"test"};
  return m;
}

absl::StatusOr<TokenFileInfo> WriteTokens(const std::string& path, int64_t vocab,
                                          const std::vector<int64_t>& ids) {
  auto w = TokenFileWriter::Create(path, Meta(vocab));
  if (!w.ok()) return w.status();
  absl::Status st = w->Append(ids);
  if (!st.ok()) return st;
  return w->Finish();
}

TEST(TokenFileTest, RoundTripsUint16AtTheLargestVocabThatFits) {
  TempDir dir;
  const std::string path = dir.File("a.bin");
  std::vector<int64_t> ids = {0, 1, 255, 256, 65535, 42};
  CART_ASSERT_OK_AND_ASSIGN(TokenFileInfo info, WriteTokens(path, 65536, ids));
  EXPECT_EQ(info.dtype, "uint16");
  EXPECT_EQ(std::filesystem::file_size(path), ids.size() * 2);
  // Little-endian on disk: 65535 is ff ff, 256 is 00 01.
  const std::string bytes = ReadFile(path);
  EXPECT_EQ(static_cast<uint8_t>(bytes[6]), 0x00);
  EXPECT_EQ(static_cast<uint8_t>(bytes[7]), 0x01);
  CART_ASSERT_OK_AND_ASSIGN(TokenFile f, TokenFile::Open(path));
  EXPECT_EQ(f.size(), 6);
  std::vector<int64_t> got(6);
  ASSERT_THAT(f.Read(0, 6, got.data()), IsOk());
  EXPECT_EQ(got, ids);
  std::vector<int64_t> mid(2);
  ASSERT_THAT(f.Read(3, 2, mid.data()), IsOk());
  EXPECT_EQ(mid, (std::vector<int64_t>{256, 65535}));
}

TEST(TokenFileTest, UsesUint32AboveSixtyFiveThousandFiveHundredThirtySix) {
  TempDir dir;
  const std::string path = dir.File("b.bin");
  std::vector<int64_t> ids = {65536, 70000, 0, 3};
  CART_ASSERT_OK_AND_ASSIGN(TokenFileInfo info, WriteTokens(path, 70001, ids));
  EXPECT_EQ(info.dtype, "uint32");
  EXPECT_EQ(std::filesystem::file_size(path), 16u);
  CART_ASSERT_OK_AND_ASSIGN(TokenFile f, TokenFile::Open(path));
  std::vector<int64_t> got(4);
  ASSERT_THAT(f.Read(0, 4, got.data()), IsOk());
  EXPECT_EQ(got, ids);
}

TEST(TokenFileTest, MetadataRecordsCountShaAndSourcesAndRoundTrips) {
  TempDir dir;
  const std::string path = dir.File("c.bin");
  TokenFileInfo meta = Meta(300);
  meta.bos_id = 1;
  meta.eos_id = 2;
  meta.entropy_rate_nats = 1.25;
  auto w = TokenFileWriter::Create(path, meta);
  ASSERT_THAT(w, IsOk());
  // Many appends across the internal buffer boundary.
  std::vector<int64_t> all;
  for (int chunk = 0; chunk < 40; ++chunk) {
    std::vector<int64_t> ids(30000);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = (chunk * 7 + i) % 300;
    ASSERT_THAT(w->Append(ids), IsOk());
    all.insert(all.end(), ids.begin(), ids.end());
  }
  CART_ASSERT_OK_AND_ASSIGN(TokenFileInfo info, w->Finish());
  EXPECT_EQ(info.tokens, 1'200'000);
  EXPECT_EQ(info.sha256, Sha256File(path));
  CART_ASSERT_OK_AND_ASSIGN(TokenFileInfo read, ReadTokenFileInfo(dir.File("c.json")));
  EXPECT_EQ(read.tokenizer, "synth:300");
  EXPECT_EQ(read.vocab, 300);
  EXPECT_EQ(read.tokens, 1'200'000);
  EXPECT_EQ(read.dtype, "uint16");
  EXPECT_EQ(read.sha256, info.sha256);
  EXPECT_EQ(read.sources, std::vector<std::string>{"test"});
  EXPECT_EQ(read.bos_id, 1);
  EXPECT_EQ(read.eos_id, 2);
  ASSERT_TRUE(read.entropy_rate_nats.has_value());
  EXPECT_DOUBLE_EQ(*read.entropy_rate_nats, 1.25);
  CART_ASSERT_OK_AND_ASSIGN(TokenFile f, TokenFile::Open(path));
  EXPECT_THAT(f.Verify(), IsOk());
  std::vector<int64_t> got(all.size());
  ASSERT_THAT(f.Read(0, f.size(), got.data()), IsOk());
  EXPECT_EQ(got, all);
}

TEST(TokenFileTest, ReadPastTheEndIsOutOfRange) {
  TempDir dir;
  ASSERT_THAT(WriteTokens(dir.File("d.bin"), 10, {1, 2, 3}), IsOk());
  CART_ASSERT_OK_AND_ASSIGN(TokenFile f, TokenFile::Open(dir.File("d.bin")));
  std::vector<int64_t> out(4);
  EXPECT_THAT(f.Read(0, 4, out.data()),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("d.bin")));
  EXPECT_THAT(f.Read(3, 1, out.data()),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("d.bin")));
  EXPECT_THAT(f.Read(-1, 1, out.data()),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("d.bin")));
  EXPECT_THAT(f.Read(3, 0, out.data()), IsOk());
}

TEST(TokenFileTest, OpenReportsMissingFilesAndSizeMismatchWithThePath) {
  TempDir dir;
  EXPECT_THAT(TokenFile::Open(dir.File("none.bin")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("none.json")));
  ASSERT_THAT(WriteTokens(dir.File("e.bin"), 10, {1, 2, 3}), IsOk());
  WriteFile(dir.path() / "e.bin", std::string(5, '\0'));  // 5 bytes, not 3 × 2
  EXPECT_THAT(TokenFile::Open(dir.File("e.bin")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("e.bin: size is 5 bytes")));
  std::filesystem::remove(dir.path() / "e.bin");
  EXPECT_THAT(TokenFile::Open(dir.File("e.bin")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("e.bin")));
}

TEST(TokenFileTest, BadMetadataNamesFileAndField) {
  TempDir dir;
  WriteFile(dir.path() / "f.bin", "");
  WriteFile(dir.path() / "f.json", "{not json");
  EXPECT_THAT(TokenFile::Open(dir.File("f.bin")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("f.json")));
  WriteFile(dir.path() / "f.json",
            R"({"tokenizer":"bytes","vocab":258,"tokens":0,"dtype":"int8","sha256":""})");
  EXPECT_THAT(TokenFile::Open(dir.File("f.bin")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"dtype\"")));
  WriteFile(dir.path() / "f.json",
            R"({"tokenizer":"bytes","tokens":0,"dtype":"uint16","sha256":""})");
  EXPECT_THAT(TokenFile::Open(dir.File("f.bin")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"vocab\"")));
  WriteFile(
      dir.path() / "f.json",
      R"({"tokenizer":"bytes","vocab":258,"tokens":0,"dtype":"uint16","sha256":"","bos_id":999})");
  EXPECT_THAT(TokenFile::Open(dir.File("f.bin")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"bos_id\" is 999")));
}

TEST(TokenFileTest, VerifyDetectsChangedTokens) {
  TempDir dir;
  ASSERT_THAT(WriteTokens(dir.File("g.bin"), 10, {1, 2, 3}), IsOk());
  WriteFile(dir.path() / "g.bin", std::string("\x01\x00\x02\x00\x04\x00", 6));
  CART_ASSERT_OK_AND_ASSIGN(TokenFile f, TokenFile::Open(dir.File("g.bin")));
  EXPECT_THAT(f.Verify(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("g.bin")));
}

TEST(TokenFileTest, WriterRejectsIdsOutsideTheVocabulary) {
  TempDir dir;
  auto w = TokenFileWriter::Create(dir.File("h.bin"), Meta(10));
  ASSERT_THAT(w, IsOk());
  EXPECT_THAT(w->Append({3, 10}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("token id 10 at offset 1")));
  EXPECT_THAT(w->Append({-1}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("-1")));
  EXPECT_EQ(w->tokens(), 0);
  EXPECT_THAT(TokenFileWriter::Create(dir.File("h.tokens"), Meta(10)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(".bin")));
  EXPECT_THAT(TokenFileWriter::Create(dir.File("i.bin"), Meta(0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocab")));
}

TEST(TokenFileTest, AbandonedWriterLeavesTheOldFileAndNoTemporaries) {
  TempDir dir;
  const std::string path = dir.File("j.bin");
  CART_ASSERT_OK_AND_ASSIGN(TokenFileInfo old, WriteTokens(path, 10, {1, 2, 3}));
  {
    auto w = TokenFileWriter::Create(path, Meta(10));
    ASSERT_THAT(w, IsOk());
    ASSERT_THAT(w->Append({4, 5, 6, 7}), IsOk());
    // Destroyed without Finish().
  }
  CART_ASSERT_OK_AND_ASSIGN(TokenFile f, TokenFile::Open(path));
  EXPECT_EQ(f.size(), 3);
  EXPECT_EQ(f.info().sha256, old.sha256);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    ++files;
    EXPECT_THAT(e.path().filename().string(), ::testing::Not(HasSubstr(".tmp")));
  }
  EXPECT_EQ(files, 2);
}

TEST(TokenFileTest, WriterCreatesMissingDirectories) {
  TempDir dir;
  const std::string path = dir.File("new/sub/l.bin");
  ASSERT_THAT(WriteTokens(path, 10, {4}), IsOk());
  CART_ASSERT_OK_AND_ASSIGN(TokenFile f, TokenFile::Open(path));
  EXPECT_EQ(f.size(), 1);
}

TEST(TokenFileTest, EmptyFileOpensAndReadsNothing) {
  TempDir dir;
  CART_ASSERT_OK_AND_ASSIGN(TokenFileInfo info, WriteTokens(dir.File("k.bin"), 10, {}));
  EXPECT_EQ(info.sha256, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CART_ASSERT_OK_AND_ASSIGN(TokenFile f, TokenFile::Open(dir.File("k.bin")));
  EXPECT_EQ(f.size(), 0);
  EXPECT_THAT(f.Verify(), IsOk());
}

TEST(TokenFileTest, MovedFileStillReadsAndConcurrentReadsAgree) {
  TempDir dir;
  std::vector<int64_t> ids(100000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (i * 31) % 1000;
  ASSERT_THAT(WriteTokens(dir.File("m.bin"), 1000, ids), IsOk());
  CART_ASSERT_OK_AND_ASSIGN(TokenFile a, TokenFile::Open(dir.File("m.bin")));
  TokenFile b = std::move(a);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int64_t> out(1000);
      for (int64_t start = t; start + 1000 <= b.size(); start += 997) {
        if (!b.Read(start, 1000, out.data()).ok()) ++mismatches[t];
        for (int i = 0; i < 1000; ++i) mismatches[t] += out[i] != ids[start + i];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace cart::data
