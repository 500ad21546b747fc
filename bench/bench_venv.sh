#!/usr/bin/env bash
# A benchmark's own Python environment: deploy/python-requirements.txt plus EXTRA (pinned and
# hash-checked like it), made in .cache/python/NAME with Debian's python3 the first time and
# whenever either file changes. Prints the environment's folder.
#
#   bench/bench_venv.sh NAME EXTRA_REQUIREMENTS
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
name=$1 extra=$2
venv=$root/.cache/python/$name
if ! cmp -s "$venv/.cart-requirements" <(cat "$root/deploy/python-requirements.txt" "$extra"); then
  echo "bench: making the environment $venv ($(basename "$extra"))" >&2
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --require-hashes \
    -r "$root/deploy/python-requirements.txt" -r "$extra" >&2
  cat "$root/deploy/python-requirements.txt" "$extra" >"$venv/.cart-requirements"
fi
echo "$venv"
