#!/usr/bin/env bash
# The images of deploy/image.sh, run (`make image-test`): cartd's image serves gRPC and the
# dashboard; a sweep submitted from this machine with the built `cart` is trained to the end by the
# CPU worker's image; both run as the non-root user cart and carry the commit they were built
# from. Containers share this machine's network (--network host), ports from 17000 up.
#
#   tests/images/image_test.sh [BUILD_DIR] [CUDA_BUILD_DIR]
#
# With CUDA_BUILD_DIR (a build against the PyTorch wheel's CUDA LibTorch, as build-torch2), the
# CUDA worker's image is built too and trains one of the runs on the CPU (there is no GPU here):
# every library it loads is in the image, and its environment record names LibTorch 2.x and CUDA.
#
# Prints PASS or FAIL lines and exits non-zero on any failure.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
work=$(mktemp -d /tmp/cart-image-test-XXXXXX)
chmod 755 "$work"
fails=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

cuda_build=${2:-}
# The CUDA worker's image from a build that is not linked against a CUDA LibTorch: refused by name.
refused=$("$root/deploy/image.sh" "$build" worker-cuda 2>&1) && status=0 || status=$?
if [ "$status" -ne 0 ] && grep -q "is not linked against a CUDA LibTorch" <<<"$refused"; then
  pass "worker-cuda from a CPU build is refused: $(head -1 <<<"$refused")"
else
  fail "worker-cuda from a CPU build: exit $status, said: $refused"
fi
"$root/deploy/image.sh" "$build" cartd worker-cpu
[ -n "$cuda_build" ] && "$root/deploy/image.sh" "$cuda_build" worker-cuda

# shellcheck source=tests/images/podman_runtime.sh
source "$root/tests/images/podman_runtime.sh"
cleanup() {
  "${podman_cmd[@]}" rm -f cart-test-cartd cart-test-worker cart-test-worker-cuda >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

commit=$(git -C "$root" rev-parse HEAD)
images=(cartd worker-cpu)
[ -n "$cuda_build" ] && images+=(worker-cuda)
for image in "${images[@]}"; do
  labels=$(podman image inspect "localhost/cart-lab/$image:latest" \
    --format '{{.Config.User}} {{index .Labels "org.opencontainers.image.revision"}}')
  [ "$labels" = "cart $commit" ] && pass "$image runs as cart, labelled with $commit" \
    || fail "$image: user and revision are '$labels'"
  size=$(podman image inspect "localhost/cart-lab/$image:latest" --format '{{.Size}}')
  echo "size $image $((size / 1024 / 1024)) MiB"
done

port=17000
"$build/bin/cart" data synth --vocab 32 --tokens 200000 --out "$work/synth.bin" >/dev/null
cat >"$work/sweep.yaml" <<EOF
name: image
base: {vocab: 32, d: 64, P: 1, R: 2, seq_len: 32, batch: 4, steps: 200, lr: 1e-2, warmup: 3,
       eval_every: 0, checkpoint_every: 10, threads: 1, train_data: $work/synth.bin}
seeds: [1, 2]
EOF
"${podman_cmd[@]}" run -d --name cart-test-cartd --network host localhost/cart-lab/cartd:latest \
  --listen "127.0.0.1:$port" --http "127.0.0.1:$((port + 1))" --data-dir /var/lib/cart/data >/dev/null
for _ in $(seq 50); do
  "$build/bin/cart" sweep ls --server "127.0.0.1:$port" >/dev/null 2>&1 && break
  sleep 0.2
done
"$build/bin/cart" sweep submit "$work/sweep.yaml" --server "127.0.0.1:$port" >/dev/null \
  && pass "a sweep submitted to cartd's container" || fail "submitting to cartd's container"
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$((port + 1))/api/v1/sweeps")" = 200 ] \
  && pass "the dashboard's API answers" || fail "the dashboard's API does not answer"
if [ -n "$cuda_build" ]; then
  # The marker shows that ldd ran in the container; then no line may say "not found".
  lddout=$("${podman_cmd[@]}" run --rm --entrypoint /bin/sh localhost/cart-lab/worker-cuda:latest -c \
    'ldd /usr/local/bin/cart-worker /usr/local/bin/cart /usr/local/bin/cart-torch; echo LDD_DONE' 2>&1 || true)
  if grep -q '^LDD_DONE$' <<<"$lddout" && ! grep -q 'not found' <<<"$lddout"; then
    pass "worker-cuda: every library its programs link is in the image"
  else
    fail "worker-cuda: ldd in the image: $(grep -E 'not found|rror' <<<"$lddout" || tail -3 <<<"$lddout")"
  fi
  "${podman_cmd[@]}" run -d --name cart-test-worker-cuda --network host -v "$work:$work:ro" \
    localhost/cart-lab/worker-cuda:latest --server "127.0.0.1:$port" --device cpu \
    --worker-id image-w2 --cache-dir /var/cache/cart --threads 1 >/dev/null
  # Registered before the CPU worker starts, so that each takes a run.
  for _ in $(seq 100); do
    "$build/bin/cart" workers ls --server "127.0.0.1:$port" 2>/dev/null | grep -q image-w2 && break
    sleep 0.3
  done
fi
"${podman_cmd[@]}" run -d --name cart-test-worker --network host -v "$work:$work:ro" \
  localhost/cart-lab/worker-cpu:latest --server "127.0.0.1:$port" --device cpu \
  --worker-id image-w1 --cache-dir /var/cache/cart --threads 1 >/dev/null
done_runs=0
for _ in $(seq 180); do
  done_runs=$("$build/bin/cart" sweep show image --server "127.0.0.1:$port" --json 2>/dev/null \
    | python3 -c 'import json,sys; print(sum(r.get("state") == "RUN_STATE_SUCCEEDED"
                                         for r in json.load(sys.stdin).get("runs", [])))' \
      2>/dev/null || echo 0)
  [ "$done_runs" = 2 ] && break
  sleep 1
done
[ "$done_runs" = 2 ] && pass "the workers' containers trained both runs" \
  || { fail "runs succeeded: $done_runs of 2"; "${podman_cmd[@]}" logs cart-test-worker | tail -20; }
if [ -n "$cuda_build" ]; then
  record=$("$build/bin/cart" runs ls --server "127.0.0.1:$port" >/dev/null 2>&1; for run in 1 2; do
    "$build/bin/cart" runs show "$run" --server "127.0.0.1:$port" 2>/dev/null; done)
  grep -q "image-w1" <<<"$record" && pass "worker-cpu trained a run" || fail "worker-cpu trained no run"
  if grep -q "image-w2" <<<"$record"; then
    grep -q "torch.version: 2\." <<<"$record" && grep -q "torch.cuda: 1[0-9]" <<<"$record" \
      && pass "worker-cuda trained a run on the CPU; its record names $(grep -m1 -o 'torch.version: [^ ]*' <<<"$record") and $(grep -m1 -o 'torch.cuda: [^ ]*' <<<"$record")" \
      || fail "worker-cuda's environment record: $(grep 'torch\.' <<<"$record")"
  else
    fail "worker-cuda trained no run"; "${podman_cmd[@]}" logs cart-test-worker-cuda | tail -20
  fi
fi
[ "$fails" -eq 0 ] && echo "image_test: all passed" || echo "image_test: $fails failed"
exit $((fails > 0))
