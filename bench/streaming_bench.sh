#!/usr/bin/env bash
# The cost of running under cart-worker (every step's metrics streamed to cartd, checkpoints
# uploaded) against the same run under `cart train` (metrics to a local file), printed, not
# asserted. The run is the performance issue's shape: CART d 256, P 2, R 4, T 256, batch 8,
# vocab 4096, two threads (train::UseThreads), metrics every step. Each way runs PAIRS times, alternating, STEPS steps
# each; the figure is the median tokens/s over steps after the first WARMUP.
# Usage: bench/streaming_bench.sh [BUILD_DIR] [STEPS] [PAIRS] [WARMUP]
set -euo pipefail
build=${1:-build}
steps=${2:-40}
pairs=${3:-2}
warmup=${4:-5}
bin=$build/bin
dir=$(mktemp -d)
pid=
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
"$bin/cart" data synth --vocab 4096 --order 1 --tokens 2000000 --val-tokens 65536 --seed 1 \
  --out "$dir/synth.bin" >/dev/null
source "$(dirname "$0")/run_config.sh"
config() { bench_run_yaml "$steps" 2 "$dir/synth.bin" | sed "s/^/$1/"; }  # indented by $1
config "" >"$dir/run.yaml"
port=$((20000 + RANDOM % 20000))
"$bin/cartd" --listen 127.0.0.1:$port --http off --data-dir "$dir/cart" >"$dir/cartd.log" 2>&1 &
pid=$!
export CART_SERVER=127.0.0.1:$port CART_CONFIG=/dev/null
for _ in $(seq 100); do "$bin/cart" sweep ls >/dev/null 2>&1 && break; sleep 0.1; done

# Median of the numbers on stdin after the first $warmup.
median() { tail -n +$((warmup + 1)) | sort -n | awk '{t[NR]=$1} END {print t[int((NR+1)/2)]}'; }
train_rates=(); worker_rates=()
for i in $(seq "$pairs"); do
  "$bin/cart" train "$dir/run.yaml" --out "$dir/train$i" >/dev/null 2>&1
  train_rates+=("$(grep -o '"tokens_per_s":[0-9.e+]*' "$dir/train$i/metrics.jsonl" |
    cut -d: -f2 | median)")
  { echo "name: stream$i"; echo "base:"; config "  "; } >"$dir/stream$i.yaml"
  "$bin/cart" sweep submit "$dir/stream$i.yaml" >/dev/null
  "$bin/cart-worker" --device cpu --threads 2 --exit-when-idle --max-jobs 1 \
    --cache-dir "$dir/worker" --acquire-wait-ms 1000 >"$dir/worker$i.log" 2>&1
  run=$("$bin/cart" runs ls --sweep "stream$i" --json | grep -o '"run_id": *"[0-9]*"' | head -1 |
    grep -o '[0-9]*')
  worker_rates+=("$("$bin/cart" results series --run "$run" --metric tokens_per_s \
    --format csv | tail -n +2 | cut -d, -f2 | median)")
done
echo "tokens/s, median over steps $((warmup + 1))..$steps (pairs run alternately):"
echo "  cart train:   ${train_rates[*]}"
echo "  cart-worker:  ${worker_rates[*]}"
printf '%s\n' "${train_rates[@]}" >"$dir/t"
printf '%s\n' "${worker_rates[@]}" >"$dir/w"
paste "$dir/t" "$dir/w" | awk '{s += $2 / $1; n++} END {printf "  overhead of streaming: %.2f%% (worker / train = %.4f, mean of %d pairs)\n", (1 - s / n) * 100, s / n, n}'
