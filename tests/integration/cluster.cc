#include "tests/integration/cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/process.h"
#include "common/strings.h"
#include "config/config.h"
#include "data/synth.h"
#include "gtest/gtest.h"
#include "train/trainer.h"

namespace cart::testing {

Cluster::Cluster(double lease_ttl_s) : lease_ttl_s_(lease_ttl_s) {
  user_token_ = "user-token-0123456789abcdef";
  worker_token_ = "worker-token-0123456789abcdef";
  admin_token_ = "admin-token-0123456789abcdef";
  WriteFile("tokens", StrCat(user_token_, " user tester\n", worker_token_, " worker testbox\n",
                             admin_token_, " admin root\n"));
  port_ = FreePort();
  client_.server = address();
  client_.token = user_token_;
  CART_EXPECT_OK(rpc::WriteClientConfig(client_, dir_.File("client.yaml")));
}

Cluster::~Cluster() {
  for (pid_t pid : workers_) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  if (cartd_ > 0) {
    kill(cartd_, SIGKILL);
    waitpid(cartd_, nullptr, 0);
  }
  // Deleting a namespace deletes its end of the veth pair, and with it this side's end.
  for (const auto& [id, host] : hosts_) RunCommand(StrCat("ip netns del ", host.netns, " 2>&1"));
}

namespace {

// Namespaces "cartt<pid><id>" whose test process is gone (killed by a timeout before its
// destructor ran): deleted, so that their addresses do not shadow a new test's.
void DeleteStaleNamespaces() {
  const CommandResult list = RunCommand("ip netns list 2>/dev/null");
  std::istringstream lines(list.output);
  std::string line;
  while (std::getline(lines, line)) {
    const std::string name = line.substr(0, line.find(' '));
    if (name.rfind("cartt", 0) != 0) continue;
    size_t end = 5;
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    const std::string pid = name.substr(5, end - 5);
    if (!pid.empty() && kill(std::stoi(pid), 0) != 0) {
      RunCommand(StrCat("ip netns del ", name, " 2>&1"));
    }
  }
}

}  // namespace

bool Cluster::AddHost(const std::string& id, std::string* why) {
  if (geteuid() != 0) {
    *why = "network namespaces need root";
    return false;
  }
  if (hosts_.empty()) DeleteStaleNamespaces();
  const int index = static_cast<int>(hosts_.size());
  if (index >= 4) {
    *why = "at most four hosts per test (each takes one of the test process's four /24s)";
    return false;
  }
  Host host;
  host.netns = StrCat("cartt", getpid(), id);
  host.link = StrCat("cv", getpid() % 10'000'000, index, "r");
  host.inner = StrCat("cv", getpid() % 10'000'000, index, "n");
  // A /24 per host, chosen by pid so that tests in parallel processes do not share one; up to
  // four hosts per test.
  const int subnet = (getpid() % 60) * 4 + index + 1;
  host.cartd_ip = StrCat("10.200.", subnet, ".1");
  host.address = StrCat("10.200.", subnet, ".2");
  const std::string commands[] = {
      StrCat("ip netns add ", host.netns),
      StrCat("ip link add ", host.link, " type veth peer name ", host.inner, " netns ", host.netns),
      StrCat("ip addr add ", host.cartd_ip, "/24 dev ", host.link),
      StrCat("ip link set ", host.link, " up"),
      StrCat("ip -n ", host.netns, " addr add ", host.address, "/24 dev ", host.inner),
      StrCat("ip -n ", host.netns, " link set ", host.inner, " up"),
      StrCat("ip -n ", host.netns, " link set lo up"),
      // Everything else through this side: cartd's addresses on the other links too.
      StrCat("ip -n ", host.netns, " route add default via ", host.cartd_ip)};
  hosts_[id] = host;  // the destructor deletes what was made, even after a failure below
  for (const std::string& command : commands) {
    const CommandResult r = RunCommand(command + " 2>&1");
    if (r.exit_code != 0) {
      *why = StrCat("'", command, "' failed: ", r.output);
      return false;
    }
  }
  return true;
}

void Cluster::SetLink(const std::string& id, bool up, LinkEnd end) {
  const Host& host = hosts_.at(id);
  const std::string command = end == LinkEnd::kCartd
                                  ? StrCat("ip link set ", host.link)
                                  : StrCat("ip -n ", host.netns, " link set ", host.inner);
  const CommandResult r = RunCommand(StrCat(command, up ? " up" : " down", " 2>&1"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

pid_t Cluster::Spawn(const std::string& exe, const std::vector<std::string>& args,
                     const std::string& log, const std::string& netns,
                     const std::vector<std::string>& env) {
  std::vector<std::string> full = args;
  if (!netns.empty()) full.insert(full.begin(), {"netns", "exec", netns, exe});
  SpawnOptions options;
  options.env = env;
  options.output_path = dir_.File(log);
  // Die with the test process, even when it is killed (a timeout), so nothing is left behind;
  // out of the test's process group, so that signals sent to the test stay there.
  options.die_with_parent = true;
  options.own_process_group = true;
  absl::StatusOr<pid_t> pid = cart::Spawn(netns.empty() ? exe : "/usr/sbin/ip", full, options);
  EXPECT_TRUE(pid.ok()) << pid.status();
  return pid.ok() ? *pid : -1;
}

std::vector<std::string> Cluster::CartdArgs(const std::string& config_yaml) {
  std::vector<std::string> args = {
      "--listen",          address(),     "--data-dir",         dir_.File("cartd"), "--tokens",
      dir_.File("tokens"), "--lease-ttl", StrCat(lease_ttl_s_), "--http",           "127.0.0.1:0"};
  if (!config_yaml.empty()) {
    args.push_back("--config");
    args.push_back(WriteFile("cartd.yaml", config_yaml));
  }
  if (!hosts_.empty()) {
    // Workers on other hosts dial this side's veth addresses: listen on all of them. The test
    // network is private to this machine, hence plaintext (--insecure) with tokens.
    args[1] = StrCat("0.0.0.0:", port_);
    args.push_back("--insecure");
  }
  return args;
}

void Cluster::StartCartd(const std::string& config_yaml) {
  cartd_ = Spawn(BinDir() + "/cartd", CartdArgs(config_yaml), "cartd.log");
  WaitForCartd();
}

void Cluster::StartCartdWithEnv(const std::string& config_yaml,
                                const std::vector<std::string>& env) {
  cartd_ = Spawn(BinDir() + "/cartd", CartdArgs(config_yaml), "cartd.log", "", env);
  WaitForCartd();
}

bool Cluster::StartCartdOnSmallDisk(int64_t disk_mib, const std::string& config_yaml,
                                    std::string* why) {
  if (!CanMountTmpfs(why)) return false;
  cartd_ = SpawnOnSmallDisk(dir_.File("cartd"), disk_mib, BinDir() + "/cartd",
                            CartdArgs(config_yaml), "cartd.log");
  WaitForCartd();
  return true;
}

pid_t Cluster::SpawnOnSmallDisk(const std::string& dir, int64_t disk_mib, const std::string& exe,
                                const std::vector<std::string>& args, const std::string& log) {
  std::filesystem::create_directories(dir);
  // unshare and sh exec into `exe`: the pid returned is its.
  std::vector<std::string> full = {
      "-rm", "sh",
      "-c",  StrCat("mount -t tmpfs -o size=", disk_mib, "m tmpfs \"$0\" && exec \"$@\""),
      dir,   exe};
  full.insert(full.end(), args.begin(), args.end());
  return Spawn("/usr/bin/unshare", full, log);
}

void Cluster::WaitForCartd() {
  Connect();
  // Ready when it answers.
  const bool up = WaitFor(
      [&] {
        grpc::ClientContext ctx;
        rpc::PrepareContext(ctx, client_, 1000);
        cart::v1::ListSweepsResponse resp;
        return stub_->ListSweeps(&ctx, {}, &resp).ok();
      },
      std::chrono::seconds(30));
  ASSERT_TRUE(up) << Log("cartd.log");
}

void Cluster::KillCartd(int signal) {
  kill(cartd_, signal);
  waitpid(cartd_, nullptr, 0);
  cartd_ = -1;
}

std::vector<std::string> Cluster::WorkerArgs(const std::string& id, const std::string& server,
                                             int64_t memory_mib,
                                             const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"--server",          server, "--token",         worker_token_,
                                   "--device",          "cpu",  "--worker-id",     WorkerId(id),
                                   "--threads",         "1",    "--cache-dir",     CacheDir(id),
                                   "--acquire-wait-ms", "1000", "--client-config", "/dev/null"};
  if (memory_mib > 0) args.insert(args.end(), {"--memory-mib", StrCat(memory_mib)});
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

pid_t Cluster::StartWorker(const std::string& id, int64_t memory_mib,
                           const std::vector<std::string>& extra) {
  auto host = hosts_.find(id);
  const std::string server =
      host == hosts_.end() ? address() : StrCat(host->second.cartd_ip, ":", port_);
  pid_t pid = Spawn(BinDir() + "/cart-worker", WorkerArgs(id, server, memory_mib, extra),
                    "worker-" + id + ".log", host == hosts_.end() ? "" : host->second.netns);
  workers_.push_back(pid);
  return pid;
}

bool Cluster::CanMountTmpfs(std::string* why) {
  const CommandResult probe = RunCommand("unshare -rm sh -c 'mount -t tmpfs tmpfs /mnt' 2>&1");
  if (probe.exit_code == 0) return true;
  *why = "a mount namespace with a tmpfs cannot be made here (unshare -rm: " + probe.output + ")";
  return false;
}

pid_t Cluster::StartWorkerOnSmallDisk(const std::string& id, int64_t disk_mib,
                                      const std::vector<std::string>& extra, std::string* why) {
  if (!CanMountTmpfs(why)) return -1;
  const pid_t pid = SpawnOnSmallDisk(CacheDir(id), disk_mib, BinDir() + "/cart-worker",
                                     WorkerArgs(id, address(), 0, extra), "worker-" + id + ".log");
  workers_.push_back(pid);
  return pid;
}

std::string Cluster::Http(const std::string& path) {
  const std::string log = Log("cartd.log");
  const std::string mark = "dashboard at http://127.0.0.1:";
  const size_t at = log.find(mark);
  if (at == std::string::npos) return "";
  const int port = std::atoi(log.c_str() + at + mark.size());
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request =
        StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ", user_token_,
               "\r\nConnection: close\r\n\r\n");
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[65536];
      for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) answer.append(buf, n);
    }
  }
  close(fd);
  const size_t body = answer.find("\r\n\r\n");
  return body == std::string::npos ? "" : answer.substr(body + 4);
}

void Cluster::Signal(pid_t pid, int signal) { kill(pid, signal); }

void Cluster::Wait(pid_t pid) { waitpid(pid, nullptr, 0); }

std::string Cluster::Cart(const std::vector<std::string>& args, bool allow_failure,
                          int* exit_code) {
  std::string cmd = "CART_CONFIG=" + dir_.File("client.yaml") + " " + BinDir() + "/cart";
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " 2>" + dir_.File("cart.stderr") + " </dev/null";  // never a terminal: no prompts
  const CommandResult run = RunCommand(cmd);
  const std::string& out = run.output;
  const int code = run.exit_code;
  if (exit_code != nullptr) *exit_code = code;
  if (!allow_failure) {
    EXPECT_EQ(code, 0) << cmd << "\n" << out << ReadFile(dir_.File("cart.stderr"));
  }
  return out + ReadFile(dir_.File("cart.stderr"));
}

std::string Cluster::SynthData(uint64_t seed, const std::string& out) {
  data::SynthOptions o;
  o.chain.vocab = 32;
  o.chain.order = 1;
  o.chain.seed = seed;
  o.chain.concentration = 0.05;
  o.tokens = 40'000;
  o.val_tokens = 4'000;
  o.out = out.empty() ? dir_.File("synth.bin") : out;
  auto r = data::WriteSynthetic(o);
  EXPECT_TRUE(r.ok()) << r.status();
  return o.out;
}

std::string Cluster::WriteFile(const std::string& name, const std::string& text) {
  ::cart::testing::WriteFile(dir_.File(name), text);
  return dir_.File(name);
}

void Cluster::Connect() {
  auto channel = rpc::MakeChannel(client_);
  ASSERT_TRUE(channel.ok());
  stub_ = cart::v1::SchedulerService::NewStub(*channel);
}

cart::v1::GetRunResponse Cluster::GetRun(int64_t run_id) {
  grpc::ClientContext ctx;
  rpc::PrepareContext(ctx, client_, 5000);
  cart::v1::GetRunRequest req;
  req.set_run_id(run_id);
  cart::v1::GetRunResponse resp;
  grpc::Status s = stub_->GetRun(&ctx, req, &resp);
  EXPECT_TRUE(s.ok() || s.error_code() == grpc::StatusCode::UNAVAILABLE) << s.error_message();
  return resp;
}

std::vector<cart::v1::RunView> Cluster::Runs(const std::string& sweep) {
  grpc::ClientContext ctx;
  rpc::PrepareContext(ctx, client_, 5000);
  cart::v1::ListRunsRequest req;
  req.set_sweep(sweep);
  cart::v1::ListRunsResponse resp;
  stub_->ListRuns(&ctx, req, &resp);
  return {resp.runs().begin(), resp.runs().end()};
}

bool Cluster::WaitFor(const std::function<bool()>& done, std::chrono::seconds timeout) {
  return testing::WaitUntil(done, absl::FromChrono(timeout), absl::Milliseconds(100));
}

bool Cluster::WaitForStepAndCheckpoint(int64_t run_id, int64_t step) {
  return WaitFor(
      [&] {
        const cart::v1::GetRunResponse got = GetRun(run_id);
        return got.run().step() >= step && got.checkpoints_size() > 0;
      },
      std::chrono::seconds(120));
}

std::map<int64_t, double> Cluster::Series(int64_t run_id, const std::string& name) {
  grpc::ClientContext ctx;
  rpc::PrepareContext(ctx, client_, 10'000);
  cart::v1::StreamMetricsRequest req;
  req.set_run_id(run_id);
  req.add_names(name);
  auto reader = stub_->StreamMetrics(&ctx, req);
  std::map<int64_t, double> out;
  cart::v1::MetricBatchView batch;
  while (reader->Read(&batch)) {
    for (const auto& p : batch.points()) {
      EXPECT_EQ(out.count(p.step()), 0u) << name << " at step " << p.step() << " twice";
      out[p.step()] = p.value();
    }
  }
  grpc::Status s = reader->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  return out;
}

std::string Cluster::Log(const std::string& name) const {
  return "--- " + name + " ---\n" + ReadFile(dir_.File(name));
}

std::string RunBase(const std::string& data, int steps, int checkpoint_every) {
  return StrCat(R"(  vocab: 32
  d: 64
  P: 1
  R: 2
  seq_len: 32
  batch: 4
  accum: 1
  lr: 3e-3
  lr_min: 3e-4
  warmup: 3
  log_every: 1
  eval_every: 0
  eval_sequences: 4
  threads: 1
  steps: )",
                steps, "\n  checkpoint_every: ", checkpoint_every, "\n  train_data: ", data,
                "\n  val_data:\n    synth: ", data.substr(0, data.size() - 4), ".val.bin\n");
}

void ExpectStraightLosses(Cluster& c, int64_t run, size_t steps) {
  const std::map<int64_t, double> want =
      StraightLosses(c.GetRun(run).run().config_yaml(), c.dir() + "/straight");
  const std::map<int64_t, double> got = c.Series(run, "loss");
  ASSERT_EQ(want.size(), steps);
  ASSERT_EQ(got.size(), steps);
  for (const auto& [step, loss] : want) EXPECT_EQ(got.at(step), loss) << "step " << step;
}

std::map<int64_t, double> StraightLosses(const std::string& config_yaml,
                                         const std::string& out_dir) {
  absl::StatusOr<config::RunConfig> config = config::ParseRunConfigYaml(config_yaml, "run");
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return {};
  train::TrainOptions o;
  o.out_dir = out_dir;
  absl::StatusOr<train::TrainResult> trained = train::Train(*config, o);
  EXPECT_TRUE(trained.ok()) << trained.status();
  std::map<int64_t, double> losses;
  std::ifstream in(o.out_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) losses[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return losses;
}

std::string StateOf(Cluster& c, int64_t run) {
  std::string n = cart::v1::RunState_Name(c.GetRun(run).run().state());
  return n.size() > 10 ? n.substr(10) : n;
}

int64_t RunId(Cluster& c, const std::string& sweep, int index) {
  for (const auto& r : c.Runs(sweep)) {
    if (r.name() == StrCat(sweep, "/", index)) return r.run_id();
  }
  ADD_FAILURE() << "no run " << sweep << "/" << index;
  return 0;
}

}  // namespace cart::testing
