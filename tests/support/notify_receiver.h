#pragma once

// tests/support/notify_receiver.py (a webhook receiver and an SMTP server, aiosmtpd) as a process
// of a test: started, waited for until it listens, stopped, started again on the same ports and
// records file (a receiver that was down and comes back). Header-only: the notification tests
// (tests/server, tests/integration) include it.

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/process.h"
#include "common/strings.h"
#include "tests/support/test_support.h"

namespace cart::testing {

inline const std::string kReceiverPython = CART_SOURCE_DIR "/.cache/python/venv/bin/python";
inline const std::string kReceiverScript = CART_SOURCE_DIR "/tests/support/notify_receiver.py";

// notify_receiver.py running with some arguments; killed on destruction.
class Receiver {
 public:
  // Starts it with `args` (besides --out) and waits until it has printed the ports it was asked
  // for. Fails the test (and returns null) when it does not come up. `records`: the file it
  // appends to (empty: a new one in `dir`); give a stopped receiver's records() to go on with it.
  static std::unique_ptr<Receiver> Start(const TempDir& dir, std::vector<std::string> args,
                                         const std::string& records = "") {
    auto receiver = std::unique_ptr<Receiver>(new Receiver(dir, records));
    const bool want_http = std::find(args.begin(), args.end(), "--http-port") != args.end();
    const bool want_smtp = std::find(args.begin(), args.end(), "--smtp-port") != args.end();
    args.insert(args.begin(), {kReceiverScript, "--out", receiver->records_});
    SpawnOptions options;
    options.output_path = receiver->output_;
    options.die_with_parent = true;
    absl::StatusOr<pid_t> pid = Spawn(kReceiverPython, args, options);
    EXPECT_TRUE(pid.ok()) << pid.status();
    if (!pid.ok()) return nullptr;
    receiver->pid_ = *pid;
    bool exited = false;
    ::cart::testing::WaitUntil(
        [&] {
          receiver->ReadPorts();
          exited = waitpid(receiver->pid_, nullptr, WNOHANG) == receiver->pid_;
          return exited || ((!want_http || receiver->http_port_ > 0) &&
                            (!want_smtp || receiver->smtp_port_ > 0));
        },
        absl::Seconds(30), absl::Milliseconds(20));
    if (exited) receiver->pid_ = -1;
    const bool up = !exited && (!want_http || receiver->http_port_ > 0) &&
                    (!want_smtp || receiver->smtp_port_ > 0);
    EXPECT_TRUE(up) << "notify_receiver.py did not come up (deploy/install-python.sh installs "
                       "aiosmtpd); its output:\n"
                    << ReadFile(receiver->output_);
    return up ? std::move(receiver) : nullptr;
  }

  ~Receiver() { Stop(); }

  // Kills it: its ports refuse connections until a receiver is started on them again.
  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  const std::string& records() const { return records_; }

  int http_port() const { return http_port_; }
  int smtp_port() const { return smtp_port_; }

  // What it has recorded, in order.
  std::vector<nlohmann::json> Records() const {
    std::vector<nlohmann::json> out;
    std::istringstream lines(std::filesystem::exists(records_) ? ReadFile(records_) : "");
    for (std::string line; std::getline(lines, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }

 private:
  Receiver(const TempDir& dir, const std::string& records)
      : records_(records.empty() ? dir.File(StrCat("records-", ++count_, ".jsonl")) : records),
        output_(dir.File(StrCat("receiver-", ++outputs_, ".log"))) {}

  void ReadPorts() {
    std::istringstream lines(ReadFile(output_));
    for (std::string word; lines >> word;) {
      if (word == "http") lines >> http_port_;
      if (word == "smtp") lines >> smtp_port_;
    }
  }

  static inline int count_ = 0;
  static inline int outputs_ = 0;
  const std::string records_;
  const std::string output_;
  pid_t pid_ = -1;
  int http_port_ = 0;
  int smtp_port_ = 0;
};

}  // namespace cart::testing
