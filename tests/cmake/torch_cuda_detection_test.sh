#!/usr/bin/env bash
# cmake/CartTorchCuda.cmake against fake LibTorch layouts (empty library files, a shell-script
# nvcc): the PyTorch wheel's (prefix torch/share/cmake, libraries in torch/lib), pytorch.org's
# zip, a CPU-only LibTorch, each way of naming the CUDA toolkit, and the error when the named one
# has no nvcc. Then the header view that hides LibTorch's bundled protobuf and fmt headers.
#   torch_cuda_detection_test.sh SOURCE_DIR
set -uo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# The layouts.
wheel=$tmp/site-packages/torch
mkdir -p "$wheel/share/cmake/Torch" "$wheel/lib" "$tmp/libtorch/lib" "$tmp/cpu/lib" \
  "$tmp/cuda/bin" "$tmp/other/bin"
touch "$wheel/lib/libc10.so" "$wheel/lib/libc10_cuda.so" "$tmp/libtorch/lib/libc10.so" \
  "$tmp/libtorch/lib/libc10_cuda.so" "$tmp/cpu/lib/libc10.so"
printf '#!/bin/sh\necho fake nvcc\n' > "$tmp/cuda/bin/nvcc"
cp "$tmp/cuda/bin/nvcc" "$tmp/other/bin/nvcc"
chmod +x "$tmp/cuda/bin/nvcc" "$tmp/other/bin/nvcc"

# check NAME EXPECTED_EXIT(0|1) TEXT... -- CMAKE_ARGS...: configures the stand-in project with a
# PATH without nvcc and without the CUDA environment variables, except those in ENV_ARGS, and
# checks the exit status and that each TEXT appears in the output.
check() {
  local name=$1 status=$2
  shift 2
  local patterns=()
  while [ "$1" != "--" ]; do patterns+=("$1"); shift; done
  shift
  local out
  out=$(env -u CUDACXX -u CUDA_HOME -u CUDA_PATH -u CUDAToolkit_ROOT -u CMAKE_PREFIX_PATH \
        PATH=/usr/bin:/bin "${ENV_ARGS[@]}" \
        cmake -S "$src/tests/cmake/detect" -B "$tmp/build-$name" -DCART_SOURCE_DIR="$src" "$@" 2>&1)
  local got=$?
  out=$(tr '\n' ' ' <<<"$out" | tr -s ' ')  # CMake wraps messages: match across line ends
  [ $got -ne 0 ] && got=1
  local ok=1
  [ "$got" = "$status" ] || { echo "FAIL $name: configure exit $got, expected $status"; ok=0; }
  for p in "${patterns[@]}"; do
    if ! grep -qF -- "$p" <<<"$out"; then echo "FAIL $name: no '$p' in: $out"; ok=0; fi
  done
  if [ $ok = 1 ]; then echo "ok   $name"; else failures=$((failures + 1)); fi
}

ENV_ARGS=()
check wheel-toolkit-root 0 \
  "RESULT cuda_libdir=$wheel/lib" "RESULT toolkit_root_dir=$tmp/cuda" \
  "RESULT cuda_compiler=$tmp/cuda/bin/nvcc" "RESULT library_path=$wheel/lib" \
  "(from -DCUDAToolkit_ROOT=$tmp/cuda)" -- \
  -DCMAKE_PREFIX_PATH="$wheel/share/cmake" -DCUDAToolkit_ROOT="$tmp/cuda"
check wheel-package-dir 0 "RESULT cuda_libdir=$wheel/lib" -- \
  -DCMAKE_PREFIX_PATH="$wheel" -DCUDAToolkit_ROOT="$tmp/cuda"
check zip-compiler 0 "RESULT cuda_libdir=$tmp/libtorch/lib" "RESULT toolkit_root_dir=$tmp/other" \
  "(from -DCMAKE_CUDA_COMPILER=$tmp/other/bin/nvcc)" -- \
  -DCMAKE_PREFIX_PATH="$tmp/libtorch" -DCMAKE_CUDA_COMPILER="$tmp/other/bin/nvcc"
check cpu-libtorch 0 "RESULT torch_libdir=$tmp/cpu/lib" "RESULT cuda_libdir=" \
  "RESULT toolkit_root_dir=" -- -DCMAKE_PREFIX_PATH="$tmp/cpu"
ENV_ARGS=(CUDACXX="$tmp/cuda/bin/nvcc")
check wheel-cudacxx 0 "RESULT toolkit_root_dir=$tmp/cuda" "(from CUDACXX=$tmp/cuda/bin/nvcc)" -- \
  -DCMAKE_PREFIX_PATH="$wheel/share/cmake"
ENV_ARGS=(CUDACXX=/nonexistent/bin/nvcc)
check cudacxx-without-nvcc 1 "CUDACXX=/nonexistent/bin/nvcc: there is no nvcc at /nonexistent/bin/nvcc" -- \
  -DCMAKE_PREFIX_PATH="$wheel/share/cmake"
ENV_ARGS=(PATH="$tmp/other/bin:/usr/bin:/bin")
check nvcc-on-path 0 "RESULT toolkit_root_dir=$tmp/other" "nvcc on PATH" -- \
  -DCMAKE_PREFIX_PATH="$wheel/share/cmake"
ENV_ARGS=()
if [ -e /usr/local/cuda/bin/nvcc ]; then
  echo "skip no-toolkit: /usr/local/cuda/bin/nvcc exists on this machine"
else
  check no-toolkit 1 "is a CUDA LibTorch and no CUDA toolkit was found" "-DCUDAToolkit_ROOT=DIR" \
    "CUDACXX=DIR/bin/nvcc" -- -DCMAKE_PREFIX_PATH="$wheel/share/cmake"
fi

# The include view: google/ and fmt/ hidden, everything else reachable, targets pointed at it.
inc=$tmp/include
mkdir -p "$inc/ATen" "$inc/torch/csrc/api/include" "$inc/google/protobuf" "$inc/fmt" "$inc/c10"
check header-view 0 "RESULT torch_includes=$tmp/build-header-view/torch-include;$inc/torch/csrc/api/include" \
  "RESULT torch_include_dirs=$tmp/build-header-view/torch-include;$inc/torch/csrc/api/include" -- \
  -DFAKE_TORCH_INCLUDE="$inc"
view=$tmp/build-header-view/torch-include
if [ -e "$view/ATen" ] && [ -e "$view/c10" ] && [ -e "$view/torch/csrc/api/include" ] &&
   [ ! -e "$view/google" ] && [ ! -e "$view/fmt" ]; then
  echo "ok   header-view contents"
else
  echo "FAIL header-view contents: $(ls "$view" 2>&1 | tr '\n' ' ')"
  failures=$((failures + 1))
fi

echo "$failures failure(s)"
[ $failures -eq 0 ]
