// Training memory: what a step keeps for backward, tensor by tensor (docs/model.md §5 "Training
// memory"), and the micro-batch that fits a device. The counts follow model/layers.cc and
// model/cart.cc as written; where LibTorch's kernels decide what is kept, MemoryKernels says
// which. tests/train/activation_memory_test.cc holds each count against LibTorch's allocator.

#include <algorithm>
#include <limits>
#include <vector>

#include "common/strings.h"
#include "config/accounting.h"

namespace cart::config {
namespace {

constexpr double kHeadDim = 64;

// Per-token byte counts of one block for one width and precision.
struct Widths {
  double d = 0;  // model width
  double h = 0;  // SwiGLU hidden width
  double H = 0;  // heads
  double T = 0;  // sequence length
  double w = 4;  // bytes of a matmul's output: 2 under bf16 autocast, else 4
  bool bf16 = false;
};

bool FusedRmsNorm(const MemoryKernels& k) { return k.cuda && k.libtorch_major >= 2; }
bool FusedAttention(const MemoryKernels& k) { return k.libtorch_major >= 2; }

// An RMSNorm of the fp32 residual stream, with what the `readers` linear layers that read its
// output keep of it.
double NormKept(const Widths& x, int readers, const MemoryKernels& k) {
  double kept = 4;                            // 1/rms, one fp32 per token
  if (!FusedRmsNorm(k)) kept += 4 * x.d;      // the normalised copy the weight multiplies
  if (k.libtorch_major < 2) kept += 4 * x.d;  // LibTorch 1.x keeps one more fp32 copy
  // Its output, fp32: kept by the linear layers that read it. Under autocast each reads it
  // through a bf16 cast of its own (autocast caches casts of weights only); merged projections
  // read it once.
  kept += x.bf16 ? 2 * x.d * (k.merged_projections ? 1 : readers) : 4 * x.d;
  return kept;
}

// Attention of a block: what its projections and its attention kernel keep, per token.
double AttentionKept(const Widths& x, BlockKind kind, const MemoryKernels& k) {
  const double wd = x.w * x.d;
  // Written out (LibTorch 1.x): the softmax's fp32 output (and under autocast its bf16 copy that
  // multiplies V), per head and key.
  const double probs = (x.bf16 ? 6 : 4) * x.H * x.T;
  const double lse = 4 * x.H;  // a fused kernel's log-sum-exp, fp32 per head and token
  const bool fused = FusedAttention(k);
  switch (kind) {
    case BlockKind::kPrelude:
    case BlockKind::kSelfCore: {
      const double latent = wd / 4;  // kv_down's output, read by k_up and v_up
      if (fused) {
        // q and k after RoPE, v, the output (its merged-heads view is free). Merged: the views
        // keep q's and k's unrotated projections with their stacked outputs.
        return latent + 4 * wd + lse + (k.merged_projections ? 2 * wd : 0);
      }
      // Contiguous copies of q, k and v for the batched products, the probabilities, the
      // merged-heads copy o_proj reads. Merged: the latent's view keeps q's projection.
      return latent + 4 * wd + probs + (k.merged_projections ? wd : 0);
    }
    case BlockKind::kDense:
      if (fused) return 4 * wd + lse + (k.merged_projections ? 2 * wd : 0);
      return 4 * wd + probs;
    case BlockKind::kCrossCore:
      // q (no RoPE) and the output; K and V belong to the anchor. Written out: copies of q, K and
      // V every loop, the probabilities and the merged-heads copy.
      if (fused) return 2 * wd + lse;
      return 4 * wd + probs;
  }
  return 0;
}

// Linear weights of a block, in parameters: all of them (what autocast casts to bf16) and those
// merged projections stack (copied once per forward pass).
struct BlockWeights {
  double linear = 0;
  double stacked = 0;
};
BlockWeights WeightsOf(const Widths& x, BlockKind kind) {
  const double d2 = x.d * x.d;
  const double mlp = 3 * x.h * x.d;
  const double mlp_stacked = 2 * x.h * x.d;  // gate with up
  switch (kind) {
    case BlockKind::kPrelude:
    case BlockKind::kSelfCore:  // q, kv_down, k_up, v_up, o; q with kv_down, k_up with v_up
      return {2.75 * d2 + mlp, 1.75 * d2 + mlp_stacked};
    case BlockKind::kDense:  // q, k, v, o; q with k with v
      return {4 * d2 + mlp, 3 * d2 + mlp_stacked};
    case BlockKind::kCrossCore:  // q, o
      return {2 * d2 + mlp, mlp_stacked};
  }
  return {};
}

// Bytes of the weight copies a forward pass makes and backward reads: bf16 casts of every linear
// weight under autocast (merged ones stacked then cast: the same bytes), fp32 stacked copies
// without.
double WeightCopies(const Widths& x, double linear, double stacked, const MemoryKernels& k) {
  if (x.bf16) return 2 * linear;
  return k.merged_projections ? 4 * stacked : 0;
}

int NormReaders(BlockKind kind) {
  switch (kind) {
    case BlockKind::kDense:
      return 3;  // q, k, v
    case BlockKind::kCrossCore:
      return 1;  // q
    default:
      return 2;  // q, kv_down
  }
}

Widths WidthsOf(const ModelConfig& m, int64_t seq_len, bool bf16) {
  Widths x;
  x.d = static_cast<double>(m.d);
  x.h = static_cast<double>(m.mlp_hidden());
  x.H = static_cast<double>(m.n_heads());
  x.T = static_cast<double>(seq_len);
  x.w = bf16 ? 2 : 4;
  x.bf16 = bf16;
  return x;
}

// One step of the forward pass as the backward pass meets it: what it keeps (bytes at this
// micro-batch), the gradients its backward makes first, and what its backward holds briefly.
struct Stage {
  double kept = 0;
  double grads = 0;
  double transient = 0;
};

}  // namespace

MemoryKernels GpuWorkerKernels() { return MemoryKernels{}; }

std::string DescribeKernels(const MemoryKernels& k) {
  return StrCat("LibTorch ", k.libtorch_major, ".x, ", k.cuda ? "CUDA" : "CPU", ", ",
                k.merged_projections ? "merged" : "separate", " projections");
}

bool UsesBf16(DType dtype, const MemoryKernels& k) {
  return dtype == DType::kBFloat16 || (dtype == DType::kAuto && k.cuda);
}

StepShape ShapeOf(const RunConfig& c, const MemoryKernels& k) {
  return StepShape{c.train.seq_len, c.train.batch, c.train.accum, UsesBf16(c.train.dtype, k)};
}

BlockBytes BlockActivationBytes(const ModelConfig& m, BlockKind kind, int64_t seq_len, bool bf16,
                                const MemoryKernels& k, bool causal) {
  const Widths x = WidthsOf(m, seq_len, bf16);
  BlockBytes b;
  b.per_token = NormKept(x, NormReaders(kind), k) + AttentionKept(x, kind, k) +
                4 * x.d +            // the residual after attention
                NormKept(x, 2, k) +  // gate, up
                4 * x.w * x.h +      // SwiGLU: gate, up, silu(gate), their product
                4 * x.d;             // the block's output
  const bool rope = kind != BlockKind::kCrossCore;
  if (!FusedAttention(k) && causal) b.fixed += x.T * x.T;  // the causal mask, one byte a pair
  // RoPE's cos and sin cast to bf16 for q and for k, each kept by its product.
  if (rope && bf16) b.fixed += 4 * x.T * kHeadDim * 2;
  const BlockWeights weights = WeightsOf(x, kind);
  b.fixed += WeightCopies(x, weights.linear, weights.stacked, k);
  return b;
}

int64_t EstimateTrainingBytes(const ModelConfig& m, const StepShape& s, const MemoryKernels& k) {
  const ParamCounts p = CountParams(m);
  const Widths x = WidthsOf(m, s.seq_len, s.bf16);
  const double tokens = static_cast<double>(s.micro_batch) * x.T;
  const double V = static_cast<double>(m.vocab);
  const bool held = s.accum > 1;  // gradients held from the first micro-batch on
  // The gradients a stage's backward makes for `params` parameters: new ones; with held
  // gradients, a fresh one per tensor that is then added to the held one, except for parameters
  // used more than once (the tied embedding, a shared core, a recomputed anchor), whose
  // contributions autograd sums in a buffer of their size from the first use the backward pass
  // meets until the last.
  auto make_grads = [&](Stage& stage, double params, bool reused = false) {
    (held && !reused ? stage.transient : stage.grads) = 4 * params;
  };
  auto block = [&](BlockKind kind, bool causal) {
    const BlockBytes b = BlockActivationBytes(m, kind, s.seq_len, s.bf16, k, causal);
    return Stage{tokens * b.per_token + b.fixed, 0, 0};
  };

  std::vector<Stage> stages;
  // The embedding's output (the first block's input). Its backward makes a dense vocab x d
  // gradient, and autograd sums it with the tied weight's other one (the logits' gradient, held
  // since the head) out of place, the first being a transposed view: two more vocab x d tensors.
  stages.push_back(Stage{tokens * 4 * x.d, 0, 8 * V * x.d});
  if (m.model == ModelKind::kDense) {
    for (int i = 0; i < m.layers; ++i) {
      Stage layer = block(BlockKind::kDense, true);
      make_grads(layer, static_cast<double>(p.dense_layer));
      stages.push_back(layer);
    }
  } else {
    for (int i = 0; i < m.P; ++i) {
      Stage layer = block(BlockKind::kPrelude, true);
      make_grads(layer, static_cast<double>(p.prelude_layer));
      stages.push_back(layer);
    }
    const bool self = m.core_attn == CoreAttn::kSelf;
    const bool shared = m.core == CoreSharing::kShared;
    const bool recompute = m.kv == KvMode::kRecompute;
    // The anchor: kv_down's input cast under autocast, the latent, and with a fused kernel K and
    // V themselves (written-out attention copies them every loop instead).
    // Its weights' copies: kv_down, k_up, v_up; k_up with v_up stacked.
    const double anchor_copies = WeightCopies(x, 0.75 * x.d * x.d, 0.5 * x.d * x.d, k);
    Stage anchor;
    if (!self) {
      anchor.kept = tokens * ((x.bf16 ? 2 * x.d : 0) + x.w * x.d / 4 +
                              (FusedAttention(k) ? 2 * x.w * x.d : 0)) +
                    anchor_copies;
    }
    const double extras = (m.hyper ? 3 : 0) + (m.lie ? 32 * x.d : 0) + (m.lti ? x.d : 0);
    if (!self && !recompute) {
      make_grads(anchor, static_cast<double>(p.anchor));
      stages.push_back(anchor);
    }
    for (int r = 0; r < m.R; ++r) {
      const bool last = r == m.R - 1;  // the first the backward pass meets
      if (!self && recompute) {
        Stage a = anchor;
        if (last) make_grads(a, static_cast<double>(p.anchor), /*reused=*/true);
        if (r > 0) a.kept -= anchor_copies;  // made once a pass
        stages.push_back(a);
      }
      Stage core =
          block(self ? BlockKind::kSelfCore : BlockKind::kCrossCore, self || m.cross_causal);
      // A shared core's weight copies are made once a pass and its gradients once, at the
      // first loop the backward pass meets.
      if (shared && r > 0) {
        const BlockWeights w = WeightsOf(x, self ? BlockKind::kSelfCore : BlockKind::kCrossCore);
        core.kept -= WeightCopies(x, w.linear, w.stacked, k);
      }
      if (!shared || last) {
        make_grads(core, static_cast<double>(p.core_block) + (last ? extras : 0),
                   /*reused=*/shared);
      }
      // The loop's input, when the hyper-connection mix or the loop embedding makes a new one.
      core.kept += tokens * 4 * x.d * ((m.hyper ? 1 : 0) + (m.lie ? 1 : 0));
      stages.push_back(core);
    }
    Stage coda = block(BlockKind::kPrelude, true);
    make_grads(coda, static_cast<double>(p.prelude_layer));
    stages.push_back(coda);
  }
  // The head: the final norm, the logits and the loss. At the start of backward the loss's
  // log-softmax output, its gradient and the logits' gradient, fp32 (under autocast the bf16
  // logits' gradient comes once the log-softmax output is freed), and under autocast the bf16
  // copy of the tied weight the logits were made with; then the tied weight's gradient.
  Stage head;
  head.kept = tokens * (NormKept(x, 1, k) + 12 * V) + (x.bf16 ? 2 * V * x.d : 0);
  make_grads(head, V * x.d + x.d, /*reused=*/true);  // the tied embedding
  stages.push_back(head);

  // Walking backward: before stage j runs, stages 0..j are still kept and the gradients of
  // stages j..end exist.
  double kept = 0;
  for (const Stage& st : stages) kept += st.kept;
  double made = 0;
  double walk = 0;
  for (auto it = stages.rbegin(); it != stages.rend(); ++it) {
    made += it->grads;
    walk = std::max(walk, kept + made + it->transient);
    kept -= it->kept;
  }
  const double params = static_cast<double>(p.stored);
  const double states = (held ? 16 : 12) * params;  // weights and moments (+ held gradients)
  const double total = std::max(states + walk, 16 * params);
  // Saturates rather than overflowing (a request far beyond any device).
  return total >= 9.2e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(total);
}

int64_t EstimateTrainingBytes(const RunConfig& c, const MemoryKernels& k) {
  return EstimateTrainingBytes(c.model, ShapeOf(c, k), k);
}

std::optional<MicroBatchFit> FitMicroBatch(const RunConfig& c, int64_t memory_bytes,
                                           const MemoryKernels& kernels, int64_t largest) {
  const int64_t global = c.train.batch * c.train.accum;
  auto bytes = [&](int64_t b) {
    StepShape shape = ShapeOf(c, kernels);
    shape.micro_batch = b;
    shape.accum = global / std::max<int64_t>(b, 1);
    return EstimateTrainingBytes(c.model, shape, kernels);
  };
  // Held gradients (accumulation) make the estimate jump where the micro-batch reaches the global
  // batch, but it still only grows with the micro-batch at a given accumulation, which is all the
  // bisection needs for divisors: it searches the largest micro-batch whose estimate at
  // accumulation > 1 fits, then takes the largest divisor of the global batch not above it.
  auto held_bytes = [&](int64_t b) {
    StepShape shape = ShapeOf(c, kernels);
    shape.micro_batch = b;
    shape.accum = 2;
    return EstimateTrainingBytes(c.model, shape, kernels);
  };
  const int64_t top = std::min(largest > 0 ? largest : c.train.batch, global);
  // The whole global batch in one micro-batch holds no gradients between micro-batches, so it can
  // fit where a smaller one with held gradients does not (a small model's gradients outweigh its
  // activations).
  if (top == global && bytes(global) <= memory_bytes) {
    return MicroBatchFit{global, 1, bytes(global)};
  }
  if (bytes(1) > memory_bytes) {
    // Not even micro-batch 1 with held gradients: the whole batch at once may still fit (what
    // MinTrainingBytes counts, and placement with it), above the configured micro-batch.
    if (global > 1 && bytes(global) <= memory_bytes) return MicroBatchFit{global, 1, bytes(global)};
    return std::nullopt;
  }
  int64_t fits = 1;
  int64_t too_big = top + 1;
  while (too_big - fits > 1) {
    const int64_t mid = fits + (too_big - fits) / 2;
    (held_bytes(mid) <= memory_bytes ? fits : too_big) = mid;
  }
  const int64_t best = LargestDivisorAtMost(global, fits);
  return MicroBatchFit{best, global / best, bytes(best)};
}

int64_t MinTrainingBytes(const RunConfig& c, const MemoryKernels& kernels) {
  // Micro-batch 1 with the gradients held, or the whole global batch at once without: the
  // estimate only grows with the micro-batch at one accumulation, so one of the two is the least.
  const int64_t global = c.train.batch * c.train.accum;
  StepShape one = ShapeOf(c, kernels);
  one.micro_batch = 1;
  one.accum = global;
  StepShape whole = one;
  whole.micro_batch = global;
  whole.accum = 1;
  return std::min(EstimateTrainingBytes(c.model, one, kernels),
                  EstimateTrainingBytes(c.model, whole, kernels));
}

}  // namespace cart::config
