#include "config/accounting.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <utility>

namespace cart::config {
namespace {

int64_t MlpParams(const ModelConfig& m) { return 3 * m.d * m.mlp_hidden(); }
// Low-rank ("MLA") attention: q and o are d×d; kv_down d→d/4; k_up and v_up d/4→d.
int64_t MlaParams(int64_t d) { return 2 * d * d + 3 * d * (d / 4); }
int64_t AnchorParams(int64_t d) { return 3 * d * (d / 4); }

}  // namespace

ParamCounts CountParams(const ModelConfig& m) {
  ParamCounts c;
  const int64_t d = m.d;
  c.embedding = m.vocab * d;
  c.prelude_layer = MlaParams(d) + MlpParams(m) + 2 * d;
  if (m.model == ModelKind::kDense) {
    c.dense_layer = 4 * d * d + MlpParams(m) + 2 * d;
    c.stored = c.embedding + m.layers * c.dense_layer + d;
    c.effective = c.stored;
    return c;
  }
  const bool self = m.core_attn == CoreAttn::kSelf;
  // Cross-attention core: q and o only, K and V come from the anchor. Self-attention core: a full
  // low-rank attention like the prelude's.
  c.core_block = (self ? MlaParams(d) : 2 * d * d) + MlpParams(m) + 2 * d;
  c.anchor = self ? 0 : AnchorParams(d);
  const int64_t cores = m.core == CoreSharing::kUnshared ? m.R : 1;
  const int64_t extras = (m.hyper ? 3 : 0) + (m.lie ? 32 * d : 0) + (m.lti ? d : 0) + d;
  c.stored = c.embedding + (m.P + 1) * c.prelude_layer + c.anchor + cores * c.core_block + extras;
  if (m.core == CoreSharing::kUnshared) {
    c.effective = c.stored;
  } else {
    int64_t per_loop = c.core_block + (m.kv == KvMode::kRecompute ? c.anchor : 0);
    c.effective = c.stored + (m.R - 1) * per_loop;
  }
  return c;
}

FlopCounts CountFlops(const ModelConfig& m, int64_t seq_len, int loops) {
  const double d = static_cast<double>(m.d);
  const double T = static_cast<double>(seq_len);
  const double mlp = 2.0 * MlpParams(m);
  const double attn_core = 4.0 * T * d;  // QKᵀ and AV, each 2·T·d per token
  const double mla = 2.0 * MlaParams(m.d) + attn_core;
  const double logits = 2.0 * d * static_cast<double>(m.vocab);
  FlopCounts f;
  if (m.model == ModelKind::kDense) {
    f.forward_per_token = m.layers * (2.0 * 4 * d * d + attn_core + mlp) + logits;
  } else {
    const int r = loops > 0 ? loops : m.R;
    const bool self = m.core_attn == CoreAttn::kSelf;
    const double core = (self ? mla : 2.0 * 2 * d * d + attn_core) + mlp;
    const double anchor = self ? 0.0 : 2.0 * AnchorParams(m.d);
    const double anchors = m.kv == KvMode::kRecompute ? r * anchor : anchor;
    const double lie = m.lie ? 2.0 * 32 * d : 0.0;
    f.forward_per_token = (m.P + 1) * (mla + mlp) + anchors + r * (core + lie) + logits;
  }
  f.train_per_token = 3.0 * f.forward_per_token;
  return f;
}

double SixNFlopsPerToken(const ModelConfig& m) {
  return 6.0 * static_cast<double>(CountParams(m).effective);
}

int64_t LargestDivisorAtMost(int64_t n, int64_t limit) {
  int64_t best = 1;
  for (int64_t i = 1; i <= n / i; ++i) {
    if (n % i != 0) continue;
    if (i <= limit) best = std::max(best, i);
    if (n / i <= limit) best = std::max(best, n / i);
  }
  return best;
}
DenseMatch MatchDenseDepth(const ModelConfig& cart, MatchTarget target) {
  const ParamCounts c = CountParams(cart);
  ModelConfig dense = cart;
  dense.model = ModelKind::kDense;
  DenseMatch best;
  best.target = target == MatchTarget::kStored ? c.stored : c.effective;
  for (int layers = 1; layers <= 1024; ++layers) {
    dense.layers = layers;
    const int64_t params = CountParams(dense).stored;
    if (target == MatchTarget::kStored) {
      if (params > best.target) break;
      best.layers = layers;
      best.params = params;
    } else if (params >= best.target) {
      best.layers = layers;
      best.params = params;
      break;
    }
  }
  if (best.layers == 0) {  // even one layer exceeds the stored target: one layer is the floor
    dense.layers = 1;
    best.layers = 1;
    best.params = CountParams(dense).stored;
  }
  return best;
}

RunCost EstimateRunCost(const RunConfig& c, bool eval, const std::vector<int>& eval_loops) {
  // The paper's RTX 3090 figures (§ throughput): width -> tokens/s of CART P = 6, R = 6, T = 1024.
  static constexpr std::pair<int64_t, double> kMeasured[] = {
      {256, 134'985}, {512, 71'244}, {768, 45'556}, {1024, 32'393}};
  const auto* ref = &kMeasured[0];
  for (const auto& m : kMeasured) {
    if (std::llabs(m.first - c.model.d) < std::llabs(ref->first - c.model.d)) ref = &m;
  }
  ModelConfig paper;
  paper.vocab = 32000;
  paper.d = ref->first;
  paper.P = 6;
  paper.R = 6;
  const double achieved = ref->second * CountFlops(paper, 1024).train_per_token;  // FLOP/s
  RunCost cost;
  if (eval) {
    const int64_t per_set = c.train.eval_sequences * c.train.seq_len;
    const int64_t sets = static_cast<int64_t>(c.data.val_data.size());
    for (int r : eval_loops) {
      cost.tokens += per_set * sets;
      cost.flops += static_cast<double>(per_set * sets) *
                    CountFlops(c.model, c.train.seq_len, r).forward_per_token;
    }
  } else {
    cost.tokens = c.train.steps * c.train.batch * c.train.accum * c.train.seq_len;
    cost.flops =
        static_cast<double>(cost.tokens) * CountFlops(c.model, c.train.seq_len).train_per_token;
  }
  cost.rtx3090_hours = cost.flops / achieved / 3600.0;
  return cost;
}

int64_t DefaultMemoryReserveBytes(int64_t device_bytes) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  return std::max(kGiB, device_bytes / 10);
}

int64_t UsableMemoryBytes(int64_t device_bytes, int64_t reserve_bytes) {
  const int64_t reserve =
      reserve_bytes < 0 ? DefaultMemoryReserveBytes(device_bytes) : reserve_bytes;
  return std::max<int64_t>(0, device_bytes - reserve);
}

}  // namespace cart::config
