// ArtifactStore: content addressing, verification on upload and on read, limits, names.

#include "server/artifacts.h"

#include <chrono>
#include <filesystem>

#include "common/sha256.h"
#include "common/status.h"
#include "tests/support/test_support.h"

namespace cart::server {
namespace {

using ::cart::testing::ReadFile;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::cart::testing::WriteFile;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string Sha256Hex(std::string_view bytes) {
  Sha256 hash;
  hash.Update(bytes);
  return hash.HexDigest();
}

class ArtifactStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ArtifactStoreOptions options;
    options.root = dir_.File("artifacts");
    options.max_bytes = 1 << 20;
    auto store = ArtifactStore::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  absl::Status PutInTwoPieces(const std::string& data, const std::string& sha, int64_t size) {
    CART_ASSIGN_OR_RETURN(auto upload, store_->BeginUpload(sha, size));
    CART_RETURN_IF_ERROR(upload->Append(data.substr(0, data.size() / 2)));
    CART_RETURN_IF_ERROR(upload->Append(data.substr(data.size() / 2)));
    return upload->Commit();
  }

  std::string ReadBack(const std::string& sha, absl::Status* status) {
    std::string out;
    *status = store_->Read(sha, 7, [&](std::string_view chunk) {
      out.append(chunk);
      return true;
    });
    return out;
  }

  TempDir dir_;
  std::unique_ptr<ArtifactStore> store_;
};

TEST_F(ArtifactStoreTest, VerifiedUploadIsStoredUnderItsHash) {
  const std::string data = "checkpoint bytes";
  const std::string sha = Sha256Hex(data);
  CART_ASSERT_OK(PutInTwoPieces(data, sha, data.size()));
  EXPECT_EQ(ArtifactStore::RelativePath(sha), sha.substr(0, 2) + "/" + sha);
  EXPECT_TRUE(std::filesystem::exists(store_->FullPath(sha)));
  CART_ASSERT_OK_AND_ASSIGN(auto size, store_->Size(sha));
  EXPECT_EQ(size, static_cast<int64_t>(data.size()));
  absl::Status status;
  EXPECT_EQ(ReadBack(sha, &status), data);
  CART_EXPECT_OK(status);
}

TEST_F(ArtifactStoreTest, UploadsBelowTheFreeSpaceFloorAreRefusedNamingTheNumbers) {
  ArtifactStoreOptions options;
  options.root = dir_.File("full");
  options.min_free_bytes = int64_t{1} << 62;  // more than any disk has
  CART_ASSERT_OK_AND_ASSIGN(auto store, ArtifactStore::Open(options));
  const std::string data = "bytes";
  EXPECT_THAT(store->BeginUpload(Sha256Hex(data), data.size()).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("bytes free on"), HasSubstr("below the floor"))));
}

TEST_F(ArtifactStoreTest, TemporaryFilesOfInterruptedUploadsAreRemovedAtOpen) {
  const std::string data = "kept";
  const std::string sha = Sha256Hex(data);
  CART_ASSERT_OK(PutInTwoPieces(data, sha, data.size()));
  // What a crash mid-upload leaves: AtomicFileWriter's temporary beside its target.
  WriteFile(store_->FullPath(sha) + ".tmp-999-0", "half an upload");
  std::filesystem::create_directories(dir_.File("artifacts/ab"));
  WriteFile(dir_.File("artifacts/ab/") + std::string(64, 'a') + ".tmp-1-2", "another");
  ArtifactStoreOptions options;
  options.root = dir_.File("artifacts");
  CART_ASSERT_OK_AND_ASSIGN(auto reopened, ArtifactStore::Open(options));
  EXPECT_EQ(reopened->swept_temp_files(), 2);
  EXPECT_FALSE(std::filesystem::exists(store_->FullPath(sha) + ".tmp-999-0"));
  EXPECT_TRUE(std::filesystem::exists(store_->FullPath(sha)));
}

TEST_F(ArtifactStoreTest, TheQuotaRefusesUploadsPastItAndRemovalsMakeRoom) {
  ArtifactStoreOptions options;
  options.root = dir_.File("quota");
  options.quota_bytes = 10;
  CART_ASSERT_OK_AND_ASSIGN(auto store, ArtifactStore::Open(options));
  auto put = [&](const std::string& data) -> absl::Status {
    CART_ASSIGN_OR_RETURN(auto upload, store->BeginUpload(Sha256Hex(data), data.size()));
    CART_RETURN_IF_ERROR(upload->Append(data));
    return upload->Commit();
  };
  CART_ASSERT_OK(put("123456"));
  EXPECT_EQ(store->stored_bytes(), 6);
  EXPECT_THAT(put("abcdef"), StatusIs(absl::StatusCode::kResourceExhausted,
                                      AllOf(HasSubstr("to 12 bytes, past its quota of 10"),
                                            HasSubstr("keep_checkpoints_per_run"))));
  CART_ASSERT_OK(put("123456"));  // the same blob again takes no room
  CART_ASSERT_OK(store->Remove(Sha256Hex("123456")));
  EXPECT_EQ(store->stored_bytes(), 0);
  CART_ASSERT_OK(store->Remove(Sha256Hex("123456")));  // already gone: fine
  CART_ASSERT_OK(put("abcdef"));
  // Reopened, the store counts what is on disk.
  CART_ASSERT_OK_AND_ASSIGN(auto reopened, ArtifactStore::Open(options));
  EXPECT_EQ(reopened->stored_bytes(), 6);
}

TEST_F(ArtifactStoreTest, UnknownBlobsOlderThanTheGraceAreRemoved) {
  const std::string known = "named by a checkpoint", old = "left by a crash", young = "in flight";
  for (const std::string* data : {&known, &old, &young}) {
    CART_ASSERT_OK(PutInTwoPieces(*data, Sha256Hex(*data), data->size()));
  }
  const auto two_hours_ago = std::filesystem::file_time_type::clock::now() - std::chrono::hours(2);
  std::filesystem::last_write_time(store_->FullPath(Sha256Hex(known)), two_hours_ago);
  std::filesystem::last_write_time(store_->FullPath(Sha256Hex(old)), two_hours_ago);
  const int64_t removed =
      store_->RemoveUnknown([&](const std::string& sha) { return sha == Sha256Hex(known); }, 3600);
  EXPECT_EQ(removed, 1);
  EXPECT_TRUE(std::filesystem::exists(store_->FullPath(Sha256Hex(known))));
  EXPECT_FALSE(std::filesystem::exists(store_->FullPath(Sha256Hex(old))));
  EXPECT_TRUE(std::filesystem::exists(store_->FullPath(Sha256Hex(young))));
  EXPECT_EQ(store_->stored_bytes(), static_cast<int64_t>(known.size() + young.size()));
}

TEST_F(ArtifactStoreTest, HashOrSizeMismatchStoresNothing) {
  const std::string data = "checkpoint bytes";
  const std::string other = Sha256Hex("something else");
  EXPECT_THAT(PutInTwoPieces(data, other, data.size()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("hash to")));
  EXPECT_THAT(PutInTwoPieces(data, Sha256Hex(data), data.size() + 1),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("declared")));
  EXPECT_THAT(PutInTwoPieces(data, Sha256Hex(data), data.size() - 1),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("more than the declared")));
  CART_ASSERT_OK_AND_ASSIGN(auto size, store_->Size(other));
  EXPECT_FALSE(size.has_value());
  // No temporary file is left behind.
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_.path())) {
    EXPECT_FALSE(entry.is_regular_file()) << entry.path();
  }
}

TEST_F(ArtifactStoreTest, SizeLimitAndNamesAreEnforced) {
  EXPECT_THAT(store_->BeginUpload(std::string(64, 'a'), (1 << 20) + 1),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("limit")));
  for (const std::string& bad :
       std::vector<std::string>{"../../etc/passwd", std::string(64, 'A'), std::string(63, 'a'),
                                std::string(65, 'a'), std::string("ab/") + std::string(61, 'a')}) {
    EXPECT_THAT(store_->BeginUpload(bad, 1),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hex")))
        << bad;
  }
}

TEST_F(ArtifactStoreTest, CorruptionOnDiskIsDetectedOnRead) {
  const std::string data = "checkpoint bytes";
  const std::string sha = Sha256Hex(data);
  CART_ASSERT_OK(PutInTwoPieces(data, sha, data.size()));
  ::cart::testing::WriteFile(store_->FullPath(sha), "checkpoint bytez");
  absl::Status status;
  ReadBack(sha, &status);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("corrupt")));
  EXPECT_THAT(store_->Read(Sha256Hex("never stored"), 7, [](std::string_view) { return true; }),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

// A shared store (artifact_store: {kind: shared_fs}): blobs a worker wrote under their names are
// adopted only when whole, hashing to their names and within the store's limits.
class SharedArtifactStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<ArtifactStore> Open(int64_t quota = 0, int64_t floor = 0) {
    ArtifactStoreOptions options;
    options.root = dir_.File("shared");
    options.max_bytes = 1 << 20;
    options.quota_bytes = quota;
    options.min_free_bytes = floor;
    options.shared = true;
    absl::StatusOr<std::unique_ptr<ArtifactStore>> store = ArtifactStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }
  // What a worker's write leaves: the bytes under the name it gives them.
  std::string WriteAsWorker(const ArtifactStore& store, const std::string& name,
                            const std::string& data) {
    WriteFile(store.FullPath(name), data);
    return name;
  }
  TempDir dir_;
};

TEST_F(SharedArtifactStoreTest, AWorkersBlobIsAdoptedOnceAndCounted) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  // The store's id, kept across opens: how a worker tells it sees this store.
  EXPECT_EQ(store->store_id().size(), 32u);
  EXPECT_EQ(ReadFile(dir_.File("shared/.cart-store")), store->store_id() + "\n");
  const std::string data = "a checkpoint a worker wrote";
  const std::string sha = WriteAsWorker(*store, Sha256Hex(data), data);
  EXPECT_EQ(store->stored_bytes(), 0);
  CART_ASSERT_OK(store->Adopt(sha, data.size()));
  EXPECT_EQ(store->stored_bytes(), static_cast<int64_t>(data.size()));
  CART_ASSERT_OK(store->Adopt(sha, data.size()));  // idempotent: counted once
  EXPECT_EQ(store->stored_bytes(), static_cast<int64_t>(data.size()));
  absl::Status read;
  std::string back;
  read = store->Read(sha, 5, [&](std::string_view chunk) {
    back.append(chunk);
    return true;
  });
  CART_EXPECT_OK(read);
  EXPECT_EQ(back, data);
  // An upload of the same blob takes no more room either.
  CART_ASSERT_OK_AND_ASSIGN(auto upload, store->BeginUpload(sha, data.size()));
  CART_ASSERT_OK(upload->Append(data));
  CART_ASSERT_OK(upload->Commit());
  EXPECT_EQ(store->stored_bytes(), static_cast<int64_t>(data.size()));
  CART_ASSERT_OK(store->Remove(sha));
  EXPECT_EQ(store->stored_bytes(), 0);
  const std::string id = store->store_id();
  store.reset();
  store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->store_id(), id);
}

TEST_F(SharedArtifactStoreTest, BadBlobsAreRefusedAndRemoved) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_THAT(store->Adopt(Sha256Hex("never written"), 13),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("not in the shared store")));
  const std::string sized = WriteAsWorker(*store, Sha256Hex("short"), "short");
  EXPECT_THAT(store->Adopt(sized, 6),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("has 5 bytes, declared 6")));
  EXPECT_FALSE(std::filesystem::exists(store->FullPath(sized)));
  // Bytes under another blob's name (a torn or tampered write).
  const std::string forged = WriteAsWorker(*store, Sha256Hex("genuine"), "forged!");
  EXPECT_THAT(store->Adopt(forged, 7), StatusIs(absl::StatusCode::kDataLoss,
                                                HasSubstr("hashes to " + Sha256Hex("forged!"))));
  EXPECT_FALSE(std::filesystem::exists(store->FullPath(forged)));
  EXPECT_EQ(store->stored_bytes(), 0);
  const std::string big(size_t{1} << 20 | 1, 'x');
  const std::string too_big = WriteAsWorker(*store, Sha256Hex(big), big);
  EXPECT_THAT(store->Adopt(too_big, big.size()),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("the limit is 1048576")));
  EXPECT_FALSE(std::filesystem::exists(store->FullPath(too_big)));
  EXPECT_THAT(store->Adopt("../../etc/passwd", 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hex")));
}

TEST_F(SharedArtifactStoreTest, QuotaAndDiskFloorRefuseAdoptionsAsTheyRefuseUploads) {
  auto store = Open(/*quota=*/10);
  ASSERT_NE(store, nullptr);
  CART_ASSERT_OK(store->Adopt(WriteAsWorker(*store, Sha256Hex("123456"), "123456"), 6));
  const std::string over = WriteAsWorker(*store, Sha256Hex("abcdef"), "abcdef");
  EXPECT_THAT(store->Adopt(over, 6), StatusIs(absl::StatusCode::kResourceExhausted,
                                              HasSubstr("to 12 bytes, past its quota of 10")));
  EXPECT_FALSE(std::filesystem::exists(store->FullPath(over)));
  store.reset();
  store = Open(/*quota=*/0, /*floor=*/int64_t{1} << 60);  // a floor no disk reaches
  ASSERT_NE(store, nullptr);
  const std::string floor = WriteAsWorker(*store, Sha256Hex("abcdef"), "abcdef");
  EXPECT_THAT(store->Adopt(floor, 6),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("below the floor")));
  EXPECT_FALSE(std::filesystem::exists(store->FullPath(floor)));
}

TEST_F(SharedArtifactStoreTest, OnlyASharedStoreAdoptsAndWorkersPartialFilesOutliveARestart) {
  ArtifactStoreOptions own;
  own.root = dir_.File("own");
  CART_ASSERT_OK_AND_ASSIGN(auto cartds, ArtifactStore::Open(own));
  WriteFile(cartds->FullPath(Sha256Hex("x")), "x");
  EXPECT_THAT(cartds->Adopt(Sha256Hex("x"), 1),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not shared")));

  auto store = Open();
  ASSERT_NE(store, nullptr);
  // A worker writing while cartd restarts: its partial file stays (cartd's own temporaries go).
  const std::string partial = dir_.File("shared/incoming/box-1a2b.tmp-77-0");
  WriteFile(partial, "half a checkpoint");
  store.reset();
  store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->swept_temp_files(), 0);
  EXPECT_TRUE(std::filesystem::exists(partial));
  EXPECT_EQ(store->RemoveUnknown([](const std::string&) { return false; }, 3600), 0);
  EXPECT_TRUE(std::filesystem::exists(partial));
  // One a worker that died left hours ago goes.
  std::filesystem::last_write_time(
      partial, std::filesystem::file_time_type::clock::now() - std::chrono::hours(2));
  EXPECT_EQ(store->RemoveUnknown([](const std::string&) { return false; }, 3600), 1);
  EXPECT_FALSE(std::filesystem::exists(partial));
}

}  // namespace
}  // namespace cart::server
