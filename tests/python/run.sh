#!/usr/bin/env bash
# ctest `python_cartlab` (label integration): builds cartlab's wheel from clients/python with the
# pinned environment of deploy/install-python.sh (its gRPC stubs generated from proto/ by
# grpcio-tools), installs it into a folder of its own, and runs TEST_MODULE (test_cartlab.py, or
# test_notebook.py for `python_notebook`) against real cartd, cart-worker and cart processes on
# loopback ports.
#
#   tests/python/run.sh BIN_DIR SOURCE_DIR OUT_DIR [TEST_MODULE]
set -euo pipefail
bin=$1 src=$2 out=$3 module=${4:-test_cartlab}
venv=${CART_PYTHON_VENV:-$src/.cache/python/venv}
if [ ! -x "$venv/bin/python" ]; then
  echo "python_cartlab: no $venv: run deploy/install-python.sh (make test does)" >&2
  exit 1
fi
rm -rf "$out"
mkdir -p "$out/wheel" "$out/site"
# Built from a copy (pip builds in the tree it is given), the stubs from the checkout's proto/;
# --no-build-isolation: with the pinned setuptools and grpcio-tools, not the index's newest.
cp -r "$src/clients/python" "$out/src"
CARTLAB_PROTO_DIR=$src/proto "$venv/bin/pip" wheel --quiet --disable-pip-version-check \
  --no-deps --no-build-isolation "$out/src" -w "$out/wheel"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --target "$out/site" \
  "$out"/wheel/cartlab-*.whl
cd "$out"
CART_BIN_DIR=$bin CART_SOURCE_DIR=$src CART_TEST_OUT=$out PYTHONPATH=$out/site:$src/tests/python \
  "$venv/bin/python" -m unittest -v "$module" 2>&1
