#!/usr/bin/env bash
# deploy/gpu-check.sh (make gpu-check) on this build as it stands (--no-build), with --log-dir:
# - where LibTorch sees no CUDA device it skips the GPU steps, saying so, checks `cart model
#   bench` on the CPU and the device series, and exits 0; every step's time is printed, and what
#   was printed, the GPU tests' log and the series' cartd and worker logs are in the log folder;
# - a run killed part-way (as a lease's time limit kills it) leaves on disk what it had printed.
# Usage: gpu_check_script_test.sh SOURCE_DIR BUILD_DIR PYTHON
set -euo pipefail
src=$1 build=$2 python=$3
# This checks the path without a card; where the driver lists one, `make gpu-check` is the check.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "gpu_check_script: skipped: nvidia-smi lists a GPU here (run make gpu-check)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
check() {  # check WHAT: a failed expectation, with the run's log
  echo "FAIL: $1" >&2
  sed 's/^/  | /' "$tmp/out" >&2
  failures=$((failures + 1))
}

# 1. A whole run.
rc=0
bash "$src/deploy/gpu-check.sh" --no-build --build-dir "$build" --python "$python" \
  --log-dir "$tmp/logs" >"$tmp/out" 2>&1 || rc=$?
[ "$rc" = 0 ] || check "gpu-check exited $rc"
log=$tmp/logs/gpu-check.log
for line in "^gpu-check: ctest -L gpu took [0-9]* s" \
            "^gpu-check: cart model bench on the CPU took [0-9]* s" \
            "^gpu-check: the device series took [0-9]* s" \
            "^gpu-check:   cart_device_utilization_ratio" "^gpu-check: done in [0-9]* s"; do
  grep -q "$line" "$log" 2>/dev/null || check "gpu-check.log has no line '$line'"
done
# stdout and stderr reach the two through separate pipes: the same lines, perhaps not in order.
cmp -s <(sort "$tmp/out") <(sort "$log") || check "gpu-check.log holds other lines than were printed"
grep -q "gpu_test" "$tmp/logs/ctest-gpu.log" 2>/dev/null || check "ctest-gpu.log does not name gpu_test"
for f in cartd.log worker.log; do
  [ -s "$tmp/logs/$f" ] || check "the series' $f is not in the log folder"
done

# 2. Killed with everything it started once the benchmark begins: the lines before are on disk.
setsid bash "$src/deploy/gpu-check.sh" --no-build --build-dir "$build" --python "$python" \
  --log-dir "$tmp/cut" >"$tmp/out" 2>&1 &
leader=$!
for _ in $(seq 1 600); do
  grep -q "^gpu-check: no CUDA device: skipping the benchmark" "$tmp/cut/gpu-check.log" 2>/dev/null &&
    break
  sleep 0.1
done
kill -KILL -- "-$leader" 2>/dev/null || true
wait "$leader" 2>/dev/null || true
grep -q "^gpu-check: GPU tests: [0-9]* passed" "$tmp/cut/gpu-check.log" 2>/dev/null ||
  check "a killed run: the GPU tests' line printed before the kill is not in gpu-check.log"
grep -q "^gpu-check: done in" "$tmp/cut/gpu-check.log" 2>/dev/null &&
  check "a killed run: it was not killed part-way (done in the log)"

if [ "$failures" -gt 0 ]; then
  echo "gpu_check_script: $failures failure(s)" >&2
  exit 1
fi
echo "gpu_check_script: a whole run and a killed run keep their logs"
