// rpc/artifacts: what arrives is written whole or not at all, and must hash to what was promised.

#include "rpc/artifacts.h"

#include <deque>
#include <filesystem>
#include <string>

#include "common/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::rpc {
namespace {

using ::cart::testing::ReadFile;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::testing::HasSubstr;

// A server stream played from a list of chunks, ending with `end`.
class FakeReader : public grpc::ClientReaderInterface<cart::v1::ArtifactChunk> {
 public:
  FakeReader(std::deque<cart::v1::ArtifactChunk> chunks, grpc::Status end)
      : chunks_(std::move(chunks)), end_(std::move(end)) {}
  bool Read(cart::v1::ArtifactChunk* chunk) override {
    if (chunks_.empty()) return false;
    *chunk = chunks_.front();
    chunks_.pop_front();
    return true;
  }
  grpc::Status Finish() override { return end_; }
  bool NextMessageSize(uint32_t* size) override {
    *size = 1 << 20;
    return !chunks_.empty();
  }
  void WaitForInitialMetadata() override {}

 private:
  std::deque<cart::v1::ArtifactChunk> chunks_;
  grpc::Status end_;
};

std::string Sha(const std::string& bytes) {
  Sha256 h;
  h.Update(bytes);
  return h.HexDigest();
}

// `data` cut in two chunks; the first announces `sha` and `size` when `announce`.
std::deque<cart::v1::ArtifactChunk> Chunks(const std::string& data, bool announce,
                                           const std::string& sha, int64_t size) {
  cart::v1::ArtifactChunk a, b;
  if (announce) {
    a.set_sha256(sha);
    a.set_size_bytes(size);
  }
  a.set_data(data.substr(0, data.size() / 2));
  b.set_data(data.substr(data.size() / 2));
  return {a, b};
}

TEST(ArtifactsTest, ReceivedBytesAreWrittenWhenTheyHashToWhatWasAskedAndAnnounced) {
  TempDir dir;
  const std::string data = "checkpoint bytes, two chunks of them";
  FakeReader reader(Chunks(data, true, Sha(data), data.size()), grpc::Status::OK);
  const std::string path = dir.File("sub/ckpt.pt");
  absl::StatusOr<std::string> sha = ReceiveArtifact(reader, path, Sha(data), "artifact x");
  ASSERT_TRUE(sha.ok()) << sha.status();
  EXPECT_EQ(*sha, Sha(data));
  EXPECT_EQ(ReadFile(path), data);
}

TEST(ArtifactsTest, AnotherHashOrSizeLeavesNothingAtThePath) {
  TempDir dir;
  const std::string data = "checkpoint bytes";
  const std::string path = dir.File("ckpt.pt");
  {
    FakeReader reader(Chunks(data, false, "", 0), grpc::Status::OK);
    EXPECT_THAT(ReceiveArtifact(reader, path, Sha("other bytes"), "artifact y"),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("artifact y arrived with")));
  }
  {
    FakeReader reader(Chunks(data, true, Sha(data), data.size() + 1), grpc::Status::OK);
    EXPECT_THAT(ReceiveArtifact(reader, path, "", "checkpoint of run 7"),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("cartd announced 17 bytes")));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 0)
      << "no temporary file left behind";
}

TEST(ArtifactsTest, AFailedStreamReturnsItsStatusAndWritesNothing) {
  TempDir dir;
  const std::string data = "partial";
  FakeReader reader(Chunks(data, true, Sha(data), data.size()),
                    grpc::Status(grpc::StatusCode::NOT_FOUND, "run 9 has no checkpoint"));
  const std::string path = dir.File("ckpt.pt");
  EXPECT_THAT(ReceiveArtifact(reader, path, "", "checkpoint"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no checkpoint")));
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace cart::rpc
