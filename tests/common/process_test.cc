// common/process: Spawn starts the program with the asked environment and output; a background
// thread's priority is lowered for that thread alone.

#include "common/process.h"

#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart {
namespace {

using ::cart::testing::ReadFile;
using ::cart::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

int ExitStatus(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(ProcessTest, TheChildGetsTheArgumentsEnvironmentAndOutputAsked) {
  TempDir dir;
  setenv("CART_PROCESS_TEST_KEEP", "kept", 1);
  setenv("CART_PROCESS_TEST_DROP", "dropped", 1);
  setenv("CART_PROCESS_TEST_SET", "old", 1);
  SpawnOptions options;
  options.env = {"CART_PROCESS_TEST_SET=new"};
  options.unset_env = {"CART_PROCESS_TEST_DROP"};
  options.output_path = dir.File("out.log");
  absl::StatusOr<pid_t> pid = Spawn("/bin/sh",
                                    {"-c",
                                     "echo \"$0 $CART_PROCESS_TEST_KEEP $CART_PROCESS_TEST_SET "
                                     "[$CART_PROCESS_TEST_DROP]\"; echo err >&2; exit 3",
                                     "arg0"},
                                    options);
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(ExitStatus(*pid), 3);
  const std::string out = ReadFile(dir.File("out.log"));
  EXPECT_THAT(out, HasSubstr("arg0 kept new []"));
  EXPECT_THAT(out, HasSubstr("err"));
  EXPECT_THAT(out, Not(HasSubstr("old")));
}

TEST(ProcessTest, AProgramThatCannotBeExecutedExitsWith127) {
  absl::StatusOr<pid_t> pid = Spawn("/nonexistent/program", {});
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(ExitStatus(*pid), 127);
}

int ThisThreadsIoPriority() {
  constexpr int kWhoProcess = 1;
  return static_cast<int>(syscall(SYS_ioprio_get, kWhoProcess, static_cast<int>(gettid())));
}

TEST(ThreadPriorityTest, OnlyTheCallingThreadAndTheThreadsItStartsAreLowered) {
  const int before = ThisThreadsNiceness();
  const int io_before = ThisThreadsIoPriority();
  int lowered = -100, io = -1, inherited = -100, again = -100;
  std::thread([&] {
    LowerThisThreadsPriority(10);
    lowered = ThisThreadsNiceness();
    io = ThisThreadsIoPriority();
    std::thread([&] { inherited = ThisThreadsNiceness(); }).join();
    LowerThisThreadsPriority(5);  // never raised back
    again = ThisThreadsNiceness();
  }).join();
  EXPECT_EQ(lowered, std::max(before, 10));
  EXPECT_EQ(io, (2 << 13) | 7);  // best-effort class, level 7
  EXPECT_EQ(inherited, lowered);
  EXPECT_EQ(again, lowered);
  // This thread is as it was.
  EXPECT_EQ(ThisThreadsNiceness(), before);
  EXPECT_EQ(ThisThreadsIoPriority(), io_before);
}

const char* FakeEnv(const char* name) {
  if (std::string_view(name) == "POD_NAME") return "cart-worker-7d9f-x2";
  if (std::string_view(name) == "EMPTY") return "";
  return nullptr;
}

TEST(ExpandEnvReferencesTest, ReplacesEachReferenceAndNamesTheOneThatIsUnset) {
  EXPECT_EQ(ExpandEnvReferences("k8s-$(POD_NAME)", FakeEnv).value(), "k8s-cart-worker-7d9f-x2");
  EXPECT_EQ(ExpandEnvReferences("$(POD_NAME)/$(EMPTY)x", FakeEnv).value(), "cart-worker-7d9f-x2/x");
  EXPECT_EQ(ExpandEnvReferences("plain-id.1", FakeEnv).value(), "plain-id.1");
  EXPECT_EQ(ExpandEnvReferences("a$b $$(POD_NAME)", FakeEnv).value(), "a$b $(POD_NAME)");

  const absl::StatusOr<std::string> unset = ExpandEnvReferences("k8s-$(NODE)", FakeEnv);
  ASSERT_FALSE(unset.ok());
  EXPECT_EQ(unset.status().message(),
            "'k8s-$(NODE)': $(NODE) names an environment variable that is not set");
  for (const char* bad : {"k8s-$(POD_NAME", "$()", "$(1X)", "$(A-B)"}) {
    const absl::StatusOr<std::string> r = ExpandEnvReferences(bad, FakeEnv);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("must start a reference $(NAME)"), std::string::npos)
        << r.status();
  }
}

}  // namespace
}  // namespace cart
