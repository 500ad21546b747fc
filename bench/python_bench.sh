#!/usr/bin/env bash
# cartlab's read side, printed, not asserted (docs/python.md "Speed"):
#   1. runs() of one 10,000-run sweep over gRPC from a real cartd (median of 5), beside `cart runs
#      ls --sweep` of the same sweep;
#   2. history() of the loss and rho of bench-store's stage-2 database (36 runs x 27,777 steps,
#      10 million metric rows in all) over gRPC (median of 3), and the same from the database file
#      with open_db.
# Usage: bench/python_bench.sh [BUILD_DIR]   (the Python environment: deploy/install-python.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
venv=${CART_PYTHON_VENV:-$root/.cache/python/venv}
[ -x "$venv/bin/python" ] || { echo "python_bench: run deploy/install-python.sh first" >&2; exit 1; }
dir=$(mktemp -d)
pid=; pid2=
trap 'kill $pid $pid2 2>/dev/null || true; rm -rf "$dir"' EXIT
cp -r "$root/clients/python" "$dir/src"
CARTLAB_PROTO_DIR=$root/proto "$venv/bin/pip" wheel --quiet --disable-pip-version-check --no-deps \
  --no-build-isolation "$dir/src" -w "$dir/wheel"
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --target "$dir/site" \
  "$dir"/wheel/cartlab-*.whl
py() { PYTHONPATH=$dir/site "$venv/bin/python" "$@"; }

export CART_CONFIG=/dev/null
# shellcheck source=bench/big_sweep.sh
source "$(dirname "$0")/big_sweep.sh"
echo "cartlab, one sweep of 10,000 runs (gRPC, ListRuns in pages of 1,000):"
py - <<'PY'
import statistics, time, cartlab
lab = cartlab.connect()
times = []
for _ in range(5):
    start = time.perf_counter()
    runs = lab.runs(sweep="big")
    times.append(time.perf_counter() - start)
print(f"  lab.runs(sweep='big')          {statistics.median(times):6.3f} s median of 5 "
      f"({len(runs)} rows x {len(runs.columns)} columns)")
PY
start=$(date +%s.%N)
"$build/bin/cart" runs ls --sweep big >/dev/null
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" 'BEGIN {printf "  cart runs ls --sweep big       %6.3f s (one run)\n", e - s}'

echo "cartlab at 10 million metric points (building the database with bench-store):"
"$build/bin/bench-store" --only table --dir "$dir/store" --keep | sed 's/^/  /'
mkdir -p "$dir/big"
mv "$dir/store/bench.db" "$dir/big/cart.db"
port2=$((port + 2)); http2=$((port + 3))
"$build/bin/cartd" --listen 127.0.0.1:$port2 --http 127.0.0.1:$http2 --data-dir "$dir/big" \
  >"$dir/cartd2.log" 2>&1 &
pid2=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http2/healthz" >/dev/null && break; sleep 0.1; done
CART_SERVER=127.0.0.1:$port2 DB=$dir/big/cart.db py - <<'PY'
import os, statistics, time, cartlab
lab = cartlab.connect()
runs = lab.runs(sweep="stage2")
def timed(fn, n):
    times, out = [], None
    for _ in range(n):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out
t, h = timed(lambda: lab.history(runs, ["train/loss", "rho"]), 3)
print(f"  lab.history(36 runs, loss+rho) {t:6.3f} s median of 3 ({len(h):,} points, gRPC stream)")
db = cartlab.open_db(os.environ["DB"])
t, h2 = timed(lambda: db.history(runs, ["train/loss", "rho"]), 3)
print(f"  open_db(...).history(same)     {t:6.3f} s median of 3 ({len(h2):,} points, SQLite file)")
PY
echo "  (the same export with MLflow: not measured yet)"
