#!/usr/bin/env bash
# Installs the Python client's test environment (`make test`): the pinned PyPI wheels of
# deploy/python-requirements.txt into a virtual environment made with Debian's python3. Prints
# nothing else on success but where it is. Idempotent: a second run costs one file comparison.
#
#   deploy/install-python.sh [DIR]     DIR defaults to .cache/python in the checkout
#
# Afterwards DIR/venv/bin/python has grpcio, pandas and grpcio-tools; tests/python/run.sh builds
# cartlab's wheel with it and runs the tests against real cartd processes. A researcher installs
# cartlab with pip as usual (docs/python.md); this is for the tests. Needs python3-venv and PyPI.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/.cache/python}
requirements=$root/deploy/python-requirements.txt
venv=$dir/venv
stamp=$venv/.cart-requirements

if [ -f "$stamp" ] && cmp -s "$stamp" "$requirements"; then
  echo "install-python: $dir up to date"
  exit 0
fi
python=/usr/bin/python3  # Debian's own: the python3 first on PATH may be pyenv's or conda's
if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
  echo "install-python: $python cannot make a virtual environment: install python3-venv" >&2
  echo "install-python: (deploy/install-deps.sh --test does)" >&2
  exit 1
fi
rm -rf "$venv"
mkdir -p "$dir"
"$python" -m venv "$venv"
echo "install-python: pip install -r deploy/python-requirements.txt into $venv"
# --no-deps: the file lists every package (hash-checked); nothing is resolved from the index.
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --require-hashes \
  -r "$requirements"
cp "$requirements" "$stamp"
echo "install-python: $("$venv/bin/python" -c 'import grpc, pandas; print("grpcio", grpc.__version__, "pandas", pandas.__version__)')"
