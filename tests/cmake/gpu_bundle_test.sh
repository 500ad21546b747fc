#!/usr/bin/env bash
# Checks that a bundle from `make gpu-bundle` is enough on its own, on a machine that also has the
# packages installed (as this one does): configures the project with the bundle first on every
# search path, as gpu-check.sh does, builds cartd, then fails if CMake found a bundled package,
# library or program outside the bundle (CMakeCache), if any header of a bundled library was read
# from /usr/include (ninja's dependency log), or if cartd loads a bundled library from elsewhere
# (ldd). A package missing from the bundle would be found in /usr here and fail one of the three.
# (The toolchain's own headers and libraries, libc's, stay in /usr.) Nothing sets LD_LIBRARY_PATH:
# the bundle's files carry their own RUNPATH. Last, in a mount namespace where the system's
# library folder holds only libc's and the compiler's runtime libraries (a node that has none of
# Debian's other packages), the bundle's protoc, grpc_cpp_plugin and pkgconf run and so does the
# cartd built from it. Not part of ctest: making a bundle needs Debian's mirrors.
#
#   tests/cmake/gpu_bundle_test.sh [BUNDLE] [BUILD]   defaults: gpu-bundle/, build-bundle-test/
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=$(cd "${1:-$root/gpu-bundle}" && pwd)
build=${2:-$root/build-bundle-test}
"$bundle/relocate.sh"
bp=$bundle/prefix/usr
lib=$bp/lib/x86_64-linux-gnu
unset LD_LIBRARY_PATH
export PKG_CONFIG_PATH=$lib/pkgconfig:$bp/share/pkgconfig PATH=$bp/bin:$PATH
rm -rf "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCART_WITH_TORCH=OFF \
  -DCART_BUILD_TESTS=OFF -DCART_BUILD_BENCH=OFF \
  "-DCMAKE_PREFIX_PATH=$bp" "-DPKG_CONFIG_EXECUTABLE=$bp/bin/pkgconf" \
  "-DCMAKE_PROGRAM_PATH=$bp/bin" "-DCMAKE_CXX_COMPILER_LAUNCHER=" >"$build.log" 2>&1 ||
  { tail -30 "$build.log"; echo "gpu_bundle_test: FAILED: configure"; exit 1; }
cmake --build "$build" --target cartd >>"$build.log" 2>&1 ||
  { tail -30 "$build.log"; echo "gpu_bundle_test: FAILED: build"; exit 1; }

bad=0
bundled='(grpc|gRPC|protobuf|Protobuf|protoc|absl|yaml|fmt|CLI11|nlohmann|prometheus|civetweb|Boost|boost|sentencepiece|SQLite|sqlite|OPENSSL|OpenSSL|ssl|crypto|ZLIB|libz|c-ares|cares|re2|upb|GTest|PKG_CONFIG|curl)'
found=$(grep -E "^[A-Za-z0-9_.-]*${bundled}[A-Za-z0-9_.-]*(_DIR|_LIBRARY[A-Z_]*|_INCLUDE_DIR[A-Z_]*|_EXECUTABLE|_PROGRAM):[A-Z]*=/usr/" \
  "$build/CMakeCache.txt" || true)
if [ -n "$found" ]; then
  echo "gpu_bundle_test: CMake found these outside the bundle:"
  echo "$found"
  bad=1
fi
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
# ninja records headers under the source tree relative to the build directory (../gpu-bundle/...).
headers=$(ninja -C "$build" -t deps | grep -c "$(basename "$bundle")/prefix/" || true)
libs=$(ldd "$build/bin/cartd" | grep -c "$bundle" || true)
echo "gpu_bundle_test: cartd built from the bundle: $headers header reads and $libs shared libraries from $bundle"

# A node without Debian's libraries: /usr/lib/x86_64-linux-gnu replaced (in a mount namespace) by
# a folder of libc's libraries and the compiler's runtime only.
if unshare -m true 2>/dev/null || unshare -rm true 2>/dev/null; then
  userns=""; unshare -m true 2>/dev/null || userns=-r
  sys=$(mktemp -d)
  trap 'rm -rf "$sys"' EXIT
  for pattern in 'ld-linux-x86-64.so.*' 'libc.so.*' 'libm.so.*' 'libdl.so.*' 'libpthread.so.*' \
                 'librt.so.*' 'libresolv.so.*' 'libutil.so.*' 'libanl.so.*' 'libnss_*.so.*' \
                 'libstdc++.so.*' 'libgcc_s.so.*'; do
    find /usr/lib/x86_64-linux-gnu -maxdepth 1 -name "$pattern" -exec cp -a {} "$sys/" \;
  done
  out=$(unshare $userns -m bash -c '
    mount --bind "$1" /usr/lib/x86_64-linux-gnu || exit 90
    "$2/bin/protoc" --version && "$2/bin/pkgconf" --version &&
      { "$2/bin/grpc_cpp_plugin" </dev/null >/dev/null 2>&1; [ $? != 127 ]; } &&
      "$3/bin/cartd" --help >/dev/null && echo "cartd starts"' _ "$sys" "$bp" "$build" 2>&1) || {
    echo "gpu_bundle_test: without Debian's libraries the bundle's programs or cartd do not run:"
    echo "$out"
    bad=1
  }
  # The same programs fail there without the bundle's RUNPATH: the check can tell.
  if [ "$bad" = 0 ]; then
    echo "$out" | sed 's/^/gpu_bundle_test:   /'
    if unshare $userns -m bash -c 'mount --bind "$1" /usr/lib/x86_64-linux-gnu && /usr/bin/protoc --version' \
         _ "$sys" >/dev/null 2>&1; then
      echo "gpu_bundle_test: Debian's own protoc ran without Debian's libraries: the check cannot fail"
      bad=1
    fi
  fi
else
  echo "gpu_bundle_test: no mount namespace here (unshare -m); the run without Debian's libraries is not checked"
fi
[ "$bad" = 0 ] || { echo "gpu_bundle_test: FAILED"; exit 1; }
echo "gpu_bundle_test: passed"
