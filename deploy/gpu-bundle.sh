#!/usr/bin/env bash
# `make gpu-bundle`: the C++ libraries CART Lab needs besides LibTorch (gRPC, protobuf and protoc,
# abseil, SQLite, yaml-cpp, fmt, CLI11, nlohmann-json, prometheus-cpp, Boost's headers,
# SentencePiece, OpenSSL, zlib, GoogleTest, pkgconf), as Debian 12's .debs unpacked into one
# prefix, for a GPU node without internet (docs/gpu.md). Run it on a Debian 12 machine that
# reaches Debian's mirrors; copy the tarball beside the source on the node, unpack it in the
# checkout, and `make gpu-check` (deploy/gpu-check.sh) builds against it.
#
#   deploy/gpu-bundle.sh [OUT]     OUT defaults to gpu-bundle/ in the checkout
#
# Writes OUT/prefix (the unpacked packages, OUT/prefix/.cart-bundle lists them with versions),
# OUT/relocate.sh (points the bundle's pkg-config and CMake files at where it now lies; run by
# gpu-check.sh) and OUT/cart-gpu-bundle.tar.xz (both, under gpu-bundle/), which must stay within
# 50 MiB so that it travels with the source. What a compiler installation brings (libc, libstdc++,
# the sanitizers' runtimes, kernel headers) is left out: the node has a compiler.
#
# Every program and shared library in the bundle gets a RUNPATH relative to where it lies
# ($ORIGIN/..., with patchelf), so the bundle's protoc, grpc_cpp_plugin and pkgconf, and what is
# built against it, find the bundle's libraries without LD_LIBRARY_PATH, which would also hand
# Debian 12's libcurl, OpenSSL and zlib to the node's own CMake, compiler and Python.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/gpu-bundle}
case $out in /*) ;; *) out=$PWD/$out ;; esac
limit_mib=50
if ! command -v patchelf >/dev/null 2>&1; then
  echo "gpu-bundle: needs patchelf (apt-get install patchelf, or deploy/install-deps.sh)" >&2
  exit 1
fi

if ! grep -qs 'VERSION_CODENAME=bookworm' /etc/os-release; then
  echo "gpu-bundle: build the bundle on Debian 12 (bookworm): its .debs are what it holds" >&2
  exit 1
fi

roots=(
  libabsl-dev libprotobuf-dev protobuf-compiler libgrpc++-dev libgrpc-dev protobuf-compiler-grpc
  libsqlite3-dev libyaml-cpp-dev nlohmann-json3-dev libfmt-dev libcli11-dev prometheus-cpp-dev
  libssl-dev libboost-dev libsentencepiece-dev zlib1g-dev libgtest-dev libgmock-dev pkgconf
)
# The toolchain's own packages, present wherever g++ is.
toolchain='^(libc6|libc6-dev|libc-dev-bin|linux-libc-dev|libcrypt1|libcrypt-dev|libgcc-s1|gcc-[0-9]+-base|libgcc-[0-9]+-dev|libstdc\+\+6|libstdc\+\+-[0-9]+-dev|libasan[0-9]+|liblsan[0-9]+|libtsan[0-9]+|libubsan[0-9]+|libatomic1|libgomp1|libitm1|libquadmath0|libnsl2|libnsl-dev|libtirpc3|libtirpc-dev|libtirpc-common|rpcsvc-proto)$'

mapfile -t packages < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances "${roots[@]}" 2>/dev/null |
  grep '^[a-z0-9]' | sort -u | grep -Ev "$toolchain")
echo "gpu-bundle: ${#packages[@]} packages (${roots[*]} and what they need)"

rm -rf "$out/debs" "$out/prefix"
mkdir -p "$out/debs" "$out/prefix"
(cd "$out/debs" && apt-get download -qq "${packages[@]}")
for deb in "$out"/debs/*.deb; do dpkg-deb -x "$deb" "$out/prefix"; done
for deb in "$out"/debs/*.deb; do dpkg-deb -f "$deb" Package Version | paste -sd' '; done \
  >"$out/prefix/.cart-bundle"
rm -rf "$out"/prefix/usr/share/{doc,man,lintian,locale,bug,info} "$out/debs"
# Debian 12 merges /lib into /usr/lib, and a few packages still ship under /lib (zlib1g): the
# same merge here, so that the bundle's libraries lie in one folder, the one its RUNPATHs name.
if [ -d "$out/prefix/lib" ] && [ ! -L "$out/prefix/lib" ]; then
  cp -a "$out/prefix/lib/." "$out/prefix/usr/lib/"
  rm -rf "$out/prefix/lib"
  ln -s usr/lib "$out/prefix/lib"
fi

# Absolute symlinks (/usr/lib/...) would point out of the bundle: make them relative.
while IFS= read -r link; do
  target=$(readlink "$link")
  case $target in
    /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$out/prefix$target")" "$link" ;;
  esac
done < <(find "$out/prefix" -type l)

# Each dynamic ELF file finds the bundle's libraries beside itself: $ORIGIN and the path from its
# folder to the library folder. (Static archives and data are not ELF objects with a dynamic
# section; patchelf --print-rpath fails on them and they are left alone.)
libdir=$out/prefix/usr/lib/x86_64-linux-gnu
patched=0
while IFS= read -r -d '' f; do
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
  patchelf --print-rpath "$f" >/dev/null 2>&1 || continue
  patchelf --print-needed "$f" 2>/dev/null | grep -q . || continue
  rel=$(realpath -m --relative-to="$(dirname "$f")" "$libdir")
  if [ "$rel" = . ]; then rpath='$ORIGIN'; else rpath="\$ORIGIN:\$ORIGIN/$rel"; fi
  patchelf --set-rpath "$rpath" "$f"
  patched=$((patched + 1))
done < <(find "$out/prefix" -type f -print0)
echo "gpu-bundle: RUNPATH set on $patched programs and libraries"

cat >"$out/relocate.sh" <<'SH'
#!/usr/bin/env bash
# Points the bundle's pkg-config files and the CMake files that name /usr at this bundle's
# prefix. Idempotent; deploy/gpu-check.sh runs it before configuring.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
prefix=$here/prefix
stamp=$prefix/.cart-relocated
[ "$(cat "$stamp" 2>/dev/null)" = "$prefix" ] && exit 0
old=$(cat "$stamp" 2>/dev/null || true)  # empty: the files still name /usr
find "$prefix" \( -name '*.pc' -o -name '*.cmake' \) -type f -print0 |
  xargs -0 sed -i -E "s#(^|[ \"';=(]|-I|-L)${old}/usr(/|\"|\)|\$)#\1${prefix}/usr\2#g"
echo "$prefix" >"$stamp"
SH
chmod +x "$out/relocate.sh"
"$out/relocate.sh"
# The stamp names this machine's path: the node's relocate.sh starts from it.

tarball=$out/cart-gpu-bundle.tar.xz
tar -C "$(dirname "$out")" --transform "s#^$(basename "$out")#gpu-bundle#" -cJf "$tarball" \
  "$(basename "$out")/prefix" "$(basename "$out")/relocate.sh"
size=$(stat -c %s "$tarball")
echo "gpu-bundle: $tarball, $((size / 1024 / 1024)) MiB ($(du -sh "$out/prefix" | cut -f1) unpacked)"
if [ "$size" -gt $((limit_mib * 1024 * 1024)) ]; then
  echo "gpu-bundle: over the ${limit_mib} MiB that travel with the source" >&2
  exit 1
fi
echo "gpu-bundle: on the node: tar -xJf cart-gpu-bundle.tar.xz -C <checkout>; make gpu-check"
