// A worker's side of a shared-filesystem artifact store (worker/shared_store.h): whether it sees
// cartd's store, blobs written under their hash and read back checked.

#include "worker/shared_store.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/sha256.h"
#include "tests/support/test_support.h"

namespace cart::worker {
namespace {

namespace fs = std::filesystem;
using ::cart::testing::ReadFile;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::cart::testing::WriteFile;
using ::testing::HasSubstr;

cart::v1::SharedArtifactStore Store(const std::string& path, const std::string& id) {
  cart::v1::SharedArtifactStore store;
  store.set_path(path);
  store.set_store_id(id);
  return store;
}

TEST(SharedStoreTest, AWorkerSeesTheStoreOnlyWhereItsIdIs) {
  TempDir dir;
  const std::string root = dir.File("lab");
  EXPECT_THAT(SharedStoreDir(Store(root, "0123"), ""),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not visible at " + root)));
  WriteFile(root + "/.cart-store", "0123\n");
  CART_ASSERT_OK_AND_ASSIGN(std::string seen, SharedStoreDir(Store(root, "0123"), ""));
  EXPECT_EQ(seen, root);
  // Mounted elsewhere on this box: the worker's flag names where.
  const std::string mount = dir.File("mnt/cart");
  WriteFile(mount + "/.cart-store", "0123\n");
  CART_ASSERT_OK_AND_ASSIGN(seen, SharedStoreDir(Store("/not/here", "0123"), mount));
  EXPECT_EQ(seen, mount);
  // A copy of another store (or a stale snapshot) is not cartd's.
  WriteFile(mount + "/.cart-store", "4567\n");
  EXPECT_THAT(SharedStoreDir(Store(root, "0123"), mount),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("holds store 4567, cartd's is 0123")));
}

TEST(SharedStoreTest, ABlobIsWrittenUnderItsHashAndReadBackChecked) {
  TempDir dir;
  const std::string root = dir.File("lab");
  const std::string file = dir.File("ckpt/step-10.pt");
  std::string data(3 * (size_t{4} << 20) + 17, '\0');  // several copy chunks
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 % 251);
  WriteFile(file, data);
  CART_ASSERT_OK_AND_ASSIGN(std::string sha, WriteToSharedStore(root, file));
  EXPECT_EQ(sha, Sha256File(file));
  const std::string blob = root + "/" + sha.substr(0, 2) + "/" + sha;
  EXPECT_EQ(ReadFile(blob), data);
  EXPECT_TRUE(fs::is_empty(root + "/incoming"));  // the partial file became the blob
  // Written again (a retry): the same blob, nothing left behind.
  CART_ASSERT_OK_AND_ASSIGN(std::string again, WriteToSharedStore(root, file));
  EXPECT_EQ(again, sha);
  EXPECT_TRUE(fs::is_empty(root + "/incoming"));

  const std::string local = dir.File("cache/" + sha + ".pt");
  CART_ASSERT_OK(CopyFromSharedStore(root, sha, local));
  EXPECT_EQ(ReadFile(local), data);
  const std::string missing(64, 'e');
  EXPECT_THAT(CopyFromSharedStore(root, missing, dir.File("cache/m.pt")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("not in the shared store")));
  // Bytes that no longer hash to their name are not copied.
  WriteFile(blob, "bit rot");
  const std::string other = dir.File("cache/other.pt");
  EXPECT_THAT(CopyFromSharedStore(root, sha, other),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("corrupt")));
  EXPECT_FALSE(fs::exists(other));
  EXPECT_THAT(WriteToSharedStore(root, dir.File("no/such.pt")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("does not exist")));
  EXPECT_TRUE(fs::is_empty(root + "/incoming"));
}

}  // namespace
}  // namespace cart::worker
