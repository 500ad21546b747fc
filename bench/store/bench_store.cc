// bench-store: the store's figures (issue 5), printed, not asserted.
//   1. metric ingest, points/s, batched appends from several workers (median of 3)
//   2. creating a 10,000-run sweep, seconds (median of 3)
//   3. the ρ-by-d×R table over ~10 million metric rows, milliseconds (median of 20)
//   4. file size per million points
// Usage: bench-store [--points N] [--dir DIR] [--only ingest|sweep|table] [--sync full|normal]
//                    [--keep]
//   --sync: SQLite's synchronous setting, cartd's store_sync (default full, as cartd's).
//   N: metric rows for figure 3, default 10,000,000. --keep leaves DIR/bench.db (the last
//   database built) for other benchmarks, e.g. bench/dashboard_bench.sh's 10-million-point part.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/strings.h"
#include "store/run_store.h"

namespace cart::store {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kT0 = 1'700'000'000'000'000;
constexpr int64_t kGiB = int64_t{1} << 30;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// CPU seconds of the whole process (all threads). Other jobs share this machine's two cores, so
// wall time measures their load as much as the store; CPU time is the store's own cost.
double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one;
  in >> one;
  return one.empty() ? "?" : one;
}

// Bytes this process has handed to write(2)/pwrite(2) so far (/proc/self/io "wchar"): the WAL
// appends and checkpoint copies that ingest costs.
double BytesWritten() {
  std::ifstream in("/proc/self/io");
  std::string key;
  double value = 0;
  while (in >> key >> value) {
    if (key == "wchar:") return value;
  }
  return 0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void Die(const absl::Status& status, const char* what) {
  std::fprintf(stderr, "bench-store: %s: %s\n", what, Message(status).c_str());
  std::exit(1);
}

template <typename T>
T Check(absl::StatusOr<T> value, const char* what) {
  if (!value.ok()) Die(value.status(), what);
  return *std::move(value);
}

void Check(const absl::Status& status, const char* what) {
  if (!status.ok()) Die(status, what);
}

bool g_sync_full = true;  // --sync

std::unique_ptr<RunStore> Fresh(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  StoreOptions options;
  options.path = path;
  options.synchronous_full = g_sync_full;
  return Check(RunStore::Open(options), "open");
}

// A run as the scheduler would resolve it: every docs/model.md §9 key.
NewRun PaperRun(int64_t d, int64_t r, int64_t seed, int64_t index) {
  NewRun run;
  run.name = StrCat("d", d, "-R", r, "-s", seed, "-", index);
  run.params = {{"model", "cart"},
                {"vocab", "32000"},
                {"d", StrCat(d)},
                {"P", "6"},
                {"R", StrCat(r)},
                {"R_infer", StrCat(r)},
                {"kv", "frozen"},
                {"core", "shared"},
                {"core_attn", "cross"},
                {"hyper", "on"},
                {"lti", "on"},
                {"lie", "on"},
                {"cross_causal", "true"},
                {"gate", "paper"},
                {"steps", "30500"},
                {"seq_len", "1024"},
                {"batch", "8"},
                {"accum", "4"},
                {"lr", "0.0003"},
                {"lr_min", "3e-05"},
                {"warmup", "100"},
                {"weight_decay", "0.1"},
                {"weight_decay_scope", "all"},
                {"clip", "1.0"},
                {"seed", StrCat(seed)},
                {"dtype", "bf16"},
                {"log_every", "1"},
                {"eval_every", "500"},
                {"checkpoint_every", "1000"},
                {"train_data", "data/mix.bin"}};
  for (const auto& [key, value] : run.params) run.config_yaml += StrCat(key, ": ", value, "\n");
  run.stored_params = 125'090'000;
  run.effective_params = 178'840'000;
  run.memory_estimate_bytes = 6 * kGiB;
  return run;
}

// Stage 2's 36 runs (d × R × seed), all leased and running. Returns (run id, attempt) pairs.
std::vector<std::pair<int64_t, int64_t>> StartStage2(RunStore& store) {
  NewSweep sweep;
  sweep.name = "stage2";
  sweep.client_request_id = "bench";
  sweep.spec_text = "stage2";
  for (int64_t d : {256, 512, 768, 1024}) {
    for (int64_t r : {6, 8, 10}) {
      for (int64_t seed : {42, 137, 271}) sweep.runs.push_back(PaperRun(d, r, seed, 0));
    }
  }
  Check(store.CreateSweep(sweep, Audit{kT0, "bench", ""}), "create stage2");
  Check(store.RegisterWorker("bench", "cpu", 80 * kGiB, kT0), "register");
  std::vector<std::pair<int64_t, int64_t>> runs;
  while (true) {
    auto claim = Check(store.ClaimNextRun("bench", 80 * kGiB, kT0), "claim");
    if (!claim) break;
    Check(store.MarkRunning(claim->run.id, claim->attempt, kT0), "start");
    runs.emplace_back(claim->run.id, claim->attempt);
  }
  return runs;
}

const std::vector<std::string> kMetricNames = {
    "train/loss",   "train/lr",     "train/grad_norm", "train/tokens_per_s", "rho",
    "val/tiny/ppl", "val/wiki/ppl", "val/edu/ppl",     "train/mfu",          "train/step_s"};

// One batch: `steps` consecutive steps × every metric name.
std::vector<MetricPoint> MakeBatch(int64_t first_step, int64_t steps, int64_t run_index) {
  std::vector<MetricPoint> points;
  points.reserve(steps * kMetricNames.size());
  for (int64_t s = first_step; s < first_step + steps; ++s) {
    for (size_t n = 0; n < kMetricNames.size(); ++n) {
      const double value = 0.8 + 0.001 * run_index + 1e-7 * s + 0.01 * n;
      points.push_back({s, kMetricNames[n], value, kT0 + s * 1000});
    }
  }
  return points;
}

// A measured amount of work: wall-clock and process CPU seconds.
struct Timing {
  double wall = 0;
  double cpu = 0;
  double bytes_written = 0;
};

template <typename Fn>
Timing Time(Fn&& fn) {
  const auto start = Clock::now();
  const double cpu = CpuSeconds();
  const double written = BytesWritten();
  fn();
  return Timing{Seconds(start), CpuSeconds() - cpu, BytesWritten() - written};
}

Timing MedianTiming(const std::vector<Timing>& timings) {
  std::vector<double> wall, cpu, written;
  for (const Timing& t : timings) {
    wall.push_back(t.wall);
    cpu.push_back(t.cpu);
    written.push_back(t.bytes_written);
  }
  return Timing{Median(wall), Median(cpu), Median(written)};
}

// `workers` threads, each owning runs[i], runs[i + workers], ...: every thread appends batches
// of `steps_per_batch` steps to its runs in turn, keeping `in_flight` appends outstanding, until
// every run has `steps` steps.
Timing Ingest(RunStore& store, const std::vector<std::pair<int64_t, int64_t>>& runs, int64_t steps,
              int64_t steps_per_batch, int workers, int in_flight) {
  return Time([&] {
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        std::deque<std::future<absl::StatusOr<int64_t>>> pending;
        for (int64_t first = 0; first < steps; first += steps_per_batch) {
          for (size_t i = w; i < runs.size(); i += workers) {
            const int64_t n = std::min(steps_per_batch, steps - first);
            pending.push_back(store.AppendMetricsAsync(
                runs[i].first, runs[i].second, MakeBatch(first, n, static_cast<int64_t>(i))));
            while (static_cast<int>(pending.size()) > in_flight) {
              Check(pending.front().get(), "append");
              pending.pop_front();
            }
          }
        }
        for (auto& f : pending) Check(f.get(), "append");
      });
    }
    for (auto& t : threads) t.join();
  });
}

void PrintRate(const char* what, double points, const Timing& t, const char* note) {
  std::printf("%-58s %9.0f points/s  (%.0f per cpu-second; %.0f bytes written per point; %s)\n",
              what, points / t.wall, points / t.cpu, t.bytes_written / points, note);
}

}  // namespace
}  // namespace cart::store

int main(int argc, char** argv) {
  using namespace cart::store;  // NOLINT: a benchmark's main
  int64_t table_points = 10'000'000;
  bool keep = false;
  std::string only;
  std::string dir = (std::filesystem::temp_directory_path() / "bench-store").string();
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--points") && i + 1 < argc) {
      table_points = cart::ParseInt64(argv[++i]).value_or(-1);
    } else if (!std::strcmp(argv[i], "--dir") && i + 1 < argc) {
      dir = argv[++i];
    } else if (!std::strcmp(argv[i], "--keep")) {
      keep = true;
    } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) {
      only = argv[++i];
    } else if (!std::strcmp(argv[i], "--sync") && i + 1 < argc &&
               (!std::strcmp(argv[i + 1], "full") || !std::strcmp(argv[i + 1], "normal"))) {
      cart::store::g_sync_full = !std::strcmp(argv[++i], "full");
    } else {
      std::fprintf(stderr,
                   "usage: bench-store [--points N] [--dir DIR] [--only ingest|sweep|table] "
                   "[--sync full|normal] [--keep]\n");
      return 2;
    }
  }
  if (table_points < 3600) {
    std::fprintf(stderr, "bench-store: --points must be an integer >= 3600\n");
    return 2;
  }
  std::filesystem::create_directories(dir);
  const std::string path = (std::filesystem::path(dir) / "bench.db").string();
  std::printf("bench-store: %s (SQLite WAL, synchronous=%s); load average %s on %u cores\n",
              path.c_str(), cart::store::g_sync_full ? "FULL" : "NORMAL", LoadAverage().c_str(),
              std::thread::hardware_concurrency());
  auto wanted = [&](const char* section) { return only.empty() || only == section; };

  // 1. Ingest: 36 runs, 4 workers, batches of 50 steps x 10 metrics = 500 points, 4 appends in
  // flight per worker: 1.8 M points per repetition. Then one run with blocking appends.
  if (wanted("ingest")) {
    std::vector<Timing> many, one;
    for (int rep = 0; rep < 3; ++rep) {
      auto store = Fresh(path);
      auto runs = StartStage2(*store);
      many.push_back(Ingest(*store, runs, 5000, 50, 4, 4));
    }
    PrintRate("metric ingest, 36 runs, 4 workers, 500-point batches:", 36.0 * 5000 * 10,
              MedianTiming(many), "median of 3; target >= 200,000");
    for (int rep = 0; rep < 3; ++rep) {
      auto store = Fresh(path);
      auto runs = StartStage2(*store);
      runs.resize(1);
      one.push_back(Ingest(*store, runs, 100'000, 100, 1, 1));
    }
    PrintRate("metric ingest, 1 run, blocking 1,000-point appends:", 100'000.0 * 10,
              MedianTiming(one), "median of 3");
  }

  // 2. A 10,000-run sweep in one transaction.
  if (wanted("sweep")) {
    std::vector<Timing> timings;
    for (int rep = 0; rep < 3; ++rep) {
      auto store = Fresh(path);
      NewSweep sweep;
      sweep.name = "big";
      sweep.client_request_id = "big";
      sweep.spec_text = "big";
      for (int64_t i = 0; i < 10'000; ++i) {
        sweep.runs.push_back(PaperRun(256 * (1 + i % 4), 2 + i % 9, 42 + i, i));
      }
      CreatedSweep created;
      timings.push_back(Time([&] {
        created = Check(store->CreateSweep(sweep, Audit{kT0, "bench", ""}), "create");
      }));
      if (created.run_ids.size() != 10'000) Die(absl::InternalError("run count"), "create");
    }
    const Timing t = MedianTiming(timings);
    std::printf("%-58s %9.3f s         (cpu %.3f s; median of 3; target <= 0.5 s)\n",
                "create a 10,000-run sweep, 30 config keys per run:", t.wall, t.cpu);
  }

  // 3 + 4. The rho table over ~table_points metric rows: stage 2's 36 runs x 10 metrics x steps.
  if (wanted("table")) {
    auto store = Fresh(path);
    auto runs = StartStage2(*store);
    const int64_t steps = table_points / (36 * 10);
    const int64_t points = steps * 36 * 10;
    const Timing ingest = Ingest(*store, runs, steps, 100, 4, 4);
    for (const auto& [run, attempt] : runs) {
      Check(store->RecordAttemptOutcome(run, attempt, AttemptOutcome::kSucceeded,
                                        Audit{kT0, "bench", ""}),
            "succeed");
    }
    PrintRate(cart::StrCat("ingest of ", points, " rows (1,000-point batches):").c_str(),
              static_cast<double>(points), ingest, cart::StrCat(ingest.wall, " s").c_str());
    PivotRequest request;
    request.filter.sweeps = {"stage2"};
    request.metric = "rho";
    request.row_key = "d";
    request.col_key = "R";
    std::vector<Timing> pivots;
    PivotTable table;
    for (int rep = 0; rep < 20; ++rep) {
      pivots.push_back(Time([&] { table = Check(store->Pivot(request), "pivot"); }));
    }
    Timing t = MedianTiming(pivots);
    std::printf(
        "%-58s %9.2f ms        (cpu %.2f ms; median of 20; target <= 50 ms; %zu x %zu "
        "cells, n = %lld)\n",
        cart::StrCat("rho by d x R over ", points, " metric rows:").c_str(), t.wall * 1e3,
        t.cpu * 1e3, table.row_values.size(), table.col_values.size(),
        static_cast<long long>(table.cells[0][0].n));
    std::vector<Timing> series;
    for (int rep = 0; rep < 20; ++rep) {
      series.push_back(Time([&] {
        Check(store->MetricSeries({runs[0].first, "train/loss", 1000, {}, {}}), "series");
      }));
    }
    t = MedianTiming(series);
    std::printf("%-58s %9.2f ms        (cpu %.2f ms; median of 20)\n",
                cart::StrCat("one run's loss series, ", steps, " points -> 1,000:").c_str(),
                t.wall * 1e3, t.cpu * 1e3);
    store.reset();  // closing folds the WAL into the file
    const double mb = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
    std::printf("%-58s %9.1f MB        (%.1f MB for %lld points)\n",
                "file size per million metric points:", mb / (static_cast<double>(points) / 1e6),
                mb, static_cast<long long>(points));
  }
  if (!keep) {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  }
  std::printf("load average at the end: %s\n", LoadAverage().c_str());
  return 0;
}
