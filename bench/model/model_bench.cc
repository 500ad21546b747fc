// Forward+backward throughput of CART variants on CPU, next to the FLOP ratio that
// model/accounting predicts. Prints medians of timed repetitions; asserts nothing.
//
//   build/bin/bench-model [--threads N] [--reps N]

#include <fmt/format.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "bench/model/issue_run.h"
#include "config/accounting.h"
#include "model/language_model.h"
#include "train/trainer.h"

namespace {

using cart::config::ModelConfig;

double MedianSecondsPerStep(cart::model::LanguageModel& model, const torch::Tensor& ids, int reps) {
  return cart::bench::MedianSeconds(
      [&] {
        model.zero_grad();
        torch::Tensor logits = model.Forward(ids);
        torch::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), ids.view({-1}))
            .backward();
      },
      reps);
}

}  // namespace

int main(int argc, char** argv) {
  const cart::bench::BenchFlags flags = cart::bench::ParseFlagsAndSetUp(argc, argv, {2, 7});
  const int threads = flags.threads, reps = flags.reps;
  const int64_t B = cart::bench::kBatch, T = cart::bench::kSeqLen;
  const ModelConfig base = cart::bench::IssueRunModel();
  struct Variant {
    const char* name;
    ModelConfig config;
  };
  std::vector<Variant> variants;
  variants.push_back({"frozen, shared (default)", base});
  ModelConfig recompute = base;
  recompute.kv = cart::config::KvMode::kRecompute;
  variants.push_back({"kv: recompute", recompute});
  ModelConfig unshared = base;
  unshared.core = cart::config::CoreSharing::kUnshared;
  variants.push_back({"core: unshared", unshared});
  ModelConfig self = base;
  self.core_attn = cart::config::CoreAttn::kSelf;
  variants.push_back({"core_attn: self", self});

  fmt::print(
      "CART fwd+bwd on CPU: d={} P={} R={} vocab={} batch {}x{} tokens, {} threads, median of {}\n",
      base.d, base.P, base.R, base.vocab, B, T, threads, reps);
  fmt::print("{:<26}{:>12}{:>14}{:>16}{:>16}\n", "variant", "tokens/s", "GFLOP/s", "time ratio",
             "FLOP ratio");
  torch::manual_seed(0);
  torch::Tensor ids = torch::randint(0, base.vocab, {B, T}, torch::kInt64);
  double base_time = 0, base_flops = 0;
  for (const Variant& v : variants) {
    auto model = cart::model::BuildModel(v.config, 1).value();
    const double sec = MedianSecondsPerStep(*model, ids, reps);
    const double flops = cart::config::CountFlops(v.config, T).train_per_token;
    if (base_time == 0) {
      base_time = sec;
      base_flops = flops;
    }
    fmt::print("{:<26}{:>12.0f}{:>14.1f}{:>16.3f}{:>16.3f}\n", v.name, B * T / sec,
               flops * B * T / sec / 1e9, sec / base_time, flops / base_flops);
  }
  return 0;
}
