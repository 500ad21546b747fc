// The deployment files of deploy/ used as a lab would use them: the Slurm array script starting
// real cart-worker processes under a real single-node Slurm (slurmctld, slurmd, munged) against a
// real cartd; the systemd units checked by systemd-analyze; the Kubernetes manifests rendered by
// kubectl kustomize; every cartd config example read by cartd's own parser.

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "common/file.h"
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/integration/cluster.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kDeploy = std::string(CART_SOURCE_DIR) + "/deploy";

bool OnPath(const std::string& program) {
  return RunCommand("command -v " + program + " >/dev/null 2>&1").exit_code == 0;
}

// A single-node Slurm cluster (tests/integration/slurm_cluster.sh), stopped when destroyed.
class SlurmCluster {
 public:
  explicit SlurmCluster(std::string dir) : dir_(std::move(dir)) {
    const CommandResult r = RunCommand(
        StrCat(CART_SOURCE_DIR, "/tests/integration/slurm_cluster.sh start ", dir_, " 2>&1"));
    ok_ = r.exit_code == 0;
    output_ = r.output;
  }
  ~SlurmCluster() {
    RunCommand(Env() + "scancel --user=root >/dev/null 2>&1");
    RunCommand(StrCat(CART_SOURCE_DIR, "/tests/integration/slurm_cluster.sh stop ", dir_));
  }
  bool ok() const { return ok_; }
  const std::string& output() const { return output_; }
  // The environment prefix for Slurm commands.
  std::string Env() const { return StrCat("SLURM_CONF=", dir_, "/slurm.conf "); }
  std::string Run(const std::string& command) const {
    return RunCommand(Env() + command + " 2>&1").output;
  }

 private:
  std::string dir_;
  bool ok_ = false;
  std::string output_;
};

TEST(DeployTest, SlurmArrayWorkersRunASweepAndScancelDrainsWithACheckpoint) {
  if (geteuid() != 0) GTEST_SKIP() << "slurmd must run as root to start jobs";
  if (!OnPath("slurmctld") || !OnPath("munged")) {
    GTEST_SKIP() << "Slurm is not installed (deploy/install-deps.sh installs slurm-wlm and munge)";
  }
  Cluster c(/*lease_ttl_s=*/5);
  c.StartCartd();
  const std::string data = c.SynthData();
  c.Cart({"sweep", "submit",
          c.WriteFile("two.yaml",
                      StrCat("name: two\nbase:\n", RunBase(data, 40, 10), "seeds: [1, 2]\n"))});
  SlurmCluster slurm(c.dir() + "/slurm");
  ASSERT_TRUE(slurm.ok()) << slurm.output();

  // The script as a lab runs it, with the device and binary of this machine.
  const std::string env = StrCat("CART_SERVER=", c.address(), " CART_TOKEN=", c.worker_token(),
                                 " CART_DEVICE=cpu CART_WORKER_PREFIX=testbox CART_BIN=", BinDir(),
                                 "/cart-worker CART_CACHE=", c.dir(), "/cache ");
  const std::string submitted = slurm.Run(
      StrCat(env, "sbatch --parsable --array=0-1 --cpus-per-task=1 --chdir=", c.dir(), " ", kDeploy,
             "/slurm/cart-workers.sbatch --threads 1 --acquire-wait-ms 500"));
  const std::string job = std::string(Trim(submitted));
  ASSERT_TRUE(std::regex_match(job, std::regex("[0-9]+"))) << submitted;

  const int64_t first = RunId(c, "two", 0), second = RunId(c, "two", 1);
  ASSERT_TRUE(c.WaitFor(
      [&] { return StateOf(c, first) == "SUCCEEDED" && StateOf(c, second) == "SUCCEEDED"; },
      std::chrono::seconds(180)))
      << slurm.Run("squeue") << ReadFile(c.dir() + "/cart-worker-" + job + "_0.log");
  for (int64_t run : {first, second}) {
    EXPECT_THAT(c.GetRun(run).run().worker_id(), StartsWith(StrCat("testbox-", job, "-")));
  }
  EXPECT_THAT(ReadFile(c.dir() + "/cart-worker-" + job + "_1.log"),
              HasSubstr(StrCat("cart-worker testbox-", job, "-1 on ")));

  // scancel: Slurm sends SIGTERM to the batch script, which is the worker. The run stops after a
  // final checkpoint, reports DRAINED and goes back to the queue.
  c.Cart({"sweep", "submit",
          c.WriteFile("long.yaml",
                      StrCat("name: long\nbase:\n", RunBase(data, 5000, 10), "seeds: [3]\n"))});
  const int64_t run = RunId(c, "long", 0);
  ASSERT_TRUE(
      c.WaitFor([&] { return c.GetRun(run).run().step() >= 15; }, std::chrono::seconds(120)))
      << slurm.Run("squeue");
  slurm.Run("scancel " + job);
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "QUEUED"; }, std::chrono::seconds(60)))
      << StateOf(c, run) << ReadFile(c.dir() + "/cart-worker-" + job + "_0.log");
  cart::v1::GetRunResponse drained = c.GetRun(run);
  ASSERT_FALSE(drained.checkpoints().empty());
  EXPECT_GE(drained.checkpoints().rbegin()->step(), 15);
  bool saw_drained = false;
  for (const auto& e : drained.events())
    saw_drained |= e.why().find("DRAINED") != std::string::npos;
  EXPECT_TRUE(saw_drained) << c.Cart({"runs", "show", StrCat(run)});
  EXPECT_TRUE(
      c.WaitFor([&] { return Trim(slurm.Run("squeue -h")).empty(); }, std::chrono::seconds(60)))
      << slurm.Run("squeue");
}

TEST(DeployTest, SystemdUnitsPassSystemdAnalyzeWithTheBuiltBinaries) {
  if (!OnPath("systemd-analyze")) GTEST_SKIP() << "systemd-analyze is not installed";
  TempDir dir;
  for (const std::string unit : {"cartd.service", "cart-worker@.service"}) {
    std::string text = ReadFile(kDeploy + "/systemd/" + unit);
    ASSERT_FALSE(text.empty()) << unit;
    // Point ExecStart at the binaries just built (verify checks that they exist).
    text = std::regex_replace(text, std::regex("/usr/local/bin/"), BinDir() + "/");
    WriteFile(dir.File(unit), text);
  }
  for (const std::string unit : {"cartd.service", "cart-worker@0.service"}) {
    const CommandResult r = RunCommand(
        StrCat("cd ", dir.path().string(), " && systemd-analyze verify ", unit, " 2>&1"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output, "") << "systemd-analyze found problems in " << unit;
  }
}

TEST(DeployTest, EveryCartdConfigExampleIsReadByCartd) {
  // The systemd example as it ships; the Kubernetes one as kustomize renders it (when kubectl is
  // here) or as written in the ConfigMap.
  std::vector<std::pair<std::string, std::string>> configs = {
      {"cartd.yaml.example", ReadFile(kDeploy + "/systemd/cartd.yaml.example")}};
  std::string k8s = ReadFile(kDeploy + "/k8s/cartd.yaml");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(k8s, m, std::regex("cartd.yaml: \\|\\n((?:    .*\\n)+)")));
  std::string block = m[1];
  block = std::regex_replace(block, std::regex("(^|\\n)    "), "$1");
  configs.emplace_back("k8s cartd-config", block);
  for (const auto& [name, text] : configs) {
    ASSERT_FALSE(text.empty()) << name;
    server::ServerConfig config;
    absl::Status applied = server::ApplyConfigYaml(text, name, config);
    EXPECT_TRUE(applied.ok()) << name << ": " << applied;
    EXPECT_EQ(config.listen, "0.0.0.0:7070") << name;
    EXPECT_EQ(config.http_listen, "0.0.0.0:8080") << name << ": the dashboard port";
    EXPECT_TRUE(server::ValidateServerConfig(config).ok()) << name;
    EXPECT_FALSE(config.tokens_file.empty()) << name << ": beyond loopback it needs tokens";
  }
}

TEST(DeployTest, KubernetesManifestsRenderWithKustomize) {
  if (!OnPath("kubectl")) GTEST_SKIP() << "kubectl is not installed";
  const CommandResult r = RunCommand("kubectl kustomize " + kDeploy + "/k8s 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* kind : {"kind: Namespace", "kind: ConfigMap", "kind: Service",
                           "kind: StatefulSet", "kind: Deployment"}) {
    EXPECT_THAT(r.output, HasSubstr(kind));
  }
  EXPECT_THAT(r.output, HasSubstr("nvidia.com/gpu: 1"));
  EXPECT_THAT(r.output, HasSubstr("namespace: cart-lab"));
  EXPECT_THAT(r.output, HasSubstr("--worker-id=k8s-$(POD_NAME)"));
}

}  // namespace
}  // namespace cart::testing
