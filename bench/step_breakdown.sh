#!/usr/bin/env bash
# Where a training step's time goes on the CPU, by kind of work (matmul, attention, elementwise,
# optimizer, outside ops), for each build given, in one sitting: `cart model bench --device cpu
# --breakdown` (train/step_profile.h) at the performance issue's run (CART d 256, P 2, R 4,
# T 256, batch 8, vocab 4096) and at d 512, one width per call. Each build trains with its own
# LibTorch's kernels: Debian's 1.13 (written-out attention, per-tensor AdamW) and PyTorch 2.x's
# (scaled_dot_product_attention, fused AdamW and foreach clipping). Asserts nothing.
#
#   bench/step_breakdown.sh [BUILD_DIR ...]      default: build build-torch2 (those that exist)
#   THREADS=1 STEPS=8 WARMUP=2 bench/step_breakdown.sh build
set -euo pipefail
cd "$(dirname "$0")/.."
builds=("$@")
[ ${#builds[@]} -gt 0 ] || for b in build build-torch2; do [ -x "$b/bin/cart-torch" ] && builds+=("$b"); done
threads=${THREADS:-1}
steps=${STEPS:-8}
warmup=${WARMUP:-2}
for build in "${builds[@]}"; do
  for d in 256 512; do
    echo "=== $build (threads $threads), d $d"
    "$build/bin/cart-torch" model bench --device cpu --d "$d" --steps "$steps" --warmup "$warmup" \
      --set P=2 --set R=4 --set seq_len=256 --set batch=8 --set vocab=4096 \
      --set threads="$threads" --breakdown 2>/dev/null | sed -n '/^where a step/,/^matmul:/p' | sed -n '2,3p'
  done
done
