// Every program is linked with libstdc++ ahead of its other shared libraries (the top-level
// CMakeLists.txt; docs/architecture.md "libstdc++ first"), so that a library exporting its own
// copies of libstdc++'s functions, as PyTorch's wheels do with std::filesystem, cannot take this
// program's calls. This program is linked against such a library (std_fs_interposer.cc): its
// remove_all must be libstdc++'s, which removes the folder, not the copy, which removes nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <system_error>

#include "tests/support/test_support.h"

extern "C" int cart_interposer_calls;

namespace cart {
namespace {

TEST(LinkOrderTest, LibstdcxxsOwnFilesystemCallsWinOverALibrarysCopies) {
  testing::TempDir dir;
  const std::filesystem::path tree = dir.File("tree");
  std::filesystem::create_directories(tree / "a" / "b");
  std::ofstream(tree / "a" / "b" / "file") << "x";

  std::error_code ec;
  const std::uintmax_t removed = std::filesystem::remove_all(tree, ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_EQ(cart_interposer_calls, 0)
      << "std::filesystem::remove_all bound to the copy in libcart_std_fs_interposer.so: "
         "libstdc++ is not first in this program's lookup order";
  EXPECT_EQ(removed, 4u);  // tree, a, b, file
  EXPECT_FALSE(std::filesystem::exists(tree));
}

}  // namespace
}  // namespace cart
