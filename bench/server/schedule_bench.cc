// bench-schedule: replays sweep files through the real Scheduler and store with simulated workers
// on a simulated clock (no sleeping: a 100-hour replay takes seconds), and prints, per fleet and
// placement policy, the makespan, the lower bound, their ratio and the idle GPU-hours
// (docs/design.md "Placement").
//
// Each run's true duration on a device is its work (config::EstimateRunCost: hours on one RTX
// 3090) divided by the device's true speed: 1 for a 3090, 1 / 4.5 for a 3050 (the paper's
// d = 1024 runs take about 4.5 times as long on one). With --speeds learned (the default) the
// workers report nothing at registration: cartd starts from the card's peak (0.26 for a 3050)
// and learns from the tokens/s each run reports; with --speeds reported they report their true
// speed. Every worker reports a run's tokens/s once, at its start, the step it has reached at
// each event (a heartbeat), and a final checkpoint at its end (derived runs start from it).
//
// Usage: bench-schedule [--scenario makespan|share] [--sweep FILE]... [--fleet SPEC]...
//                       [--speeds learned|reported]
//   share: two users on one fleet for 48 h: fair share and preemption on, fair share only, neither
//          (ShareScenario)
//   FILE: sweep files, submitted in order (default sweeps/paper/stage2.yaml)
//   SPEC: "4x3090", "2x3090+4x3050" (kinds: 3090, 3050, 4090, a100), as many as wanted;
//         default the four fleets of docs/design.md's table.

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/file.h"
#include "common/strings.h"
#include "config/config.h"
#include "server/scheduler.h"
#include "store/run_store.h"

namespace {

using cart::StrCat;
using Placement = cart::server::SchedulerOptions::Placement;

struct Kind {
  const char* key;
  const char* device_name;
  int64_t memory_gib;
  double speed;  // true speed, × an RTX 3090
};
constexpr Kind kKinds[] = {
    {"3090", "NVIDIA GeForce RTX 3090", 24, 1.0},
    {"3050", "NVIDIA GeForce RTX 3050", 8, 1.0 / 4.5},
    {"4090", "NVIDIA GeForce RTX 4090", 24, 1.9},
    {"a100", "NVIDIA A100-SXM4-80GB", 80, 2.2},
};

struct SimWorker {
  std::string id;
  const Kind* kind;
  bool busy = false;
  double busy_hours = 0;
  // The run it trains: heartbeats report its step as a worker's would.
  int64_t run_id = 0, attempt = 0, steps = 0;
  double start_h = 0, hours = 0;
  int64_t start_step = 0;        // the checkpoint it resumed from
  int64_t checkpoint_every = 0;  // steps; periodic checkpoints are recorded as it passes them
  int64_t last_checkpoint = 0;   // the last step recorded
  bool preempt_asked = false;    // cartd sent a preempt control (SimStream)
  bool stopping = false;         // its stop at a checkpoint is scheduled
};

// The attempt stream of a simulated worker: a preempt control marks the worker, which stops at a
// checkpoint kStopHours later (its next step, the checkpoint's write and upload).
class SimStream : public cart::server::AttemptStream {
 public:
  explicit SimStream(bool* preempt_asked) : preempt_asked_(preempt_asked) {}
  void Send(const cart::server::Control& control) override {
    if (control.kind == cart::server::Control::Kind::kPreempt) *preempt_asked_ = true;
  }
  void Close() override {}

 private:
  bool* preempt_asked_;
};
constexpr double kStopHours = 1.0 / 60;  // a minute from the preempt control to DRAINED

struct Result {
  double makespan_h = 0;
  double lower_bound_h = 0;
  double idle_gpu_h = 0;
  int runs = 0;
  bool stuck = false;
  std::map<std::string, double> gpu_hours;      // per submitter, within the horizon
  std::map<std::string, double> first_start_h;  // per submitter: when its first run started
  int preemptions = 0;
  double longest_checkpoint_interval_h = 0;  // of the runs that were preempted
};

// A sweep file submitted by `who` at `at_h` hours into the replay.
struct Submission {
  double at_h = 0;
  std::string who = "user:replay";
  std::string file;
  std::string text;
};

struct ReplayOptions {
  Placement placement = Placement::kEarliestFinish;
  bool reported_speeds = false;
  absl::Duration fair_share_half_life = absl::Hours(24);
  double horizon_h = 0;  // stop here (runs still going count their hours so far); 0: the end
  bool preemption = false;
  absl::Duration preempt_interval = absl::Hours(1);
};

std::vector<SimWorker> ParseFleet(const std::string& spec) {
  std::vector<SimWorker> fleet;
  for (const std::string& part : cart::Split(spec, '+')) {
    const size_t x = part.find('x');
    const int n = x == std::string::npos ? 1 : std::stoi(part.substr(0, x));
    const std::string key = x == std::string::npos ? part : part.substr(x + 1);
    const Kind* kind = nullptr;
    for (const Kind& k : kKinds) {
      if (key == k.key) kind = &k;
    }
    if (kind == nullptr) {
      std::fprintf(stderr, "bench-schedule: unknown device kind '%s' in fleet '%s'\n", key.c_str(),
                   spec.c_str());
      std::exit(2);
    }
    for (int i = 0; i < n; ++i) {
      fleet.push_back(SimWorker{StrCat(key, "-", fleet.size()), kind});
    }
  }
  return fleet;
}

Result Replay(std::vector<Submission> submissions, const std::string& fleet_spec,
              const ReplayOptions& replay) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / StrCat("bench-schedule-", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  cart::FakeClock clock;
  const absl::Time start = clock.Now();
  cart::store::StoreOptions store_options;
  store_options.path = (dir / "cart.db").string();
  // Leases never lapse in the replay: its heartbeats come only at events, hours apart.
  store_options.lease_ttl_us = int64_t{10'000} * 3'600'000'000;
  auto store = cart::store::RunStore::Open(store_options);
  if (!store.ok()) {
    std::fprintf(stderr, "bench-schedule: %s\n", std::string(store.status().message()).c_str());
    std::exit(1);
  }
  cart::server::SchedulerOptions options;
  options.lease_ttl = absl::Hours(10'000);
  options.expiry_interval = absl::ZeroDuration();
  options.placement = replay.placement;
  options.fair_share_half_life = replay.fair_share_half_life;
  options.preemption = replay.preemption;
  options.preempt_interval = replay.preempt_interval;
  auto scheduler = std::make_unique<cart::server::Scheduler>(store->get(), &clock, options);
  std::stable_sort(submissions.begin(), submissions.end(),
                   [](const Submission& a, const Submission& b) { return a.at_h < b.at_h; });
  size_t next_submission = 0;
  std::map<int64_t, std::string> owner_of;  // run id -> who submitted it
  auto submit_due = [&](double now_h) {
    for (; next_submission < submissions.size() && submissions[next_submission].at_h <= now_h;
         ++next_submission) {
      const Submission& s = submissions[next_submission];
      cart::server::SubmitRequest submit;
      submit.spec_yaml = s.text;
      submit.file_name = s.file;
      submit.who = s.who;
      auto submitted = scheduler->SubmitSweep(submit);
      if (!submitted.ok()) {
        std::fprintf(stderr, "bench-schedule: %s: %s\n", s.file.c_str(),
                     std::string(submitted.status().message()).c_str());
        std::exit(1);
      }
      cart::store::RunFilter filter;
      filter.sweeps = {submitted->sweep.name};
      if (auto runs = store->get()->ListRuns(filter); runs.ok()) {
        for (const auto& r : *runs) owner_of[r.id] = s.who;
      }
    }
  };
  submit_due(0);
  std::vector<SimWorker> fleet = ParseFleet(fleet_spec);
  double capacity = 0, fastest = 0;
  for (SimWorker& w : fleet) {
    cart::server::WorkerInfo info;
    info.id = w.id;
    info.hostname = "replay";
    info.device_kind = "cuda";
    info.device_name = w.kind->device_name;
    info.memory_bytes = w.kind->memory_gib << 30;
    info.memory_reserve_bytes = 0;
    if (replay.reported_speeds) info.speed_factor = w.kind->speed;
    (void)scheduler->RegisterWorker(info);
    capacity += w.kind->speed;
    fastest = std::max(fastest, w.kind->speed);
  }
  struct Finish {
    double at_h;
    size_t worker;
    int64_t run_id;
    int64_t attempt;
    int64_t steps;
    bool stop = false;  // a preempted run stopping at a checkpoint, not its end
    bool operator>(const Finish& o) const { return at_h > o.at_h; }
  };
  std::vector<std::shared_ptr<SimStream>> streams(fleet.size());
  for (size_t i = 0; i < fleet.size(); ++i) {
    streams[i] = std::make_shared<SimStream>(&fleet[i].preempt_asked);
  }
  auto checkpoint_of = [](int64_t run_id, int64_t step) {
    cart::store::NewCheckpoint checkpoint;
    checkpoint.step = step;
    checkpoint.sha256 = StrCat(std::string(40, 'a'), run_id + 1'000'000'000, step + 1'000'000'000);
    checkpoint.sha256.resize(64, '0');
    checkpoint.size_bytes = 1;
    checkpoint.path = StrCat("replay/", run_id, "-", step);
    return checkpoint;
  };
  // The step a busy worker has reached at `at_h`.
  auto step_at = [](const SimWorker& w, double at_h) {
    const double fraction = w.hours > 0 ? (at_h - w.start_h) / w.hours : 1;
    return std::clamp<int64_t>(
        w.start_step + static_cast<int64_t>(static_cast<double>(w.steps - w.start_step) * fraction),
        w.start_step + 1, std::max<int64_t>(w.steps - 1, w.start_step + 1));
  };
  std::priority_queue<Finish, std::vector<Finish>, std::greater<>> finishes;
  Result result;
  double work_total = 0, longest = 0;
  double now_h = 0;
  while (true) {
    // Busy workers heartbeat with the step they have reached (placement reads their pace), and
    // record the periodic checkpoints they have passed.
    for (SimWorker& w : fleet) {
      if (!w.busy || w.hours <= 0) continue;
      const int64_t step = step_at(w, now_h);
      (void)scheduler->Heartbeat(w.run_id, w.attempt, step);
      if (w.checkpoint_every > 0) {
        const int64_t passed = step / w.checkpoint_every * w.checkpoint_every;
        if (passed > w.last_checkpoint && passed > w.start_step) {
          (void)scheduler->RecordCheckpoint(w.run_id, w.attempt, checkpoint_of(w.run_id, passed));
          w.last_checkpoint = passed;
        }
      }
    }
    // cartd's expiry thread asks for preemptions each second; here at each event. A preempted
    // worker stops at a checkpoint kStopHours later.
    if (replay.preemption) {
      (void)scheduler->Preempt();
      for (size_t i = 0; i < fleet.size(); ++i) {
        SimWorker& w = fleet[i];
        if (!w.busy || !w.preempt_asked || w.stopping) continue;
        w.stopping = true;
        finishes.push(Finish{now_h + kStopHours, i, w.run_id, w.attempt, w.steps, true});
      }
    }
    // Every idle worker asks, in id order, and asks again after another's claim (cartd wakes the
    // workers that waited when one claims).
    for (bool claimed = true; claimed;) {
      claimed = false;
      for (size_t i = 0; i < fleet.size(); ++i) {
        SimWorker& w = fleet[i];
        if (w.busy) continue;
        auto job = scheduler->Acquire(w.id, absl::ZeroDuration());
        if (!job.ok() || !job->has_value()) continue;
        claimed = true;
        const cart::server::Job& j = **job;
        (void)scheduler->AttachStream(j.run.id, j.attempt, streams[i]);  // RUNNING
        const double done_fraction =
            j.resume_from && j.run.steps > 0
                ? static_cast<double>(j.resume_from->step) / static_cast<double>(j.run.steps)
                : 0;
        const double work = j.run.work_hours * (1 - done_fraction);
        const double hours = work / w.kind->speed;
        work_total += work;
        longest = std::max(longest, work);
        // The run's tokens/s on this device, as a worker reports it at its first logged step.
        int64_t tokens = 0;
        int64_t checkpoint_every = 0;
        if (auto config = cart::config::ParseRunConfigYaml(j.run.config_yaml, "replay");
            config.ok()) {
          tokens = config->train.steps * config->train.batch * config->train.accum *
                   config->train.seq_len;
          checkpoint_every = config->train.checkpoint_every;
        }
        if (tokens > 0 && j.run.work_hours > 0) {
          const double tokens_per_s =
              static_cast<double>(tokens) / (j.run.work_hours * 3600.0) * w.kind->speed;
          (void)scheduler->AppendMetrics(
              j.run.id, j.attempt,
              {{1, "tokens_per_s", tokens_per_s, absl::ToUnixMicros(clock.Now())}});
        }
        w.busy = true;
        w.busy_hours += hours;
        result.first_start_h.try_emplace(owner_of[j.run.id], now_h);
        w.run_id = j.run.id;
        w.attempt = j.attempt;
        w.steps = j.run.steps;
        w.start_h = now_h;
        w.hours = hours;
        w.start_step = j.resume_from ? j.resume_from->step : 0;
        w.checkpoint_every = j.kind == cart::JobKind::kTrain ? checkpoint_every : 0;
        w.last_checkpoint = w.start_step;
        w.preempt_asked = false;
        w.stopping = false;
        finishes.push(Finish{now_h + hours, i, j.run.id, j.attempt, j.run.steps});
        ++result.runs;
      }
    }
    const double next_submit_h = next_submission < submissions.size()
                                     ? submissions[next_submission].at_h
                                     : std::numeric_limits<double>::infinity();
    const double next_finish_h =
        finishes.empty() ? std::numeric_limits<double>::infinity() : finishes.top().at_h;
    if (std::isinf(next_submit_h) && std::isinf(next_finish_h)) break;
    const double next_h = std::min(next_submit_h, next_finish_h);
    if (replay.horizon_h > 0 && next_h >= replay.horizon_h) {
      now_h = replay.horizon_h;
      for (const SimWorker& w : fleet) {  // what the running runs used up to the horizon
        if (w.busy) result.gpu_hours[owner_of[w.run_id]] += now_h - w.start_h;
      }
      break;
    }
    now_h = next_h;
    clock.Set(start + absl::Seconds(now_h * 3600.0));
    if (next_submit_h <= next_finish_h) {
      submit_due(now_h);
      continue;
    }
    const Finish f = finishes.top();
    finishes.pop();
    SimWorker& w = fleet[f.worker];
    if (!w.busy || w.run_id != f.run_id || w.attempt != f.attempt) continue;  // it stopped early
    if (f.stop) {
      // Preempted: a checkpoint at the step reached, DRAINED; the rest of its work is not done.
      const int64_t step = step_at(w, now_h);
      const double used_h = now_h - w.start_h;
      result.gpu_hours[owner_of[f.run_id]] += used_h;
      w.busy_hours -= w.hours - used_h;
      work_total -= (w.hours - used_h) * w.kind->speed;
      if (w.steps > 0 && w.checkpoint_every > 0) {
        result.longest_checkpoint_interval_h =
            std::max(result.longest_checkpoint_interval_h,
                     w.hours / static_cast<double>(w.steps - w.start_step) *
                         static_cast<double>(w.checkpoint_every));
      }
      (void)scheduler->RecordCheckpoint(f.run_id, f.attempt, checkpoint_of(f.run_id, step));
      (void)scheduler->ReportOutcome(f.run_id, f.attempt, cart::store::AttemptOutcome::kDrained,
                                     "");
      ++result.preemptions;
      w.busy = false;
      continue;
    }
    result.gpu_hours[owner_of[f.run_id]] += w.hours;
    (void)scheduler->RecordCheckpoint(f.run_id, f.attempt, checkpoint_of(f.run_id, f.steps));
    (void)scheduler->ReportOutcome(f.run_id, f.attempt, cart::store::AttemptOutcome::kSucceeded,
                                   "");
    w.busy = false;
  }
  cart::store::RunFilter queued;
  queued.states = {cart::store::RunState::kQueued, cart::store::RunState::kBlocked};
  if (auto left = store->get()->ListRuns(queued); left.ok() && !left->empty()) result.stuck = true;
  result.makespan_h = now_h;
  result.lower_bound_h = std::max(work_total / capacity, longest / fastest);
  for (const SimWorker& w : fleet) result.idle_gpu_h += now_h - w.busy_hours;
  scheduler.reset();
  store->reset();
  fs::remove_all(dir);
  return result;
}

}  // namespace

// Two users share four 3090s for 48 hours: A submits the paper's stage 2 at 0 h (about 210
// GPU-hours, priority 10) and B, from 1 h on, six 2-hour runs every 3 hours at the same priority
// (demand enough for the whole fleet). Prints each user's GPU-hours in the 48 h, their shares and
// how long B waited for its first run and how many runs were preempted, with fair share and
// preemption on, fair share alone, and neither.
int ShareScenario(const std::string& stage2_file, const std::string& stage2) {
  std::vector<Submission> subs;
  subs.push_back(Submission{0, "user:a", stage2_file, stage2});
  for (int k = 0; k < 16; ++k) {
    const std::string text = StrCat(
        "name: b-", k,
        "\nbase: {model: cart, vocab: 32000, P: 6, R: 6, d: 256, steps: 30500, seq_len: 1024, "
        "batch: 8, accum: 4, checkpoint_every: 500, train_data: var/data/mix.bin}\n"
        "seeds: [1, 2, 3, 4, 5, 6]\npriority: 10\n");
    subs.push_back(Submission{1.0 + 3.0 * k, "user:b", StrCat("b-", k, ".yaml"), text});
  }
  std::printf(
      "two users on 4x3090 for 48 h: A submits stage 2 at 0 h, B six 2-hour runs every "
      "3 h from 1 h\n");
  std::printf("%-40s %8s %8s %8s %8s %12s %11s\n", "policy", "A GPU-h", "B GPU-h", "A share",
              "B share", "B waited", "preemptions");
  struct Policy {
    const char* name;
    bool fair, preempt;
  };
  for (const Policy& p : {Policy{"fair share + preemption (interval 1 h)", true, true},
                          Policy{"fair share (half-life 24 h)", true, false},
                          Policy{"no fair share", false, false}}) {
    ReplayOptions options;
    options.horizon_h = 48;
    options.fair_share_half_life = p.fair ? absl::Hours(24) : absl::ZeroDuration();
    options.preemption = p.preempt;
    const Result r = Replay(subs, "4x3090", options);
    const double a = r.gpu_hours.count("user:a") ? r.gpu_hours.at("user:a") : 0;
    const double b = r.gpu_hours.count("user:b") ? r.gpu_hours.at("user:b") : 0;
    const auto first = r.first_start_h.find("user:b");
    char waited[32] = "never";
    if (first != r.first_start_h.end()) {
      std::snprintf(waited, sizeof waited, "%.2f h", first->second - 1.0);
    }
    std::printf("%-40s %8.1f %8.1f %7.1f%% %7.1f%% %12s %11d\n", p.name, a, b, 100 * a / (a + b),
                100 * b / (a + b), waited, r.preemptions);
    if (r.preemptions > 0) {
      std::printf(
          "  (the preempted runs' checkpoint interval: up to %.2f h; B's first run started "
          "%.2f h after its submission)\n",
          r.longest_checkpoint_interval_h, first->second - 1.0);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  std::vector<std::string> files, fleets;
  bool reported = false;
  std::string scenario = "makespan";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--sweep" || a == "--fleet" || a == "--speeds" || a == "--scenario") &&
        i + 1 < argc) {
      const std::string v = argv[++i];
      if (a == "--sweep") files.push_back(v);
      if (a == "--fleet") fleets.push_back(v);
      if (a == "--speeds") reported = v == "reported";
      if (a == "--scenario") scenario = v;
    } else {
      std::fprintf(stderr,
                   "usage: bench-schedule [--scenario makespan|share] [--sweep FILE]... "
                   "[--fleet SPEC]... [--speeds learned|reported]\n");
      return 2;
    }
  }
  if (files.empty()) files.push_back(StrCat(CART_SOURCE_DIR, "/sweeps/paper/stage2.yaml"));
  if (fleets.empty()) fleets = {"4x3090", "8x3090", "2x3090+2x3050", "2x3090+4x3050"};
  std::vector<Submission> sweeps;
  for (const std::string& f : files) {
    auto text = cart::ReadWholeFile(f);
    if (!text.ok()) {
      std::fprintf(stderr, "bench-schedule: %s\n", std::string(text.status().message()).c_str());
      return 1;
    }
    sweeps.push_back(Submission{0, "user:replay", f, *text});
  }
  if (scenario == "share") return ShareScenario(sweeps.front().file, sweeps.front().text);
  std::printf("replay of %zu sweep file(s), speeds %s; hours on the simulated clock\n",
              files.size(), reported ? "reported by the workers" : "learned by cartd");
  std::printf("%-18s %6s %9s | %-27s | %-27s\n", "fleet", "runs", "bound h",
              "first fit: h (ratio) idle h", "earliest finish: h (ratio) idle h");
  for (const std::string& fleet : fleets) {
    ReplayOptions options;
    options.reported_speeds = reported;
    options.placement = Placement::kFirstFit;
    const Result ff = Replay(sweeps, fleet, options);
    options.placement = Placement::kEarliestFinish;
    const Result ef = Replay(sweeps, fleet, options);
    std::printf("%-18s %6d %9.1f | %8.1f (%.3f) %8.1f%s | %8.1f (%.3f) %8.1f%s\n", fleet.c_str(),
                ef.runs, ef.lower_bound_h, ff.makespan_h, ff.makespan_h / ff.lower_bound_h,
                ff.idle_gpu_h, ff.stuck ? " STUCK" : "", ef.makespan_h,
                ef.makespan_h / ef.lower_bound_h, ef.idle_gpu_h, ef.stuck ? " STUCK" : "");
  }
  return 0;
}
