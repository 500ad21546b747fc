#!/usr/bin/env bash
# Makes a CUDA toolkit directory in the usual layout (bin/nvcc, include/, lib/ with the unversioned
# .so names that CMake's FindCUDA and the linker look for) out of symlinks into NVIDIA's PyPI
# wheels, for a LibTorch 2.x whose CMake config wants a toolkit at configure time. Used by
# deploy/install-torch2.sh and deploy/gpu-check.sh.
#
#   deploy/cuda-toolkit-view.sh WHEEL_CUDA OUT
#
# WHEEL_CUDA: the wheels' shared root, e.g. <site-packages>/nvidia/cu13 (bin/nvcc, include/,
# lib/, nvvm/). OUT is made afresh. Exits 1, saying so, when WHEEL_CUDA has no bin/nvcc.
set -euo pipefail

wheel_cuda=$1
cuda=$2
if [ ! -x "$wheel_cuda/bin/nvcc" ]; then
  echo "cuda-toolkit-view: no nvcc at $wheel_cuda/bin/nvcc (install nvidia-cuda-nvcc)" >&2
  exit 1
fi
rm -rf "$cuda"
mkdir -p "$cuda/lib"
# nvcc finds its libraries and headers relative to the bin/ it was started from ($(TOP)/lib,
# $(TOP)/include in nvcc.profile), so bin/ is a symlink to the wheel's bin/.
for d in bin include nvvm; do
  if [ -e "$wheel_cuda/$d" ]; then ln -sfn "$wheel_cuda/$d" "$cuda/$d"; fi
done
for f in "$wheel_cuda"/lib/*.so.* "$wheel_cuda"/lib/*.a; do
  [ -e "$f" ] || continue
  name=$(basename "$f")
  ln -sfn "$f" "$cuda/lib/$name"
  case $name in *.so.*) ln -sfn "$f" "$cuda/lib/${name%%.so.*}.so" ;; esac
done
ln -sfn lib "$cuda/lib64"
