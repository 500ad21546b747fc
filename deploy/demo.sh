#!/usr/bin/env bash
# The main job on one box (`make demo`): real text in, a small real sweep trained by local
# workers under an embedded cartd, and the ρ table (max σ(a) by d × R) at the end.
#
#   1. fetch the demo corpora (State of the Union speeches, Debian fortunes) into var/corpora
#   2. train a SentencePiece BPE tokenizer on them and tokenize them, holding out a validation set
#   3. `cart up --sweep`: cartd on var/demo/cart, two CPU workers, a 2 × 2 sweep over d and R,
#      then the ρ and perplexity tables from the results database, and `cart report` of its runs
#      (the demo sweep as the study's stage 2) in var/demo/report
#
# Re-running reuses the prepared data and the finished sweep (submits are idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$build/bin
out=var/demo
mkdir -p "$out"

deploy/fetch-corpora.sh var/corpora
corpora=(var/corpora/sotu/sotu.txt var/corpora/fortunes/fortunes.txt)

if [ ! -s "$out/sp.model" ]; then
  "$bin/cart" data tokenizer train "${corpora[@]}" --vocab 2048 --out "$out/sp.model"
fi
if [ ! -s "$out/train.bin" ]; then
  "$bin/cart" data prepare "${corpora[@]}" --tokenizer "$out/sp.model" --out "$out/train.bin" \
    --val val=0.02
fi

cat > "$out/demo.yaml" <<YAML
# A 2 × 2 sweep over width and loop count: small enough for two CPU cores in a few minutes.
name: demo
base:
  vocab: 2048
  P: 2
  steps: 200
  seq_len: 128
  batch: 8
  accum: 1
  lr: 3e-3
  lr_min: 3e-4
  warmup: 30
  log_every: 25
  eval_every: 100
  checkpoint_every: 100
  eval_sequences: 16
  threads: 1
  train_data: $PWD/$out/train.bin
  val_data:
    val: $PWD/$out/val.bin
grid:
  d: [64, 128]
  R: [2, 4]
seeds: [42]
YAML

"$bin/cart" up --data-dir "$out/cart" --listen 127.0.0.1:0 --workers 2 --threads 1 \
  --client-config "$out/client.yaml" --sweep "$out/demo.yaml" --rows d --cols R \
  --metric rho_max --metric val_ppl/val --report "$out/report" --report-sweep stage2=demo
echo
echo "report of these runs: $out/report/report.md (and report.html; plots in $out/report/plots)"
echo "results stay in $out/cart (SQLite: $out/cart/cart.db); query them with e.g."
echo "  CART_CONFIG=$out/client.yaml $bin/cart up --data-dir $out/cart   # in one shell, then:"
echo "  CART_CONFIG=$out/client.yaml $bin/cart results pivot --metric val_ppl/val --rows d --cols R"
