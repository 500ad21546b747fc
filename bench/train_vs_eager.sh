#!/usr/bin/env bash
# `cart train` against plain eager PyTorch (bench/reference/cart_eager.py, Debian python3-torch:
# the same LibTorch 1.13 and OpenBLAS underneath) on the performance issue's run (CART d 256, P 2,
# R 4, T 256, batch 8, vocab 4096, full optimizer step), from the same initial weights and data,
# at 1 and 2 threads, in one sitting. Also measures the fp32 matrix-multiply peak of this machine
# (OpenBLAS sgemm, 2048^3, through torch.mm) and prints each trainer's MFU against it: the model's
# training FLOPs per token (`cart model params`, attention counted in full) x tokens/s / peak.
# On x86-64 it also measures the core clock under load (bench/reference/clock.c) and prints the
# fp32 peak it implies, clock x FMA_FLOPS_PER_CYCLE (default 32: two 256-bit FMA pipes, as on the
# AVX2 cores of AMD Zen 2/3 and Intel Skylake; set it for other CPUs), as a second bound.
# tests/cli/eager_reference_test checks that the two trainers' losses agree step by step.
#
# Eager runs in three settings: OpenBLAS at N threads with torch's intra-op pool at 1 (the pools
# cart uses; the ratio is against this one); the same with glibc's malloc set as cart sets it
# (train::RetainFreedMemory, through GLIBC_TUNABLES: what a Python user could do too); and, at 2
# threads, torch.set_num_threads(2) with OpenBLAS at 2 (both pools, as a script that only calls
# set_num_threads gets).
#
# LibTorch 2.x: PYTHON=.cache/torch2/venv/bin/python bench/train_vs_eager.sh build-torch2 compares
# the torch2 build's `cart train` with eager PyTorch 2.x of the same wheel. Its BLAS is MKL inside
# libtorch_cpu, whose threads are LibTorch's own (train::UseThreads sets them, finding no
# OpenBLAS): eager then runs with torch.set_num_threads(N), the same pool, and the OpenBLAS-only
# rows are left out.
#
# Prints medians of per-step tokens/s (steps after the first WARMUP, ROUNDS alternating rounds
# pooled); asserts nothing.
# Usage: [PYTHON=...] bench/train_vs_eager.sh [BUILD_DIR] [STEPS] [WARMUP] [ROUNDS]
set -euo pipefail
build=${1:-build}
steps=${2:-15}
warmup=${3:-3}
rounds=${4:-2}
python=${PYTHON:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "train_vs_eager: $python cannot import torch; install Debian's python3-torch" >&2
  exit 1
fi
torch_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)
# PyPI's wheels say BLAS_INFO=mkl; Debian's says generic (the system's libblas.so.3: OpenBLAS).
if "$python" -c 'import sys, torch; sys.exit("blas_info=mkl" in torch.__config__.show().lower())' \
    2>/dev/null; then
  blas=OpenBLAS
else
  blas=MKL
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$build/bin/cart" data synth --vocab 4096 --order 1 --tokens 2000000 --val-tokens 65536 --seed 1 \
  --out "$dir/synth.bin" >/dev/null
source "$here/run_config.sh"
bench_run_yaml "$steps" 1 "$dir/synth.bin" >"$dir/run.yaml"
"$build/bin/cart" model init "$dir/run.yaml" --seed 42 --out "$dir/init.safetensors" >/dev/null
flops_per_token=$("$build/bin/cart" model params "$dir/run.yaml" --json |
  "$python" -c 'import json,sys; print(json.load(sys.stdin)["train_flops_per_token"])')

clock_ghz=""
if [ "$(uname -m)" = x86_64 ] && cc -O2 -o "$dir/clock" "$here/reference/clock.c" 2>/dev/null; then
  clock_ghz=$("$dir/clock")
fi
fma_flops=${FMA_FLOPS_PER_CYCLE:-32}

median() { sort -n | awk '{t[NR]=$1} END {printf "%.0f", t[int((NR+1)/2)]}'; }
# Per-step tokens/s after the warm-up, appended to FILE.
cart_run() {  # THREADS FILE
  bench_run_yaml "$steps" "$1" "$dir/synth.bin" >"$dir/run.yaml"
  rm -rf "$dir/out"
  "$build/bin/cart" train "$dir/run.yaml" --out "$dir/out" >/dev/null 2>&1
  grep -o '"tokens_per_s":[0-9.e+]*' "$dir/out/metrics.jsonl" | cut -d: -f2 |
    tail -n +$((warmup + 1)) >>"$2"
}
malloc_like_cart=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824
eager_run() {  # OPENBLAS_THREADS TORCH_THREADS FILE [GLIBC_TUNABLES]
  GLIBC_TUNABLES=${4:-} OPENBLAS_NUM_THREADS=$1 "$python" "$here/reference/cart_eager.py" \
    --tokens "$dir/synth.bin" --init "$dir/init.safetensors" --steps "$steps" --threads "$2" |
    "$python" -c 'import json,sys
for line in sys.stdin: print(2048 / json.loads(line)["seconds"])' |
    tail -n +$((warmup + 1)) >>"$3"
}
peak() {  # THREADS -> sgemm GFLOP/s, median of 7
  OPENBLAS_NUM_THREADS=$1 TORCH_THREADS=$1 BLAS=$blas "$python" -c 'import os, time, torch
if os.environ["BLAS"] != "OpenBLAS": torch.set_num_threads(int(os.environ["TORCH_THREADS"]))
n = 2048; a, b = torch.randn(n, n), torch.randn(n, n); torch.mm(a, b); t = []
for _ in range(7):
    s = time.perf_counter(); torch.mm(a, b); t.append(time.perf_counter() - s)
print(f"{2 * n ** 3 / sorted(t)[3] / 1e9:.1f}")'
}

for threads in 1 2; do
  : >"$dir/cart.$threads" && : >"$dir/eager.$threads" && : >"$dir/heap.$threads"
  : >"$dir/both.$threads"
done
for ((round = 0; round < rounds; ++round)); do
  for threads in 1 2; do
    cart_run "$threads" "$dir/cart.$threads"
    torch_threads=1
    [ "$blas" = OpenBLAS ] || torch_threads=$threads
    eager_run "$threads" "$torch_threads" "$dir/eager.$threads"
    eager_run "$threads" "$torch_threads" "$dir/heap.$threads" "$malloc_like_cart"
  done
  [ "$blas" = OpenBLAS ] && eager_run 2 2 "$dir/both.2"
done

echo "CART d 256 P 2 R 4, T 256 x batch 8, vocab 4096: training FLOPs/token $flops_per_token"
echo "cart train from $build; eager PyTorch $torch_version ($python), BLAS $blas"
echo "median tokens/s over steps $((warmup + 1))..$steps of $rounds rounds; MFU against sgemm peak"
printf '%-9s %-44s %10s %9s %8s\n' threads trainer tokens/s "vs eager" MFU
for threads in 1 2; do
  p=$(peak "$threads")
  c=$(median <"$dir/cart.$threads")
  e=$(median <"$dir/eager.$threads")
  mfu() { awk -v t="$1" -v f="$flops_per_token" -v p="$p" 'BEGIN {printf "%.1f%%", 100 * t * f / (p * 1e9)}'; }
  ratio() { awk -v a="$1" -v b="$e" 'BEGIN {printf "%.2fx", a / b}'; }
  echo "$threads         sgemm peak ($blas, 2048^3): $p GFLOP/s"
  printf '%-9s %-44s %10s %9s %8s\n' "$threads" "cart train" "$c" "$(ratio "$c")" "$(mfu "$c")"
  if [ "$blas" = OpenBLAS ]; then eager_label="eager, OpenBLAS $threads + torch 1"; else
    eager_label="eager, torch.set_num_threads($threads) ($blas)"; fi
  printf '%-9s %-44s %10s %9s %8s\n' "$threads" "$eager_label" "$e" "1.00x" "$(mfu "$e")"
  h=$(median <"$dir/heap.$threads")
  printf '%-9s %-44s %10s %9s %8s\n' "$threads" "eager, same + malloc as cart sets it" "$h" \
    "$(ratio "$h")" "$(mfu "$h")"
  if [ "$threads" = 2 ] && [ "$blas" = OpenBLAS ]; then
    b=$(median <"$dir/both.2")
    printf '%-9s %-44s %10s %9s %8s\n' 2 "eager, OpenBLAS 2 + torch.set_num_threads(2)" "$b" \
      "$(ratio "$b")" "$(mfu "$b")"
  fi
  awk -v e="$e" -v f="$flops_per_token" -v p="$p" 'BEGIN {
    printf "          1.5x eager = %.0f tokens/s = %.1f%% of the sgemm peak\n", 1.5 * e,
      150 * e * f / (p * 1e9) }'
  if [ -n "$clock_ghz" ]; then
    awk -v e="$e" -v f="$flops_per_token" -v g="$clock_ghz" -v c="$fma_flops" -v n="$threads" '
      BEGIN { peak = g * c * n
        printf "          clock %.2f GHz x %d FLOP/cycle x %d cores = %.1f GFLOP/s fp32 peak;", g, c,
          n, peak
        printf " 1.5x eager = %.1f%% of it\n", 150 * e * f / (peak * 1e9) }'
  fi
done
