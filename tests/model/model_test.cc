// Tests of the LibTorch CART and dense models against docs/model.md §1–5 on CPU.

#include <torch/torch.h>

#include <cmath>

#include "common/strings.h"
#include "config/accounting.h"
#include "gtest/gtest.h"
#include "model/cart.h"
#include "model/dense.h"
#include "model/language_model.h"
#include "tests/support/test_support.h"

namespace cart::model {
namespace {

// A tiny config: d = 64 (one head), P = 2, R = 3, vocab 50.
config::ModelConfig Tiny() {
  config::ModelConfig m;
  m.vocab = 50;
  m.d = 64;
  m.P = 2;
  m.R = 3;
  m.layers = 2;
  return m;
}

std::shared_ptr<LanguageModel> Build(const config::ModelConfig& m, int64_t seed = 7) {
  auto model = BuildModel(m, seed);
  EXPECT_TRUE(model.ok()) << model.status();
  return *model;
}

torch::Tensor Ids(int64_t B, int64_t T, int64_t vocab, int64_t seed = 1) {
  torch::manual_seed(seed);
  return torch::randint(0, vocab, {B, T}, torch::kInt64);
}

// Every valid combination of the §4 switches (cross_causal left true), for the sweeping tests.
std::vector<config::ModelConfig> AllCausalSwitchCombos() {
  std::vector<config::ModelConfig> out;
  for (config::KvMode kv : {config::KvMode::kFrozen, config::KvMode::kRecompute})
    for (config::CoreSharing core : {config::CoreSharing::kShared, config::CoreSharing::kUnshared})
      for (config::CoreAttn attn : {config::CoreAttn::kCross, config::CoreAttn::kSelf})
        for (int flags = 0; flags < 8; ++flags)
          for (config::GateMode gate : {config::GateMode::kPaper, config::GateMode::kDelta}) {
            if (attn == config::CoreAttn::kSelf && kv == config::KvMode::kRecompute) continue;
            config::ModelConfig m = Tiny();
            m.kv = kv;
            m.core = core;
            m.core_attn = attn;
            m.hyper = flags & 1;
            m.lti = flags & 2;
            m.lie = flags & 4;
            m.gate = gate;
            out.push_back(m);
          }
  return out;
}

std::string Describe(const config::ModelConfig& m) {
  config::RunConfig r;
  r.model = m;
  return StrCat("kv=", config::GetKey(r, "kv").value(), " core=", config::GetKey(r, "core").value(),
                " core_attn=", config::GetKey(r, "core_attn").value(), " hyper=", m.hyper,
                " lti=", m.lti, " lie=", m.lie, " gate=", config::GetKey(r, "gate").value());
}

int64_t CountModuleParams(LanguageModel& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

TEST(CartModelTest, ModuleParameterCountEqualsAccountingForEverySwitch) {
  for (const config::ModelConfig& m : AllCausalSwitchCombos()) {
    auto model = Build(m);
    EXPECT_EQ(CountModuleParams(*model), config::CountParams(m).stored) << Describe(m);
  }
  config::ModelConfig dense = Tiny();
  dense.model = config::ModelKind::kDense;
  EXPECT_EQ(CountModuleParams(*Build(dense)), config::CountParams(dense).stored);
}

TEST(CartModelTest, ModuleParameterCountEqualsSpecTableAtPaperWidth) {
  config::ModelConfig m;
  m.vocab = 32000;
  m.d = 256;
  m.P = 6;
  m.R = 6;
  EXPECT_EQ(CountModuleParams(*Build(m)), 14'365'187);  // 14.37M in docs/model.md §5
}

TEST(CartModelTest, TensorNamesFollowTheCheckpointSpec) {
  auto model = Build(Tiny());
  auto params = model->named_parameters();
  for (const char* name : {"embed.weight",
                           "prelude.0.attn_norm.weight",
                           "prelude.1.attn.q_proj.weight",
                           "prelude.0.attn.kv_down.weight",
                           "prelude.0.attn.k_up.weight",
                           "prelude.0.attn.v_up.weight",
                           "prelude.0.attn.o_proj.weight",
                           "prelude.0.ffn_norm.weight",
                           "prelude.0.ffn.gate.weight",
                           "prelude.0.ffn.up.weight",
                           "prelude.0.ffn.down.weight",
                           "anchor.kv_down.weight",
                           "anchor.k_up.weight",
                           "anchor.v_up.weight",
                           "core.attn_norm.weight",
                           "core.q_proj.weight",
                           "core.o_proj.weight",
                           "core.ffn_norm.weight",
                           "core.ffn.gate.weight",
                           "core.ffn.up.weight",
                           "core.ffn.down.weight",
                           "hyper.weights",
                           "lie.weight",
                           "lti.a",
                           "coda.attn.q_proj.weight",
                           "coda.ffn.down.weight",
                           "final_norm.weight"}) {
    EXPECT_NE(params.find(name), nullptr) << name;
  }
  EXPECT_EQ(params["lie.weight"].sizes(), (std::vector<int64_t>{64, 32}));  // d × 32
  EXPECT_EQ(params["prelude.0.attn.kv_down.weight"].sizes(),
            (std::vector<int64_t>{16, 64}));  // (out, in)
  config::ModelConfig unshared = Tiny();
  unshared.core = config::CoreSharing::kUnshared;
  auto u = Build(unshared)->named_parameters();
  EXPECT_NE(u.find("core.2.q_proj.weight"), nullptr);
  EXPECT_EQ(u.find("core.3.q_proj.weight"), nullptr);
}

TEST(CartModelTest, InitialisationFollowsTheSpec) {
  auto model = std::dynamic_pointer_cast<CartImpl>(Build(Tiny()));
  ASSERT_NE(model, nullptr);
  EXPECT_TRUE(torch::equal(model->hyper_weights, torch::tensor({1.0f, 0.0f, 0.0f})));
  EXPECT_NEAR(torch::sigmoid(model->lti_a).mean().item<double>(), 0.9, 1e-6);
  EXPECT_TRUE(torch::equal(model->final_norm->weight, torch::ones({64})));
  // N(0, 0.02): the std of a large matrix is within a few percent of 0.02.
  EXPECT_NEAR(model->embed->weight.std().item<double>(), 0.02, 0.002);
  Diagnostics rho = model->Rho();
  EXPECT_NEAR(rho.rho_max, 0.9, 1e-6);
  EXPECT_NEAR(rho.rho_min, 0.9, 1e-6);
}

TEST(CartModelTest, LoopIndexTableIsTheSpecSinusoid) {
  torch::Tensor pe = LoopIndexTable();
  ASSERT_EQ(pe.sizes(), (std::vector<int64_t>{16, 32}));
  const double div1 = std::exp(2 * (-std::log(10000.0) / 32));  // column pair 1
  EXPECT_NEAR(pe[5][2].item<double>(), std::sin(5 * div1), 1e-6);
  EXPECT_NEAR(pe[5][3].item<double>(), std::cos(5 * div1), 1e-6);
  EXPECT_NEAR(pe[0][1].item<double>(), 1.0, 1e-7);
}

TEST(CartModelTest, ShapesDtypesAndVariableLoopCounts) {
  auto model = Build(Tiny());
  torch::NoGradGuard no_grad;
  torch::Tensor ids = Ids(2, 7, 50);
  torch::Tensor logits = model->Forward(ids);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 7, 50}));
  EXPECT_EQ(logits.scalar_type(), torch::kFloat32);
  for (int loops = 1; loops <= 16; ++loops) {
    ForwardOptions o;
    o.loops = loops;
    EXPECT_TRUE(torch::isfinite(model->Forward(ids, o)).all().item<bool>()) << loops;
  }
  ForwardOptions too_many;
  too_many.loops = 17;
  EXPECT_THROW(model->Forward(ids, too_many), c10::Error);
}

TEST(CartModelTest, SameSeedSameModelDifferentSeedDifferentModel) {
  torch::NoGradGuard no_grad;
  torch::Tensor ids = Ids(1, 9, 50);
  torch::Tensor a = Build(Tiny(), 11)->Forward(ids);
  torch::Tensor b = Build(Tiny(), 11)->Forward(ids);
  torch::Tensor c = Build(Tiny(), 12)->Forward(ids);
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_FALSE(torch::allclose(a, c));
}

// Changing tokens after position t must leave logits at positions <= t unchanged.
double MaxChangeBeforeCut(LanguageModel& model, int64_t T, int64_t cut) {
  torch::NoGradGuard no_grad;
  torch::Tensor ids = Ids(2, T, model.config().vocab, 3);
  torch::Tensor changed = ids.clone();
  changed.narrow(1, cut + 1, T - cut - 1).copy_(Ids(2, T - cut - 1, model.config().vocab, 4));
  torch::Tensor a = model.Forward(ids).narrow(1, 0, cut + 1);
  torch::Tensor b = model.Forward(changed).narrow(1, 0, cut + 1);
  return (a - b).abs().max().item<double>();
}

TEST(CartModelTest, CausalForEverySwitchCombinationAndDense) {
  constexpr double kTolerance = 1e-5;  // fp32 reassociation noise is ~1e-7 here
  for (const config::ModelConfig& m : AllCausalSwitchCombos()) {
    auto model = Build(m);
    EXPECT_LE(MaxChangeBeforeCut(*model, 12, 5), kTolerance) << Describe(m);
  }
  config::ModelConfig dense = Tiny();
  dense.model = config::ModelKind::kDense;
  EXPECT_LE(MaxChangeBeforeCut(*Build(dense), 12, 5), kTolerance);
}

TEST(CartModelTest, NonCausalCrossAttentionLeaksTheFuture) {
  for (config::KvMode kv : {config::KvMode::kFrozen, config::KvMode::kRecompute}) {
    config::ModelConfig m = Tiny();
    m.kv = kv;
    // Same seed and shapes, so both models hold identical weights; only the mask differs.
    const double causal = MaxChangeBeforeCut(*Build(m, 5), 12, 5);
    m.cross_causal = false;
    const double leaky = MaxChangeBeforeCut(*Build(m, 5), 12, 5);
    EXPECT_LE(causal, 1e-6);
    // At init (weights ~N(0, 0.02)) the leak moves early logits by ~1e-5..1e-4; the causal model
    // moves them by nothing at all.
    EXPECT_GT(leaky, 1e-5) << "kv " << static_cast<int>(kv);
    EXPECT_GT(leaky, 100 * causal);
  }
}

TEST(CartModelTest, AnchorIsComputedOncePerForwardWhenFrozenAndEveryLoopWhenRecomputed) {
  torch::NoGradGuard no_grad;
  torch::Tensor ids = Ids(1, 5, 50);
  ForwardOptions o;
  o.diagnostics = true;
  DiagnosticTensors diag;
  Build(Tiny())->Forward(ids, o, &diag);
  EXPECT_EQ(diag.anchor_calls, 1);
  config::ModelConfig recompute = Tiny();
  recompute.kv = config::KvMode::kRecompute;
  auto model = Build(recompute);
  model->Forward(ids, o, &diag);
  EXPECT_EQ(diag.anchor_calls, 3);
  o.loops = 7;
  model->Forward(ids, o, &diag);
  EXPECT_EQ(diag.anchor_calls, 7);
  config::ModelConfig self = Tiny();
  self.core_attn = config::CoreAttn::kSelf;
  Build(self)->Forward(ids, o, &diag);
  EXPECT_EQ(diag.anchor_calls, 0);
}

// An independent, hand-written §3 forward pass over the model's own submodules, with each switch
// spelled as its equation. Frozen KV, shared cross-attention core.
torch::Tensor ReferenceForward(CartImpl& m, const torch::Tensor& ids) {
  const config::ModelConfig& c = m.config();
  torch::Tensor x = m.embed(ids);
  RopeTables rope = MakeRope(ids.size(1), x);
  for (const auto& layer : *m.prelude) x = layer->as<PreludeLayerImpl>()->forward(x, rope);
  torch::Tensor e = x;
  auto [K, V] = m.anchor(e);
  std::vector<torch::Tensor> buf = {e, e, e};
  torch::Tensor pe = LoopIndexTable();
  for (int r = 0; r < c.R; ++r) {
    torch::Tensor h_in;
    if (c.hyper) {
      torch::Tensor w = torch::softmax(m.hyper_weights, 0);
      h_in = w[0] * buf[0] + w[1] * buf[1] + w[2] * buf[2];
    } else {
      h_in = buf[0];  // hyper: off
    }
    if (c.lie) h_in = h_in + torch::matmul(m.lie->weight, pe[r]);  // Wlie · pe[r]
    torch::Tensor t = m.core->forward(h_in, K, V, rope);
    torch::Tensor h;
    if (!c.lti) {
      h = c.gate == config::GateMode::kPaper ? h_in + t : t;  // lti: off → h = h_in + update
    } else if (c.gate == config::GateMode::kPaper) {
      h = torch::sigmoid(m.lti_a) * h_in + t;
    } else {
      h = torch::sigmoid(m.lti_a) * h_in + (t - h_in);  // gate: delta
    }
    buf = {h, buf[0], buf[1]};
  }
  torch::Tensor h = m.coda(buf[0], rope);
  return torch::matmul(m.final_norm(h), m.embed->weight.t());
}

TEST(CartModelTest, EachSwitchComputesExactlyItsEquation) {
  torch::NoGradGuard no_grad;
  torch::Tensor ids = Ids(2, 6, 50);
  struct Case {
    const char* name;
    void (*set)(config::ModelConfig&);
  };
  const Case cases[] = {
      {"baseline", [](config::ModelConfig&) {}},
      {"lti off", [](config::ModelConfig& m) { m.lti = false; }},
      {"hyper off", [](config::ModelConfig& m) { m.hyper = false; }},
      {"lie off", [](config::ModelConfig& m) { m.lie = false; }},
      {"gate delta", [](config::ModelConfig& m) { m.gate = config::GateMode::kDelta; }},
  };
  for (const Case& c : cases) {
    config::ModelConfig cfg = Tiny();
    c.set(cfg);
    auto model = std::dynamic_pointer_cast<CartImpl>(Build(cfg));
    // Move the learned mixing weights off their init so the hyper-connection sum matters.
    if (model->hyper_weights.defined())
      model->hyper_weights.copy_(torch::tensor({0.3f, -0.2f, 0.5f}));
    if (model->lti_a.defined()) model->lti_a.uniform_(-1.0, 3.0);
    torch::Tensor got = model->Forward(ids);
    torch::Tensor want = ReferenceForward(*model, ids);
    EXPECT_LE((got - want).abs().max().item<double>(), 1e-5) << c.name;
  }
}

TEST(CartModelTest, GradientsReachEveryParameterForEverySwitch) {
  torch::Tensor ids = Ids(2, 6, 50);
  for (const config::ModelConfig& m : AllCausalSwitchCombos()) {
    auto model = Build(m);
    torch::Tensor logits = model->Forward(ids);
    torch::nn::functional::cross_entropy(logits.view({-1, 50}), ids.view({-1})).backward();
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << p.key() << " " << Describe(m);
      EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key() << " " << Describe(m);
    }
  }
}

TEST(CartModelTest, FiniteDifferenceGradientCheckInDouble) {
  config::ModelConfig m = Tiny();
  m.R = 2;
  m.P = 1;
  m.vocab = 11;
  auto model = Build(m);
  model->to(torch::kFloat64);
  torch::Tensor ids = Ids(1, 4, 11);
  auto loss_fn = [&] {
    return torch::nn::functional::cross_entropy(model->Forward(ids).view({-1, 11}), ids.view({-1}));
  };
  model->zero_grad();
  loss_fn().backward();
  const double eps = 1e-6;
  int checked = 0;
  for (const auto& p : model->named_parameters()) {
    torch::Tensor flat = p.value().data().view({-1});
    torch::Tensor grad = p.value().grad().view({-1});
    for (int64_t i : {int64_t{0}, flat.numel() / 2, flat.numel() - 1}) {
      const double orig = flat[i].item<double>();
      torch::NoGradGuard no_grad;
      flat[i] = orig + eps;
      const double up = loss_fn().item<double>();
      flat[i] = orig - eps;
      const double down = loss_fn().item<double>();
      flat[i] = orig;
      const double numeric = (up - down) / (2 * eps);
      const double analytic = grad[i].item<double>();
      EXPECT_NEAR(analytic, numeric, 1e-6 + 1e-4 * std::abs(numeric)) << p.key() << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
}

TEST(CartModelTest, DiagnosticsReportRhoAndPerLoopNorms) {
  torch::NoGradGuard no_grad;
  auto model = Build(Tiny());
  ForwardOptions o;
  o.diagnostics = true;
  o.loops = 5;
  DiagnosticTensors tensors;
  model->Forward(Ids(1, 5, 50), o, &tensors);
  const Diagnostics diag = Read(tensors);
  ASSERT_EQ(diag.h_norm.size(), 5u);
  ASSERT_EQ(diag.rel_update.size(), 5u);
  EXPECT_NEAR(diag.rho_max, 0.9, 1e-6);
  for (int r = 0; r < 5; ++r) {
    EXPECT_GT(diag.h_norm[r], 0);
    EXPECT_GT(diag.rel_update[r], 0);
  }
  // Faithfulness note 1: with the paper's double residual the carry is ≈ 1.9 at init, so the
  // state grows loop after loop.
  EXPECT_GT(diag.h_norm[4], 1.5 * diag.h_norm[0]);
}

// Regression values: logits of a fixed tiny model (seed 2024, ids 0..7) at four positions, computed
// once by this implementation on LibTorch 1.13 CPU. Any change to the architecture, init order or
// numerics moves them far beyond the tolerance.
TEST(CartModelTest, FixedSeedLogitsMatchStoredValues) {
  torch::NoGradGuard no_grad;
  auto model = Build(Tiny(), 2024);
  torch::Tensor ids = torch::arange(8, torch::kInt64).unsqueeze(0);
  torch::Tensor logits = model->Forward(ids);
  const double want[4][3] = {{0.3015558, 0.0501165, -0.1360045},
                             {0.1008568, 0.0801037, -0.1185946},
                             {0.1005369, 0.0700755, -0.0990080},
                             {0.0992023, 0.0930678, -0.1250976}};
  const int64_t pos[4] = {0, 3, 5, 7};
  const int64_t tok[3] = {0, 17, 49};
  constexpr double kTolerance = 1e-5;  // stored to 7 decimals; fp32 BLAS differences are ~1e-7
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) {
      EXPECT_NEAR(logits[0][pos[i]][tok[j]].item<double>(), want[i][j], kTolerance)
          << "position " << pos[i] << " token " << tok[j];
    }
  }
}

}  // namespace
}  // namespace cart::model
