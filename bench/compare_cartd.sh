#!/usr/bin/env bash
# Two cartd builds side by side on copies of one database: the dashboard's series reads (a sweep's
# groups view, a run's chart), median and slowest of 20 requests each, two alternating rounds, and whether
# the two answer byte for byte the same. Made for a change to the read path: keep the old cartd
# (cp build/bin/cartd /tmp/cartd-old), rebuild, compare. The default database is bench-store's
# 10-million-point one (36 runs x 10 metrics x 27,777 steps, sweep "stage2").
# Prints figures; asserts nothing.
# Usage: bench/compare_cartd.sh OLD_CARTD NEW_CARTD [DATABASE] [BUILD_DIR]
set -euo pipefail
old=$1
new=$2
db=${3:-}
build=${4:-build}
dir=$(mktemp -d)
pids=()
trap 'kill ${pids[*]:-} 2>/dev/null || true; rm -rf "$dir"' EXIT
if [ -z "$db" ]; then
  "$build/bin/bench-store" --only table --dir "$dir/store" --keep >/dev/null
  db=$dir/store/bench.db
fi
port=$((20000 + RANDOM % 20000))
declare -A http
for side in old new; do
  mkdir -p "$dir/$side"
  cp "$db" "$dir/$side/cart.db"
  [ -f "$db-wal" ] && cp "$db-wal" "$dir/$side/cart.db-wal"
  binary=$old
  [ "$side" = new ] && binary=$new
  http[$side]=$((port + 1))
  "$binary" --listen 127.0.0.1:$port --http 127.0.0.1:${http[$side]} --data-dir "$dir/$side" \
    >"$dir/$side.log" 2>&1 &
  pids+=($!)
  healthy=0
  for _ in $(seq 200); do
    curl -sf "http://127.0.0.1:${http[$side]}/healthz" >/dev/null && healthy=1 && break
    sleep 0.1
  done
  if [ "$healthy" = 0 ]; then
    echo "compare_cartd: the $side cartd ($binary) did not come up; its log:" >&2
    cat "$dir/$side.log" >&2
    exit 1
  fi
  port=$((port + 2))
done
api() {  # SIDE PATH
  local times=()
  for _ in $(seq 20); do
    times+=("$(curl -sf -o /dev/null -w '%{time_total}' "http://127.0.0.1:${http[$1]}/api/v1/$2")")
  done
  printf '%s\n' "${times[@]}" | sort -n | awk -v s="$1" -v p="$2" '{t[NR]=$1} END {
    printf "  %-4s GET /api/v1/%-52s p50 %7.1f ms  max %7.1f ms\n", s, p,
      t[int(NR*0.5+0.5)]*1000, t[NR]*1000}'
}
for path in 'sweeps/stage2/groups?by=R&metric=train/loss&points=120' \
  'runs/1/series?metric=train/loss&points=600' 'runs/1/series?metric=train/loss&points=100'; do
  for _ in 1 2; do
    api old "$path"
    api new "$path"
  done
  if cmp -s <(curl -s "http://127.0.0.1:${http[old]}/api/v1/$path") \
    <(curl -s "http://127.0.0.1:${http[new]}/api/v1/$path"); then
    echo "  the same answer, byte for byte"
  else
    echo "  the answers differ"
  fi
done
