#!/usr/bin/env bash
# Builds CART Lab's OCI images with buildah from a Debian 12 root made here (debootstrap
# --variant=minbase from Debian's mirror: no container registry is needed), with the programs of a
# build directory and the Debian packages of exactly the shared libraries they load (ldd, dpkg -S).
#
#   deploy/image.sh [BUILD_DIR] [IMAGE...]      BUILD_DIR defaults to build; IMAGE: cartd, worker-cpu
#
# Images (tag: the version and the git commit; also :latest):
#   localhost/cart-lab/cartd        cartd and the dashboard's files; no LibTorch
#   localhost/cart-lab/worker-cpu   cart-worker and cart on Debian's LibTorch 1.13 (CPU)
# Each runs as the user cart (uid 10001), carries the commit and version as OCI labels
# (org.opencontainers.image.revision, .version, .source) and has its size printed at the end.
# The Debian root is cached in .cache/images (rebuilt when older than 30 days), so a second run
# costs the package installs and the commit. Needs root, buildah, debootstrap and Debian's mirror
# (deploy/install-deps.sh --images installs the first two). Not finished: the CUDA worker image
# (docs/operations.md).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
shift || true
images=("$@")
[ ${#images[@]} -eq 0 ] && images=(cartd worker-cpu)
case "$build" in /*) ;; *) build=$root/$build ;; esac
cache=$root/.cache/images
base=$cache/bookworm-minbase.tar
log() { echo "image: $*" >&2; }

missing=()
for tool in buildah debootstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
[ "$(id -u)" -eq 0 ] || missing+=("root (debootstrap and buildah mount need it)")
if [ ${#missing[@]} -gt 0 ]; then
  log "missing: ${missing[*]} (deploy/install-deps.sh --images installs the tools)"
  exit 1
fi
for image in "${images[@]}"; do
  case "$image" in
    cartd) need=(cartd) ;;
    worker-cpu) need=(cart-worker cart cart-torch) ;;
    *) log "unknown image '$image'; allowed: cartd, worker-cpu"; exit 2 ;;
  esac
  for program in "${need[@]}"; do
    [ -x "$build/bin/$program" ] || { log "$build/bin/$program missing: build it first (make apps)"; exit 1; }
  done
done

version=$("$build/bin/cartd" --version 2>/dev/null | awk '{print $NF}')
commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
tag="${version:-0}-${commit:0:12}"

# The Debian root, once a month.
mkdir -p "$cache"
if [ ! -s "$base" ] || [ -n "$(find "$base" -mtime +30)" ]; then
  log "debootstrap --variant=minbase bookworm (once; cached in $base)"
  tmp=$(mktemp -d)
  debootstrap --variant=minbase bookworm "$tmp" http://deb.debian.org/debian >"$cache/debootstrap.log" 2>&1 \
    || { log "debootstrap failed; see $cache/debootstrap.log"; rm -rf "$tmp"; exit 1; }
  rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*
  tar -C "$tmp" -cf "$base.tmp" . && mv "$base.tmp" "$base"
  rm -rf "$tmp"
fi

# The Debian packages holding the shared libraries `programs` load.
packages_for() {
  local lib
  for program in "$@"; do
    ldd "$program" | awk '$3 ~ /^\// {print $3}'
  done | sort -u | while read -r lib; do
    lib=$(readlink -f "$lib")
    dpkg -S "$lib" 2>/dev/null || dpkg -S "/usr${lib#/usr}" 2>/dev/null || dpkg -S "${lib#/usr}" 2>/dev/null \
      || log "no Debian package holds $lib"
  done | cut -d: -f1 | sort -u
}

# build_image NAME PROGRAMS... [-- MODULES...] [+ EXTRA_PACKAGES...]
build_image() {
  local name=$1; shift
  local programs=() modules=() extra=() part=programs
  for a in "$@"; do
    case "$a" in
      --) part=modules ;;
      +) part=extra ;;
      *) if [ $part = programs ]; then programs+=("$a"); elif [ $part = modules ]; then modules+=("$a"); else extra+=("$a"); fi ;;
    esac
  done
  local ctr mnt
  ctr=$(buildah from scratch)
  trap 'buildah umount "$ctr" >/dev/null 2>&1 || true; buildah rm "$ctr" >/dev/null 2>&1 || true' RETURN
  mnt=$(buildah mount "$ctr")
  tar -C "$mnt" -xf "$base"
  local paths=()
  for program in "${programs[@]}"; do paths+=("$build/bin/$program"); done
  for module in "${modules[@]}"; do paths+=("$build/lib/$module"); done
  mapfile -t pkgs < <(packages_for "${paths[@]}")
  pkgs+=("${extra[@]}")
  log "$name: ${#pkgs[@]} Debian packages for ${programs[*]}"
  cp /etc/resolv.conf "$mnt/etc/resolv.conf"
  # No package's service is started in the image while it is built (invoke-rc.d asks this).
  printf '#!/bin/sh\nexit 101\n' >"$mnt/usr/sbin/policy-rc.d"
  chmod 755 "$mnt/usr/sbin/policy-rc.d"
  mount -t proc proc "$mnt/proc"
  if ! chroot "$mnt" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends ${pkgs[*]} ca-certificates" \
      >"$cache/$name-apt.log" 2>&1; then
    umount "$mnt/proc"
    log "$name: apt-get in the image failed; see $cache/$name-apt.log"
    return 1
  fi
  umount "$mnt/proc"
  chroot "$mnt" apt-get clean
  rm -rf "$mnt"/var/lib/apt/lists/* "$mnt"/usr/share/doc/* "$mnt"/usr/share/man/* "$mnt/etc/resolv.conf" \
    "$mnt/usr/sbin/policy-rc.d"
  for program in "${programs[@]}"; do install -m 0755 "$build/bin/$program" "$mnt/usr/local/bin/"; done
  for module in "${modules[@]}"; do install -m 0644 "$build/lib/$module" "$mnt/usr/local/lib/"; done
  chroot "$mnt" useradd --uid 10001 --no-log-init --create-home --home-dir /var/lib/cart --shell /usr/sbin/nologin cart
  mkdir -p "$mnt/var/cache/cart" && chroot "$mnt" chown cart:cart /var/cache/cart
  if [ "$name" = cartd ]; then
    mkdir -p "$mnt/usr/share/cart"
    cp -r "$root/dashboards/web" "$mnt/usr/share/cart/web"
    rm -rf "$mnt/usr/share/cart/web/node_modules/.cache"
    buildah config --entrypoint '["/usr/local/bin/cartd", "--web-dir", "/usr/share/cart/web"]' \
      --cmd '' --port 7070 --port 8080 "$ctr"
  else
    buildah config --entrypoint '["/usr/local/bin/cart-worker"]' --cmd '' "$ctr"
  fi
  buildah config --user cart --workingdir /var/lib/cart \
    --label org.opencontainers.image.title="cart-lab/$name" \
    --label org.opencontainers.image.version="$version" \
    --label org.opencontainers.image.revision="$commit" \
    --label org.opencontainers.image.source="CART Lab" "$ctr"
  buildah umount "$ctr" >/dev/null
  buildah commit --quiet --rm "$ctr" "localhost/cart-lab/$name:$tag" >/dev/null
  trap - RETURN
  buildah tag "localhost/cart-lab/$name:$tag" "localhost/cart-lab/$name:latest"
  local size
  size=$(buildah inspect --type image --format '{{.FromImageID}}' "localhost/cart-lab/$name:$tag" >/dev/null 2>&1; \
         buildah images --format '{{.Size}}' "localhost/cart-lab/$name:$tag" | head -1)
  echo "localhost/cart-lab/$name:$tag  $size"
}

for image in "${images[@]}"; do
  case "$image" in
    cartd) build_image cartd cartd ;;
    # The SentencePiece module cart_data loads at run time, and OpenBLAS, which LibTorch finds at
    # run time (without it, the reference BLAS: about 10x slower). Parquet input is not in the
    # image: its module links the pyarrow wheel's Arrow, not a Debian package.
    worker-cpu) build_image worker-cpu cart-worker cart cart-torch -- libcart_sentencepiece.so \
                  + libopenblas0-pthread ;;
  esac
done
