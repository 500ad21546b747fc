#!/usr/bin/env bash
# Installs the Debian packages CART Lab's build and programs need; with --test also those only
# the tests use (Slurm and munge for tests/integration/deploy_test). Idempotent: packages already
# present are skipped, so a second run costs one dpkg query.
#
# Debian 12 (bookworm) only. Elsewhere it prints the list and exits 1: install the equivalents
# yourself (a CUDA LibTorch 2.x from pytorch.org goes in through -DCMAKE_PREFIX_PATH).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git clang-format
  libtorch-dev libopenblas0-pthread
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev libabsl-dev
  libsqlite3-dev sqlite3
  libboost-dev libfmt-dev libspdlog-dev nlohmann-json3-dev libyaml-cpp-dev libcli11-dev
  libsentencepiece-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev openssl fortunes gnuplot-nox
)
if [ "${1:-}" = "--test" ]; then
  packages+=(slurm-wlm munge)
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
  exit 0
fi

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
