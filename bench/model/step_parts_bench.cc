// What the two remaining ideas for the CPU training step could still save, on the performance
// issue's run (CART d 256, P 2, R 4, T 256, batch 8, vocab 4096), measured in one sitting next to
// the full step (forward, cross-entropy, backward, clipping, AdamW, as `cart train` runs it):
//
//  - cross-entropy over the (2048 x 4096) logits, forward + backward: LibTorch's (log_softmax and
//    nll_loss, which write the log-probabilities and then a zero-filled gradient), a chunked one
//    (rows in chunks of 256 through autograd: less memory at once, not less work; each slice's
//    backward writes a full-size gradient), and a fused kernel written here
//    (forward: one pass per row for max and sum of exponentials; backward: one pass that writes
//    softmax - one-hot), which is not bit-identical to LibTorch's;
//  - AdamW: torch::optim::AdamW, which steps parameter by parameter, against the same update run
//    over one flat buffer (multi-tensor, gradients gathered with one cat; and the update alone,
//    whole and a slice at a time), and whether the two agree bit for bit after three steps.
//
// Prints medians of timed repetitions and each part as a share of the full step; asserts nothing.
//
//   build/bin/bench-step-parts [--threads N] [--reps N]

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "bench/model/issue_run.h"
#include "bench/model/step_parts_kernels.h"
#include "model/language_model.h"
#include "train/trainer.h"

namespace {

class FusedCrossEntropy : public torch::autograd::Function<FusedCrossEntropy> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor logits,
                               torch::Tensor targets) {
    const int64_t N = logits.size(0), V = logits.size(1);
    torch::Tensor lse = torch::empty({N}, logits.options());
    const float* x = logits.data_ptr<float>();
    float* l = lse.data_ptr<float>();
    at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) cart::bench::RowLogSumExp(x + i * V, V, l + i);
    });
    const int64_t* t = targets.data_ptr<int64_t>();
    double loss = 0;
    for (int64_t i = 0; i < N; ++i) loss += l[i] - x[i * V + t[i]];
    ctx->save_for_backward({logits, targets, lse});
    return torch::tensor(static_cast<float>(loss / static_cast<double>(N)));
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &logits = saved[0], &targets = saved[1], &lse = saved[2];
    const int64_t N = logits.size(0), V = logits.size(1);
    const float scale = grad_out[0].item<float>() / static_cast<float>(N);
    torch::Tensor grad = torch::empty_like(logits);
    const float* x = logits.data_ptr<float>();
    const float* l = lse.data_ptr<float>();
    const int64_t* t = targets.data_ptr<int64_t>();
    float* g = grad.data_ptr<float>();
    at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        cart::bench::RowGradient(x + i * V, V, l[i], scale, t[i], g + i * V);
    });
    return {grad, torch::Tensor()};
  }
};

// AdamW as torch::optim::AdamW computes it (the same tensor operations in the same order), over
// one flat buffer that the parameters are views of.
class FlatAdamW {
 public:
  FlatAdamW(std::vector<torch::Tensor> params, double lr, double wd)
      : params_(std::move(params)), lr_(lr), wd_(wd) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> flat_views;
    for (const auto& p : params_) flat_views.push_back(p.detach().reshape({-1}));
    flat_ = torch::cat(flat_views);
    int64_t offset = 0;
    for (auto& p : params_) {
      p.set_(flat_.storage(), offset, p.sizes(), p.strides());
      offset += p.numel();
    }
    exp_avg_ = torch::zeros_like(flat_);
    exp_avg_sq_ = torch::zeros_like(flat_);
  }

  // The gradients gathered into one buffer, as the update needs them.
  torch::Tensor GatherGrads() const {
    std::vector<torch::Tensor> grads;
    for (const auto& p : params_) grads.push_back(p.grad().reshape({-1}));
    return torch::cat(grads);
  }

  void Step() { Update(GatherGrads()); }

  // The update alone: its floor if backward wrote its gradients into one buffer (which would
  // need that buffer zero-filled before every backward instead of gradients set to none).
  // `chunk` > 0 runs the update a slice of that many values at a time (the same operations on
  // each value, so the same bits), which keeps the slices of the four buffers in cache.
  void Update(const torch::Tensor& grad, int64_t chunk = 0) {
    torch::NoGradGuard no_grad;
    ++step_;
    const double b1 = 0.9, b2 = 0.95, eps = 1e-8;
    const double bias1 = 1 - std::pow(b1, step_), bias2 = 1 - std::pow(b2, step_);
    const int64_t n = flat_.numel(), size = chunk > 0 ? chunk : n;
    for (int64_t at = 0; at < n; at += size) {
      const int64_t len = std::min(size, n - at);
      torch::Tensor p = flat_.narrow(0, at, len), g = grad.narrow(0, at, len);
      torch::Tensor m = exp_avg_.narrow(0, at, len), v = exp_avg_sq_.narrow(0, at, len);
      p.mul_(1 - lr_ * wd_);
      m.mul_(b1).add_(g, 1 - b1);
      v.mul_(b2).addcmul_(g, g, 1 - b2);
      torch::Tensor denom = (v.sqrt() / std::sqrt(bias2)).add_(eps);
      p.addcdiv_(m, denom, -lr_ / bias1);
    }
  }

 private:
  std::vector<torch::Tensor> params_;
  torch::Tensor flat_, exp_avg_, exp_avg_sq_;
  double lr_, wd_;
  int64_t step_ = 0;
};

std::vector<torch::Tensor> RandomParams(const std::vector<torch::Tensor>& like, bool grads) {
  torch::manual_seed(7);
  std::vector<torch::Tensor> out;
  for (const auto& p : like) {
    torch::Tensor t = torch::randn(p.sizes()).set_requires_grad(true);
    if (grads) t.mutable_grad() = torch::randn(p.sizes());
    out.push_back(t);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const cart::bench::BenchFlags flags = cart::bench::ParseFlagsAndSetUp(argc, argv, {1, 9});
  const int threads = flags.threads, reps = flags.reps;
  const int64_t B = cart::bench::kBatch, T = cart::bench::kSeqLen;
  const cart::config::ModelConfig config = cart::bench::IssueRunModel();
  const double lr = 3e-4, wd = 0.1;
  auto model = cart::model::BuildModel(config, 1).value();
  torch::optim::AdamW adamw(
      model->parameters(),
      torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).weight_decay(wd).eps(1e-8));
  torch::manual_seed(0);
  torch::Tensor x = torch::randint(0, config.vocab, {B, T}, torch::kInt64);
  torch::Tensor y = torch::randint(0, config.vocab, {B * T}, torch::kInt64);

  // The full step, as Trainer::Step runs it for one micro-batch.
  const double step = cart::bench::MedianSeconds(
      [&] {
        model->zero_grad(/*set_to_none=*/true);
        torch::Tensor logits = model->Forward(x);
        torch::nn::functional::cross_entropy(logits.view({-1, config.vocab}), y).backward();
        torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
        adamw.step();
      },
      reps);

  // Cross-entropy on logits of the step's shape.
  torch::Tensor logits = torch::randn({B * T, config.vocab}).set_requires_grad(true);
  auto ce_time = [&](const std::function<torch::Tensor()>& loss) {
    return cart::bench::MedianSeconds(
        [&] {
          logits.mutable_grad() = torch::Tensor();
          loss().backward();
        },
        reps);
  };
  const double ce_torch = ce_time([&] { return torch::nn::functional::cross_entropy(logits, y); });
  const double ce_chunked = ce_time([&] {
    torch::Tensor total = torch::zeros({});
    for (int64_t r = 0; r < B * T; r += 256) {
      total = total + torch::nn::functional::cross_entropy(
                          logits.slice(0, r, r + 256), y.slice(0, r, r + 256),
                          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    }
    return total / static_cast<double>(B * T);
  });
  const double ce_fused = ce_time([&] { return FusedCrossEntropy::apply(logits, y); });
  torch::Tensor torch_grad, fused_grad;
  double torch_loss, fused_loss;
  {
    logits.mutable_grad() = torch::Tensor();
    torch::Tensor l = torch::nn::functional::cross_entropy(logits, y);
    l.backward();
    torch_loss = l.item<double>();
    torch_grad = logits.grad().clone();
    logits.mutable_grad() = torch::Tensor();
    l = FusedCrossEntropy::apply(logits, y);
    l.backward();
    fused_loss = l.item<double>();
    fused_grad = logits.grad().clone();
  }

  // AdamW over parameters of the model's shapes: per parameter against flat.
  std::vector<torch::Tensor> shapes = model->parameters();
  std::vector<torch::Tensor> per_param = RandomParams(shapes, true);
  std::vector<torch::Tensor> flat_params = RandomParams(shapes, true);
  torch::optim::AdamW per_param_opt(
      per_param, torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).weight_decay(wd).eps(1e-8));
  FlatAdamW flat_opt(flat_params, lr, wd);
  for (int i = 0; i < 3; ++i) {
    per_param_opt.step();
    flat_opt.Step();
  }
  bool same_bits = true;
  for (size_t i = 0; i < per_param.size(); ++i) same_bits &= per_param[i].equal(flat_params[i]);
  const double adam_per_param = cart::bench::MedianSeconds([&] { per_param_opt.step(); }, reps);
  const double adam_flat = cart::bench::MedianSeconds([&] { flat_opt.Step(); }, reps);
  const torch::Tensor flat_grad = flat_opt.GatherGrads();
  const double adam_flat_update =
      cart::bench::MedianSeconds([&] { flat_opt.Update(flat_grad); }, reps);
  const double adam_flat_chunked =
      cart::bench::MedianSeconds([&] { flat_opt.Update(flat_grad, 1 << 18); }, reps);

  int64_t n_params = 0;
  for (const auto& p : shapes) n_params += p.numel();
  fmt::print("CART d={} P={} R={} vocab={}, batch {}x{}, {} threads, median of {} repetitions\n",
             config.d, config.P, config.R, config.vocab, B, T, threads, reps);
  fmt::print("full step (fwd, cross-entropy, bwd, clip, AdamW): {:.1f} ms\n", step * 1e3);
  fmt::print("{:<52}{:>10}{:>12}{:>14}\n", "part", "ms", "% of step", "saves % step");
  auto row = [&](const char* name, double t, double base) {
    fmt::print("{:<52}{:>10.2f}{:>12.2f}{:>14.2f}\n", name, t * 1e3, 100 * t / step,
               100 * (base - t) / step);
  };
  row("cross-entropy fwd+bwd, LibTorch", ce_torch, ce_torch);
  row("cross-entropy fwd+bwd, chunks of 256 rows", ce_chunked, ce_torch);
  row("cross-entropy fwd+bwd, fused (written here)", ce_fused, ce_torch);
  fmt::print("  fused vs LibTorch: loss {:.9g} vs {:.9g}, largest gradient difference {:.3g}\n",
             fused_loss, torch_loss, (fused_grad - torch_grad).abs().max().item<double>());
  row(fmt::format("AdamW, parameter by parameter ({} tensors)", shapes.size()).c_str(),
      adam_per_param, adam_per_param);
  row(fmt::format("AdamW, one flat buffer ({:.2f} M values)", n_params / 1e6).c_str(), adam_flat,
      adam_per_param);
  row("AdamW, one flat buffer, update alone (no gather)", adam_flat_update, adam_per_param);
  row("AdamW, flat, update alone, 256 K values at a time", adam_flat_chunked, adam_per_param);
  fmt::print("  flat vs per parameter after 3 steps: {}\n",
             same_bits ? "the same bits" : "different bits");
  return 0;
}
