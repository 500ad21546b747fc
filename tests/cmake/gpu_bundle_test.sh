#!/usr/bin/env bash
# Checks that a bundle from `make gpu-bundle` is enough on its own: configures the project with
# CMake told to ignore /usr (CMAKE_IGNORE_PREFIX_PATH) so that every package, pkg-config module
# and program comes from the bundle, builds cartd, then fails if any header of a bundled library
# was read from /usr/include (ninja's dependency log) or cartd loads a bundled library from
# outside the bundle (ldd). Not part of ctest: making a bundle needs Debian's mirrors.
#
#   tests/cmake/gpu_bundle_test.sh [BUNDLE] [BUILD]   defaults: gpu-bundle/, build-bundle-test/
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=$(cd "${1:-$root/gpu-bundle}" && pwd)
build=${2:-$root/build-bundle-test}
"$bundle/relocate.sh"
bp=$bundle/prefix/usr
lib=$bp/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$lib PKG_CONFIG_PATH=$lib/pkgconfig:$bp/share/pkgconfig PATH=$bp/bin:$PATH
rm -rf "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCART_WITH_TORCH=OFF \
  -DCART_BUILD_TESTS=OFF -DCART_BUILD_BENCH=OFF -DCMAKE_IGNORE_PREFIX_PATH=/usr \
  "-DCMAKE_PREFIX_PATH=$bp" "-DPKG_CONFIG_EXECUTABLE=$bp/bin/pkgconf" \
  "-DCMAKE_PROGRAM_PATH=$bp/bin" "-DCMAKE_CXX_COMPILER_LAUNCHER=" >"$build.log" 2>&1 ||
  { tail -30 "$build.log"; echo "gpu_bundle_test: FAILED: configure"; exit 1; }
cmake --build "$build" --target cartd >>"$build.log" 2>&1 ||
  { tail -30 "$build.log"; echo "gpu_bundle_test: FAILED: build"; exit 1; }

bad=0
leaked=$(ninja -C "$build" -t deps | grep -E '^ +/usr/include/(grpc|grpcpp|google/protobuf|absl|yaml-cpp|fmt|CLI|nlohmann|prometheus|boost|sentencepiece|sqlite3|openssl|zlib|gtest)' | sort -u || true)
if [ -n "$leaked" ]; then
  echo "gpu_bundle_test: headers read from /usr/include instead of the bundle:"
  echo "$leaked" | head -20
  bad=1
fi
outside=$(ldd "$build/bin/cartd" | grep -E 'lib(grpc|gpr|protobuf|absl|yaml-cpp|fmt|prometheus|sqlite3|ssl|crypto|cares|re2|upb|civetweb)' | grep -v "$bundle" || true)
if [ -n "$outside" ]; then
  echo "gpu_bundle_test: libraries loaded from outside the bundle:"
  echo "$outside"
  bad=1
fi
headers=$(ninja -C "$build" -t deps | grep -c "^ *$bundle" || true)
libs=$(ldd "$build/bin/cartd" | grep -c "$bundle" || true)
echo "gpu_bundle_test: cartd built from the bundle: $headers header reads and $libs shared libraries from $bundle"
[ "$bad" = 0 ] || { echo "gpu_bundle_test: FAILED"; exit 1; }
echo "gpu_bundle_test: passed"
