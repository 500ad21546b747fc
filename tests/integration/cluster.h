#pragma once

// A throwaway CART Lab deployment for multi-process tests: a real cartd process on a free
// loopback port with its own data dir and tokens, real cart-worker processes, synthetic data, and
// a gRPC stub to inspect it.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cart/v1/scheduler.grpc.pb.h"
#include "rpc/client.h"
#include "tests/support/test_support.h"

namespace cart::testing {

class Cluster {
 public:
  explicit Cluster(double lease_ttl_s = 3.0);
  ~Cluster();  // kills every process it started

  // Puts the worker that will be started as `id` on a host of its own: a network namespace joined
  // to this one (where cartd runs) by a veth link, with its own address; the worker dials cartd at
  // this side's address. Call before StartCartd, which then listens on every address. Returns
  // false with the reason when namespaces cannot be made (not root, no `ip`).
  bool AddHost(const std::string& id, std::string* why);
  // Takes the link to host `id` down (a real split: packets are dropped, nothing is reset) or up,
  // at cartd's end of it or at the host's. Cutting at the host's end leaves cartd's address on
  // this side up, so the other hosts still reach it (they route to it through their own links).
  enum class LinkEnd { kCartd, kHost };
  void SetLink(const std::string& id, bool up, LinkEnd end = LinkEnd::kCartd);
  // Host `id`'s namespace (for `nsenter --net=/run/netns/<name>`), its own address, and the
  // address cartd listens on at this side of its link. Every host routes to all of cartd's
  // addresses, so one of them can stand for cartd on every host (as a lab's DNS name would).
  const std::string& HostNetns(const std::string& id) const { return hosts_.at(id).netns; }
  const std::string& HostAddress(const std::string& id) const { return hosts_.at(id).address; }
  std::string CartdAddressFor(const std::string& id) const {
    return hosts_.at(id).cartd_ip + ":" + std::to_string(port_);
  }

  // `config_yaml`: a cartd config file's text (keys: docs/architecture.md "cartd config").
  void StartCartd(const std::string& config_yaml = "");
  // The same with `env` ("NAME=VALUE") set in cartd's environment (an LD_PRELOAD library).
  void StartCartdWithEnv(const std::string& config_yaml, const std::vector<std::string>& env);
  // StartCartd with its data directory on a tmpfs of `disk_mib` MiB that only it sees (as for
  // StartWorkerOnSmallDisk); false with the reason when that cannot be made. The test reaches
  // that disk through /proc/<cartd_pid()>/root<dir()>/cartd.
  bool StartCartdOnSmallDisk(int64_t disk_mib, const std::string& config_yaml, std::string* why);
  pid_t cartd_pid() const { return cartd_; }
  // GET `path` from cartd's HTTP port with the user token; the answer's body ("" when none).
  std::string Http(const std::string& path);
  void KillCartd(int signal);  // and waits for it
  // The full worker id of the worker started as `id`: the worker token (named "testbox") is bound
  // to the ids "testbox-…" (server/auth.h).
  static std::string WorkerId(const std::string& id) { return "testbox-" + id; }
  // Starts a worker with the id WorkerId(id); returns its pid.
  pid_t StartWorker(const std::string& id, int64_t memory_mib = 0,
                    const std::vector<std::string>& extra = {});
  // Starts worker `id` as StartWorker does, its cache directory a tmpfs of `disk_mib` MiB that
  // only it sees: a mount and user namespace of its own (`unshare -rm`, which needs no root where
  // the kernel allows unprivileged user namespaces, as Debian's does). Returns -1 with the reason
  // when such a namespace cannot be made. The test reaches that disk through
  // /proc/<pid>/root<CacheDir(id)>.
  pid_t StartWorkerOnSmallDisk(const std::string& id, int64_t disk_mib,
                               const std::vector<std::string>& extra, std::string* why);
  std::string CacheDir(const std::string& id) const { return dir_.File("worker-" + id); }
  void Signal(pid_t pid, int signal);
  void Wait(pid_t pid);

  // Runs `cart ARGS...` with the user's client config; returns stdout, fails the test on a
  // non-zero exit unless `allow_failure`.
  std::string Cart(const std::vector<std::string>& args, bool allow_failure = false,
                   int* exit_code = nullptr);

  // Writes a synthetic Markov source (vocab 32) with a validation split; returns the .bin path.
  // `seed` picks the chain (another seed: another build of the file); `out`: where, replacing what
  // is there (default synth.bin in the cluster's directory).
  std::string SynthData(uint64_t seed = 3, const std::string& out = "");
  std::string WriteFile(const std::string& name, const std::string& text);

  cart::v1::SchedulerService::Stub& stub() { return *stub_; }
  cart::v1::GetRunResponse GetRun(int64_t run_id);
  std::vector<cart::v1::RunView> Runs(const std::string& sweep);
  // testing::WaitUntil polling every 100 ms (each poll is a gRPC call); false on timeout.
  bool WaitFor(const std::function<bool()>& done, std::chrono::seconds timeout);
  // Waits (up to 120 s) until the run has reported `step` and cartd holds a checkpoint of it.
  // Tests that kill or cut a worker and expect a resume wait for both: a checkpoint's write and
  // upload run beside training, so step reports can reach cartd before the checkpoint that
  // precedes them is acknowledged, and a run stopped before any acknowledgement starts over.
  bool WaitForStepAndCheckpoint(int64_t run_id, int64_t step);
  // All points of `name` for a run, by step.
  std::map<int64_t, double> Series(int64_t run_id, const std::string& name);

  std::string dir() const { return dir_.path().string(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  const std::string& worker_token() const { return worker_token_; }
  const std::string& user_token() const { return user_token_; }
  // An admin's ("admin root"): `cart ... --token` with it acts as an admin.
  const std::string& admin_token() const { return admin_token_; }
  std::string Log(const std::string& name) const;  // a process's captured stderr

 private:
  pid_t Spawn(const std::string& exe, const std::vector<std::string>& args, const std::string& log,
              const std::string& netns = "", const std::vector<std::string>& env = {});
  std::vector<std::string> WorkerArgs(const std::string& id, const std::string& server,
                                      int64_t memory_mib, const std::vector<std::string>& extra);
  void Connect();
  std::vector<std::string> CartdArgs(const std::string& config_yaml);
  void WaitForCartd();  // connects, then waits until cartd answers
  static bool CanMountTmpfs(std::string* why);
  // Starts `exe` with `args` in a mount namespace of its own where `dir` is a tmpfs of
  // `disk_mib` MiB; its pid.
  pid_t SpawnOnSmallDisk(const std::string& dir, int64_t disk_mib, const std::string& exe,
                         const std::vector<std::string>& args, const std::string& log);

  TempDir dir_;
  double lease_ttl_s_;
  int port_ = 0;
  std::string user_token_, worker_token_, admin_token_;
  pid_t cartd_ = -1;
  std::vector<pid_t> workers_;
  struct Host {
    std::string netns;     // the namespace
    std::string link;      // this side's end of the veth pair
    std::string inner;     // the host's end
    std::string cartd_ip;  // this side's address, which the host's worker dials
    std::string address;   // the host's address
  };
  std::map<std::string, Host> hosts_;  // by worker id
  std::unique_ptr<cart::v1::SchedulerService::Stub> stub_;
  rpc::ClientConfig client_;
};

// The `base:` block of a sweep file for a tiny CPU run (vocab 32, d 64, P 1, R 2) on `data`.
std::string RunBase(const std::string& data, int steps, int checkpoint_every = 10);
// The loss at each step of the run `config_yaml` trained straight through in this process (no
// cartd, no interruption), its directory under `out_dir`: what a run moved between workers must
// match bit for bit.
std::map<int64_t, double> StraightLosses(const std::string& config_yaml,
                                         const std::string& out_dir);
// Expects run `run`'s stored losses to be those of its config trained straight through here
// (StraightLosses, under c.dir()/straight), bit for bit, at each of `steps` steps.
void ExpectStraightLosses(Cluster& c, int64_t run, size_t steps);
// A run's state name without the RUN_STATE_ prefix ("RUNNING").
std::string StateOf(Cluster& c, int64_t run);
// The id of run `index` of `sweep`.
int64_t RunId(Cluster& c, const std::string& sweep, int index);

}  // namespace cart::testing
