#!/usr/bin/env bash
# `make fuzz`: builds the libFuzzer targets with clang (ASan + UBSan) in BUILD_DIR and runs each
# for SECONDS from its seed corpus (tests/fuzz/corpus/<target>, copied so the repository's corpus
# only grows by hand). Inputs that crash land in BUILD_DIR/findings/<target>/; add the fixed ones
# to the seed corpus, where the ordinary build replays them as tests.
# Usage: tests/fuzz/run.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
build=${1:-build-fuzz}
seconds=${2:-60}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" \
    -DCART_FUZZ=ON -DCART_WITH_TORCH=OFF -DCART_BUILD_TESTS=OFF -DCART_BUILD_BENCH=OFF
fi
cmake --build "$build" --target fuzz_all

targets=(sweep_yaml run_config safetensors client_config tokens_file token_file_info cli_args
  http_request)
status=0
printf '%-16s %12s %10s %9s\n' target executions exec/s findings
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  findings="$build/findings/$t"
  mkdir -p "$corpus" "$findings"
  cp -n "$here/corpus/$t/"* "$corpus/" 2>/dev/null || true
  log="$build/findings/$t.log"
  # -rss_limit_mb bounds what one input may allocate; -timeout flags an input that hangs.
  "$build/bin/fuzz_$t" "$corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$findings/" -print_final_stats=1 >"$log" 2>&1 || true
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  found=$(find "$findings" -type f | wc -l)
  printf '%-16s %12s %10s %9s\n' "$t" "${runs:-0}" "${rate:-0}" "$found"
  if [ "$found" -gt 0 ]; then
    status=1
    echo "  $t: see $log and $findings/" >&2
  fi
done
exit $status
