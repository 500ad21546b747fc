#pragma once

// Parameter, FLOP and memory accounting for CART and dense configs (docs/model.md §5). Pure
// arithmetic, no Torch, so that cartd and `cart sweep submit --dry-run` agree with the trainer;
// tests/model checks it against the parameter count of the real LibTorch modules.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"

namespace cart::config {

// Parameter counts, in parameters (not bytes).
struct ParamCounts {
  int64_t embedding = 0;      // vocab * d (tied with the output projection)
  int64_t prelude_layer = 0;  // one prelude layer (the coda layer has the same shape)
  int64_t core_block = 0;     // one core block
  int64_t anchor = 0;         // the anchor projection (0 with core_attn: self)
  int64_t dense_layer = 0;    // one dense-baseline layer (dense configs only)
  int64_t stored = 0;         // parameters held in memory / on disk
  int64_t effective = 0;      // parameters applied per token at training R (docs/model.md §5)
};

// Counts for `m` (either kind). For dense, stored == effective.
ParamCounts CountParams(const ModelConfig& m);

// Matmul and attention FLOPs per token at sequence length `seq_len`, counting a multiply-add as
// two FLOPs, full (not causally halved) attention score and value products, and the tied output
// projection. Norms, activations and softmax are left out (they are < 1% at these widths).
struct FlopCounts {
  double forward_per_token = 0;
  double train_per_token = 0;  // forward + backward ≈ 3 × forward
};
// `loops` overrides R (e.g. R_infer for evaluation); 0 means the training R.
FlopCounts CountFlops(const ModelConfig& m, int64_t seq_len, int loops = 0);

// Training FLOPs per token as the paper counts them for its MFU: 6 × the effective parameters
// (no attention products). With the RTX 3090's 71 TFLOP/s it gives back the paper's stated MFU
// from its stated tokens/s. Two MFU conventions follow (docs/gpu.md "Two MFUs"): `mfu` from
// CountFlops (matmuls and attention products, attention counted in full T x T) and `mfu_6n` from
// this.
double SixNFlopsPerToken(const ModelConfig& m);

// Training memory (docs/model.md §5 "Training memory"). What a step keeps for its backward pass
// depends on the kernels the worker's LibTorch runs, so the estimate takes them:
struct MemoryKernels {
  // 1: LibTorch 1.x writes attention out (scores, fp32 probabilities and their T x T mask kept;
  // its RMSNorm keeps one more fp32 copy); 2: scaled_dot_product_attention (flash or
  // memory-efficient kernels: the output and one log-sum-exp per head and token, no T x T tensor).
  int libtorch_major = 2;
  // On CUDA with LibTorch 2.x RMSNorm is one fused kernel (model/layers.cc), which keeps no
  // normalised copy of its input.
  bool cuda = true;
  // Projections that read one input run as one matmul (model::MergesProjections): a view of the
  // stacked output keeps all of it, and under autocast the input is cast once instead of once per
  // projection.
  bool merged_projections = true;
};
// What cartd stores and shows for a run before a worker is chosen: a CUDA worker's kernels
// (LibTorch 2.x, merged projections; every GPU worker's default), since the card is where memory
// is short. Each worker's own fit uses its own kernels (RegisterWorkerRequest's device).
MemoryKernels GpuWorkerKernels();
std::string DescribeKernels(const MemoryKernels& k);  // "LibTorch 2.x, CUDA, merged projections"
// Whether a run of `dtype` trains under bf16 autocast with these kernels' device (auto: on CUDA).
bool UsesBf16(DType dtype, const MemoryKernels& k);

struct StepShape {
  int64_t seq_len = 0;
  int64_t micro_batch = 0;
  int64_t accum = 1;  // > 1: every gradient is held while the later micro-batches run
  bool bf16 = true;   // bf16 autocast (matmul outputs in bf16, the residual stream in fp32)
};
// The shape a run's config trains in on devices with these kernels.
StepShape ShapeOf(const RunConfig& c, const MemoryKernels& k);

// Peak training memory, bytes: fp32 weights and AdamW moments (12 B per stored parameter), the
// tensors every block application keeps for backward (all R loops, no checkpointing), tensor by
// tensor as the model's code and these kernels make them, and the gradients as the backward pass
// makes them while it frees what each block kept; the largest total along the way, and at least
// the 16 B per parameter of the optimizer step. tests/train/activation_memory_test.cc compares it
// with LibTorch's allocator, block by block and for whole steps.
int64_t EstimateTrainingBytes(const ModelConfig& m, const StepShape& s, const MemoryKernels& k);
// The estimate for `c` as configured (micro-batch, accumulation, precision) on these kernels.
int64_t EstimateTrainingBytes(const RunConfig& c, const MemoryKernels& k);

// What one application of a block keeps for backward, its output included and its input not:
// bytes per token, and bytes whatever the micro-batch (a T x T mask, RoPE tables cast to bf16,
// the bf16 or stacked copies of its weights).
enum class BlockKind { kPrelude, kCrossCore, kSelfCore, kDense };
struct BlockBytes {
  double per_token = 0;
  double fixed = 0;
};
BlockBytes BlockActivationBytes(const ModelConfig& m, BlockKind kind, int64_t seq_len, bool bf16,
                                const MemoryKernels& k, bool causal = true);

// Training on a device with less memory than a run's estimate: lower the micro-batch and raise
// gradient accumulation so that the global batch (batch × accum) and so the optimisation stay the
// same. The fit is the largest micro-batch that divides the global batch, is no larger than
// `largest` (0: the configured one), and whose EstimateTrainingBytes fits `memory_bytes`; nullopt
// when not even a micro-batch of 1 fits. The configured micro-batch is returned as is when it fits
// and `largest` is 0. With `largest` up to the global batch the fit also raises the micro-batch
// (less accumulation) where the memory allows: what cartd does on a GPU, where a larger
// micro-batch means fewer, larger kernels.
struct MicroBatchFit {
  int64_t batch = 0;  // sequences per micro-batch
  int64_t accum = 0;  // micro-batches per optimizer step
  int64_t bytes = 0;  // EstimateTrainingBytes at that micro-batch
};
std::optional<MicroBatchFit> FitMicroBatch(const RunConfig& c, int64_t memory_bytes,
                                           const MemoryKernels& kernels, int64_t largest = 0);
// The largest divisor of `n` (>= 1) that is at most `limit`; 1 when none above 1 is.
int64_t LargestDivisorAtMost(int64_t n, int64_t limit);
// The least memory the run can train in: the estimate at micro-batch 1 (gradients held between
// micro-batches) or, when less, at the whole global batch in one.
int64_t MinTrainingBytes(const RunConfig& c, const MemoryKernels& kernels);

// Memory a worker's device keeps back from training: the CUDA context (300-500 MiB), cuBLAS's
// workspace, the caching allocator's fragmentation, and on a workstation the desktop and other
// processes. The estimates above count only the run's own tensors, so cartd fits runs into the
// device memory minus this reserve. Default: max(1 GiB, 10 % of the device), for a GPU and for
// the CPU's RAM alike; a worker may set its own (cart-worker --memory-reserve-mib, 0 for none).
int64_t DefaultMemoryReserveBytes(int64_t device_bytes);
// device_bytes minus the reserve (reserve_bytes, or the default when it is negative), at least 0.
int64_t UsableMemoryBytes(int64_t device_bytes, int64_t reserve_bytes);

// Which parameter count a dense baseline should match, and how to round.
enum class MatchTarget {
  kStored,     // largest depth with params <= CART's stored params (no more memory than CART)
  kEffective,  // smallest depth with params >= CART's effective params (at least CART's compute)
};
struct DenseMatch {
  int layers = 0;
  int64_t params = 0;
  int64_t target = 0;
};
// The dense depth matching the CART config `cart` (same vocab and d). At d=1024, P=6, R=6 this is
// 7 layers for kStored and 12 for kEffective.
DenseMatch MatchDenseDepth(const ModelConfig& cart, MatchTarget target);

// What a run costs, for `cart sweep submit --dry-run`. Hours on one RTX 3090 are extrapolated
// from the paper's measured training throughput (CART, P = 6, R = 6, T = 1024, bf16: 134,985 /
// 71,244 / 45,556 / 32,393 tokens/s at d = 256 / 512 / 768 / 1024): the FLOP rate achieved at the
// nearest measured width (d below 256 takes d = 256's, above 1024 takes 1024's) is applied to this
// run's FLOPs. An estimate, not a promise: other switches change the kernels' efficiency.
struct RunCost {
  int64_t tokens = 0;        // train: steps × batch × accum × seq_len; eval: tokens evaluated
  double flops = 0;          // train: train FLOPs; eval: forward FLOPs over every loop count
  double rtx3090_hours = 0;  // flops / the achieved FLOP rate at the nearest measured width
};
// `eval_loops` (eval jobs) lists the loop counts evaluated; each reads eval_sequences × seq_len
// tokens of every validation set (zero-shot tasks are not counted: their size is in the files).
RunCost EstimateRunCost(const RunConfig& c, bool eval, const std::vector<int>& eval_loops);

}  // namespace cart::config
