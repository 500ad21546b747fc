// Atomic file writes: the content lands whole, and a secret is created with its final mode.

#include "common/file.h"

#include <sys/stat.h>

#include <filesystem>
#include <iterator>

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
  // A directory where a file was meant (a volume mounted over a config file's path) is an
  // error that says so, not an empty file.
  const absl::StatusOr<std::string> directory = ReadWholeFile(dir.path().string());
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(std::string(directory.status().message()), ::testing::HasSubstr("is a directory"));
}

TEST(FileTest, EachCommitPutsTheWholeFileInPlaceAndLeavesNoTemporary) {
  ::cart::testing::TempDir dir;
  for (int way = 0; way < 3; ++way) {
    const std::string path = dir.File("f" + std::to_string(way));
    auto writer = AtomicFileWriter::Open(path);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE(writer->Write("part one, ").ok());
    ASSERT_TRUE(writer->Write("part two").ok());
    EXPECT_FALSE(std::filesystem::exists(path));  // nothing under the name until committed
    const std::string target = way == 2 ? dir.File("named-later") : path;
    const absl::Status done = way == 0   ? writer->Commit()
                              : way == 1 ? writer->CommitWithoutSync()
                                         : writer->CommitAs(target);
    ASSERT_TRUE(done.ok()) << done;
    EXPECT_EQ(ReadWholeFile(target).value(), "part one, part two");
    EXPECT_FALSE(writer->Commit().ok());  // once only
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << entry.path();
  }
  {  // abandoned: nothing left
    auto writer = AtomicFileWriter::Open(dir.File("abandoned"));
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE(writer->Write("x").ok());
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()),
                          std::filesystem::directory_iterator()),
            3);
}

}  // namespace
}  // namespace cart
