// `cart` and `cart-torch`: the commands that need LibTorch run in cart-torch, so every other
// command starts without loading it.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/test_support.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(CartBinaryTest, CartDoesNotLinkLibTorchAndHandsTorchCommandsToCartTorch) {
  const CommandResult ldd = RunCommand("ldd " + BinDir() + "/cart 2>&1");
  ASSERT_EQ(ldd.exit_code, 0) << ldd.output;
  EXPECT_THAT(ldd.output, Not(HasSubstr("libtorch")));
  EXPECT_THAT(ldd.output, Not(HasSubstr("libc10")));
  if (!std::filesystem::exists(BinDir() + "/cart-torch")) {
    GTEST_SKIP() << "built without LibTorch: no cart-torch";
  }
  // `cart train --help` is answered by cart-torch, under the name cart.
  const CommandResult help = RunCommand(BinDir() + "/cart train --help 2>&1");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_THAT(help.output, HasSubstr("Usage: cart train"));
  // And `cart --help` still lists every command.
  const CommandResult all = RunCommand(BinDir() + "/cart --help 2>&1");
  for (const char* command :
       {"sweep", "runs", "up", "report", "train", "eval", "model", "export"}) {
    EXPECT_THAT(all.output, HasSubstr(std::string("\n  ") + command + " ")) << command;
  }
}

}  // namespace
}  // namespace cart::testing
