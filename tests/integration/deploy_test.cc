// The deployment files of deploy/ used as a lab would use them: the Slurm array script starting
// real cart-worker processes under a real single-node Slurm (slurmctld, slurmd, munged) against a
// real cartd; the systemd units checked by systemd-analyze; the Kubernetes manifests rendered by
// kubectl kustomize; every cartd config example read by cartd's own parser.

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <map>
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
using ::testing::Not;
using ::testing::StartsWith;

const std::string kDeploy = std::string(CART_SOURCE_DIR) + "/deploy";

bool OnPath(const std::string& program) {
  return RunCommand("command -v " + program + " >/dev/null 2>&1").exit_code == 0;
}

const std::string kSlurmCluster =
    std::string(CART_SOURCE_DIR) + "/tests/integration/slurm_cluster.sh";

// A Slurm cluster (tests/integration/slurm_cluster.sh), stopped when destroyed: one node on
// loopback, or the nodes `nodes_args` names (--controller ADDR --node NAME=NETNS@ADDR ...).
class SlurmCluster {
 public:
  explicit SlurmCluster(std::string dir, const std::string& nodes_args = "")
      : dir_(std::move(dir)) {
    const CommandResult r =
        RunCommand(StrCat(kSlurmCluster, " start ", dir_, " ", nodes_args, " 2>&1"));
    ok_ = r.exit_code == 0;
    output_ = r.output;
  }
  ~SlurmCluster() {
    RunCommand(Env() + "scancel --user=root >/dev/null 2>&1");
    RunCommand(StrCat(kSlurmCluster, " stop ", dir_));
  }
  bool ok() const { return ok_; }
  // Stops node `name`'s slurmd (the jobs it started go on, as on a host whose daemon died).
  void StopSlurmd(const std::string& name) const {
    const CommandResult r = RunCommand(StrCat(kSlurmCluster, " cut ", dir_, " ", name, " 2>&1"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }
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

// How many of a run's events record an attempt that reported DRAINED.
int CountDrained(const cart::v1::GetRunResponse& run) {
  int n = 0;
  for (const auto& e : run.events()) n += e.why().find("DRAINED") != std::string::npos;
  return n;
}

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
  EXPECT_GE(CountDrained(drained), 1) << c.Cart({"runs", "show", StrCat(run)});
  EXPECT_TRUE(
      c.WaitFor([&] { return Trim(slurm.Run("squeue -h")).empty(); }, std::chrono::seconds(60)))
      << slurm.Run("squeue");
}

// The worker ids of an array job's tasks by the node each ran on, from the line the sbatch script
// writes first ("cart-worker <id> on <host name>, ...") into each task's log.
std::map<std::string, std::string> WorkersByNode(const std::string& dir, const std::string& job,
                                                 int tasks) {
  std::map<std::string, std::string> by_node;
  for (int task = 0; task < tasks; ++task) {
    const std::string log = ReadFile(StrCat(dir, "/cart-worker-", job, "_", task, ".log"));
    std::smatch m;
    if (std::regex_search(log, m, std::regex("cart-worker (\\S+) on ([a-z0-9-]+),"))) {
      by_node[m[2]] = m[1];
    }
  }
  return by_node;
}

// squeue's elapsed time ("M:SS", "H:MM:SS" or "D-HH:MM:SS") in seconds; -1 when malformed.
int64_t ElapsedSeconds(const std::string& text) {
  std::smatch m;
  if (!std::regex_match(text, m, std::regex("(?:(\\d+)-)?(?:(\\d+):)?(\\d+):(\\d+)"))) return -1;
  const auto part = [&](int i) { return m[i].matched ? std::stoll(m[i].str()) : 0LL; };
  return ((part(1) * 24 + part(2)) * 60 + part(3)) * 60 + part(4);
}

// Slurm across three nodes, each slurmd in a network namespace of its own with its own address
// and host name (the jobs it starts inherit both), slurmctld and cartd outside them. The array
// job puts one worker on each node. One node is cut mid-run (its slurmd killed, its link down):
// Slurm marks it down, cartd's lease on its run lapses, and the run finishes on the idle node
// with the losses of a run trained straight through. Then a run of a sweep that allows a single
// attempt is drained twice through the SIGTERM path, once before its task's time limit (the
// script's --signal) and once by scancel, and is still queued: handing a run back spends no
// attempt.
TEST(DeployTest, SlurmOnThreeNodesMovesACutNodesRunAndDrainsOnTimeLimitAndScancel) {
  if (geteuid() != 0) GTEST_SKIP() << "slurmd and network namespaces need root";
  if (!OnPath("slurmctld") || !OnPath("munged") || !OnPath("nsenter")) {
    GTEST_SKIP() << "Slurm is not installed (deploy/install-deps.sh installs slurm-wlm and munge)";
  }
  Cluster c(/*lease_ttl_s=*/3);
  const std::vector<std::string> nodes = {"node1", "node2", "node3"};
  std::string why;
  for (const std::string& node : nodes) {
    if (!c.AddHost(node, &why)) GTEST_SKIP() << why;
  }
  c.StartCartd();
  // The nodes all reach slurmctld and cartd at one address of this host (node1's link's; the
  // others route to it), as a lab's nodes reach the head node by one name.
  const std::string controller = c.CartdAddressFor("node1");
  std::string nodes_args = "--controller " + controller.substr(0, controller.find(':'));
  for (const std::string& node : nodes) {
    nodes_args += StrCat(" --node ", node, "=", c.HostNetns(node), "@", c.HostAddress(node));
  }
  SlurmCluster slurm(c.dir() + "/slurm", nodes_args);
  ASSERT_TRUE(slurm.ok()) << slurm.output();

  const std::string data = c.SynthData();
  constexpr int kSteps = 400;
  c.Cart({"sweep", "submit",
          c.WriteFile("spread.yaml", StrCat("name: spread\nbase:\n", RunBase(data, kSteps, 10),
                                            "seeds: [1, 2]\n"))});
  const std::string env = StrCat("CART_SERVER=", controller, " CART_TOKEN=", c.worker_token(),
                                 " CART_DEVICE=cpu CART_WORKER_PREFIX=testbox CART_BIN=", BinDir(),
                                 "/cart-worker CART_CACHE=", c.dir(), "/cache ");
  const std::string job = std::string(Trim(slurm.Run(
      StrCat(env, "sbatch --parsable --array=0-2 --cpus-per-task=1 --chdir=", c.dir(), " ", kDeploy,
             "/slurm/cart-workers.sbatch --threads 1 --acquire-wait-ms 500"))));
  ASSERT_TRUE(std::regex_match(job, std::regex("[0-9]+"))) << job;

  // One worker per node, each seeing its node's host name.
  std::map<std::string, std::string> workers;
  ASSERT_TRUE(c.WaitFor(
      [&] {
        workers = WorkersByNode(c.dir(), job, 3);
        return workers.size() == 3;
      },
      std::chrono::seconds(60)))
      << slurm.Run("squeue") << slurm.Run("sinfo -N");
  for (const std::string& node : nodes) EXPECT_TRUE(workers.count(node)) << node;
  EXPECT_EQ(Trim(slurm.Run(StrCat("squeue -h -j ", job, " -o %N | sort | tr '\\n' ' '"))),
            "node1 node2 node3");

  const int64_t cut_run = RunId(c, "spread", 0), other_run = RunId(c, "spread", 1);
  ASSERT_TRUE(c.WaitForStepAndCheckpoint(cut_run, 30)) << slurm.Run("squeue");
  const std::string first_worker = c.GetRun(cut_run).run().worker_id();
  std::string cut_node;
  for (const auto& [node, worker] : workers) {
    if (worker == first_worker) cut_node = node;
  }
  ASSERT_FALSE(cut_node.empty()) << first_worker << " is not one of the array's workers";
  slurm.StopSlurmd(cut_node);
  c.SetLink(cut_node, false, Cluster::LinkEnd::kHost);

  // cartd gives the run to the worker that had none, on another node, which resumes it from the
  // newest checkpoint cartd holds; Slurm sees the node go silent and marks it down.
  ASSERT_TRUE(c.WaitFor(
      [&] {
        const cart::v1::RunView view = c.GetRun(cut_run).run();
        return view.state() == cart::v1::RUN_STATE_SUCCEEDED &&
               StateOf(c, other_run) == "SUCCEEDED";
      },
      std::chrono::seconds(240)))
      << slurm.Run("squeue") << c.Log("cartd.log");
  const cart::v1::RunView moved = c.GetRun(cut_run).run();
  EXPECT_EQ(moved.attempt(), 2);
  EXPECT_NE(moved.worker_id(), first_worker);
  EXPECT_NE(moved.worker_id(), c.GetRun(other_run).run().worker_id());
  ExpectStraightLosses(c, cut_run, kSteps);
  EXPECT_TRUE(c.WaitFor(
      [&] {
        return slurm.Run(StrCat("sinfo -h -N -n ", cut_node, " -o %T")).find("down") !=
               std::string::npos;
      },
      std::chrono::seconds(60)))
      << slurm.Run("sinfo -N");

  // A run allowed one attempt, drained ahead of the time limit of the task that holds it (Slurm
  // sends SIGTERM to the batch script, which is the worker)...
  c.Cart({"sweep", "submit",
          c.WriteFile("long.yaml", StrCat("name: long\nmax_attempts: 1\nbase:\n",
                                          RunBase(data, 50000, 10), "seeds: [3]\n"))});
  const int64_t run = RunId(c, "long", 0);
  ASSERT_TRUE(
      c.WaitFor([&] { return c.GetRun(run).run().step() >= 15; }, std::chrono::seconds(120)))
      << slurm.Run("squeue");
  const std::string holder = c.GetRun(run).run().worker_id();
  const std::string task = holder.substr(holder.rfind('-') + 1);
  // A limit 3 minutes past the time the task has run: under the 300 s by which the script asks
  // for SIGTERM before its limit (--signal=B:TERM@300), so slurmctld sends it at its next check
  // of time limits (every 30 s), as it would five minutes before a real limit, and the worker
  // drains and exits before the limit itself: the task ends COMPLETED, not TIMEOUT.
  const std::string elapsed =
      std::string(Trim(slurm.Run(StrCat("squeue -h -j ", job, "_", task, " -o %M"))));
  ASSERT_GE(ElapsedSeconds(elapsed), 0) << "squeue said '" << elapsed << "'";
  const int64_t limit_minutes = ElapsedSeconds(elapsed) / 60 + 3;
  EXPECT_EQ(
      slurm.Run(StrCat("scontrol update JobId=", job, "_", task, " TimeLimit=", limit_minutes)),
      "");
  ASSERT_TRUE(
      c.WaitFor([&] { return CountDrained(c.GetRun(run)) == 1; }, std::chrono::seconds(150)))
      << StateOf(c, run) << slurm.Run("squeue")
      << ReadFile(StrCat(c.dir(), "/cart-worker-", job, "_", task, ".log"));

  EXPECT_TRUE(c.WaitFor(
      [&] {
        return slurm.Run(StrCat("scontrol show job ", job, "_", task)).find("JobState=COMPLETED") !=
               std::string::npos;
      },
      std::chrono::seconds(60)))
      << slurm.Run(StrCat("scontrol show job ", job, "_", task));

  // ... taken up by another node's worker, and drained again by scancel.
  ASSERT_TRUE(c.WaitFor(
      [&] {
        const cart::v1::RunView view = c.GetRun(run).run();
        return view.state() == cart::v1::RUN_STATE_RUNNING && view.worker_id() != holder;
      },
      std::chrono::seconds(60)))
      << StateOf(c, run) << slurm.Run("squeue");
  slurm.Run("scancel " + job);
  ASSERT_TRUE(c.WaitFor([&] { return CountDrained(c.GetRun(run)) == 2; }, std::chrono::seconds(60)))
      << StateOf(c, run) << slurm.Run("squeue");
  const cart::v1::GetRunResponse drained = c.GetRun(run);
  EXPECT_EQ(StateOf(c, run), "QUEUED") << "two drains spent the run's single attempt";
  EXPECT_EQ(drained.run().max_attempts(), 1);
  ASSERT_FALSE(drained.checkpoints().empty());
  EXPECT_GE(drained.checkpoints().rbegin()->step(), 15);
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
                           "kind: PersistentVolumeClaim", "kind: Deployment"}) {
    EXPECT_THAT(r.output, HasSubstr(kind));
  }
  EXPECT_THAT(r.output, HasSubstr("nvidia.com/gpu: 1"));
  EXPECT_THAT(r.output, HasSubstr("namespace: cart-lab"));
  EXPECT_THAT(r.output, HasSubstr("--worker-id=k8s-$(POD_NAME)"));
  EXPECT_THAT(r.output, HasSubstr("image: registry.example.org/cart-lab/worker-cuda:0.1.0"));
  EXPECT_THAT(r.output, HasSubstr("type: Recreate")) << "two cartd pods must never overlap";

  // The overlay podman plays (tests/images/k8s_test.sh runs it): the images built here, the
  // host's network, the CPU, no GPU limit.
  const CommandResult podman = RunCommand("kubectl kustomize " + kDeploy + "/podman 2>&1");
  ASSERT_EQ(podman.exit_code, 0) << podman.output;
  EXPECT_THAT(podman.output, HasSubstr("image: localhost/cart-lab/cartd:latest"));
  EXPECT_THAT(podman.output, HasSubstr("image: localhost/cart-lab/worker-cpu:latest"));
  EXPECT_THAT(podman.output, HasSubstr("--server=127.0.0.1:7070"));
  EXPECT_THAT(podman.output, HasSubstr("--device=cpu"));
  EXPECT_THAT(podman.output, HasSubstr("hostNetwork: true"));
  EXPECT_THAT(podman.output, Not(HasSubstr("nvidia.com/gpu")));
  EXPECT_THAT(podman.output, Not(HasSubstr("kind: StatefulSet")));
}

}  // namespace
}  // namespace cart::testing
