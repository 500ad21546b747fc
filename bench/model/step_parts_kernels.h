// The fused cross-entropy's two row passes for bench-step-parts. They live in their own file,
// free of Torch headers, because it is built with -O3 -ffast-math (so that the compiler turns
// expf into glibc's vector expf), flags the Torch translation units and their precompiled header
// do not share.
#pragma once

#include <cstdint>

namespace cart::bench {

// *lse = log(sum_j exp(x[j])) for one row of V logits.
void RowLogSumExp(const float* x, int64_t V, float* lse);

// g[j] = (exp(x[j] - lse) - [j == target]) * scale: the cross-entropy gradient of one row.
void RowGradient(const float* x, int64_t V, float lse, float scale, int64_t target, float* g);

}  // namespace cart::bench
