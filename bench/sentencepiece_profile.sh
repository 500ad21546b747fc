#!/usr/bin/env bash
# Where cart's SentencePiece time goes (printed, not asserted): the same text and model through
#   - `cart data prepare --tokenizer sp.model --threads 1`, profiled with perf: the share of each
#     shared object (cart's own code vs Debian's libsentencepiece) and the top symbols;
#   - Debian's own `spm_encode` (the same libsentencepiece, no cart code at all);
#   - the `sentencepiece` package from PyPI (bench/tokenizer-requirements.txt), single-threaded.
# All three encode the same lines (one document per line), so the figures compare the libraries.
#
#   bench/sentencepiece_profile.sh [BUILD_DIR]   (needs perf and spm_encode: apt-get install
#   linux-perf sentencepiece; var/corpora: deploy/fetch-corpora.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
cart=$build/bin/cart
command -v perf >/dev/null || { echo "perf is missing: apt-get install linux-perf" >&2; exit 1; }
command -v spm_encode >/dev/null || { echo "spm_encode is missing: apt-get install sentencepiece" >&2; exit 1; }
[ -s "$root/var/corpora/sotu/sotu.jsonl.gz" ] || "$root/deploy/fetch-corpora.sh" "$root/var/corpora"
venv=$("$root/bench/bench_venv.sh" tokenizer-venv "$root/bench/tokenizer-requirements.txt")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# The speeches three times over, one document per line (inner newlines become spaces).
for _ in 1 2 3; do zcat "$root/var/corpora/sotu/sotu.jsonl.gz"; done >"$dir/docs.jsonl"
"$venv/bin/python" - "$dir/docs.jsonl" "$dir/lines.txt" <<'PY'
import json, sys
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        if line.strip():
            out.write(" ".join(json.loads(line)["text"].split("\n")) + "\n")
PY
mb=$(stat -c %s "$dir/lines.txt" | awk '{printf "%.2f", $1 / 1e6}')
"$cart" data tokenizer train "$dir/docs.jsonl" --vocab 8000 --out "$dir/sp.model" >/dev/null
echo "text: $mb MB, $(wc -l <"$dir/lines.txt") lines; SentencePiece BPE, vocab 8,000, trained here"
echo "libsentencepiece: Debian $(dpkg-query -W -f '${Version}' libsentencepiece0); PyPI sentencepiece $("$venv/bin/python" -c 'import sentencepiece; print(sentencepiece.__version__)')"

median() { sort -g | sed -n 2p; }
timed() {  # COMMAND... -> seconds (median of 3)
  for _ in 1 2 3; do
    local s e
    s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N)
    awk -v s="$s" -v e="$e" 'BEGIN {print e - s}'
  done | median
}
t_cart=$(timed "$cart" data prepare "$dir/lines.txt" --format lines --tokenizer "$dir/sp.model" --out "$dir/o.bin" --threads 1)
t_spm=$(timed spm_encode --model "$dir/sp.model" --output_format id --input "$dir/lines.txt" --output "$dir/spm.ids")
t_py=$("$venv/bin/python" - "$dir/sp.model" "$dir/lines.txt" <<'PY'
import sys, time, sentencepiece
sp = sentencepiece.SentencePieceProcessor(model_file=sys.argv[1])
lines = open(sys.argv[2]).read().splitlines()
times = []
for _ in range(3):
    t = time.perf_counter(); sp.encode(lines, num_threads=1); times.append(time.perf_counter() - t)
print(sorted(times)[1])
PY
)
for row in "cart prepare (Debian lib, 1 thread)|$t_cart" "spm_encode (Debian lib)|$t_spm" "PyPI sentencepiece encode|$t_py"; do
  awk -v name="${row%%|*}" -v t="${row##*|}" -v mb="$mb" 'BEGIN {printf "  %-38s %6.2f s  %6.2f MB/s\n", name, t, mb / t}'
done
awk -v a="$t_cart" -v b="$t_spm" -v c="$t_py" 'BEGIN {printf "  cart / spm_encode: %.2fx the speed; spm_encode / PyPI: %.2fx the speed\n", b / a, c / b}'

echo "perf profile of cart prepare at 1 thread, by shared object (children excluded):"
perf record -q -o "$dir/perf.data" -F 999 -- "$cart" data prepare "$dir/lines.txt" --format lines \
  --tokenizer "$dir/sp.model" --out "$dir/o.bin" --threads 1 >/dev/null 2>&1
perf report -q -i "$dir/perf.data" --no-children --sort dso --percent-limit 0.5 2>/dev/null \
  | grep -v '^ *$' | sed 's/^/  /'
perf report -q -i "$dir/perf.data" --no-children --sort dso 2>/dev/null \
  | awk '/ cart| libcart/ {sub("%", "", $1); s += $1} END {printf "  cart'"'"'s own code (cart, libcart_*): %.2f %%\n", s}'
echo "top symbols:"
perf report -q -i "$dir/perf.data" --no-children --sort dso,symbol --percent-limit 1.5 2>/dev/null \
  | grep -v '^ *$' | cut -c1-150 | sed 's/^/  /'
