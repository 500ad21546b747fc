// A worker that cannot reach cartd says so, naming the address, and gives up after its limit
// (--connect-timeout-s), so that a batch job ends instead of holding its allocation idle; within
// the limit it keeps trying and registers once cartd is back.

#include <signal.h>
#include <sys/wait.h>

#include "common/strings.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace cart::testing {
namespace {

TEST(WorkerConnectTest, AnUnreachableCartdIsNamedRetriedWithinTheLimitThenGivenUp) {
  Cluster c;
  c.StartCartd();
  c.KillCartd(SIGKILL);  // its address is known; nothing answers there

  // Within its limit the worker waits, saying for what, and registers when cartd comes back.
  const pid_t patient = c.StartWorker("patient", 0, {"--connect-timeout-s", "120"});
  ASSERT_TRUE(WaitUntil(
      [&] { return c.Log("worker-patient.log").find("does not answer") != std::string::npos; },
      absl::Seconds(30)));
  EXPECT_NE(c.Log("worker-patient.log").find(StrCat("cartd at ", c.address())), std::string::npos)
      << c.Log("worker-patient.log");
  c.StartCartd();
  ASSERT_TRUE(
      WaitUntil([&] { return c.Log("worker-patient.log").find("registered") != std::string::npos; },
                absl::Seconds(30)))
      << c.Log("worker-patient.log");
  EXPECT_NE(c.Log("worker-patient.log").find("answers again"), std::string::npos)
      << c.Log("worker-patient.log");
  kill(patient, SIGTERM);
  c.Wait(patient);

  // Past the limit the worker exits with an error naming the address, however long it was up.
  c.KillCartd(SIGKILL);
  const pid_t hasty = c.StartWorker("hasty", 0, {"--connect-timeout-s", "2"});
  int status = 0;
  ASSERT_TRUE(
      WaitUntil([&] { return waitpid(hasty, &status, WNOHANG) == hasty; }, absl::Seconds(30)))
      << c.Log("worker-hasty.log");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  const std::string log = c.Log("worker-hasty.log");
  EXPECT_NE(log.find(StrCat("cartd at ", c.address(), " did not answer for ")), std::string::npos)
      << log;
  EXPECT_NE(log.find("giving up (--connect-timeout-s 2)"), std::string::npos) << log;
}

}  // namespace
}  // namespace cart::testing
