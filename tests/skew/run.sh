#!/usr/bin/env bash
# Builds the previous release (the commit in tests/skew/previous_release) from this clone's git
# history into BUILD/skew/<commit>/src, unless it is built there already, and runs skew_test.js
# with this build against it. The previous tree sits as this one does (its build folder inside
# it), so ccache serves every file the two releases share.
# Usage: tests/skew/run.sh SOURCE_DIR BUILD_DIR. Exits 77 (ctest: skipped) when the commit is
# not in this clone (a shallow one).
set -euo pipefail
src=$1
build=$2
commit=$(grep -v '^#' "$src/tests/skew/previous_release" | head -1)
if ! git -C "$src" cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "skew: the previous release $commit is not in this clone's history (a shallow clone?): skipped"
  exit 77
fi
dir=$build/skew/$commit
if [ ! -x "$dir/src/build/bin/cart-worker" ] || [ ! -x "$dir/src/build/bin/cartd" ]; then
  rm -rf "$dir"
  mkdir -p "$dir/src"
  git -C "$src" archive "$commit" | tar -x -C "$dir/src"
  prefix=$(sed -n 's/^CMAKE_PREFIX_PATH:[A-Z]*=//p' "$build/CMakeCache.txt")
  start=$(date +%s)
  if ! (cd "$dir/src" &&
    cmake --preset default -B build -DCART_BUILD_TESTS=OFF -DCART_BUILD_BENCH=OFF \
      -DCART_BROWSER_TESTS=OFF ${prefix:+"-DCMAKE_PREFIX_PATH=$prefix"} >"$dir/configure.log" 2>&1 &&
    nice -n 19 cmake --build build -j "$(nproc)" --target cartd cart-worker cart \
      >"$dir/build.log" 2>&1); then
    echo "skew: building the previous release $commit failed:"
    tail -40 "$dir/configure.log" "$dir/build.log" 2>/dev/null
    exit 1
  fi
  echo "skew: built the previous release $commit in $(($(date +%s) - start)) s"
fi
exec node "$src/tests/skew/skew_test.js" --bin "$build/bin" --web "$src/dashboards/web" \
  --out "$build/test-output/skew" --prev-bin "$dir/src/build/bin"
