#!/usr/bin/env bash
# The Kubernetes manifests of deploy/k8s, run (`make image-test`): rendered with kustomize through
# the podman overlay (deploy/podman) and played with `podman kube play` on this machine, with the
# images `make image` builds. cartd's pod and two worker pods start; a sweep submitted from this
# machine with the built `cart` finishes and the dashboard answers; the worker pod holding a run is
# removed mid-run (SIGTERM: it drains to a checkpoint), a replacement pod is played as the
# Deployment controller would, and the run ends with losses bit-identical to an uninterrupted run
# of the same config (`cart runs diff`).
#
#   tests/images/k8s_test.sh [BUILD_DIR]
#
# The pods use this machine's network: ports 7070 and 8080 must be free. KEEP_PODS=1 leaves the
# pods and the test's directory for inspection. Prints PASS or FAIL lines
# and exits non-zero on any failure.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
cart="$build/bin/cart"
work=$(mktemp -d /tmp/cart-k8s-test-XXXXXX)
chmod 755 "$work"
podman_cmd=(podman)
# What kube play makes from the test's overlay (every name prefixed cart-test-, so that a lab's own
# deploy/podman pods, volume and secret on this machine are never touched): pods named
# <deployment>-pod-<n>, named volumes for the claim and the ConfigMap, and the test's secret.
remove_all() {
  local pod volume
  for pod in cart-test-cartd-pod-0 cart-test-cart-worker-pod-0 cart-test-cart-worker-pod-1 \
             cart-test-cart-worker-r-pod-0; do
    "${podman_cmd[@]}" pod rm -f "$pod" >/dev/null 2>&1 || true  # one at a time: a missing one ends the call
  done
  for volume in cart-test-cartd-data cart-test-cartd-config; do
    podman volume rm -f "$volume" >/dev/null 2>&1 || true
  done
  podman secret rm cart-test-tokens >/dev/null 2>&1 || true
}
cleanup() {
  if [ -n "${KEEP_PODS:-}" ]; then echo "KEEP_PODS: pods and $work left for inspection"; return; fi
  remove_all
  rm -rf "$work"
}
trap cleanup EXIT
fails=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

for port in 7070 8080; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "k8s_test: port $port is in use; the pods of deploy/podman listen on 7070 and 8080" >&2
    exit 1
  fi
done
command -v kubectl >/dev/null || { echo "k8s_test: kubectl is needed for kustomize" >&2; exit 1; }

"$root/deploy/image.sh" "$build" cartd worker-cpu

# shellcheck source=tests/images/podman_runtime.sh
source "$root/tests/images/podman_runtime.sh"

# The test's own overlay on deploy/podman: cartd's tokens from this test's directory, and the
# sweep's data mounted read-only into the workers at the path the sweep names.
user_token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
worker_token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
mkdir -p "$work/tokens" "$work/overlay" "$work/data"
printf '%s user tester\n%s worker k8s\n' "$user_token" "$worker_token" >"$work/tokens/tokens"
# As a secret volume with the manifest's defaultMode and fsGroup: readable by cartd's group only.
chown 0:10001 "$work/tokens/tokens"
chmod 440 "$work/tokens/tokens"
cat >"$work/overlay/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namePrefix: cart-test-
resources:
  - $(realpath --relative-to="$work/overlay" "$root/deploy/podman")
patches:
  - target: {kind: Deployment, name: cartd}
    patch: |-
      - op: test
        path: /spec/template/spec/volumes/2/name
        value: tokens
      - op: replace
        path: /spec/template/spec/volumes/2/hostPath/path
        value: $work/tokens
  - target: {kind: Deployment, name: cart-worker}
    patch: |-
      - op: test
        path: /spec/template/spec/containers/0/env/1/valueFrom/secretKeyRef/name
        value: cart-tokens
      - op: replace
        path: /spec/template/spec/containers/0/env/1/valueFrom/secretKeyRef/name
        value: cart-test-tokens
      - op: add
        path: /spec/template/spec/volumes/-
        value: {name: data, hostPath: {path: $work/data, type: Directory}}
      - op: add
        path: /spec/template/spec/containers/0/volumeMounts/-
        value: {name: data, mountPath: $work/data, readOnly: true}
EOF
# kustomize refuses a resource outside the overlay's directory tree unless it is a relative path.
kubectl kustomize "$work/overlay" >"$work/cart-lab.yaml" 2>"$work/kustomize.log" \
  || { cat "$work/kustomize.log" >&2; echo "k8s_test: kustomize failed" >&2; exit 1; }

remove_all  # what an earlier run left, if it was killed
# Without the tokens secret the workers cannot start, and podman says which secret is missing.
missing=$("${podman_cmd[@]}" kube play "$work/cart-lab.yaml" 2>&1 || true)
grep -q 'no secret with name or id "cart-test-tokens"' <<<"$missing" \
  && pass "without the secret, kube play names it: $(grep -o 'cannot set env CART_TOKEN: no secret[^:]*' <<<"$missing")" \
  || fail "kube play without the secret said: $missing"
remove_all
# The workers' token, as the secret the manifest's secretKeyRef names.
printf '{"worker-token": "%s"}' "$(printf %s "$worker_token" | base64 -w0)" >"$work/secret.json"
podman secret create cart-test-tokens "$work/secret.json" >/dev/null
"${podman_cmd[@]}" kube play "$work/cart-lab.yaml" >"$work/play.log" 2>&1 \
  || { cat "$work/play.log"; fail "podman kube play"; exit 1; }
pods=$(podman pod ps --format '{{.Name}}' | sort | tr '\n' ' ')
[ "$pods" = "cart-test-cart-worker-pod-0 cart-test-cart-worker-pod-1 cart-test-cartd-pod-0 " ] \
  && pass "kube play started cartd's pod and two worker pods" || fail "pods: $pods"

export CART_TOKEN=$user_token
server=127.0.0.1:7070
for _ in $(seq 100); do "$cart" sweep ls --server "$server" >/dev/null 2>&1 && break; sleep 0.2; done
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $user_token" \
      http://127.0.0.1:8080/api/v1/sweeps)" = 200 ] \
  && pass "the dashboard's API answers" || fail "the dashboard's API does not answer"
[ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/api/v1/sweeps)" = 401 ] \
  && pass "the dashboard refuses a caller without a token (tokens from the manifest's volume)" \
  || fail "the dashboard answered a caller without a token"

"$cart" data synth --vocab 32 --tokens 200000 --out "$work/data/synth.bin" >/dev/null
base="{vocab: 32, d: 64, P: 1, R: 2, seq_len: 32, batch: 4, steps: 300, lr: 1e-2, warmup: 3,
       log_every: 1, eval_every: 0, checkpoint_every: 10, threads: 1,
       train_data: $work/data/synth.bin}"
# The run that will move, and a long one that keeps the other pod busy, so that only the
# replacement pod can take the moved run up.
printf 'name: pods\nbase: %s\nseeds: [1]\n' "$base" >"$work/pods.yaml"
printf 'name: busy\nbase: %s\nseeds: [2]\n' "${base/steps: 300/steps: 1000000}" >"$work/busy.yaml"
"$cart" sweep submit "$work/pods.yaml" --server "$server" >/dev/null \
  && "$cart" sweep submit "$work/busy.yaml" --server "$server" >/dev/null \
  && pass "two sweeps submitted to cartd's pod" || fail "submitting to cartd's pod"

# run_field RUN FIELD: a field of `cart runs show RUN --json`'s run ("" when there is none).
run_field() {
  "$cart" runs show "$1" --server "$server" --json 2>/dev/null \
    | python3 -c "import json,sys; print(json.load(sys.stdin)['run'].get('$2', ''))" 2>/dev/null || true
}
# run_id SWEEP INDEX ("" when there is none).
run_id() {
  "$cart" sweep show "$1" --server "$server" --json 2>/dev/null | python3 -c "
import json, sys
runs = [r['run_id'] for r in json.load(sys.stdin).get('runs', []) if r['name'] == '$1/$2']
print(runs[0] if runs else '')" 2>/dev/null || true
}
first=$(run_id pods 0)
busy=$(run_id busy 0)
step=0
for _ in $(seq 300); do
  step=$(run_field "$first" step)
  [ "${step:-0}" -ge 30 ] && [ "$(run_field "$busy" state)" = RUN_STATE_RUNNING ] && break
  sleep 0.5
done
holder=$(run_field "$first" worker_id)
pod=${holder#k8s-}
if [ "${step:-0}" -ge 30 ] && [ -n "$pod" ]; then
  pass "run $first trains on $holder (step $step); run $busy on $(run_field "$busy" worker_id)"
else
  fail "run $first did not reach step 30 (worker '$holder')"
  exit 1
fi

# The pod is removed: SIGTERM, and the worker stops the run after a final checkpoint.
"${podman_cmd[@]}" pod stop -t 120 "$pod" >/dev/null 2>&1 || fail "podman pod stop $pod"
"${podman_cmd[@]}" pod rm "$pod" >/dev/null 2>&1 || fail "podman pod rm $pod"
events=$("$cart" runs show "$first" --server "$server" 2>/dev/null || true)
grep -q DRAINED <<<"$events" && pass "removing pod $pod drained run $first to a checkpoint" \
  || fail "no DRAINED event for run $first: $events"

# The replacement, as the Deployment's controller would make it: one more pod of the same
# template (podman names it from the Deployment, so here the Deployment is renamed).
python3 - "$work/cart-lab.yaml" "$work/replacement.yaml" <<'PY'
import sys
docs = open(sys.argv[1]).read().split("\n---\n")
worker = [d for d in docs if "kind: Deployment" in d and "name: cart-test-cart-worker\n" in d][0]
worker = worker.replace("name: cart-test-cart-worker\n", "name: cart-test-cart-worker-r\n", 1)
open(sys.argv[2], "w").write(worker.replace("replicas: 2", "replicas: 1") + "\n")
PY
replacement=k8s-cart-test-cart-worker-r-pod-0
"${podman_cmd[@]}" kube play "$work/replacement.yaml" >>"$work/play.log" 2>&1 \
  || fail "the replacement pod did not start: $(tail -3 "$work/play.log")"

for _ in $(seq 600); do
  [ "$(run_field "$first" state)" = RUN_STATE_SUCCEEDED ] && break
  sleep 0.5
done
[ "$(run_field "$first" state)" = RUN_STATE_SUCCEEDED ] \
  && [ "$(run_field "$first" worker_id)" = "$replacement" ] \
  && pass "the replacement pod ($replacement) resumed run $first and finished it (attempt $(run_field "$first" attempt))" \
  || fail "run $first: $(run_field "$first" state) on '$(run_field "$first" worker_id)', not finished by $replacement"
"$cart" runs cancel "$busy" --server "$server" >/dev/null 2>&1 || true

# The same config trained without interruption, on one of the pods (the busy one is free now).
printf 'name: straight\nbase: %s\nseeds: [1]\n' "$base" >"$work/straight.yaml"
"$cart" sweep submit "$work/straight.yaml" --server "$server" >/dev/null
straight=$(run_id straight 0)
for _ in $(seq 600); do [ "$(run_field "$straight" state)" = RUN_STATE_SUCCEEDED ] && break; sleep 0.5; done
diff_out=$("$cart" runs diff "$first" "$straight" --server "$server" 2>&1 || true)
grep -q "loss: bit-identical at all 300 steps" <<<"$diff_out" \
  && pass "run $first, moved between pods, has the losses of an uninterrupted run, bit for bit" \
  || fail "run $first against the uninterrupted run: $diff_out"

[ "$fails" -eq 0 ] && echo "k8s_test: all passed" || echo "k8s_test: $fails failed"
exit $((fails > 0))
