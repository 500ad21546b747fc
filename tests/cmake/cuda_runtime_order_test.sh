#!/usr/bin/env bash
# In a build against a PyTorch wheel's CUDA LibTorch: the CUDA runtime our programs load is the
# one LibTorch loads itself (the first folder of libtorch_cuda.so's own RPATH that holds
# libcudart.so.N), not the CUDA toolkit's that CMake found: a toolkit older in its minor version
# than the wheel's would otherwise serve LibTorch too (CMakeLists.txt; docs/gpu.md).
# Usage: cuda_runtime_order_test.sh BUILD_DIR
set -euo pipefail
build=$1
failures=0
for exe in cart-torch cart-worker; do
  bin=$build/bin/$exe
  [ -x "$bin" ] || { echo "FAIL: no $bin"; failures=$((failures + 1)); continue; }
  torch_cuda=$(ldd "$bin" | sed -n 's/^\s*libtorch_cuda\.so => \(\S*\) .*/\1/p')
  [ -n "$torch_cuda" ] || { echo "FAIL: $exe does not load libtorch_cuda.so"; failures=$((failures + 1)); continue; }
  origin=$(dirname "$torch_cuda")
  want=""
  rpath=$(readelf -d "$torch_cuda" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')
  IFS=: read -r -a dirs <<<"$rpath"
  for d in "${dirs[@]}"; do
    d=${d//\$ORIGIN/$origin}
    if compgen -G "$d/libcudart.so.*" >/dev/null; then want=$(cd "$d" && pwd); break; fi
  done
  if [ -z "$want" ]; then
    echo "$exe: libtorch_cuda.so's RPATH names no CUDA runtime (not a wheel's LibTorch): nothing to check"
    continue
  fi
  got=$(ldd "$bin" | sed -n 's/^\s*libcudart\.so\.[0-9]* => \(\S*\) .*/\1/p')
  got_dir=$(cd "$(dirname "$got")" && pwd)
  if [ "$got_dir" != "$want" ]; then
    echo "FAIL: $exe loads the CUDA runtime from $got_dir; LibTorch's own is in $want"
    failures=$((failures + 1))
  else
    echo "$exe: the CUDA runtime from $got_dir, LibTorch's own"
  fi
done
[ "$failures" = 0 ] || exit 1
