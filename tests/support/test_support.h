#pragma once

// Shared helpers for CART Lab tests: Status matchers, temporary directories, free ports.

#include <filesystem>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cart::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

// EXPECT_THAT(DoIt(), IsOk());
MATCHER(IsOk, "is OK") {
  const absl::Status& s = ::cart::testing::GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s;
  return s.ok();
}

// EXPECT_THAT(DoIt(), StatusIs(absl::StatusCode::kNotFound, HasSubstr("sweep")));
MATCHER_P2(StatusIs, code, message_matcher, "has code " + absl::StatusCodeToString(code)) {
  const absl::Status& s = ::cart::testing::GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(s.message()), result_listener);
}

#define CART_ASSERT_OK(expr) ASSERT_THAT((expr), ::cart::testing::IsOk())
#define CART_EXPECT_OK(expr) EXPECT_THAT((expr), ::cart::testing::IsOk())

// `CART_ASSERT_OK_AND_ASSIGN(auto x, F());` fails the test if F() is an error.
#define CART_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  CART_ASSERT_OK_AND_ASSIGN_IMPL_(CART_TEST_CONCAT_(cart_test_or_, __LINE__), lhs, expr)
#define CART_TEST_CONCAT_INNER_(a, b) a##b
#define CART_TEST_CONCAT_(a, b) CART_TEST_CONCAT_INNER_(a, b)
#define CART_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                    \
  ASSERT_TRUE(tmp.ok()) << tmp.status();                \
  lhs = std::move(tmp).value()

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A latch on a condition another thread or process makes true: polls `done` every `poll` until it
// holds (true) or `timeout` passes (false; `done` is asked once more at the deadline). Tests wait
// on the state they need instead of sleeping for a guess, so a test cannot pass before the state
// it claims to test has come about. Conditions that cost a gRPC call poll less often.
bool WaitUntil(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(20),
               absl::Duration poll = absl::Milliseconds(1));

// A TCP port on 127.0.0.1 that was free when asked (bound to port 0, then released).
int FreePort();

// Writes `contents` to `path`, creating parent directories. Fails the test on error.
void WriteFile(const std::filesystem::path& path, const std::string& contents);
// Reads a whole file; empty string when it does not exist.
std::string ReadFile(const std::filesystem::path& path);

// Directory of the built binaries (cartd, cart-worker, cart), from the CART_BIN_DIR definition.
std::string BinDir();

struct CommandResult {
  int exit_code = -1;  // -1 when the command did not exit normally or could not start
  std::string output;  // what it wrote to stdout (end the line with 2>&1 to take stderr too)
};

// Runs `command_line` through /bin/sh and waits for it.
CommandResult RunCommand(const std::string& command_line);

// Runs `cart ARGS` (ARGS as one shell-quoted string) with stderr joined to stdout.
CommandResult RunCart(const std::string& args);

}  // namespace cart::testing
