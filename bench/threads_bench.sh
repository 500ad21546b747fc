#!/usr/bin/env bash
# Training throughput by thread setting, printed, not asserted: `cart train` on the performance
# issue's run (CART d 256, P 2, R 4, T 256, batch 8, vocab 4096) with `threads` 1 and 2, each
# as cart sets the pools by default (train::UseThreads: OpenBLAS `threads`, LibTorch 1) and with
# OPENBLAS_NUM_THREADS set (then LibTorch's intra-op pool gets `threads`). Median tokens/s over the steps after the first WARMUP.
# Usage: bench/threads_bench.sh [BUILD_DIR] [STEPS] [WARMUP]
set -euo pipefail
build=${1:-build}
steps=${2:-25}
warmup=${3:-5}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$build/bin/cart" data synth --vocab 4096 --order 1 --tokens 2000000 --val-tokens 65536 --seed 1 \
  --out "$dir/synth.bin" >/dev/null
source "$(dirname "$0")/run_config.sh"
median() { tail -n +$((warmup + 1)) | sort -n | awk '{t[NR]=$1} END {printf "%.0f", t[int((NR+1)/2)]}'; }
run() {  # THREADS OPENBLAS(empty: cart's default) -> median tokens/s
  bench_run_yaml "$steps" "$1" "$dir/synth.bin" >"$dir/run.yaml"
  rm -rf "$dir/out"
  if [ -n "$2" ]; then
    OPENBLAS_NUM_THREADS=$2 "$build/bin/cart" train "$dir/run.yaml" --out "$dir/out" >/dev/null 2>&1
  else
    "$build/bin/cart" train "$dir/run.yaml" --out "$dir/out" >/dev/null 2>&1
  fi
  grep -o '"tokens_per_s":[0-9.e+]*' "$dir/out/metrics.jsonl" | cut -d: -f2 | median
}
echo "cart train tokens/s (median over steps $((warmup + 1))..$steps):"
for threads in 1 2; do
  for blas in "" 1 2; do
    printf '  threads %s, OPENBLAS_NUM_THREADS %-8s %6s\n' "$threads" \
      "${blas:-default}" "$(run "$threads" "$blas")"
  done
done
