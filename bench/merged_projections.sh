#!/usr/bin/env bash
# Merged against separate projections (model/layers.h MergesProjections) on the CPU, for each build
# given, in one sitting: `cart model bench --device cpu --projections merged|separate` at the
# performance issue's run (CART d 256, P 2, R 4, T 256, batch 8, vocab 4096) and at d 512,
# alternating the two ROUNDS times so that drift on a shared machine falls on both. Prints each
# median step time and the ratio merged / separate; it is what chose the CPU default (separate,
# train/device.h DefaultMergedProjections). Asserts nothing.
#
#   bench/merged_projections.sh [BUILD_DIR ...]   default: build build-torch2 (those that exist)
#   THREADS=1 ROUNDS=3 STEPS=6 WARMUP=2 bench/merged_projections.sh build
set -euo pipefail
cd "$(dirname "$0")/.."
builds=("$@")
[ ${#builds[@]} -gt 0 ] || for b in build build-torch2; do [ -x "$b/bin/cart-torch" ] && builds+=("$b"); done
threads=${THREADS:-1}
rounds=${ROUNDS:-3}
steps=${STEPS:-6}
warmup=${WARMUP:-2}
for build in "${builds[@]}"; do
  for d in 256 512; do
    declare -A times=([merged]="" [separate]="")
    for _ in $(seq "$rounds"); do
      for p in separate merged; do
        s=$("$build/bin/cart-torch" model bench --device cpu --d "$d" --steps "$steps" \
              --warmup "$warmup" --set P=2 --set R=4 --set seq_len=256 --set batch=8 \
              --set vocab=4096 --set threads="$threads" --projections "$p" --json 2>/dev/null |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0]["seconds_per_step"])')
        times[$p]+="$s "
      done
    done
    python3 - "$build" "$d" "${times[separate]}" "${times[merged]}" <<'PY'
import statistics, sys
build, d, sep, mer = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split()
s = statistics.median(map(float, sep)); m = statistics.median(map(float, mer))
print(f"{build} d {d}: separate {s*1e3:.0f} ms/step, merged {m*1e3:.0f} ms/step, "
      f"merged/separate {m/s:.3f} (medians of {len(sep)})")
PY
  done
done
