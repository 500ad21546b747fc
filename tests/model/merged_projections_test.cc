// Merged projections (model/layers.h MergesProjections): the projections that read one input run
// as one matmul over their stacked weights. The same function as the separate matmuls up to the
// order of float sums, over every switch combination and the dense baseline; the number of
// matmuls falls by exactly the merged groups; the shared core stacks its weights once per forward
// pass, not once per loop; and the parameters (the checkpoint's tensors) are untouched.

#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>

#include "gtest/gtest.h"
#include "model/autocast.h"
#include "model/cart.h"
#include "model/dense.h"
#include "model/language_model.h"
#include "model/layers.h"

namespace cart::model {
namespace {

config::ModelConfig Tiny() {
  config::ModelConfig m;
  m.vocab = 50;
  m.d = 128;  // two heads; kv_down is d/4 = 32 wide
  m.P = 2;
  m.R = 3;
  m.layers = 2;
  return m;
}

std::shared_ptr<LanguageModel> Build(const config::ModelConfig& m) {
  auto model = BuildModel(m, 11);
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

// Counts, on this thread while it lives, the matrix products (linear, matmul, mm, ...: the
// outermost of a nest, as LibTorch's linear calls matmul, which calls mm) and the aten::cat calls.
class OpCounter {
 public:
  OpCounter() {
    matmuls_ = cats_ = depth_ = 0;
    handle_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback(
            [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
              if (IsMatmul(fn.name()) && depth_++ == 0) ++matmuls_;
              if (std::strcmp(fn.name(), "aten::cat") == 0) ++cats_;
              return nullptr;
            },
            [](const at::RecordFunction& fn, at::ObserverContext*) {
              if (IsMatmul(fn.name())) --depth_;
            })
            .needsInputs(false));
  }
  ~OpCounter() { at::removeCallback(handle_); }
  int matmuls() const { return matmuls_; }
  int cats() const { return cats_; }

 private:
  static bool IsMatmul(const char* name) {
    for (const char* op : {"aten::linear", "aten::matmul", "aten::mm", "aten::bmm", "aten::addmm"}) {
      if (std::strcmp(name, op) == 0) return true;
    }
    return false;
  }
  static inline thread_local int matmuls_ = 0, cats_ = 0, depth_ = 0;
  at::CallbackHandle handle_;
};

struct Pass {
  torch::Tensor logits;
  std::vector<torch::Tensor> grads;
  int matmuls = 0, cats = 0;
};

Pass ForwardBackward(LanguageModel& model, const torch::Tensor& ids, bool merged) {
  SetMergedProjections(model, merged);
  model.zero_grad();
  Pass p;
  {
    OpCounter count;
    p.logits = model.Forward(ids);
    p.matmuls = count.matmuls();
    p.cats = count.cats();
  }
  torch::nn::functional::cross_entropy(p.logits.view({-1, model.config().vocab}), ids.view({-1}))
      .backward();
  for (const auto& param : model.parameters()) p.grads.push_back(param.grad().clone());
  return p;
}

std::vector<config::ModelConfig> Configs() {
  std::vector<config::ModelConfig> out;
  for (config::KvMode kv : {config::KvMode::kFrozen, config::KvMode::kRecompute}) {
    for (config::CoreSharing core :
         {config::CoreSharing::kShared, config::CoreSharing::kUnshared}) {
      for (config::CoreAttn attn : {config::CoreAttn::kCross, config::CoreAttn::kSelf}) {
        if (attn == config::CoreAttn::kSelf && kv == config::KvMode::kRecompute) continue;
        config::ModelConfig m = Tiny();
        m.kv = kv;
        m.core = core;
        m.core_attn = attn;
        out.push_back(m);
      }
    }
  }
  config::ModelConfig dense = Tiny();
  dense.model = config::ModelKind::kDense;
  out.push_back(dense);
  return out;
}

std::string Name(const config::ModelConfig& m) {
  if (m.model == config::ModelKind::kDense) return "dense";
  return std::string("kv ") + (m.kv == config::KvMode::kFrozen ? "frozen" : "recompute") +
         ", core " + (m.core == config::CoreSharing::kShared ? "shared" : "unshared") +
         ", core_attn " + (m.core_attn == config::CoreAttn::kCross ? "cross" : "self");
}

// Matmuls saved by merging, counted from the model's structure: an MLA layer (prelude, coda,
// self-attention core) runs 5 projections as 3 and its SwiGLU 3 as 2; an anchor 3 as 2; a
// cross-attention core's SwiGLU 3 as 2; a dense layer q, k, v as one and its SwiGLU 3 as 2.
int SavedMatmuls(const config::ModelConfig& m) {
  if (m.model == config::ModelKind::kDense) return m.layers * (2 + 1);
  const int mla_layers = m.P + 1;
  const int core_saves = m.core_attn == config::CoreAttn::kSelf ? 2 + 1 : 1;
  const int anchors =
      m.core_attn == config::CoreAttn::kSelf ? 0 : (m.kv == config::KvMode::kFrozen ? 1 : m.R);
  return mla_layers * 3 + m.R * core_saves + anchors;
}

// Weights stacked per forward pass: one per group per module, whatever the number of loops.
int StackedWeights(const config::ModelConfig& m) {
  if (m.model == config::ModelKind::kDense) return m.layers * 2;
  const int mla_layers = m.P + 1;
  const int core_modules = m.core == config::CoreSharing::kShared ? 1 : m.R;
  const int core_groups = m.core_attn == config::CoreAttn::kSelf ? 3 : 1;
  const int anchor = m.core_attn == config::CoreAttn::kSelf ? 0 : 1;
  return mla_layers * 3 + core_modules * core_groups + anchor;
}

TEST(MergedProjectionsTest, SameLogitsAndGradientsFewerMatmulsForEverySwitchAndDense) {
  torch::manual_seed(3);
  const torch::Tensor ids = torch::randint(0, 50, {2, 9}, torch::kInt64);
  for (const config::ModelConfig& m : Configs()) {
    SCOPED_TRACE(Name(m));
    auto model = Build(m);
    const Pass separate = ForwardBackward(*model, ids, false);
    const Pass merged = ForwardBackward(*model, ids, true);
    // fp32 on the CPU; one matmul over stacked rows sums each output in the same order as the
    // separate matmul in exact arithmetic, so only the BLAS's blocking can differ.
    EXPECT_LE((merged.logits - separate.logits).abs().max().item<double>(), 1e-5);
    ASSERT_EQ(merged.grads.size(), separate.grads.size());
    for (size_t i = 0; i < merged.grads.size(); ++i) {
      const double scale = separate.grads[i].abs().max().item<double>();
      EXPECT_LE((merged.grads[i] - separate.grads[i]).abs().max().item<double>(),
                1e-5 * std::max(scale, 1e-3))
          << "gradient of parameter " << i;
    }
    EXPECT_EQ(separate.matmuls - merged.matmuls, SavedMatmuls(m));
    EXPECT_EQ(merged.cats - separate.cats, StackedWeights(m)) << "stacked once per pass";
  }
}

TEST(MergedProjectionsTest, BackToSeparateIsTheSeparatePassToTheBit) {
  // Merging is a computation switch: it leaves no state behind in the model.
  torch::manual_seed(4);
  const torch::Tensor ids = torch::randint(0, 50, {2, 7}, torch::kInt64);
  auto model = Build(Tiny());
  const Pass before = ForwardBackward(*model, ids, false);
  (void)ForwardBackward(*model, ids, true);
  const Pass after = ForwardBackward(*model, ids, false);
  EXPECT_TRUE(torch::equal(before.logits, after.logits));
}

TEST(MergedProjectionsTest, ParametersAndTheirNamesAreTheSameEitherWay) {
  auto model = Build(Tiny());
  std::vector<std::string> names_before;
  for (const auto& p : model->named_parameters()) names_before.push_back(p.key());
  SetMergedProjections(*model, true);
  std::vector<std::string> names_after;
  for (const auto& p : model->named_parameters()) names_after.push_back(p.key());
  EXPECT_EQ(names_after, names_before);
  EXPECT_NE(std::find(names_after.begin(), names_after.end(), "prelude.0.ffn.gate.weight"),
            names_after.end());
}

TEST(MergedProjectionsTest, UnderBf16AutocastMergedStaysWithinBf16RoundingOfSeparate) {
  // bf16 autocast on the CPU, as a mixed-precision run computes: the held stacked weight is cast
  // to bf16 as autocast casts each separate weight, so the two differ by bf16 rounding only
  // (8 bits of mantissa, through 2 + 3 + 1 layers: a few per cent of the largest logit).
  torch::manual_seed(5);
  const torch::Tensor ids = torch::randint(0, 50, {2, 9}, torch::kInt64);
  auto model = Build(Tiny());
  torch::NoGradGuard no_grad;
  auto logits = [&](bool merged) {
    SetMergedProjections(*model, merged);
    SetAutocastDtype(c10::kCPU, c10::kBFloat16);
    SetAutocastEnabled(c10::kCPU, true);
    torch::Tensor out = model->Forward(ids).to(torch::kFloat32);
    SetAutocastEnabled(c10::kCPU, false);
    at::autocast::clear_cache();
    return out;
  };
  const torch::Tensor separate = logits(false);
  const torch::Tensor merged = logits(true);
  const double scale = separate.abs().max().item<double>();
  EXPECT_LE((merged - separate).abs().max().item<double>(), 0.05 * scale);
}

}  // namespace
}  // namespace cart::model
