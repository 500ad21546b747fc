#!/usr/bin/env bash
# `make proof`: the training loop on its own, on CPU, against a known answer. A seeded random
# Markov chain has an exact entropy rate, the lowest validation loss any causal model can reach;
# a small CART trains on it, and `cart eval` measures validation loss at R_infer 1, 2 and 4.
#
#   1. cart data synth   2,000,000 training + 65,536 validation tokens, vocab 64, order 1
#   2. cart train        d 64, P 2, R 2, 300 steps of 16 × 128 tokens, one thread
#   3. cart eval         the newest checkpoint, 256 validation windows, R_infer 1, 2, 4
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$build/bin
out=var/proof
rm -rf "$out/run"
mkdir -p "$out"

"$bin/cart" data synth --vocab 64 --order 1 --tokens 2000000 --val-tokens 65536 --seed 1 \
  --out "$out/synth.bin"
cat > "$out/run.yaml" <<YAML
vocab: 64
d: 64
P: 2
R: 2
steps: 300
seq_len: 128
batch: 16
accum: 1
lr: 3e-3
lr_min: 3e-4
warmup: 30
log_every: 100
eval_every: 150
checkpoint_every: 150
eval_sequences: 64
threads: 1
train_data: $PWD/$out/synth.bin
val_data:
  synth: $PWD/$out/synth.val.bin
YAML
"$bin/cart" train "$out/run.yaml" --out "$out/run"
"$bin/cart" eval "$out/run" --R-infer 1 --R-infer 2 --R-infer 4 --sequences 256
"$bin/cart" data info "$out/synth.bin" | grep -i entropy
