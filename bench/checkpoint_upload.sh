#!/usr/bin/env bash
# What checkpointing costs the training loop (printed, not asserted; docs/design.md "Storage"):
# a real cartd and cart-worker on this machine train a d = 1024, P = 6, vocab 32,000 CART (125M
# parameters), whose checkpoint (fp32
# weights and both AdamW moments) is the size of the paper's stage-2 runs', with a checkpoint
# every EVERY steps, over loopback capped at 1 Gbit/s with tc (a lab's 1 GbE link to cartd; as
# root, else uncapped and said so). Three times: the write and the upload on the training thread
# (cart-worker --upload-inline --write-checkpoints-inline, as it first was), the write on the
# training thread and the upload in the background (--write-checkpoints-inline, as it was next),
# and both in the background (the default: the loop only copies the tensors into host memory); then with the
# artifacts on a shared filesystem (a directory here) that the worker writes itself. From the run's step times in
# cartd's database: the median step, what the checkpoint steps took beyond it (the write to local
# disk, plus the upload when inline), that as a share of the run, and projected to the paper's
# cadence (a checkpoint every 500 steps) with the median step of the run without checkpoints: the
# checkpoint step's extra time, what the training loop waited for the write (from the trainer's
# log line), and all the run lost (the steps beside each upload and background write, slowed by
# them on these two cores, included).
#
#   bench/checkpoint_upload.sh [BUILD_DIR] [D] [STEPS] [EVERY]   (defaults: build 1024 30 10)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
d=${2:-1024}
steps=${3:-30}
every=${4:-10}
bin=$build/bin
dir=$(mktemp -d)
capped=0
pid=
cleanup() {
  if [ "$capped" = 1 ]; then tc qdisc del dev lo root 2>/dev/null || true; fi
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
"$bin/cart" data synth --vocab 256 --tokens 200000 --val-tokens 0 --out "$dir/synth.bin" >/dev/null
port=$((20000 + RANDOM % 20000))
# CARTD_NICE=N runs cartd at that niceness: on a lab's network cartd has a machine of its own,
# here it shares the worker's two cores (0, the default: it competes as it would on one box).
data_dir=$dir/cart
start_cartd() {  # [CONFIG-FILE]
  nice -n "${CARTD_NICE:-0}" "$bin/cartd" --listen 127.0.0.1:$port --http off \
    --data-dir "$data_dir" ${1:+--config "$1"} >"$dir/cartd.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do "$bin/cart" sweep ls >/dev/null 2>&1 && break; sleep 0.1; done
}
export CART_SERVER=127.0.0.1:$port CART_CONFIG=/dev/null
start_cartd
if [ "$(id -u)" = 0 ] && tc qdisc add dev lo root tbf rate 1gbit burst 1mb latency 200ms 2>/dev/null; then
  capped=1
  echo "loopback capped at 1 Gbit/s (tc tbf)"
else
  echo "loopback NOT capped (tc needs root): upload times are loopback's, not 1 GbE's"
fi

measure() {  # NAME EVERY WORKER-FLAGS... -> prints a line
  local name=$1 every=$2; shift 2
  cat >"$dir/$name.yaml" <<YAML
name: $name
base: {vocab: 32000, d: $d, P: 6, R: 2, seq_len: 16, batch: 1, accum: 1, steps: $steps,
       warmup: 2, log_every: 1, eval_every: 0, checkpoint_every: $every, keep_checkpoints: 2,
       train_data: $dir/synth.bin}
YAML
  "$bin/cart" sweep submit "$dir/$name.yaml" >/dev/null
  "$bin/cart-worker" --device cpu --threads 2 --exit-when-idle --max-jobs 1 \
    --cache-dir "$dir/worker-$name" --acquire-wait-ms 1000 "$@" >"$dir/worker-$name.log" 2>&1
  python3 - "$data_dir/cart.db" "$name" "$every" "$dir/totals" <<'PY'
import json, os, re, sqlite3, statistics, sys
db, sweep, every, totals = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
con = sqlite3.connect(db)
rows = con.execute(
    "SELECT m.step, m.wall_time_us FROM metrics m JOIN runs r ON r.id = m.run_id "
    "JOIN sweeps s ON s.id = r.sweep_id JOIN metric_names n ON n.id = m.name_id "
    "WHERE s.name = ? AND n.name = 'loss' ORDER BY m.step", (sweep,)).fetchall()
size = con.execute("SELECT max(a.size_bytes) FROM artifacts a").fetchone()[0] or 0
# The trainer logs what each checkpoint cost the training loop: the whole write, "checkpoint at
# step N written: X MiB in S s", or, written in the background, "... X MiB copied in S s on
# the training loop, then written in W s in the background" ("serialized in" before the loop
# only copied).
writes = [float(m.group(1)) for (text,) in con.execute(
    "SELECT l.text FROM run_logs l JOIN runs r ON r.id = l.run_id JOIN sweeps s "
    "ON s.id = r.sweep_id WHERE s.name = ?", (sweep,))
    for m in [re.search(r"written: [0-9.]+ MiB (?:in|serialized in|copied in) ([0-9.]+) s", text)] if m]
t = {s: w / 1e6 for s, w in rows}
# Step s's interval ends at its point; a checkpoint written after step s lands in step s + 1's.
gaps = {s: t[s] - t[s - 1] for s in t if s - 1 in t and s > 2}
total = sum(gaps.values())
known = json.load(open(totals)) if os.path.exists(totals) else {}
known[sweep] = total
if every == 0:
    known["step"] = statistics.median(gaps.values())
    json.dump(known, open(totals, "w"))
    print(f"{sweep:>10}: no checkpoint until the end; steps 3..: {total:.2f} s, median step "
          f"{known['step']:.3f} s")
    sys.exit(0)
json.dump(known, open(totals, "w"))
plain = [g for s, g in gaps.items() if (s - 1) % every != 0]
ckpt = [g for s, g in gaps.items() if (s - 1) % every == 0]
med = statistics.median(plain)
per = sum(g - med for g in ckpt) / max(len(ckpt), 1)
# All the run lost to checkpointing, per checkpoint: its steps and the steps beside its upload.
lost = (total - known["none"]) / max(len(ckpt), 1)
step = known["step"]  # a step with no checkpoint and no upload beside it
write = statistics.median(writes) if writes else float("nan")
print(f"{sweep:>10}: checkpoint {size / 2**30:.2f} GiB; median step {med:.3f} s; each checkpoint "
      f"step +{per:.2f} s ({len(ckpt)}), of which the loop's write "
      f"{write:.2f} s; the run lost {lost:.2f} s per checkpoint "
      f"({total:.2f} s vs {known['none']:.2f} s). At one checkpoint per 500 steps of "
      f"{step:.3f} s: the checkpoint step {100 * per / (500 * step):.3f} %, the loop's "
      f"write {100 * write / (500 * step):.3f} %, all that was lost "
      f"{100 * lost / (500 * step):.3f} % of step time")
PY
}
measure none 0
measure inline "$every" --upload-inline --write-checkpoints-inline
measure bg-upload "$every" --write-checkpoints-inline
measure background "$every"
# The shared-filesystem backend (artifact_store: kind shared_fs; a directory on this machine's
# disk standing for the lab's NFS): the worker copies each checkpoint there itself, in the
# background, and cartd re-reads it to verify it; no upload.
kill "$pid"; wait "$pid" 2>/dev/null || true
data_dir=$dir/cart-shared
echo "artifact_store: {kind: shared_fs, path: $dir/share}" >"$dir/cartd-shared.yaml"
start_cartd "$dir/cartd-shared.yaml"
measure shared "$every"

