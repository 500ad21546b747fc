#!/usr/bin/env bash
# `make gpu-check`: one command that checks a CUDA box (docs/gpu.md). Against the LibTorch inside
# the PyTorch this machine has, it builds what it needs (cart-torch and the GPU tests), runs
# `ctest -L gpu` (GPU fp32 logits against the CPU, a short bf16 training run whose checkpoint
# loads on the CPU, exact resume on the GPU), then measures training tokens/s, MFU and peak
# memory against the estimate at the paper's shapes (P 6, R 6, T 1024, d 256 ... 1024) with
# `cart model bench`, beside the paper's RTX 3090 figures, then where the device's time goes
# (--breakdown) and the step as a CUDA graph (--cuda-graph). Without a CUDA device every GPU step
# is skipped, saying so, and the benchmark runs once on the CPU at a small shape instead, so the
# script itself is checked on any machine.
#
#   deploy/gpu-check.sh [--python PY] [--build-dir DIR] [--bundle DIR] [--no-build]
#                       [--build-type TYPE] [--jobs N] [--log-dir DIR]
#                       [--device cuda:N] [--peak-tflops X] [--steps N]
#
#   --python PY        the interpreter whose `import torch` names the LibTorch (default: python3)
#   --build-dir DIR    where to build (default: build-gpu)
#   --bundle DIR       C++ libraries from `make gpu-bundle` (default: gpu-bundle/ when present),
#                      for a node without internet; otherwise the system's (deploy/install-deps.sh)
#   --no-build         use DIR as it is (tests/deploy runs the script so on its own build)
#   --build-type TYPE  CMake build type (default RelWithDebInfo; Release compiles and links
#                      faster, without debug information: for a machine lent for minutes)
#   --jobs N           parallel build jobs (default: Ninja's choice)
#   --log-dir DIR      also write everything to DIR while it runs: gpu-check.log (all that is
#                      printed, each step's time included), configure.log, ctest-gpu.log and
#                      the device series' cartd.log and worker.log, so that a run stopped
#                      part-way leaves all it got
#   --device cuda:N    the card to check (default cuda:0)
#   --peak-tflops X    the card's bf16 peak for MFU, when the built-in table lacks it
#   --steps N          timed steps per width (default 10)
#
# On a CUDA device the headline benchmark (the paper's shapes) runs first after the build, then
# the GPU tests, the other benchmarks and the device series. A step that fails is reported and the
# next one still runs (a machine lent for minutes must not lose every figure to one failure); the
# run ends with the list of failed steps and exits 1 if there are any.
#
# Needs: CMake >= 3.22, Ninja, a C++20 compiler, PyTorch 2.x, and for a CUDA PyTorch a CUDA
# toolkit of the same major version (CUDAToolkit_ROOT, CUDA_HOME, nvcc on PATH, or NVIDIA's
# nvidia-cuda-nvcc wheel in the same environment). Every one of them is checked before anything
# runs, and all that are missing are listed at once. A built tree given with --build-dir is
# configured again only when it was configured against another LibTorch. Each step has a time
# limit (GPU_CHECK_LIMITS="configure build tests bench series" in seconds overrides them). Where
# nvidia-smi lists a card that PyTorch cannot use (a driver older than the wheel's CUDA needs, a
# CPU wheel), it fails naming both. Exits non-zero when a step fails; prints the time it took.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
python=python3
build=$root/build-gpu
bundle=""
do_build=1
device=cuda:0
peak=""
steps=10
build_type=RelWithDebInfo
jobs=""
log_dir=""
while [ $# -gt 0 ]; do
  case $1 in
    --python) python=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --bundle) bundle=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --build-type) build_type=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --log-dir) log_dir=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --peak-tflops) peak=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo pipefail/{/^set -euo/!s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $build in /*) ;; *) build=$root/$build ;; esac
# An absolute bundle path: CMake reads relative search paths against each CMakeLists' own folder.
case $bundle in ''|/*) ;; *) bundle=$PWD/$bundle ;; esac
if [ -z "$bundle" ] && [ -d "$root/gpu-bundle/prefix" ]; then bundle=$root/gpu-bundle; fi
case $build_type in
  Debug|Release|RelWithDebInfo|MinSizeRel) ;;
  *) echo "gpu-check: --build-type '$build_type': one of Debug, Release, RelWithDebInfo, MinSizeRel" >&2
     exit 2 ;;
esac
if [ -n "$jobs" ] && ! [[ $jobs =~ ^[1-9][0-9]*$ ]]; then
  echo "gpu-check: --jobs '$jobs': a whole number of at least 1" >&2
  exit 2
fi
if [ -n "$log_dir" ]; then
  mkdir -p "$log_dir" || { echo "gpu-check: --log-dir '$log_dir' cannot be made" >&2; exit 2; }
  log_dir=$(cd "$log_dir" && pwd)
  # Line by line as it is printed: what a run cut short printed is on disk.
  exec > >(tee -a "$log_dir/gpu-check.log")
  tee_out=$!
  exec 2> >(tee -a "$log_dir/gpu-check.log" >&2)
  tee_err=$!
fi
scratch=$(mktemp -d)  # what is not kept: the ctest log without --log-dir, the series' cartd
cartd_pid="" worker_pid=""
# On any exit: the series' processes stopped, the scratch removed, and the log's last lines
# written before the script's caller reads it.
finish() {
  kill $cartd_pid $worker_pid 2>/dev/null || true
  rm -rf "$scratch"
  if [ -n "$log_dir" ]; then
    exec >&- 2>&-
    wait "$tee_out" "$tee_err" 2>/dev/null || true
  fi
}
trap finish EXIT
# A step's whole output: in the log folder when one is named, else beside the build tree.
step_log() { if [ -n "$log_dir" ]; then echo "$log_dir/$1"; else echo "$build.$1"; fi; }
start=$(date +%s)
step_start=$start
say() { echo "gpu-check: $*"; }
# Prints how long the step that just ended took, and the run so far.
took() {
  local now
  now=$(date +%s)
  say "$1 took $((now - step_start)) s ($((now - start)) s so far)"
  step_start=$now
}
fail() { echo "gpu-check: FAILED: $*" >&2; exit 1; }
# A step that failed: reported now, the run goes on, and the run's exit status is 1.
failed_steps=()
step_failed() {
  echo "gpu-check: FAILED: $2" >&2
  failed_steps+=("$1")
}
# Time limits per step, in seconds: configure, build, GPU tests, benchmark, device series.
read -r limit_configure limit_build limit_tests limit_bench limit_series \
  <<<"${GPU_CHECK_LIMITS:-600 5400 1800 1800 120}"
# Runs "$@" for at most $1 seconds; 124 when it ran out of time.
bounded() { local seconds=$1; shift; timeout --kill-after=10 "$seconds" "$@"; }
timed_out() { [ "$1" = 124 ] || [ "$1" = 137 ]; }

# 1. PyTorch: its LibTorch, its CUDA version, whether it sees a card.
if ! info=$("$python" - <<'PY' 2>/dev/null
import torch, torch.utils
print(torch.__version__)
print(torch.version.cuda or "")
print(torch.utils.cmake_prefix_path)
print(int(torch.cuda.is_available()))
print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
print("%d.%d" % torch.cuda.get_device_capability(0) if torch.cuda.is_available() else "")
PY
); then
  fail "$python cannot import torch: install PyTorch 2.x (pip install torch) or pass --python"
fi
{ read -r torch_version; read -r torch_cuda; read -r prefix; read -r has_cuda; read -r card || true
  read -r capability || true; } <<<"$info"
say "PyTorch $torch_version (CUDA ${torch_cuda:-none}), LibTorch config in $prefix"

# 1b. A card the driver lists but PyTorch cannot use is a failure, not a CPU check: the lab would
#     train on the CPU without knowing. nvidia-smi speaks for the driver (as NVML does).
listed="" driver=""
if command -v nvidia-smi >/dev/null 2>&1; then
  listed=$(bounded 30 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
  driver=$(bounded 30 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null |
             head -1 || true)
fi
# The oldest driver each CUDA major version runs on (NVIDIA's CUDA compatibility table, Linux).
min_driver() {
  case ${1%%.*} in
    11) echo 450 ;; 12) echo 525 ;; 13) echo 580 ;; *) echo "" ;;
  esac
}
if [ "$has_cuda" = 1 ]; then
  say "CUDA device 0: $card${capability:+ (compute capability $capability)}"
elif [ -n "$listed" ]; then
  if [ -z "$torch_cuda" ]; then
    fail "nvidia-smi lists $listed (driver $driver) but PyTorch $torch_version is a CPU build: install a CUDA wheel of PyTorch (pip install torch --index-url https://download.pytorch.org/whl/cuXYZ) or pass --python"
  fi
  need=$(min_driver "$torch_cuda")
  if [ -n "$need" ] && [ -n "$driver" ] && [ "${driver%%.*}" -lt "$need" ] 2>/dev/null; then
    fail "nvidia-smi lists $listed with driver $driver, but PyTorch $torch_version is built for CUDA $torch_cuda, which needs driver $need or newer: upgrade the driver, or install a PyTorch wheel for an older CUDA (the driver supports up to the CUDA version nvidia-smi shows)"
  fi
  fail "nvidia-smi lists $listed (driver ${driver:-unknown}) but PyTorch $torch_version (CUDA $torch_cuda) sees no CUDA device: check CUDA_VISIBLE_DEVICES, the driver's modules and that the driver supports CUDA $torch_cuda"
else
  say "PyTorch sees no CUDA device and nvidia-smi lists none: the GPU steps below are skipped"
fi

# 1c. Every prerequisite at once, before anything is built.
missing=()
if [ "$do_build" = 1 ]; then
  if ! command -v cmake >/dev/null 2>&1; then
    missing+=("cmake 3.22 or newer (apt-get install cmake, or pip install cmake)")
  else
    cmake_version=$(cmake --version | sed -n 's/^cmake version \([0-9.]*\).*/\1/p')
    if ! printf '3.22\n%s\n' "$cmake_version" | sort -V -C; then
      missing+=("cmake 3.22 or newer (this one is $cmake_version)")
    fi
  fi
  command -v ninja >/dev/null 2>&1 || missing+=("ninja (apt-get install ninja-build, or pip install ninja)")
  if ! command -v "${CXX:-c++}" >/dev/null 2>&1 && ! command -v g++ >/dev/null 2>&1 &&
     ! command -v clang++ >/dev/null 2>&1; then
    missing+=("a C++20 compiler (apt-get install g++)")
  fi
  nvcc_wheel=""  # NVIDIA's nvcc wheel beside PyTorch, when no toolkit is named (step 2 uses it)
  if [ -n "$torch_cuda" ]; then
    nvcc=""
    for candidate in "${CUDACXX:-}" "${CUDAToolkit_ROOT:+$CUDAToolkit_ROOT/bin/nvcc}" \
                     "${CUDA_HOME:+$CUDA_HOME/bin/nvcc}" "$(command -v nvcc 2>/dev/null || true)" \
                     /usr/local/cuda/bin/nvcc; do
      if [ -n "$candidate" ] && [ -x "$candidate" ]; then nvcc=$candidate; break; fi
    done
    if [ -z "$nvcc" ]; then
      site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
      for wheel_cuda in "$site"/nvidia/cu*; do
        if [ -x "$wheel_cuda/bin/nvcc" ]; then
          nvcc=$wheel_cuda/bin/nvcc nvcc_wheel=$wheel_cuda
          break
        fi
      done
    fi
    if [ -z "$nvcc" ]; then
      missing+=("nvcc for CUDA $torch_cuda (set CUDAToolkit_ROOT or CUDA_HOME, or pip install nvidia-cuda-nvcc into $python's environment)")
    else
      nvcc_version=$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
      if [ "${nvcc_version%%.*}" != "${torch_cuda%%.*}" ]; then
        missing+=("nvcc of CUDA ${torch_cuda%%.*}.x to match PyTorch's CUDA $torch_cuda ($nvcc is CUDA ${nvcc_version:-unknown})")
      fi
    fi
  fi
  if [ -n "$bundle" ] && [ ! -f "$bundle/prefix/.cart-bundle" ]; then
    missing+=("the C++ libraries bundle: $bundle is not one (make gpu-bundle on a Debian 12 box)")
  fi
fi
command -v timeout >/dev/null 2>&1 || missing+=("timeout (coreutils)")
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu-check: FAILED: missing prerequisites (${#missing[@]}):" >&2
  for m in "${missing[@]}"; do echo "gpu-check:   - $m" >&2; done
  exit 1
fi
if [ "$do_build" = 1 ]; then
  # What was found, so that a failed configure names the tools it ran with.
  compiler=${CXX:-$(command -v c++ || command -v g++ || command -v clang++)}
  say "tools: cmake $cmake_version, ninja $(ninja --version), $compiler $("$compiler" -dumpfullversion 2>/dev/null || "$compiler" -dumpversion)${nvcc:+, nvcc $nvcc_version ($nvcc)}"
fi

# 2. Configure and build cart-torch and the GPU tests against that LibTorch.
if [ "$do_build" = 1 ]; then
  cmake_args=(-S "$root" -B "$build" -G Ninja "-DCMAKE_BUILD_TYPE=$build_type"
              -DCART_WITH_TORCH=ON -DCART_BUILD_BENCH=OFF -DCART_BROWSER_TESTS=OFF "-DCMAKE_PREFIX_PATH=$prefix")
  # The card's own architecture: spares LibTorch's CMake compiling and running a probe for it.
  if [ -n "${capability:-}" ] && [ -z "${TORCH_CUDA_ARCH_LIST:-}" ]; then
    cmake_args+=("-DTORCH_CUDA_ARCH_LIST=$capability")
  fi
  if [ -n "$nvcc_wheel" ]; then
    # No toolkit named: a toolkit view of NVIDIA's wheels beside PyTorch (found in 1c).
    "$root/deploy/cuda-toolkit-view.sh" "$nvcc_wheel" "$build/cuda-toolkit"
    cmake_args+=("-DCUDAToolkit_ROOT=$build/cuda-toolkit")
    say "CUDA toolkit from the nvcc wheel in $nvcc_wheel"
  fi
  if [ -n "$bundle" ]; then
    [ -f "$bundle/prefix/.cart-bundle" ] || fail "$bundle is not a gpu bundle (make gpu-bundle)"
    "$bundle/relocate.sh"
    bp=$bundle/prefix/usr
    # The bundle's prefix before the system's: CMake searches CMAKE_PREFIX_PATH first.
    cmake_args+=("-DCMAKE_PREFIX_PATH=$prefix;$bp" "-DPKG_CONFIG_EXECUTABLE=$bp/bin/pkgconf"
                 "-DCMAKE_INCLUDE_PATH=$bp/include" "-DCMAKE_LIBRARY_PATH=$bp/lib/x86_64-linux-gnu"
                 "-DCMAKE_PROGRAM_PATH=$bp/bin")
    # No LD_LIBRARY_PATH: the bundle's programs and libraries find its libraries through their
    # own RUNPATH (deploy/gpu-bundle.sh), so this machine's compiler, CMake and Python keep theirs.
    export PKG_CONFIG_PATH=$bp/lib/x86_64-linux-gnu/pkgconfig:$bp/share/pkgconfig
    say "C++ libraries from the bundle in $bundle"
  fi
  # A tree already configured against this LibTorch and build type is reused as it is (the
  # build is incremental); one configured otherwise is configured again.
  if [ -f "$build/build.ninja" ] && grep -qF "$prefix" "$build/CMakeCache.txt" 2>/dev/null &&
     grep -qx "CMAKE_BUILD_TYPE:STRING=$build_type" "$build/CMakeCache.txt" 2>/dev/null; then
    say "reusing $build (configured against this LibTorch, $build_type)"
  else
    configure_log=$(step_log configure.log)
    rc=0
    bounded "$limit_configure" cmake "${cmake_args[@]}" >"$configure_log" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
      tail -n 30 "$configure_log" >&2
      timed_out "$rc" && fail "configure took more than $limit_configure s (log: $configure_log)"
      fail "configure (log: $configure_log)"
    fi
    took "configure ($build_type)"
  fi
  say "building cart-torch, gpu_test, cartd and cart-worker in $build${jobs:+ with $jobs jobs}"
  rc=0
  bounded "$limit_build" cmake --build "$build" ${jobs:+--parallel "$jobs"} \
    --target cart-torch gpu_test cartd cart-worker || rc=$?
  if [ "$rc" != 0 ]; then
    timed_out "$rc" && fail "the build took more than $limit_build s"
    fail "build (cmake --build $build --target cart-torch gpu_test cartd cart-worker)"
  fi
  took "the build"
fi
[ -x "$build/bin/cart-torch" ] || fail "no $build/bin/cart-torch: build first or drop --no-build"

# 3. Throughput, MFU and peak memory; bench_on_card runs one `cart model bench` on the card
#    within the bench's time limit, `what` naming it.
bench=("$build/bin/cart-torch" model bench)
[ -n "$peak" ] && bench+=(--peak-tflops "$peak")
bench_on_card() {
  local what=$1 rc=0
  shift
  say "cart model bench $what"
  bounded "$limit_bench" "${bench[@]}" --device "$device" --steps "$steps" "$@" || rc=$?
  if [ "$rc" != 0 ]; then
    if timed_out "$rc"; then
      step_failed "bench $what" "cart model bench $what took more than $limit_bench s"
    else
      step_failed "bench $what" "cart model bench $what on $device (exit $rc)"
    fi
  fi
  took "cart model bench $what"
}
# The headline figures first: what the card reaches at the paper's shapes.
if [ "$has_cuda" = 1 ]; then
  bench_on_card "on $device at the paper's shapes (bf16 autocast)"
fi

# 4. The GPU tests. ctest reports a skipped test as passed; the skip reasons are counted here.
say "ctest -L gpu"
ctest_log=$scratch/ctest-gpu.log
[ -n "$log_dir" ] && ctest_log=$log_dir/ctest-gpu.log
rc=0
(cd "$build" && bounded "$limit_tests" ctest -L gpu --output-on-failure -V) >"$ctest_log" 2>&1 || rc=$?
# gtest prints each result twice under ctest -V (the line and the summary): count test names once.
ran=$(grep -o '\[       OK \] [A-Za-z][A-Za-z0-9_]*\.[A-Za-z0-9_]*' "$ctest_log" | sort -u | grep -c . || true)
skipped=$(grep -o '\[  SKIPPED \] [A-Za-z][A-Za-z0-9_]*\.[A-Za-z0-9_]*' "$ctest_log" | sort -u | grep -c . || true)
if [ "$rc" != 0 ]; then
  tail -n 60 "$ctest_log" >&2
  if timed_out "$rc"; then
    step_failed "ctest -L gpu" "ctest -L gpu took more than $limit_tests s (log: $ctest_log)"
  else
    step_failed "ctest -L gpu" "ctest -L gpu (log: $ctest_log)"
  fi
fi
say "GPU tests: $ran passed, $skipped skipped"
took "ctest -L gpu"
if [ "$skipped" -gt 0 ]; then
  grep -m1 'no CUDA device' "$ctest_log" | sed 's/^[0-9]*: /gpu-check:   /' || true
fi
if [ "$has_cuda" = 1 ] && [ "$skipped" -gt 0 ]; then
  step_failed "GPU tests skipped" "PyTorch sees a CUDA device but the GPU tests skipped: this build's LibTorch has no CUDA"
fi

# 5. The other benchmarks.
if [ "$has_cuda" = 1 ]; then
  # Where launches weigh most (d 256), the same with the per-tensor optimizer step, to compare
  # with the fused one above (train/optimizer.h; LibTorch 2.4+ has both).
  bench_on_card "--d 256 --step-kernels per-tensor (the fused step's saving at d 256)" \
    --d 256 --step-kernels per-tensor
  # Where the device's time goes (the kernels' own time by kind, Kineto), and the step replayed as
  # a CUDA graph (off by default until measured: this is its measurement), at the smallest and
  # the largest width.
  bench_on_card "--d 256,1024 --breakdown (the kernels' time by kind)" --d 256,1024 --breakdown
  bench_on_card "--d 256,1024 --cuda-graph (the step recorded once and replayed)" \
    --d 256,1024 --warmup 5 --cuda-graph
else
  say "no CUDA device: skipping the benchmark at the paper's shapes; checking the command on the CPU"
  rc=0
  bounded "$limit_bench" "${bench[@]}" --device cpu --d 64,128 --steps 3 --warmup 1 \
    --set P=2 --set R=2 --set seq_len=64 --set batch=2 --set vocab=512 || rc=$?
  [ "$rc" = 0 ] || step_failed "bench on the CPU" "cart model bench on the CPU (exit $rc)"
  took "cart model bench on the CPU"
fi
# 6. The device series: a cartd and one cart-worker on the device for a few seconds, reading it
#    every second; the cart_device_* lines of /metrics are what NVML (or, on a CPU, /proc) reads.
series_device=$device
[ "$has_cuda" = 1 ] || series_device=cpu
say "the device series of $series_device (cartd + cart-worker --sample-interval 1, until a reading arrives)"
for exe in cartd cart-worker; do
  [ -x "$build/bin/$exe" ] || fail "no $build/bin/$exe: build it (cmake --build $build --target $exe)"
done
series_dir=$scratch/series
series_logs=${log_dir:-$series_dir}
mkdir -p "$series_dir"
read -r grpc_port http_port < <("$python" -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
"$build/bin/cartd" --listen "127.0.0.1:$grpc_port" --http "127.0.0.1:$http_port" \
  --data-dir "$series_dir/cartd" >"$series_logs/cartd.log" 2>&1 &
cartd_pid=$!
"$build/bin/cart-worker" --server "127.0.0.1:$grpc_port" --device "$series_device" \
  --worker-id gpu-check --cache-dir "$series_dir/worker" --sample-interval 1 --peak-tflops 1 \
  --acquire-wait-ms 1000 --client-config /dev/null >"$series_logs/worker.log" 2>&1 &
worker_pid=$!
series=""
for _ in $(seq 1 "$limit_series"); do
  sleep 1
  series=$("$python" -c "
import urllib.request
try:
    text = urllib.request.urlopen('http://127.0.0.1:$http_port/metrics', timeout=5).read().decode()
except Exception:
    text = ''
print('\n'.join(l for l in text.splitlines() if l.startswith('cart_device_')))")
  [ -n "$series" ] && grep -q '^cart_device_utilization_ratio' <<<"$series" && break
done
kill $worker_pid $cartd_pid 2>/dev/null || true
wait $worker_pid $cartd_pid 2>/dev/null || true
if grep -q '^cart_device_utilization_ratio' <<<"$series"; then
  sed 's/^/gpu-check:   /' <<<"$series"
else
  tail -n 5 "$series_logs/cartd.log" "$series_logs/worker.log" >&2
  step_failed "device series" "no cart_device_ series on /metrics within $limit_series s"
fi
took "the device series"
if [ ${#failed_steps[@]} -gt 0 ]; then
  echo "gpu-check: FAILED: ${#failed_steps[@]} step(s) in $(( $(date +%s) - start )) s:" >&2
  for f in "${failed_steps[@]}"; do echo "gpu-check:   - $f" >&2; done
  exit 1
fi
say "done in $(( $(date +%s) - start )) s"
