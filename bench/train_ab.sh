#!/usr/bin/env bash
# Two builds' `cart train` on the same run, alternating, in one sitting: before and after a
# change to the step, on a machine whose speed drifts. The performance issue's run (CART d 256,
# P 2, R 4, T 256, batch 8, vocab 4096; bench/run_config.sh), the same data and seed for both.
# Rounds run in ABBA order (A, B, then B, A, ...) so that a drift over the sitting weighs on both
# builds alike; each round is one `cart train` per build and thread count.
#
# Prints, per thread count, each build's median tokens/s over the steps after WARMUP of all
# rounds, the ratio B/A of the medians, and the least and greatest ratio of the rounds' own
# medians (A's and B's runs next to each other), which shows how far one round can be trusted.
# Asserts nothing. bench/train_vs_eager.sh compares one build with eager PyTorch instead.
# Usage: bench/train_ab.sh BUILD_A BUILD_B [STEPS] [WARMUP] [ROUNDS] [THREADS...]
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,/^set -euo/{/^set -euo/!s/^# \{0,1\}//p}' "$0" >&2
  exit 2
fi
a=$1 b=$2
steps=${3:-15}
warmup=${4:-3}
rounds=${5:-4}
shift $(($# < 5 ? $# : 5))
threads_list=("$@")
[ ${#threads_list[@]} -gt 0 ] || threads_list=(1 2)
for build in "$a" "$b"; do
  [ -x "$build/bin/cart" ] || { echo "train_ab: no $build/bin/cart" >&2; exit 1; }
done
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$a/bin/cart" data synth --vocab 4096 --order 1 --tokens 2000000 --val-tokens 65536 --seed 1 \
  --out "$dir/synth.bin" >/dev/null
source "$here/run_config.sh"

median() { sort -n | awk '{t[NR]=$1} END {printf "%.0f", t[int((NR+1)/2)]}'; }
# One `cart train` of BUILD at THREADS: its per-step tokens/s after the warm-up into FILE, and
# appended to ALL.
run() {  # BUILD THREADS FILE ALL
  bench_run_yaml "$steps" "$2" "$dir/synth.bin" >"$dir/run.yaml"
  rm -rf "$dir/out"
  "$1/bin/cart" train "$dir/run.yaml" --out "$dir/out" >/dev/null 2>&1
  grep -o '"tokens_per_s":[0-9.e+]*' "$dir/out/metrics.jsonl" | cut -d: -f2 |
    tail -n +$((warmup + 1)) >"$3"
  cat "$3" >>"$4"
}
for threads in "${threads_list[@]}"; do
  : >"$dir/a.$threads" && : >"$dir/b.$threads" && : >"$dir/pairs.$threads"
done
for ((round = 0; round < rounds; ++round)); do
  for threads in "${threads_list[@]}"; do
    if ((round % 2 == 0)); then
      run "$a" "$threads" "$dir/ra" "$dir/a.$threads"
      run "$b" "$threads" "$dir/rb" "$dir/b.$threads"
    else
      run "$b" "$threads" "$dir/rb" "$dir/b.$threads"
      run "$a" "$threads" "$dir/ra" "$dir/a.$threads"
    fi
    echo "$(median <"$dir/rb") $(median <"$dir/ra")" |
      awk '{printf "%.4f\n", $1 / $2}' >>"$dir/pairs.$threads"
  done
done

echo "cart train, CART d 256 P 2 R 4, T 256 x batch 8, vocab 4096; $rounds rounds in ABBA order"
echo "A: $a"
echo "B: $b"
echo "median tokens/s over steps $((warmup + 1))..$steps of all rounds; B/A of the medians; the"
echo "least and greatest B/A of one round's own medians"
printf '%-8s %10s %10s %8s %16s\n' threads A B B/A "rounds' B/A"
for threads in "${threads_list[@]}"; do
  ma=$(median <"$dir/a.$threads")
  mb=$(median <"$dir/b.$threads")
  spread=$(sort -n "$dir/pairs.$threads" | awk 'NR == 1 {lo = $1} {hi = $1} END {
    printf "%.2f..%.2f", lo, hi}')
  printf '%-8s %10s %10s %8s %16s\n' "$threads" "$ma" "$mb" \
    "$(awk -v x="$mb" -v y="$ma" 'BEGIN {printf "%.3f", x / y}')" "$spread"
done
