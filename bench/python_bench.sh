#!/usr/bin/env bash
# cartlab's read side, printed, not asserted (docs/python.md "Speed"):
#   1. runs() of one 10,000-run sweep over gRPC from a real cartd (median of 5), beside `cart runs
#      ls --sweep` of the same sweep;
#   2. history() of the loss and rho of bench-store's stage-2 database (36 runs x 27,777 steps,
#      10 million metric rows in all) over gRPC (median of 3), and the same from the database file
#      with open_db;
#   3. the same 2 million points logged into MLflow (PyPI mlflow, its SQLite backend, log_batch)
#      and read back as researchers read them there (search_runs, then get_metric_history per run
#      and metric), timed beside cartlab's read, with the ratio.
# Usage: bench/python_bench.sh [BUILD_DIR]   (the Python environment: deploy/install-python.sh;
# MLFLOW=0 skips step 3, whose environment, bench/mlflow-requirements.txt, this script makes in
# .cache/python/mlflow-venv the first time)
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
t_grpc, h = timed(lambda: lab.history(runs, ["train/loss", "rho"]), 3)
print(f"  lab.history(36 runs, loss+rho) {t_grpc:6.3f} s median of 3 ({len(h):,} points, gRPC stream)")
db = cartlab.open_db(os.environ["DB"])
t, h2 = timed(lambda: db.history(runs, ["train/loss", "rho"]), 3)
print(f"  open_db(...).history(same)     {t:6.3f} s median of 3 ({len(h2):,} points, SQLite file)")
# For the MLflow comparison below: the points, and cartlab's time over gRPC.
h.to_pickle(os.environ["DB"] + ".points.pkl")
with open(os.environ["DB"] + ".cartlab.txt", "w") as f:
    f.write(f"{t_grpc}\n")
PY
if [ "${MLFLOW:-1}" = 0 ]; then
  echo "  (MLflow comparison skipped: MLFLOW=0)"
  exit 0
fi
mlvenv=$("$root/bench/bench_venv.sh" mlflow-venv "$root/bench/mlflow-requirements.txt")
echo "the same points in MLflow $("$mlvenv/bin/python" -c 'import mlflow; print(mlflow.__version__)') (SQLite backend; logged with log_batch, read with search_runs + get_metric_history):"
POINTS=$dir/big/cart.db.points.pkl CARTLAB_S=$(cat "$dir/big/cart.db.cartlab.txt") \
  MLDIR=$dir/mlflow "$mlvenv/bin/python" - <<'PY'
import logging, os, statistics, time
import pandas as pd
import mlflow
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

logging.getLogger("mlflow").setLevel(logging.WARNING)  # its table-creation notices
points = pd.read_pickle(os.environ["POINTS"])
os.makedirs(os.environ["MLDIR"], exist_ok=True)
uri = "sqlite:///" + os.path.join(os.environ["MLDIR"], "mlflow.db")
client = MlflowClient(tracking_uri=uri)
experiment = client.create_experiment("stage2",
                                      artifact_location=os.path.join(os.environ["MLDIR"], "art"))
start = time.perf_counter()
for run_id, group in points.groupby("run_id"):
    run = client.create_run(experiment, run_name=f"stage2/{run_id}")
    wall = (group["wall_time"].astype("int64") // 1_000_000).tolist()
    metrics = [Metric(m, float(v), int(w), int(s)) for m, v, w, s in
               zip(group["metric"], group["value"], wall, group["step"])]
    for i in range(0, len(metrics), 1000):  # MLflow takes at most 1,000 metrics per batch
        client.log_batch(run.info.run_id, metrics=metrics[i:i + 1000])
    client.set_terminated(run.info.run_id)
logged = time.perf_counter() - start
print(f"  logging {len(points):,} points (log_batch of 1,000)  {logged:8.1f} s (one run)")

def read():
    frames = []
    for run in client.search_runs([experiment], max_results=1000):
        for key in ("train/loss", "rho"):
            history = client.get_metric_history(run.info.run_id, key)
            frames.append(pd.DataFrame({"run": run.info.run_name, "metric": key,
                                        "step": [m.step for m in history],
                                        "value": [m.value for m in history]}))
    return pd.concat(frames, ignore_index=True)

times = []
for _ in range(3):
    start = time.perf_counter()
    back = read()
    times.append(time.perf_counter() - start)
mlflow_s = statistics.median(times)
assert len(back) == len(points), (len(back), len(points))
cartlab_s = float(os.environ["CARTLAB_S"])
print(f"  search_runs + get_metric_history   {mlflow_s:8.3f} s median of 3 ({len(back):,} points)")
print(f"  cartlab history over gRPC          {cartlab_s:8.3f} s median of 3 (measured above)")
print(f"  ratio MLflow / cartlab             {mlflow_s / cartlab_s:8.1f} x")
PY
