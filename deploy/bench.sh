#!/usr/bin/env bash
# Runs every benchmark binary that was built (bench-*), printing their figures.
set -euo pipefail
build=${1:-build}
shopt -s nullglob
for b in "$build"/bin/bench-*; do
  echo "== $(basename "$b")"
  "$b"
done
