#!/usr/bin/env bash
# Builds CART Lab's OCI images with buildah from a Debian 12 root made here (debootstrap
# --variant=minbase from Debian's mirror: no container registry is needed), with the programs of a
# build directory and the Debian packages of exactly the shared libraries they load (ldd, dpkg -S).
#
#   deploy/image.sh [BUILD_DIR] [IMAGE...]      BUILD_DIR defaults to build; IMAGE: cartd, worker-cpu,
#                                               worker-cuda
#
# Images (tag: the version and the git commit; also :latest):
#   localhost/cart-lab/cartd        cartd and the dashboard's files; no LibTorch
#   localhost/cart-lab/worker-cpu   cart-worker and cart on Debian's LibTorch 1.13 (CPU)
#   localhost/cart-lab/worker-cuda  cart-worker and cart on the PyTorch wheel's LibTorch 2.x and the
#                                   CUDA libraries it loads (from the pinned NVIDIA wheels), from a
#                                   build configured against that wheel (build-torch2: make
#                                   build-torch2); the GPU driver comes from the host at run time
#                                   (NVIDIA container toolkit, CDI: docs/operations.md "Images")
# Each runs as the user cart (uid 10001), carries the commit and version as OCI labels
# (org.opencontainers.image.revision, .version, .source) and has its size printed at the end.
# The Debian root is cached in .cache/images (rebuilt when older than 30 days), and so is each
# image's root with its packages installed (keyed by the package list): a new build of the programs
# costs an unpack and a commit. An image whose programs, commit and packages are unchanged is kept. Needs root, buildah, debootstrap and Debian's mirror
# (deploy/install-deps.sh --images installs the first two).
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
    worker-cpu | worker-cuda) need=(cart-worker cart cart-torch) ;;
    *) log "unknown image '$image'; allowed: cartd, worker-cpu, worker-cuda"; exit 2 ;;
  esac
  for program in "${need[@]}"; do
    [ -x "$build/bin/$program" ] || { log "$build/bin/$program missing: build it first (make apps)"; exit 1; }
  done
done

# The CUDA worker needs programs linked against a CUDA LibTorch whose libraries are all present.
for image in "${images[@]}"; do
  [ "$image" = worker-cuda ] || continue
  # A here-string, not a pipe: grep -q's early exit would fail the pipe under pipefail.
  if ! grep -q 'libtorch_cuda\.so' <<<"$(ldd "$build/bin/cart-worker")"; then
    log "worker-cuda: $build/bin/cart-worker is not linked against a CUDA LibTorch; build it against"
    log "  the PyTorch wheel (make build-torch2, then deploy/image.sh build-torch2 worker-cuda)"
    exit 1
  fi
  missing_libs=$(ldd "$build/bin/cart-worker" "$build/bin/cart" "$build/bin/cart-torch" | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
  if [ -n "$missing_libs" ]; then
    log "worker-cuda: libraries not found: $missing_libs"
    log "  install the pinned wheels (deploy/install-torch2.sh, hashes in deploy/torch2-requirements.txt)"
    exit 1
  fi
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
      || true  # foreign_libs lists it
  done | cut -d: -f1 | sort -u
}

# The shared libraries `programs` load that no Debian package holds (the wheels' LibTorch and CUDA
# libraries), and the ones those load at run time without linking them: cuDNN's engine libraries,
# NVRTC's builtins and nvJitLink, found beside the linked ones.
foreign_libs() {
  local lib dir
  for program in "$@"; do
    ldd "$program" | awk '$3 ~ /^\// {print $3}'
  done | sort -u | while read -r lib; do
    lib=$(readlink -f "$lib")
    dpkg -S "$lib" >/dev/null 2>&1 || dpkg -S "/usr${lib#/usr}" >/dev/null 2>&1 \
      || dpkg -S "${lib#/usr}" >/dev/null 2>&1 || echo "$lib"
  done | tee >(xargs -r -n1 dirname | sort -u | while read -r dir; do
    find "$dir" -maxdepth 1 \( -name 'libcudnn*.so*' -o -name 'libnvrtc-builtins*.so*' \
      -o -name 'libnvJitLink*.so*' \) -print
  done) | sort -u
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
  local paths=()
  for program in "${programs[@]}"; do paths+=("$build/bin/$program"); done
  for module in "${modules[@]}"; do paths+=("$build/lib/$module"); done
  if [ "$name" != worker-cuda ]; then
    local foreign
    foreign=$(foreign_libs "${paths[@]}" | tr '\n' ' ')
    if [ -n "$foreign" ]; then
      log "$name: no Debian package holds $foreign; the image would lack them (is $build a build"
      log "  against Debian's LibTorch? the wheel's build makes worker-cuda)"
      return 1
    fi
  fi
  mapfile -t pkgs < <(packages_for "${paths[@]}")
  pkgs+=("${extra[@]}")
  # Everything the image is made of (programs, commit, packages, the wheels' libraries): when an
  # image of this name already carries the same digest, it is kept as it is.
  local inputs
  inputs=$({ sha256sum "${paths[@]}" "$0" "$base"; echo "$commit $version ${pkgs[*]}";
             # The wheels' 3 GiB by name, size and time: a re-pinned wheel changes all three.
             if [ "$name" = worker-cuda ]; then foreign_libs "${paths[@]}" | xargs -r stat -L -c '%n %s %Y'; fi
             if [ "$name" = cartd ]; then
               find "$root/dashboards/web" -path '*/node_modules' -prune -o -type f -print0 \
                 | sort -z | xargs -0 sha256sum
             fi; } | sha256sum | cut -c1-32)
  if [ "$(buildah inspect --type image --format '{{index .OCIv1.Config.Labels "org.cart-lab.inputs"}}' \
          "localhost/cart-lab/$name:latest" 2>/dev/null)" = "$inputs" ]; then
    log "$name: up to date (same programs, commit and packages)"
    echo "localhost/cart-lab/$name:latest  $(buildah images --format '{{.Size}}' "localhost/cart-lab/$name:latest" | awk 'NR == 1')"
    return 0
  fi
  local ctr mnt
  ctr=$(buildah from scratch)
  trap 'buildah umount "$ctr" >/dev/null 2>&1 || true; buildah rm "$ctr" >/dev/null 2>&1 || true' RETURN
  mnt=$(buildah mount "$ctr")
  # The Debian root with these packages installed, cached by the package list: a new build of the
  # programs costs an unpack, not an apt-get.
  local rooted
  rooted="$cache/$name-root-$(printf '%s\n' "${pkgs[@]}" | sort | cat - <(sha256sum "$base") | sha256sum | cut -c1-16).tar"
  if [ -s "$rooted" ]; then
    log "$name: ${#pkgs[@]} Debian packages for ${programs[*]}, installed before ($rooted)"
    tar -C "$mnt" -xf "$rooted"
  else
    log "$name: ${#pkgs[@]} Debian packages for ${programs[*]}"
    tar -C "$mnt" -xf "$base"
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
    rm -f "$cache/$name"-root-*.tar
    tar -C "$mnt" -cf "$rooted.tmp" . && mv "$rooted.tmp" "$rooted"
  fi
  for program in "${programs[@]}"; do install -m 0755 "$build/bin/$program" "$mnt/usr/local/bin/"; done
  for module in "${modules[@]}"; do install -m 0644 "$build/lib/$module" "$mnt/usr/local/lib/"; done
  if [ "$name" = worker-cuda ]; then
    # Flat in /opt/cart/lib under their sonames (the programs' run paths point into this machine's
    # wheel, so the image names the directory with LD_LIBRARY_PATH).
    mkdir -p "$mnt/opt/cart/lib"
    local lib count=0
    while read -r lib; do
      cp -L "$lib" "$mnt/opt/cart/lib/"
      count=$((count + 1))
    done < <(foreign_libs "${paths[@]}")
    # Each library also under the soname the programs ask for, where the file's name differs.
    for program in "${paths[@]}"; do
      ldd "$program" | awk '$3 ~ /^\// {print $1, $3}'
    done | sort -u | while read -r soname lib; do
      local file
      file=$(basename "$(readlink -f "$lib")")
      if [ -e "$mnt/opt/cart/lib/$file" ] && [ ! -e "$mnt/opt/cart/lib/$soname" ]; then
        ln -s "$file" "$mnt/opt/cart/lib/$soname"
      fi
    done
    log "$name: $count libraries of the wheels in /opt/cart/lib ($(du -sh "$mnt/opt/cart/lib" | cut -f1))"
    # No NVIDIA_VISIBLE_DEVICES: the GPUs a container sees are the ones it is given (CDI).
    buildah config --env LD_LIBRARY_PATH=/opt/cart/lib "$ctr"
  fi
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
    --label org.opencontainers.image.source="CART Lab" --label org.cart-lab.inputs="$inputs" "$ctr"
  buildah umount "$ctr" >/dev/null
  buildah commit --quiet --rm "$ctr" "localhost/cart-lab/$name:$tag" >/dev/null
  trap - RETURN
  buildah tag "localhost/cart-lab/$name:$tag" "localhost/cart-lab/$name:latest"
  local size
  # awk, not head: the list holds a line per tag, and head's early exit would end this script
  # with SIGPIPE under pipefail.
  size=$(buildah images --format '{{.Size}}' "localhost/cart-lab/$name:$tag" | awk 'NR == 1')
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
    worker-cuda) build_image worker-cuda cart-worker cart cart-torch -- libcart_sentencepiece.so ;;
  esac
done
