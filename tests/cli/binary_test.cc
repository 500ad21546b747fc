// `cart` and `cart-torch`: the commands that need LibTorch run in cart-torch, so every other
// command starts without loading it.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>

#include "common/file.h"
#include "common/process.h"
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

// Under a supervisor, nohup or `| tee`, cart up's stdout is a file or a pipe: the lines with its
// addresses must be there while it runs (they went through a full buffer and appeared at exit).
TEST(CartBinaryTest, UpShowsItsAddressesAtOnceWhenItsOutputIsAFile) {
  TempDir dir;
  SpawnOptions options;
  options.output_path = dir.File("up.out");
  options.die_with_parent = true;
  absl::StatusOr<pid_t> pid =
      Spawn(BinDir() + "/cart",
            {"up", "--data-dir", dir.File("data"), "--listen", "127.0.0.1:0", "--http",
             "127.0.0.1:0", "--workers", "0", "--client-config", dir.File("client.yaml")},
            options);
  ASSERT_TRUE(pid.ok()) << pid.status();
  const bool shown = WaitUntil([&] {
    absl::StatusOr<std::string> out = ReadWholeFile(dir.File("up.out"));
    return out.ok() && out->find("cartd listening on") != std::string::npos &&
           out->find("dashboard: http://") != std::string::npos &&
           out->find("press Ctrl-C to stop") != std::string::npos;
  });
  kill(*pid, SIGINT);
  int status = 0;
  waitpid(*pid, &status, 0);
  EXPECT_TRUE(shown) << "while cart up ran, its output file held: "
                     << ReadWholeFile(dir.File("up.out")).value_or("(nothing)");
}

}  // namespace
}  // namespace cart::testing
