#!/usr/bin/env bash
# The training-memory estimate (config::EstimateTrainingBytes, cartd's micro-batch fit) against the
# bytes LibTorch's CPU allocator really held for tensors at most (train::CpuTensorMemory), at the
# paper's four widths (CART P 6, R 6, T 1024, vocab 32,000) at micro-batch 1, in fp32 and in bf16
# autocast, for each build given, each estimated for its own kernels: Debian's LibTorch 1.13 writes
# attention out (its T x T probabilities are kept for backward), LibTorch 2.x's
# scaled_dot_product_attention keeps none. Two optimizer steps per width (the peak of the second
# holds AdamW's moments, as every later step does). Prints estimate / measured per row; asserts
# nothing (tests/train/activation_memory_test.cc does, on small shapes).
#
#   bench/memory_estimate.sh [BUILD_DIR ...]   default: build build-torch2 (those that exist)
#   WIDTHS=256,512 bench/memory_estimate.sh build
set -euo pipefail
cd "$(dirname "$0")/.."
builds=("$@")
[ ${#builds[@]} -gt 0 ] || for b in build build-torch2; do [ -x "$b/bin/cart-torch" ] && builds+=("$b"); done
widths=${WIDTHS:-256,512,768,1024}
for build in "${builds[@]}"; do
  for dtype in fp32 bf16; do
    "$build/bin/cart-torch" model bench --device cpu --d "$widths" --steps 1 --warmup 1 \
      --set seq_len=1024 --set batch=1 --set accum=1 --set dtype="$dtype" --json 2>/dev/null |
      python3 -c '
import json, sys
build, dtype = sys.argv[1], sys.argv[2]
out = json.load(sys.stdin)
for r in out["rows"]:
    m, e = r["peak_bytes"], r["estimate_bytes"]
    mib = 2 ** 20
    print("%s %s d %5d: measured %6.0f MiB, estimate %6.0f MiB, estimate/measured %.3f  (%s)"
          % (build, dtype, r["d"], m / mib, e / mib, e / m, out["estimate_kernels"]))
' "$build" "$dtype"
  done
done
