#include "bench/model/step_parts_kernels.h"

#include <algorithm>
#include <cmath>

namespace cart::bench {

void RowLogSumExp(const float* x, int64_t V, float* lse) {
  float m = x[0];
  for (int64_t j = 1; j < V; ++j) m = std::max(m, x[j]);
  float s = 0;
  for (int64_t j = 0; j < V; ++j) s += std::exp(x[j] - m);
  *lse = m + std::log(s);
}

void RowGradient(const float* x, int64_t V, float lse, float scale, int64_t target, float* g) {
  for (int64_t j = 0; j < V; ++j) g[j] = std::exp(x[j] - lse) * scale;
  g[target] -= scale;
}

}  // namespace cart::bench
