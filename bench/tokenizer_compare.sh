#!/usr/bin/env bash
# Tokenizer throughput beside the references (printed, not asserted; docs/model.md §6):
#   GPT-2 BPE: `cart data prepare --tokenizer gpt2:DIR` against Hugging Face `tokenizers` and
#     OpenAI's `tiktoken`, both built offline from the same encoder.json and vocab.bpe;
#   SentencePiece: `cart data prepare --tokenizer sp.model` against Google's `sentencepiece`.
# Every reference's ids are checked against the token file cart wrote, document by document;
# then MB/s of document text at 1 thread and at every thread (medians of 3), and how close the
# scaling comes to linear. cart's figure is `prepare` end to end (reading JSON Lines, encoding,
# writing the token file); the references encode documents already in memory.
#
#   bench/tokenizer_compare.sh [BUILD_DIR]   (needs var/corpora: deploy/fetch-corpora.sh)
# The references' pinned environment (bench/tokenizer-requirements.txt) is made in
# .cache/python/tokenizer-venv the first time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
cart=$build/bin/cart
threads=$(nproc)
[ -s "$root/var/corpora/sotu/sotu.jsonl.gz" ] || "$root/deploy/fetch-corpora.sh" "$root/var/corpora"
venv=$("$root/bench/bench_venv.sh" tokenizer-venv "$root/bench/tokenizer-requirements.txt")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# The speeches as JSON Lines, three times over (about 30 MB of text).
for _ in 1 2 3; do zcat "$root/var/corpora/sotu/sotu.jsonl.gz"; done >"$dir/docs.jsonl"
mb=$("$venv/bin/python" -c "import json,sys; print(sum(len(json.loads(l)['text'].encode()) for l in open(sys.argv[1]) if l.strip())/1e6)" "$dir/docs.jsonl")
echo "corpus: State of the Union speeches x 3 as JSON Lines, $mb MB of text, $threads threads"

# cart prepare at 1 and N threads: median of 3 wall times, MB/s of document text.
ours() {  # SPEC THREADS -> MB/s
  local spec=$1 t=$2 times=()
  for _ in 1 2 3; do
    local s e
    s=$(date +%s.%N)
    "$cart" data prepare "$dir/docs.jsonl" --tokenizer "$spec" --out "$dir/ours.bin" \
      --threads "$t" >/dev/null 2>&1
    e=$(date +%s.%N)
    times+=("$(awk -v s="$s" -v e="$e" 'BEGIN {print e - s}')")
  done
  printf '%s\n' "${times[@]}" | sort -g | sed -n 2p | awk -v mb="$mb" '{printf "%.3f", mb / $1}'
}

compare() {  # KIND SPEC MODEL
  local kind=$1 spec=$2 model=$3
  local o1 on
  o1=$(ours "$spec" 1)
  on=$(ours "$spec" "$threads")
  "$venv/bin/python" "$root/bench/tokenizer_compare.py" "$kind" "$dir/docs.jsonl" \
    "$dir/ours.bin" "$dir/ours.json" "$model" | sed 's/^/  /'
  {
    echo "cart $o1 $on"
    for t in 1 "$threads"; do
      RAYON_NUM_THREADS=$t TOKENIZERS_PARALLELISM=true "$venv/bin/python" \
        "$root/bench/tokenizer_compare.py" "$kind" "$dir/docs.jsonl" "$dir/ours.bin" \
        "$dir/ours.json" "$model" "$t"
    done | awk '{v[$1, $2] = $3; names[$1] = 1} END {for (n in names) print n, v[n, 1], v[n, '"$threads"']}'
  } | awk -v n="$threads" '{printf "  %-14s %8.2f MB/s %8.2f MB/s   scaling %3.0f %% of linear\n", $1, $2, $3, 100 * $3 / ($2 * n)}'
}

echo "GPT-2 BPE (var/corpora/gpt2):            1 thread    $threads threads"
compare gpt2 "gpt2:$root/var/corpora/gpt2" "$root/var/corpora/gpt2"
echo "SentencePiece BPE, vocab 8,000, trained here on the corpus:"
"$cart" data tokenizer train "$dir/docs.jsonl" --vocab 8000 --out "$dir/sp.model" >/dev/null
compare sentencepiece "$dir/sp.model" "$dir/sp.model"
