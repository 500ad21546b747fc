#!/usr/bin/env bash
# The dashboard's read side, printed, not asserted:
#   1. at 10,000 runs: a real cartd with one 10,000-run sweep (queued, no metrics); per page the
#      API's p50 / p99 over 20 requests and the bytes it sends; `cart sweep show` and `cart runs
#      ls` on the same sweep;
#   2. at 10 million metric points (bench-store's stage-2 database: 36 runs x 10 metrics x 27,777
#      steps): the API behind a run's page and a sweep's pages, and the time to first chart in a
#      real browser (bench/dashboard_browser.js, Debian chromium).
# Usage: bench/dashboard_bench.sh [BUILD_DIR] [WEB_DIR]  (WEB_DIR: the pages the browser part
# loads, e.g. an older checkout's dashboards/web to compare; default: this tree's)
set -euo pipefail
build=${1:-build}
web_args=()
if [ -n "${2:-}" ]; then web_args=(--web-dir "$2"); fi
dir=$(mktemp -d)
pid=; pid2=
trap 'kill $pid $pid2 2>/dev/null || true; rm -rf "$dir"' EXIT
# shellcheck source=bench/big_sweep.sh
source "$(dirname "$0")/big_sweep.sh"
api() {  # PATH: p50 and p99 of 20 requests, and the bytes of one answer (port: $http)
  local times=() bytes
  for _ in $(seq 20); do
    times+=("$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$http/api/v1/$1")")
  done
  bytes=$(curl -s "http://127.0.0.1:$http/api/v1/$1" | wc -c)
  printf '%s\n' "${times[@]}" | sort -n | awk -v p="$1" -v b="$bytes" \
    '{t[NR]=$1} END {printf "  GET /api/v1/%-45s p50 %6.1f ms  p99 %6.1f ms  %8d bytes\n", p, t[int(NR*0.5+0.5)]*1000, t[NR]*1000, b}'
}
echo "dashboard API, one sweep of 10,000 runs:"
api sweeps
api sweeps/big
api 'sweeps/big/runs?limit=50'
api 'sweeps/big/runs?limit=50&offset=9950&sort=param:seed&order=desc'
api 'sweeps/big/runs?limit=50&sort=metric:loss'
api workers
api 'sweeps/big/runs?limit=2000&metrics=loss'
for cmd in "sweep show big" "runs ls --sweep big"; do
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$build/bin/cart" $cmd >/dev/null
  end=$(date +%s.%N)
  awk -v c="$cmd" -v s="$start" -v e="$end" 'BEGIN {printf "  cart %-22s %6.2f s\n", c, e - s}'
done

echo "dashboard at 10 million metric points (building the database with bench-store):"
"$build/bin/bench-store" --only table --dir "$dir/store" --keep | sed 's/^/  /'
mkdir -p "$dir/big"
mv "$dir/store/bench.db" "$dir/big/cart.db"
http=$((http + 2))
"$build/bin/cartd" --listen 127.0.0.1:$((port + 2)) --http 127.0.0.1:$http --data-dir "$dir/big" \
  "${web_args[@]}" >"$dir/cartd2.log" 2>&1 &
pid2=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$http/healthz" >/dev/null && break; sleep 0.1; done
api sweeps
api sweeps/stage2
api 'sweeps/stage2/runs?limit=50&metrics=train/loss,rho'
api 'sweeps/stage2/pivot?metric=rho&rows=d&cols=R'
api 'sweeps/stage2/groups?by=R&metric=train/loss&points=120'
api runs/1
api 'runs/1/series?metric=train/loss&points=600'
node "$(dirname "$0")/dashboard_browser.js" "http://127.0.0.1:$http/" stage2 1 5
