#!/usr/bin/env bash
# `make study`: the paper's program scaled down to run on this machine's CPUs, end to end, and
# its report. See docs/study.md for what each part asks and why the sizes are what they are.
#
#   1. data: State of the Union speeches before 2000 and Debian's fortunes train a SentencePiece
#      BPE tokenizer and the models; the 22 speeches from 2000 on are held out whole, as the
#      validation set `speeches` and as a LAMBADA-format task (predict a passage's last word);
#      a synthetic Markov source over 32 tokens (known entropy floor) for the leak.
#   2. `cart up`: an embedded cartd on var/study/cart with two CPU workers; the sweeps of
#      sweeps/demo/ (stage 2 first, since variable_r derives from it), waited for.
#   3. `cart report` from cartd into var/study/report (report.md, report.html, tables/, plots/,
#      claims.md with each claim's computed verdict), and that claims table printed.
#
# Re-running reuses the prepared data and the finished runs (submits are idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
bin=$build/bin
out=var/study
mkdir -p "$out"
start=$(date +%s)

deploy/fetch-corpora.sh var/corpora
if [ ! -s "$out/train.jsonl" ] || [ ! -s "$out/heldout.jsonl" ]; then
  # One JSON object per speech with its year: hold out 2000 and later.
  zcat var/corpora/sotu/sotu.jsonl.gz | awk -v held="$out/heldout.jsonl.tmp" \
    -v train="$out/train.jsonl.tmp" '{
      if (!match($0, /"year": *[0-9]+/)) { print "study: no year in a speech" > "/dev/stderr"; exit 1 }
      y = substr($0, RSTART, RLENGTH); gsub(/[^0-9]/, "", y)
      if (y + 0 >= 2000) print > held; else print > train }'
  mv "$out/heldout.jsonl.tmp" "$out/heldout.jsonl"
  mv "$out/train.jsonl.tmp" "$out/train.jsonl"
fi
train_docs=("$out/train.jsonl" var/corpora/fortunes/fortunes.txt)
if [ ! -s "$out/sp.model" ]; then
  "$bin/cart" data tokenizer train "${train_docs[@]}" --vocab 1024 --out "$out/sp.model"
fi
if [ ! -s "$out/train.bin" ]; then
  "$bin/cart" data prepare "${train_docs[@]}" --tokenizer "$out/sp.model" --out "$out/train.bin"
fi
if [ ! -s "$out/speeches.bin" ]; then
  "$bin/cart" data prepare "$out/heldout.jsonl" --tokenizer "$out/sp.model" \
    --out "$out/speeches.bin"
fi
if [ ! -s "$out/lambada.jsonl" ]; then
  node deploy/make-lambada.js "$out/heldout.jsonl" "$out/lambada.jsonl" 300
fi
if [ ! -s "$out/synth.bin" ]; then
  # A high-entropy chain (Dirichlet concentration 1: 3.06 nats/token): the causal model cannot do
  # much better than the chain, so copying the future is the one way down and the leak is learnt
  # on every seed (docs/study.md).
  "$bin/cart" data synth --vocab 32 --order 1 --concentration 1 --tokens 450000 \
    --val-tokens 16384 --seed 3 --out "$out/synth.bin"
fi
echo "study: data ready after $(( $(date +%s) - start )) s"

# Stage 2 first: variable_r derives its jobs from stage 2's runs.
sweeps=()
for s in stage2 stage1 baselines ablations faithfulness leak variable_r; do
  sweeps+=(--sweep "sweeps/demo/$s.yaml")
done
"$bin/cart" up --data-dir "$out/cart" --listen 127.0.0.1:0 --workers 2 --threads 1 \
  --client-config "$out/client.yaml" "${sweeps[@]}" --rows d --cols R \
  --metric rho_max --metric val_ppl/speeches --report "$out/report"
# Which machine produced these floats (the verdicts must agree across CPU models, and float
# results differ between them): the CPU's name, family, model and stepping, LibTorch and its BLAS.
{
  echo "cpu: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  for k in 'cpu family' model stepping; do
    echo "$k: $(grep -m1 "^$k[[:space:]]*:" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  done
  echo "cores: $(nproc)"
  # The LibTorch the workers ran and the BLAS it calls: Debian's links the system libblas.so.3
  # (an alternative: OpenBLAS or the reference BLAS); PyPI's carries MKL inside libtorch_cpu.
  libs=$(ldd "$bin/cart-worker" 2>/dev/null || true)
  torch_cpu=$(awk '/libtorch_cpu\.so/ { print $3; exit }' <<<"$libs")
  echo "libtorch: ${torch_cpu:-unknown}"
  if grep -q 'libblas\.so' <<<"$libs"; then
    echo "blas: $(readlink -f "$(awk '/libblas\.so/ { print $3; exit }' <<<"$libs")")"
  else
    echo "blas: none beside libtorch_cpu (its own, MKL in PyPI's LibTorch)"
  fi
  echo "wall_s: $(( $(date +%s) - start ))"
} > "$out/report/machine.txt"
echo "study: finished in $(( $(date +%s) - start )) s; report: $out/report/report.md (and .html)"
echo "study: the machine: $(head -1 "$out/report/machine.txt") ($out/report/machine.txt)"
echo "study: the claims and their verdicts ($out/report/claims.md; deploy/quote-claims.sh puts it"
echo "study: into docs/measurements.md):"
cat "$out/report/claims.md"
