#!/usr/bin/env bash
# `cart data prepare` end to end on a generated corpus of about 1 GB in the layouts of the paper's
# sources (printed, not asserted; docs/model.md §6): a TinyStories-style text file and two folders
# of Parquet shards (snappy, zstd) in the Hugging Face layout, built from the State of the Union
# speeches (var/corpora, deploy/fetch-corpora.sh) by the pyarrow of deploy/install-python.sh. The
# three go through one `--source` mixture with the GPT-2 tokenizer at every thread: wall time,
# MB/s, peak memory (GNU time), tokens; then the paper's mixture (300M + 300M + 400M tokens)
# projected from the measured bytes per token and MB/s.
#
#   bench/prepare_gb.sh [BUILD_DIR] [GB]     (GB of text to generate; default 1)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
gb=${2:-1}
cart=$build/bin/cart
py=$root/.cache/python/venv/bin/python
[ -x "$py" ] || "$root/deploy/install-python.sh"
[ -s "$root/var/corpora/sotu/sotu.jsonl.gz" ] || "$root/deploy/fetch-corpora.sh" "$root/var/corpora"
command -v /usr/bin/time >/dev/null || { echo "prepare_gb: needs GNU time (apt-get install time)" >&2; exit 1; }
dir=${PREPARE_GB_DIR:-$(mktemp -d)}
trap 'rm -rf "$dir"' EXIT
start=$(date +%s.%N)
"$py" - "$root/var/corpora/sotu/sotu.jsonl.gz" "$dir" "$gb" <<'PY'
import gzip, json, os, sys
import pyarrow as pa, pyarrow.parquet as pq
src, out, gb = sys.argv[1], sys.argv[2], float(sys.argv[3])
speeches = [json.loads(l)["text"] for l in gzip.open(src, "rt", encoding="utf-8") if l.strip()]
# Paragraphs as documents, each tagged so no two documents are the same text.
paras = [p for s in speeches for p in s.split("\n\n") if len(p) > 200]
target = int(gb * 1e9 / 3)  # bytes of text per source
def docs():
    i = 0
    while True:
        yield f"[{i}] {paras[i % len(paras)]}"
        i += 1
gen = docs()
with open(os.path.join(out, "tiny.txt"), "w", encoding="utf-8") as f:
    n = 0
    while n < target:
        d = next(gen)
        f.write(d + "\n<|endoftext|>\n")
        n += len(d.encode())
for name, codec in (("wiki", "snappy"), ("edu", "zstd")):
    folder = os.path.join(out, name, "data")
    os.makedirs(folder)
    shards, per_shard = 8, target // 8
    for k in range(shards):
        texts, n = [], 0
        while n < per_shard:
            texts.append(next(gen))
            n += len(texts[-1].encode())
        pq.write_table(pa.table({"id": list(range(len(texts))), "text": texts}),
                       os.path.join(folder, f"train-{k:05d}-of-{shards:05d}.parquet"),
                       compression=codec, row_group_size=2000)
PY
du_text=$(du -sb "$dir" | cut -f1)
echo "corpus: $(awk -v b="$du_text" 'BEGIN {printf "%.2f", b / 1e9}') GB on disk (a text file and two folders of 8 Parquet shards), generated in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.0f", e - s}') s"
threads=$(nproc)
sources=(--source "tiny=$dir/tiny.txt" --weight tiny=3 --source "wiki=$dir/wiki" --weight wiki=3
         --source "edu=$dir/edu" --weight edu=4)
"$cart" data prepare --tokenizer "gpt2:$root/var/corpora/gpt2" --out "$dir/mix.bin" \
  "${sources[@]}" --dry-run | sed 's/^/  dry run: /'
/usr/bin/time -v -o "$dir/time.txt" "$cart" data prepare --tokenizer "gpt2:$root/var/corpora/gpt2" \
  --out "$dir/mix.bin" --threads "$threads" "${sources[@]}" >"$dir/prepare.txt" 2>/dev/null
sed 's/^/  /' "$dir/prepare.txt"
wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s}' "$dir/time.txt")
rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$dir/time.txt")
text=$("$py" - "$dir" <<'PY'
import os, sys, pyarrow.parquet as pq
d = sys.argv[1]
n = os.path.getsize(os.path.join(d, "tiny.txt"))
for name in ("wiki", "edu"):
    for f in sorted(os.listdir(os.path.join(d, name, "data"))):
        t = pq.read_table(os.path.join(d, name, "data", f), columns=["text"])
        n += sum(len(s.encode()) for s in t.column("text").to_pylist())
print(n)
PY
)
tokens=$("$py" -c "import json, sys; print(sum(json.load(open(f))['tokens'] for f in sys.argv[1:]))" \
  "$dir/mix.tiny.json" "$dir/mix.wiki.json" "$dir/mix.edu.json")
awk -v w="$wall" -v r="$rss" -v b="$text" -v t="$tokens" -v th="$threads" 'BEGIN {
  printf "prepare: %.2f GB of text, %.0f million tokens, in %.1f s at %d threads: %.2f MB/s, %.2f bytes a token, peak memory %.0f MiB\n", b / 1e9, t / 1e6, w, th, b / 1e6 / w, b / t, r / 1024
  paper = 1e9; pb = paper * b / t
  printf "the paper'"'"'s mixture (300M + 300M + 400M tokens, about %.1f GB of such text) at this speed: %.0f min on %d threads\n", pb / 1e9, pb / (b / w) / 60, th
}'
