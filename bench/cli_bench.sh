#!/usr/bin/env bash
# What a researcher waits for at the command line, printed, not asserted: `cart --version` (the
# program's own start), then against a real cartd `cart sweep submit` of a 10,000-run sweep end to
# end, and `cart sweep show` / `cart runs ls` on it. Medians of REPEAT runs (default 3; each
# submit under a new sweep name).
# Usage: bench/cli_bench.sh [BUILD_DIR] [REPEAT]
set -euo pipefail
build=${1:-build}
repeat=${2:-3}
dir=$(mktemp -d)
pid=
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
port=$((20000 + RANDOM % 20000))
"$build/bin/cartd" --listen 127.0.0.1:$port --http off --data-dir "$dir/cart" >"$dir/cartd.log" 2>&1 &
pid=$!
export CART_SERVER=127.0.0.1:$port CART_CONFIG=/dev/null
for _ in $(seq 100); do "$build/bin/cart" sweep ls >/dev/null 2>&1 && break; sleep 0.1; done
seeds=$(seq -s, 1 10000)

# SECONDS of one command, to stdout.
timed() {
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null
  end=$(date +%s.%N)
  awk -v s="$start" -v e="$end" 'BEGIN {printf "%.3f\n", e - s}'
}
median() { sort -n | awk '{t[NR]=$1} END {print t[int((NR+1)/2)]}'; }
report() { printf '  %-40s median %6.3f s   (%s)\n' "$1" "$(printf '%s\n' "${@:2}" | median)" "${*:2}"; }

runs=()
for _ in $(seq "$repeat"); do runs+=("$(timed "$build/bin/cart" --version)"); done
report "cart --version" "${runs[@]}"
runs=()
for i in $(seq "$repeat"); do
  printf 'name: big%s\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 1000}\nseeds: [%s]\nmax_runs: 10000\n' \
    "$i" "$seeds" >"$dir/big$i.yaml"
  runs+=("$(timed "$build/bin/cart" sweep submit "$dir/big$i.yaml")")
done
report "cart sweep submit (10,000 runs)" "${runs[@]}"
for cmd in "sweep show big1" "runs ls --sweep big1"; do
  runs=()
  # shellcheck disable=SC2086
  for _ in $(seq "$repeat"); do runs+=("$(timed "$build/bin/cart" $cmd)"); done
  report "cart $cmd (10,000 runs)" "${runs[@]}"
done
