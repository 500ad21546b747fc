// Atomic file writes: the content lands whole, and a secret is created with its final mode.

#include "common/file.h"

#include <sys/stat.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart {
namespace {

TEST(FileTest, AtomicWriteReplacesTheFileAndKeepsASecretPrivateFromTheStart) {
  ::cart::testing::TempDir dir;
  const std::string path = dir.File("tokens");
  ASSERT_TRUE(WriteFileAtomically(path, "old\n").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "secret-token user me\n", 0600).ok());
  EXPECT_EQ(ReadWholeFile(path).value(), "secret-token user me\n");
  struct stat info {};
  ASSERT_EQ(stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_FALSE(ReadWholeFile(dir.File("missing")).ok());
}

}  // namespace
}  // namespace cart
