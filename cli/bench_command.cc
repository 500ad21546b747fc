// cart model bench — training throughput, MFU and peak memory of the real training step on this
// machine's device, at the paper's shapes by default, beside the paper's RTX 3090 figures
// (docs/gpu.md). `make gpu-check` runs it on a GPU box.

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "cli/commands.h"
#include "common/status.h"
#include "common/strings.h"
#include "config/accounting.h"
#include "config/config.h"
#include "config/devices.h"
#include "data/token_file.h"
#include "train/device.h"
#include "train/precision.h"
#include "train/step_profile.h"
#include "train/trainer.h"

namespace cart::cli {
namespace {

namespace fs = std::filesystem;

using config::CardPeak;
using config::PeakOf;

// The paper's measured training throughput on one RTX 3090 (CART, P 6, R 6, T 1024, bf16) and
// the MFU it states, by d.
struct PaperFigure {
  double tokens_per_s;
  double mfu;
};
const std::map<int64_t, PaperFigure>& PaperFigures() {
  static const auto* figures = new std::map<int64_t, PaperFigure>{
      {256, {134'985, 0.20}}, {512, {71'244, 0.33}}, {768, {45'556, 0.40}}, {1024, {32'393, 0.49}}};
  return *figures;
}

bool IsPaperShape(const config::RunConfig& c) {
  return c.model.model == config::ModelKind::kCart && c.model.P == 6 && c.model.R == 6 &&
         c.train.seq_len == 1024 && PaperFigures().count(c.model.d) > 0;
}

struct BenchArgs {
  std::string config, device = "auto", d_list = "256,512,768,1024";
  std::vector<std::string> sets;
  int64_t steps = 10, warmup = 3;
  double peak_tflops = 0;
  double memory_gib = 0;  // fit each width into this much; 0: the CUDA card's own, none on a CPU
  bool json = false;
  bool breakdown = false;    // time the step's work by kind (train/step_profile.h)
  std::string step_kernels;  // "fused" | "per-tensor"; empty: the trainer's default
  std::string projections;   // "merged" | "separate"; empty: the trainer's default
  bool cuda_graph = false;   // train::TrainOptions::cuda_graph
};

struct BenchRow {
  int64_t d = 0;
  int64_t batch = 0, seq_len = 0;  // batch: sequences per optimizer step
  int64_t micro_batch = 0, accum = 0;
  // Set when the width does not fit the device even at micro-batch 1: why, and nothing measured.
  std::optional<std::string> not_fitted;
  // Set when measuring the width failed (the other widths are still measured and printed).
  std::optional<std::string> failed;
  double seconds_per_step = 0, tokens_per_s = 0, train_flops_per_token = 0;
  std::optional<double> mfu;
  // The paper's convention: 6 × effective parameters per token (no attention products), which
  // reproduces its stated MFU from its tokens/s with the RTX 3090's 71 TFLOP/s.
  double six_n_flops_per_token = 0;
  std::optional<double> mfu_6n;
  // The most bytes held by tensors at once: the CUDA caching allocator's, or on the CPU LibTorch's
  // CPU allocator's as train::CpuTensorMemory counts them.
  std::optional<int64_t> peak_bytes;
  std::string peak_kind;
  std::optional<int64_t> reserved_bytes;  // the caching allocator's peak held from the driver
  int64_t estimate_bytes = 0;
  double final_loss = 0;
  std::optional<PaperFigure> paper;  // the paper's RTX 3090 figures at this shape, if it is its
  // --breakdown: the timed steps' own op time by kind, and their wall time, per step.
  std::optional<train::StepBreakdown> breakdown;
  double breakdown_wall_s = 0;
};

// A token file of uniform random ids, enough for `steps` steps of `c`.
absl::StatusOr<std::string> WriteRandomTokens(const fs::path& dir, const config::RunConfig& c,
                                              int64_t steps) {
  data::TokenFileInfo meta;
  meta.tokenizer = StrCat("synth:", c.model.vocab);
  meta.vocab = c.model.vocab;
  meta.sources = {"cart model bench: uniform random ids"};
  const std::string path = (dir / "bench.bin").string();
  CART_ASSIGN_OR_RETURN(data::TokenFileWriter writer, data::TokenFileWriter::Create(path, meta));
  const int64_t n = (steps + 1) * c.train.batch * c.train.accum * (c.train.seq_len + 1);
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> id(0, c.model.vocab - 1);
  std::vector<int64_t> chunk;
  for (int64_t done = 0; done < n;) {
    chunk.clear();
    for (int64_t i = 0; i < 65536 && done < n; ++i, ++done) chunk.push_back(id(rng));
    CART_RETURN_IF_ERROR(writer.Append(chunk));
  }
  CART_RETURN_IF_ERROR(writer.Finish().status());
  return path;
}

// The kernels this build runs a step with on `device`, as the memory estimate counts them.
config::MemoryKernels BenchKernels(const BenchArgs& args, c10::Device device) {
  config::MemoryKernels k = train::KernelsOn(device);
  if (!args.projections.empty()) k.merged_projections = args.projections == "merged";
  return k;
}

absl::StatusOr<BenchRow> BenchOne(const config::RunConfig& config, const BenchArgs& args,
                                  c10::Device device, const fs::path& dir,
                                  std::optional<double> peak_tflops) {
  config::RunConfig c = config;
  const int64_t total = args.warmup + args.steps;
  c.train.steps = total;
  c.train.log_every = total;
  c.train.eval_every = 0;
  c.train.checkpoint_every = 0;
  c.train.warmup = std::min<int64_t>(c.train.warmup, total);
  c.data.val_data.clear();
  CART_ASSIGN_OR_RETURN(c.data.train_data, WriteRandomTokens(dir, c, total));
  CART_RETURN_IF_ERROR(config::Validate(c));

  train::ResetPeakDeviceMemory(device);
  // The CPU's tensor bytes, counted as the CUDA allocator counts its (train/device.h).
  std::optional<train::CpuTensorMemory> cpu_memory;
  if (device.is_cpu()) cpu_memory.emplace();
  std::vector<std::chrono::steady_clock::time_point> ends;
  train::TrainOptions options;
  options.out_dir = (dir / StrCat("run-d", c.model.d)).string();
  options.device = args.device;
  options.write_checkpoints = false;
  if (!args.step_kernels.empty()) {
    options.step_kernels =
        args.step_kernels == "fused" ? train::StepKernels::kFused : train::StepKernels::kPerTensor;
  }
  if (!args.projections.empty()) options.merged_projections = args.projections == "merged";
  options.cuda_graph = args.cuda_graph;
  const auto start = std::chrono::steady_clock::now();
  const size_t first_timed = static_cast<size_t>(std::max<int64_t>(args.warmup, 1));
  // On the CPU the ops' own time (RecordFunction), on a GPU the kernels' (Kineto).
  std::optional<train::StepProfiler> profiler;
  std::optional<train::GpuStepProfiler> gpu_profiler;
  if (args.breakdown) {
    device.is_cpu() ? (void)profiler.emplace() : (void)gpu_profiler.emplace(device);
  }
  auto take = [&] { return profiler ? profiler->Take() : gpu_profiler->Take(); };
  options.on_step = [&](int64_t, double) {
    ends.push_back(std::chrono::steady_clock::now());
    if (args.breakdown && ends.size() == first_timed) {
      (void)take();  // the warm-up's, dropped
      // The timed steps start once the profiler has restarted: its own restart is no step's.
      ends.back() = std::chrono::steady_clock::now();
    }
  };
  CART_ASSIGN_OR_RETURN(train::TrainResult result, train::Train(c, options));
  std::optional<train::StepBreakdown> breakdown;
  if (args.breakdown) breakdown = take();
  profiler.reset();
  gpu_profiler.reset();
  fs::remove(c.data.train_data);

  // The steps after the warm-up, each timed from the end of the one before (a step ends when
  // its values reach the host, so the device has finished it).
  std::vector<double> step_seconds;
  for (size_t i = first_timed; i < ends.size(); ++i) {
    step_seconds.push_back(std::chrono::duration<double>(ends[i] - ends[i - 1]).count());
  }
  if (step_seconds.empty()) {
    step_seconds.push_back(std::chrono::duration<double>(ends.back() - start).count());
  }
  BenchRow row;
  if (breakdown && ends.size() > first_timed) {
    const double steps = static_cast<double>(ends.size() - first_timed);
    for (auto& [kind, seconds] : breakdown->seconds) seconds /= steps;
    row.breakdown = breakdown;
    row.breakdown_wall_s =
        std::chrono::duration<double>(ends.back() - ends[first_timed - 1]).count() / steps;
  }
  std::sort(step_seconds.begin(), step_seconds.end());
  row.d = c.model.d;
  row.batch = c.train.batch * c.train.accum;
  row.micro_batch = c.train.batch;
  row.accum = c.train.accum;
  row.seq_len = c.train.seq_len;
  row.seconds_per_step = step_seconds[step_seconds.size() / 2];
  row.tokens_per_s = static_cast<double>(row.batch * row.seq_len) / row.seconds_per_step;
  row.train_flops_per_token = config::CountFlops(c.model, c.train.seq_len).train_per_token;
  row.six_n_flops_per_token = config::SixNFlopsPerToken(c.model);
  if (peak_tflops) {
    row.mfu = row.tokens_per_s * row.train_flops_per_token / (*peak_tflops * 1e12);
    row.mfu_6n = row.tokens_per_s * row.six_n_flops_per_token / (*peak_tflops * 1e12);
  }
  if (const auto peak = train::PeakDeviceMemory(device)) {
    row.peak_bytes = peak->allocated;
    row.reserved_bytes = peak->reserved;
  }
  if (cpu_memory) row.peak_bytes = cpu_memory->peak_bytes();
  row.peak_kind = "allocated";
  row.estimate_bytes = config::EstimateTrainingBytes(c, BenchKernels(args, device));
  row.final_loss = result.final_loss;
  if (IsPaperShape(c)) row.paper = PaperFigures().at(c.model.d);
  return row;
}

std::string Mib(std::optional<int64_t> bytes) {
  return bytes ? fmt::format("{:.0f}", static_cast<double>(*bytes) / (1 << 20)) : "-";
}
std::string Percent(std::optional<double> v) { return v ? fmt::format("{:.1f} %", *v * 100) : "-"; }

// Where each width's step went (--breakdown): ms per step and share of the step, by kind.
void PrintBreakdown(const std::vector<BenchRow>& rows, bool gpu) {
  const train::WorkKind kinds[] = {train::WorkKind::kMatmul, train::WorkKind::kAttention,
                                   train::WorkKind::kElementwise, train::WorkKind::kOptimizer};
  std::cout << "\nwhere a step's time goes (ms per step, share of the step; profiled steps):\n"
            << fmt::format("{:>6}{:>10}", "d", "step");
  for (train::WorkKind k : kinds) std::cout << fmt::format("{:>18}", train::WorkKindName(k));
  std::cout << fmt::format("{:>18}\n", gpu ? "device idle" : "outside ops");
  for (const BenchRow& r : rows) {
    if (!r.breakdown) continue;
    auto cell = [&](double seconds) {
      return fmt::format("{:.1f} ({:.0f} %)", seconds * 1e3, 100 * seconds / r.breakdown_wall_s);
    };
    std::cout << fmt::format("{:>6}{:>10.1f}", r.d, r.breakdown_wall_s * 1e3);
    for (train::WorkKind k : kinds) {
      auto it = r.breakdown->seconds.find(k);
      std::cout << fmt::format("{:>18}", cell(it == r.breakdown->seconds.end() ? 0 : it->second));
    }
    std::cout << fmt::format("{:>18}\n", cell(r.breakdown_wall_s - r.breakdown->total_seconds()));
  }
  if (gpu) {
    std::cout << "the kernels' own time on the device by their names (Kineto): matmul: GEMM "
                 "kernels; attention: fused attention kernels; elementwise: every other kernel "
                 "and copy; optimizer: multi-tensor kernels (AdamW, clipping); device idle: the "
                 "step's wall time with no kernel running (launches, host work, the host read) "
                 "(train/step_profile.h)\n";
    return;
  }
  std::cout << "matmul: matrix products outside attention; attention: its forward and backward; "
               "elementwise: every other op (norms, activations, the loss, copies); optimizer: "
               "clipping and AdamW; outside ops: dispatch between ops, data, the host read "
               "(train/step_profile.h)\n";
}

absl::Status RunBench(const BenchArgs& args) {
  config::RunConfig base;
  // The paper's stage-2 shape (docs/model.md §6) with one micro-batch per step: tokens/s does
  // not depend on accumulation.
  base.model.P = 6;
  base.model.R = 6;
  base.train.seq_len = 1024;
  base.train.batch = 8;
  base.train.accum = 1;
  if (!args.config.empty()) {
    CART_ASSIGN_OR_RETURN(base, config::LoadRunConfigFile(args.config));
  }
  CART_RETURN_IF_ERROR(config::ApplyOverrides(base, args.sets));
  if (args.steps < 1 || args.warmup < 0) {
    return absl::InvalidArgumentError("--steps must be >= 1 and --warmup >= 0");
  }
  std::vector<int64_t> widths;
  for (const std::string& part : Split(args.d_list, ',')) {
    std::optional<int64_t> d = ParseInt64(Trim(part));
    if (!d || *d < 64 || *d % 64 != 0) {
      return absl::InvalidArgumentError(
          StrCat("--d: '", part, "' is not a width (a positive multiple of 64)"));
    }
    widths.push_back(*d);
  }
  CART_ASSIGN_OR_RETURN(c10::Device device, train::ResolveDevice(args.device));
  if (args.breakdown && args.cuda_graph) {
    // Kineto tears CUPTI down and sets it up again at every Take(), which PyTorch's own profiler
    // avoids while a graph is live (known crashes): one measurement at a time.
    return absl::InvalidArgumentError(
        "--breakdown and --cuda-graph: one at a time (the profiler restarts CUPTI between "
        "steps, which a recorded graph does not survive reliably)");
  }
  if (args.breakdown && !device.is_cpu()) {
    if (absl::Status gpu = train::GpuStepProfiler::Available(); !gpu.ok()) {
      return absl::FailedPreconditionError(StrCat(
          "--breakdown on ", device.str(), " times the kernels on the device: ", Message(gpu),
          " (docs/gpu.md \"Where a step's time goes\")"));
    }
  }
  const std::string device_name =
      train::CudaDeviceName(device).value_or(device.is_cpu() ? "CPU" : device.str());
  std::optional<double> peak;
  std::string peak_source;
  if (args.peak_tflops > 0) {
    peak = args.peak_tflops;
    peak_source = "--peak-tflops";
  } else if (std::optional<CardPeak> card = PeakOf(device_name); card && device.is_cuda()) {
    peak = card->bf16_tflops;
    peak_source = StrCat("bf16 peak of ", card->name);
  }

  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = StrCat(tmp != nullptr && *tmp != 0 ? tmp : "/tmp", "/cart-bench-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(StrCat("cannot make a temporary directory from ", pattern));
  }
  const fs::path dir = pattern;
  // Each width runs at the micro-batch cartd would give this card (config::FitMicroBatch into
  // what the reserve leaves, the global batch kept by accumulation), or is reported as not
  // fitting: an 8 GB card cannot hold d >= 768 at micro-batch 8, T 1024.
  std::optional<int64_t> memory = train::CudaDeviceMemoryBytes(device);
  if (args.memory_gib > 0) memory = static_cast<int64_t>(args.memory_gib * (1 << 30));
  std::optional<int64_t> usable;
  if (memory) usable = config::UsableMemoryBytes(*memory, -1);
  std::vector<BenchRow> rows;
  absl::Status status;
  for (int64_t d : widths) {
    config::RunConfig c = base;
    c.model.d = d;
    if (usable) {
      const config::MemoryKernels kernels = BenchKernels(args, device);
      const std::optional<config::MicroBatchFit> fit = config::FitMicroBatch(c, *usable, kernels);
      if (!fit) {
        BenchRow row;
        row.d = d;
        row.not_fitted = fmt::format(
            "does not fit at micro-batch 1: {:.2f} GiB estimated, {:.2f} GiB usable of {:.2f}",
            static_cast<double>(config::MinTrainingBytes(c, kernels)) / (1 << 30),
            static_cast<double>(*usable) / (1 << 30), static_cast<double>(*memory) / (1 << 30));
        if (!args.json)
          std::cerr << fmt::format("cart model bench: d = {} {}\n", d, *row.not_fitted);
        rows.push_back(std::move(row));
        continue;
      }
      c.train.batch = fit->batch;
      c.train.accum = fit->accum;
    }
    absl::StatusOr<BenchRow> row = BenchOne(c, args, device, dir, peak);
    if (!row.ok()) {
      // The next widths are still measured: on a machine lent for minutes one failure must not
      // cost the figures of the others. The first failure is the command's exit status.
      const std::string why = StrCat("d = ", d, ": ", Message(row.status()));
      if (status.ok()) status = absl::Status(row.status().code(), why);
      if (!args.json) std::cerr << fmt::format("cart model bench: {} (failed)\n", why);
      BenchRow failed;
      failed.d = d;
      failed.failed = Message(row.status());
      rows.push_back(std::move(failed));
      continue;
    }
    rows.push_back(*row);
    // Each width's figures as soon as they exist (stderr is unbuffered): a run cut short or
    // crashing later keeps the widths it measured.
    if (!args.json) {
      std::cerr << fmt::format(
          "cart model bench: d = {} done: micro {}x{}, {:.0f} tokens/s, MFU {}, MFU 6N {}, "
          "peak {} MiB, reserved {} MiB, estimate {} MiB\n",
          d, row->micro_batch, row->accum, row->tokens_per_s, Percent(row->mfu),
          Percent(row->mfu_6n), Mib(row->peak_bytes), Mib(row->reserved_bytes),
          Mib(row->estimate_bytes));
    }
  }
  std::error_code ec;
  fs::remove_all(dir, ec);

  const bool bf16 = train::UsesMixedPrecision(base.train.dtype, device);
  if (args.json) {
    nlohmann::json out = {{"device", device.str()},
                          {"device_name", device_name},
                          {"built_with_cuda", train::BuiltWithCuda()},
                          {"mixed_precision_bf16", bf16},
                          {"peak_tflops", peak ? nlohmann::json(*peak) : nlohmann::json()},
                          {"memory_bytes", memory ? nlohmann::json(*memory) : nlohmann::json()},
                          {"estimate_kernels", config::DescribeKernels(BenchKernels(args, device))},
                          {"rows", nlohmann::json::array()}};
    for (const BenchRow& r : rows) {
      if (r.not_fitted) {
        out["rows"].push_back({{"d", r.d}, {"fits", false}, {"reason", *r.not_fitted}});
        continue;
      }
      if (r.failed) {
        out["rows"].push_back({{"d", r.d}, {"failed", *r.failed}});
        continue;
      }
      nlohmann::json j = {
          {"d", r.d},
          {"fits", true},
          {"micro_batch", r.micro_batch},
          {"accum", r.accum},
          {"tokens_per_step", r.batch * r.seq_len},
          {"seconds_per_step", r.seconds_per_step},
          {"tokens_per_s", r.tokens_per_s},
          {"train_flops_per_token", r.train_flops_per_token},
          {"mfu", r.mfu ? nlohmann::json(*r.mfu) : nlohmann::json()},
          {"six_n_flops_per_token", r.six_n_flops_per_token},
          {"mfu_6n", r.mfu_6n ? nlohmann::json(*r.mfu_6n) : nlohmann::json()},
          {"peak_bytes", r.peak_bytes ? nlohmann::json(*r.peak_bytes) : nlohmann::json()},
          {"peak_kind", r.peak_kind},
          {"reserved_bytes",
           r.reserved_bytes ? nlohmann::json(*r.reserved_bytes) : nlohmann::json()},
          {"estimate_bytes", r.estimate_bytes},
          {"final_loss", r.final_loss}};
      if (r.breakdown) {
        nlohmann::json b = {
            {"step_ms", r.breakdown_wall_s * 1e3},
            {"ops", r.breakdown->ops},
            {"outside_ops_ms", (r.breakdown_wall_s - r.breakdown->total_seconds()) * 1e3}};
        for (const auto& [kind, seconds] : r.breakdown->seconds) {
          b[StrCat(train::WorkKindName(kind), "_ms")] = seconds * 1e3;
        }
        j["breakdown"] = b;
      }
      if (r.paper) {
        j["paper_rtx3090_tokens_per_s"] = r.paper->tokens_per_s;
        j["paper_rtx3090_mfu"] = r.paper->mfu;
      }
      out["rows"].push_back(j);
    }
    std::cout << out.dump(2) << std::endl;
    return status;
  }
  std::cout << fmt::format(
      "{} ({}), {}, P {} R {} T {}, {} tokens/step, median of {} steps after {} warm-up\n"
      "MFU: config::CountFlops (attention included); MFU 6N: 6 x effective parameters, the "
      "paper's count\n",
      device.str(), device_name, bf16 ? "bf16 autocast" : "fp32", base.model.P, base.model.R,
      base.train.seq_len, base.train.batch * base.train.accum * base.train.seq_len, args.steps,
      args.warmup);
  std::cout << "MFU against "
            << (peak ? fmt::format("{:.1f} TFLOP/s ({})", *peak, peak_source)
                     : std::string("no known peak (give --peak-tflops)"))
            << "\n";
  if (usable) {
    std::cout << fmt::format(
        "micro-batch fitted to {:.2f} GiB usable of {:.2f} GiB (cartd's fit; global batch kept)\n",
        static_cast<double>(*usable) / (1 << 30), static_cast<double>(*memory) / (1 << 30));
  }
  std::cout << fmt::format("{:>6}{:>8}{:>11}{:>12}{:>9}{:>9}{:>9}{:>11}{:>10}{:>14}{:>14}{:>8}\n",
                           "d", "micro", "tokens/s", "3090 paper", "TFLOP/s", "MFU", "MFU 6N",
                           "paper MFU", "peak MiB", "reserved MiB", "estimate MiB", "est/pk");
  for (const BenchRow& r : rows) {
    if (r.not_fitted || r.failed) {
      std::cout << fmt::format("{:>6}  {}\n", r.d,
                               r.failed ? StrCat("failed: ", *r.failed) : *r.not_fitted);
      continue;
    }
    const std::optional<PaperFigure>& p = r.paper;
    std::cout << fmt::format(
        "{:>6}{:>8}{:>11.0f}{:>12}{:>9.2f}{:>9}{:>9}{:>11}{:>10}{:>14}{:>14}{:>8}\n", r.d,
        fmt::format("{}x{}", r.micro_batch, r.accum), r.tokens_per_s,
        p ? fmt::format("{:.0f}", p->tokens_per_s) : "-",
        r.tokens_per_s * r.train_flops_per_token / 1e12, Percent(r.mfu), Percent(r.mfu_6n),
        p ? Percent(p->mfu) : "-", Mib(r.peak_bytes), Mib(r.reserved_bytes), Mib(r.estimate_bytes),
        r.peak_bytes ? fmt::format("{:.2f}", static_cast<double>(r.estimate_bytes) /
                                                 static_cast<double>(*r.peak_bytes))
                     : "-");
  }
  const auto measured = std::find_if(rows.begin(), rows.end(),
                                     [](const BenchRow& r) { return !r.not_fitted && !r.failed; });
  if (measured != rows.end()) {
    std::cout << "micro: sequences per micro-batch x micro-batches per step; peak: "
              << (measured->reserved_bytes
                      ? "bytes allocated for tensors at most, by the CUDA caching allocator; "
                        "reserved: bytes it held from the driver at most"
                      : "bytes allocated for tensors at most, by LibTorch's CPU allocator")
              << "; estimate: EstimateTrainingBytes on "
              << config::DescribeKernels(BenchKernels(args, device)) << " (docs/model.md §5)\n";
  }
  if (args.breakdown) PrintBreakdown(rows, !device.is_cpu());
  std::cout << std::flush;
  return status;
}

void BenchCommand(const BenchArgs& args) {
  if (absl::Status s = RunBench(args); !s.ok()) ExitWith(s);
}

}  // namespace

void RegisterModelBenchCommand(CLI::App& model_cmd) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* bench = model_cmd.add_subcommand(
      "bench",
      "Training tokens/s, MFU and peak memory of the real training step on a device, at the "
      "paper's shapes (P 6, R 6, T 1024, batch 8) unless told otherwise (docs/gpu.md)");
  bench->add_option("config", args->config, "Run-config YAML (default: the paper's shape)");
  bench->add_option("--set", args->sets, "Override a config key: key=value (repeatable)");
  bench->add_option("--d", args->d_list, "Widths to measure, comma-separated")
      ->capture_default_str();
  bench->add_option("--device", args->device, "auto | cpu | cuda | cuda:N")->capture_default_str();
  bench->add_option("--steps", args->steps, "Timed steps per width")->capture_default_str();
  bench->add_option("--warmup", args->warmup, "Untimed steps first")->capture_default_str();
  bench->add_option("--peak-tflops", args->peak_tflops,
                    "The device's peak in TFLOP/s for MFU (default: the card's bf16 peak from "
                    "the built-in table)");
  bench->add_option("--memory-gib", args->memory_gib,
                    "Fit each width into this much device memory, as cartd fits a run to a "
                    "worker (default: the CUDA card's own; none on the CPU)");
  bench->add_flag("--json", args->json, "Print JSON");
  bench
      ->add_option("--step-kernels", args->step_kernels,
                   "The optimizer step's kernels: fused (LibTorch 2.4+) or per-tensor (default: "
                   "fused where the LibTorch has them; train/optimizer.h)")
      ->check(CLI::IsMember({"fused", "per-tensor"}));
  bench
      ->add_option("--projections", args->projections,
                   "Projections that read one input: merged (one matmul per group) or separate "
                   "(default: merged on CUDA, separate on the CPU; model/layers.h)")
      ->check(CLI::IsMember({"merged", "separate"}));
  bench->add_flag("--cuda-graph", args->cuda_graph,
                  "Record each width's step as a CUDA graph after its first steps and replay it "
                  "(CUDA, LibTorch 2.4+; off by default until measured: docs/gpu.md)");
  bench->add_flag("--breakdown", args->breakdown,
                  "Also time each step's work by kind (matmul, attention, elementwise, optimizer): "
                  "the ops on the CPU, the kernels on a GPU (docs/gpu.md)");
  OnRun(bench, [args] { BenchCommand(*args); });
}

}  // namespace cart::cli
