#!/usr/bin/env bash
# deploy/gpu-check.sh's checks before anything runs, with a fake PyTorch (a `python` that answers
# what the script asks of torch) and a fake nvidia-smi, on a PATH that holds only what is named:
# - a card the driver lists that PyTorch cannot use fails, naming the driver and the wheel's CUDA
#   (it used to skip the GPU steps and exit 0);
# - every missing build prerequisite is listed in one run (they used to surface one at a time).
# Usage: gpu_check_preflight_test.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
check() {  # check NAME CONDITION-TEXT: a failed expectation, with the output
  echo "FAIL: $1" >&2
  sed 's/^/  | /' "$tmp/out" >&2
  failures=$((failures + 1))
}
# The tools gpu-check.sh itself runs, and nothing else.
mkdir -p "$tmp/base"
for tool in bash dirname date sed grep mktemp mkdir rm cat seq sleep timeout head tail sort tr tee env \
            cp; do
  ln -s "$(command -v "$tool")" "$tmp/base/$tool"
done
# fake_python DIR VERSION CUDA AVAILABLE
fake_python() {
  mkdir -p "$1"
  printf '#!/bin/bash\ncat >/dev/null 2>&1 || true\nprintf "%%s\\n" "%s" "%s" "/fake/torch/cmake" "%s" ""\n' \
    "$2" "$3" "$4" >"$1/python"
  chmod +x "$1/python"
}
# fake_smi DIR NAME DRIVER
fake_smi() {
  mkdir -p "$1"
  cat >"$1/nvidia-smi" <<SMI
#!/bin/bash
case "\$*" in
  *driver_version*) echo "$3" ;;
  *name*) echo "$2" ;;
esac
SMI
  chmod +x "$1/nvidia-smi"
}
run() {  # run PATH ARGS...: gpu-check's exit status in $rc, its output in $tmp/out
  local path=$1; shift
  rc=0
  env -i PATH="$path" HOME="$tmp" bash "$src/deploy/gpu-check.sh" "$@" >"$tmp/out" 2>&1 || rc=$?
}

# 1. A CUDA 13.2 wheel, a 3090 on a 535 driver: PyTorch sees no device.
fake_python "$tmp/cu132" 2.15.0+cu132 13.2 0
fake_smi "$tmp/smi535" "NVIDIA GeForce RTX 3090" 535.104.05
run "$tmp/cu132:$tmp/smi535:$tmp/base" --python "$tmp/cu132/python" --build-dir "$tmp/b" --no-build
[ "$rc" = 1 ] || check "an old driver: exit $rc, not 1"
grep -q "driver 535.104.05" "$tmp/out" || check "an old driver: the driver is not named"
grep -q "CUDA 13.2, which needs driver 580 or newer" "$tmp/out" || check "an old driver: the need is not named"
grep -q "skipped" "$tmp/out" && check "an old driver: the GPU steps were skipped instead"

# 2. A CPU wheel on the same box.
fake_python "$tmp/cpu" 2.15.0+cpu "" 0
run "$tmp/cpu:$tmp/smi535:$tmp/base" --python "$tmp/cpu/python" --build-dir "$tmp/b" --no-build
[ "$rc" = 1 ] || check "a CPU wheel beside a card: exit $rc, not 1"
grep -q "is a CPU build" "$tmp/out" || check "a CPU wheel beside a card: not said"

# 3. A driver new enough, yet no device (CUDA_VISIBLE_DEVICES, modules): still a failure.
fake_smi "$tmp/smi580" "NVIDIA GeForce RTX 3090" 580.65.06
run "$tmp/cu132:$tmp/smi580:$tmp/base" --python "$tmp/cu132/python" --build-dir "$tmp/b" --no-build
[ "$rc" = 1 ] || check "a card PyTorch cannot see: exit $rc, not 1"
grep -q "lists NVIDIA GeForce RTX 3090 (driver 580.65.06) but PyTorch .* sees no CUDA device" "$tmp/out" ||
  check "a card PyTorch cannot see: not said"

# 4. A box with a usable card and none of the build tools: all four listed in one run.
fake_python "$tmp/cuda-ok" 2.15.0+cu132 13.2 1
run "$tmp/cuda-ok:$tmp/base" --python "$tmp/cuda-ok/python" --build-dir "$tmp/b"
[ "$rc" = 1 ] || check "missing tools: exit $rc, not 1"
grep -q "missing prerequisites (4)" "$tmp/out" || check "missing tools: not all four counted"
for what in "cmake 3.22" "ninja" "a C++20 compiler" "nvcc for CUDA 13.2"; do
  grep -q -- "- $what" "$tmp/out" || check "missing tools: '$what' is not listed"
done

# 5. Arguments a lease's command line could get wrong are refused before anything runs, naming
#    the argument and what it takes.
run "$tmp/cuda-ok:$tmp/base" --python "$tmp/cuda-ok/python" --build-type Fast --no-build
[ "$rc" = 2 ] || check "an unknown build type: exit $rc, not 2"
grep -q -- "--build-type 'Fast': one of Debug, Release, RelWithDebInfo, MinSizeRel" "$tmp/out" ||
  check "an unknown build type: the allowed ones are not named"
run "$tmp/cuda-ok:$tmp/base" --python "$tmp/cuda-ok/python" --jobs 0 --no-build
[ "$rc" = 2 ] || check "--jobs 0: exit $rc, not 2"
grep -q -- "--jobs '0': a whole number of at least 1" "$tmp/out" || check "--jobs 0: not said"
grep -q "PyTorch" "$tmp/out" && check "--jobs 0: PyTorch was asked before the arguments were checked"

# 6. --log-dir keeps what was printed, also for a run that fails: case 1 again, with a log.
run "$tmp/cu132:$tmp/smi535:$tmp/base" --python "$tmp/cu132/python" --build-dir "$tmp/b" \
  --no-build --log-dir "$tmp/logs"
[ "$rc" = 1 ] || check "a failing run with --log-dir: exit $rc, not 1"
grep -q "CUDA 13.2, which needs driver 580 or newer" "$tmp/logs/gpu-check.log" 2>/dev/null ||
  check "a failing run with --log-dir: the failure is not in gpu-check.log"
grep -q "^gpu-check: PyTorch 2.15.0+cu132" "$tmp/logs/gpu-check.log" 2>/dev/null ||
  check "a failing run with --log-dir: what was printed before the failure is not in gpu-check.log"

# 7. A relative --bundle is taken from where gpu-check was started (CMake would read it against
#    each CMakeLists' own folder): the missing bundle is named by its absolute path.
mkdir -p "$tmp/work/nb"
rc=0
(cd "$tmp/work" && env -i PATH="$tmp/cuda-ok:$tmp/base" HOME="$tmp" bash "$src/deploy/gpu-check.sh" \
  --python "$tmp/cuda-ok/python" --build-dir "$tmp/b" --bundle nb) >"$tmp/out" 2>&1 || rc=$?
[ "$rc" = 1 ] || check "a relative bundle: exit $rc, not 1"
grep -q -- "- the C++ libraries bundle: $tmp/work/nb is not one" "$tmp/out" ||
  check "a relative bundle: not named by its absolute path"

# 8. A step that fails does not stop the run: a built tree whose cart-torch fails and whose
#    cartd serves nothing. The GPU tests (a fake ctest: one test skipped, printed three times as
#    gtest does under ctest -V) are counted once, the failing bench and the series are each
#    reported, the series still runs after the bench failed, and the run ends listing both.
mkdir -p "$tmp/fb/bin" "$tmp/tools"
printf '#!/bin/bash\necho "cart-torch: broken on purpose" >&2\nexit 3\n' >"$tmp/fb/bin/cart-torch"
printf '#!/bin/bash\nexec sleep 30\n' >"$tmp/fb/bin/cartd"
cp "$tmp/fb/bin/cartd" "$tmp/fb/bin/cart-worker"
printf '#!/bin/bash\nprintf "1: [  SKIPPED ] CudaTest.A (0 ms)\\n1: [  SKIPPED ] 1 test, listed below:\\n1: [  SKIPPED ] CudaTest.A\\n"\n' \
  >"$tmp/tools/ctest"
chmod +x "$tmp/fb/bin/"* "$tmp/tools/ctest"
rc=0
env -i PATH="$tmp/cpu:$tmp/tools:$tmp/base" HOME="$tmp" GPU_CHECK_LIMITS="10 10 10 10 2" \
  bash "$src/deploy/gpu-check.sh" --python "$tmp/cpu/python" --build-dir "$tmp/fb" --no-build \
  >"$tmp/out" 2>&1 || rc=$?
[ "$rc" = 1 ] || check "failed steps: exit $rc, not 1"
grep -q "^gpu-check: GPU tests: 0 passed, 1 skipped" "$tmp/out" || check "failed steps: the skipped test is not counted once"
grep -q "^gpu-check: FAILED: cart model bench on the CPU (exit 3)" "$tmp/out" ||
  check "failed steps: the bench's failure is not reported"
grep -q "^gpu-check: the device series took" "$tmp/out" || check "failed steps: the series did not run after the bench failed"
grep -q "^gpu-check: FAILED: 2 step(s) in" "$tmp/out" || check "failed steps: the run's end does not count them"
for what in "bench on the CPU" "device series"; do
  grep -q -- "^gpu-check:   - $what" "$tmp/out" || check "failed steps: '$what' is not listed at the end"
done
grep -q "^gpu-check: done in" "$tmp/out" && check "failed steps: the run says done"

if [ "$failures" -gt 0 ]; then
  echo "gpu_check_preflight: $failures failure(s)" >&2
  exit 1
fi
echo "gpu_check_preflight: 8 cases pass"
