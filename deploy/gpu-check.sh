#!/usr/bin/env bash
# `make gpu-check`: one command that checks a CUDA box (docs/gpu.md). Against the LibTorch inside
# the PyTorch this machine has, it builds what it needs (cart-torch and the GPU tests), runs
# `ctest -L gpu` (GPU fp32 logits against the CPU, a short bf16 training run whose checkpoint
# loads on the CPU, exact resume on the GPU), then measures training tokens/s, MFU and peak
# memory against the estimate at the paper's shapes (P 6, R 6, T 1024, d 256 ... 1024) with
# `cart model bench`, beside the paper's RTX 3090 figures. Without a CUDA device every GPU step
# is skipped, saying so, and the benchmark runs once on the CPU at a small shape instead, so the
# script itself is checked on any machine.
#
#   deploy/gpu-check.sh [--python PY] [--build-dir DIR] [--bundle DIR] [--no-build]
#                       [--device cuda:N] [--peak-tflops X] [--steps N]
#
#   --python PY        the interpreter whose `import torch` names the LibTorch (default: python3)
#   --build-dir DIR    where to build (default: build-gpu)
#   --bundle DIR       C++ libraries from `make gpu-bundle` (default: gpu-bundle/ when present),
#                      for a node without internet; otherwise the system's (deploy/install-deps.sh)
#   --no-build         use DIR as it is (tests/deploy runs the script so on its own build)
#   --device cuda:N    the card to check (default cuda:0)
#   --peak-tflops X    the card's bf16 peak for MFU, when the built-in table lacks it
#   --steps N          timed steps per width (default 10)
#
# Needs: CMake >= 3.22, Ninja, a C++20 compiler, PyTorch 2.x, and for a CUDA PyTorch a CUDA
# toolkit (CUDAToolkit_ROOT, CUDA_HOME, nvcc on PATH, or NVIDIA's nvidia-cuda-nvcc wheel in the
# same environment). Exits non-zero when a step fails; prints the time it took.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
python=python3
build=$root/build-gpu
bundle=""
do_build=1
device=cuda:0
peak=""
steps=10
while [ $# -gt 0 ]; do
  case $1 in
    --python) python=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --bundle) bundle=$2; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --device) device=$2; shift 2 ;;
    --peak-tflops) peak=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $build in /*) ;; *) build=$root/$build ;; esac
if [ -z "$bundle" ] && [ -d "$root/gpu-bundle/prefix" ]; then bundle=$root/gpu-bundle; fi
start=$(date +%s)
say() { echo "gpu-check: $*"; }
fail() { echo "gpu-check: FAILED: $*" >&2; exit 1; }

# 1. PyTorch: its LibTorch, its CUDA version, whether it sees a card.
if ! info=$("$python" - <<'PY' 2>/dev/null
import torch, torch.utils
print(torch.__version__)
print(torch.version.cuda or "")
print(torch.utils.cmake_prefix_path)
print(int(torch.cuda.is_available()))
print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
PY
); then
  fail "$python cannot import torch: install PyTorch 2.x (pip install torch) or pass --python"
fi
{ read -r torch_version; read -r torch_cuda; read -r prefix; read -r has_cuda; read -r card || true; } \
  <<<"$info"
say "PyTorch $torch_version (CUDA ${torch_cuda:-none}), LibTorch config in $prefix"
if [ "$has_cuda" = 1 ]; then say "CUDA device 0: $card"; else
  say "PyTorch sees no CUDA device: the GPU steps below are skipped"; fi

# 2. Configure and build cart-torch and the GPU tests against that LibTorch.
if [ "$do_build" = 1 ]; then
  cmake_args=(-S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
              -DCART_WITH_TORCH=ON -DCART_BUILD_BENCH=OFF -DCART_BROWSER_TESTS=OFF "-DCMAKE_PREFIX_PATH=$prefix")
  if [ -n "$torch_cuda" ] && [ -z "${CUDAToolkit_ROOT:-}${CUDACXX:-}${CUDA_HOME:-}" ] &&
     ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    # No toolkit named: NVIDIA's nvcc wheel beside PyTorch, if it is there.
    site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    for wheel_cuda in "$site"/nvidia/cu*; do
      if [ -x "$wheel_cuda/bin/nvcc" ]; then
        "$root/deploy/cuda-toolkit-view.sh" "$wheel_cuda" "$build/cuda-toolkit"
        cmake_args+=("-DCUDAToolkit_ROOT=$build/cuda-toolkit")
        say "CUDA toolkit from the nvcc wheel in $wheel_cuda"
        break
      fi
    done
  fi
  if [ -n "$bundle" ]; then
    [ -f "$bundle/prefix/.cart-bundle" ] || fail "$bundle is not a gpu bundle (make gpu-bundle)"
    "$bundle/relocate.sh"
    bp=$bundle/prefix/usr
    # The bundle's prefix before the system's: CMake searches CMAKE_PREFIX_PATH first.
    cmake_args+=("-DCMAKE_PREFIX_PATH=$prefix;$bp" "-DPKG_CONFIG_EXECUTABLE=$bp/bin/pkgconf"
                 "-DCMAKE_INCLUDE_PATH=$bp/include" "-DCMAKE_LIBRARY_PATH=$bp/lib/x86_64-linux-gnu"
                 "-DCMAKE_PROGRAM_PATH=$bp/bin")
    export PKG_CONFIG_PATH=$bp/lib/x86_64-linux-gnu/pkgconfig:$bp/share/pkgconfig
    export LD_LIBRARY_PATH=$bp/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PATH=$bp/bin:$PATH
    say "C++ libraries from the bundle in $bundle"
  fi
  cmake "${cmake_args[@]}" >"$build.configure.log" 2>&1 ||
    { tail -30 "$build.configure.log" >&2; fail "configure (log: $build.configure.log)"; }
  say "building cart-torch and gpu_test in $build"
  cmake --build "$build" --target cart-torch gpu_test cartd cart-worker ||
    fail "build (cmake --build $build --target cart-torch gpu_test cartd cart-worker)"
fi
[ -x "$build/bin/cart-torch" ] || fail "no $build/bin/cart-torch: build first or drop --no-build"

# 3. The GPU tests. ctest reports a skipped test as passed; the skip reasons are counted here.
say "ctest -L gpu"
ctest_log=$(mktemp)
trap 'rm -f "$ctest_log"' EXIT
if ! (cd "$build" && ctest -L gpu --output-on-failure -V) >"$ctest_log" 2>&1; then
  tail -60 "$ctest_log" >&2
  fail "ctest -L gpu"
fi
ran=$(grep -c '^\(.*: \)\?\[       OK \]' "$ctest_log" || true)
skipped=$(grep -c '^\(.*: \)\?\[  SKIPPED \]' "$ctest_log" || true)
say "GPU tests: $ran passed, $skipped skipped"
if [ "$skipped" -gt 0 ]; then
  grep -m1 'no CUDA device' "$ctest_log" | sed 's/^[0-9]*: /gpu-check:   /' || true
fi
if [ "$has_cuda" = 1 ] && [ "$skipped" -gt 0 ]; then
  fail "PyTorch sees a CUDA device but the GPU tests skipped: this build's LibTorch has no CUDA"
fi

# 4. Throughput, MFU and peak memory.
bench=("$build/bin/cart-torch" model bench)
[ -n "$peak" ] && bench+=(--peak-tflops "$peak")
if [ "$has_cuda" = 1 ]; then
  say "cart model bench --device $device at the paper's shapes (bf16 autocast)"
  "${bench[@]}" --device "$device" --steps "$steps" || fail "cart model bench on $device"
else
  say "no CUDA device: skipping the benchmark at the paper's shapes; checking the command on the CPU"
  "${bench[@]}" --device cpu --d 64,128 --steps 3 --warmup 1 \
    --set P=2 --set R=2 --set seq_len=64 --set batch=2 --set vocab=512 ||
    fail "cart model bench on the CPU"
fi
# 5. The device series: a cartd and one cart-worker on the device for a few seconds, reading it
#    every second; the cart_device_* lines of /metrics are what NVML (or, on a CPU, /proc) reads.
series_device=$device
[ "$has_cuda" = 1 ] || series_device=cpu
say "the device series of $series_device (cartd + cart-worker --sample-interval 1, until a reading arrives)"
for exe in cartd cart-worker; do
  [ -x "$build/bin/$exe" ] || fail "no $build/bin/$exe: build it (cmake --build $build --target $exe)"
done
series_dir=$(mktemp -d)
cartd_pid="" worker_pid=""
trap 'rm -f "$ctest_log"; rm -rf "$series_dir"; kill $cartd_pid $worker_pid 2>/dev/null || true' EXIT
read -r grpc_port http_port < <("$python" -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
"$build/bin/cartd" --listen "127.0.0.1:$grpc_port" --http "127.0.0.1:$http_port" \
  --data-dir "$series_dir/cartd" >"$series_dir/cartd.log" 2>&1 &
cartd_pid=$!
"$build/bin/cart-worker" --server "127.0.0.1:$grpc_port" --device "$series_device" \
  --worker-id gpu-check --cache-dir "$series_dir/worker" --sample-interval 1 --peak-tflops 1 \
  --acquire-wait-ms 1000 --client-config /dev/null >"$series_dir/worker.log" 2>&1 &
worker_pid=$!
series=""
for _ in $(seq 1 30); do
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
if ! grep -q '^cart_device_utilization_ratio' <<<"$series"; then
  tail -5 "$series_dir/cartd.log" "$series_dir/worker.log" >&2
  fail "no cart_device_ series on /metrics within 30 s"
fi
sed 's/^/gpu-check:   /' <<<"$series"
say "done in $(( $(date +%s) - start )) s"
