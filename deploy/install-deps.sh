#!/usr/bin/env bash
# Installs the Debian packages CART Lab's build and programs need, and the dashboard's charting
# library from npm (`npm ci` in dashboards/web, pinned by its package-lock.json); with --test also
# what only the tests use: Slurm and munge (tests/integration/deploy_test), Chromium and Prometheus
# and npm playwright-core (tests/dashboard), Debian's PyTorch (the eager reference of
# tests/cli/eager_reference_test and bench/train_vs_eager.sh), python3-venv (the torch2 build's
# virtual environment, deploy/install-torch2.sh); with --fuzz clang and libFuzzer
# (`make fuzz`); with --images buildah, podman, debootstrap and runc (`make image`). Idempotent: packages already present are skipped, so a second run costs one dpkg
# query.
#
# Debian 12 (bookworm) only. Elsewhere it prints the list and exits 1: install the equivalents
# yourself (a CUDA LibTorch 2.x from pytorch.org goes in through -DCMAKE_PREFIX_PATH).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git clang-format
  libtorch-dev libopenblas0-pthread
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libabsl-dev
  libsqlite3-dev sqlite3 prometheus-cpp-dev libssl-dev
  libboost-dev libfmt-dev libspdlog-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev
  libsentencepiece-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev openssl fortunes gnuplot-nox
  patchelf
)
if [ "${1:-}" = "--test" ]; then
  packages+=(slurm-wlm munge chromium prometheus prometheus-alertmanager iproute2 python3-torch python3-venv)
fi
# `make image`, `make image-test`: buildah and debootstrap build the images (deploy/image.sh),
# podman and runc run them (tests/images/image_test.sh), catatonit is the pause process of
# `podman kube play`.
if [ "${1:-}" = "--images" ]; then
  packages+=(buildah podman debootstrap runc catatonit curl)
fi
# `make fuzz`: clang with libFuzzer and the sanitizers' runtimes.
if [ "${1:-}" = "--fuzz" ]; then
  packages+=(clang libclang-rt-dev)
fi
# Node.js and npm install the dashboard's pinned npm packages; a machine that has them already
# (from Debian or elsewhere) keeps its own.
if ! command -v npm >/dev/null; then
  packages+=(nodejs npm)
fi

if ! grep -qs 'VERSION_CODENAME=bookworm' /etc/os-release; then
  echo "install-deps: this script knows Debian 12 (bookworm) only." >&2
  echo "install-deps: install these packages (or your system's equivalents) by hand:" >&2
  printf '  %s\n' "${packages[@]}" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then sudo_cmd=(sudo); else
      echo "install-deps: not root and no sudo; install as root: ${missing[*]}" >&2; exit 1
    fi
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm packages, pinned by each folder's package-lock.json; reinstalled only when the lock file is
# newer than what is installed.
npm_folders=(dashboards/web)
if [ "${1:-}" = "--test" ]; then
  npm_folders+=(tests/dashboard)
fi
root=$(cd "$(dirname "$0")/.." && pwd)
for folder in "${npm_folders[@]}"; do
  dir="$root/$folder"
  stamp="$dir/node_modules/.package-lock.json"
  if [ ! -f "$stamp" ] || [ "$dir/package-lock.json" -nt "$stamp" ]; then
    echo "install-deps: npm ci in $folder"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
done
