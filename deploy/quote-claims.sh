#!/usr/bin/env bash
# Puts the claims table `cart report` generated (REPORT_DIR/claims.md) into docs/measurements.md
# (its `make study` section) between the lines `<!-- claims:begin -->` and `<!-- claims:end -->`,
# verbatim, so the table of verdicts is the study's output and never written by hand.
#
#   deploy/quote-claims.sh [REPORT_DIR]     REPORT_DIR defaults to var/study/report
set -euo pipefail
cd "$(dirname "$0")/.."
table=${1:-var/study/report}/claims.md
if [ ! -s "$table" ]; then
  echo "quote-claims: $table is missing or empty: run make study (or cart report) first" >&2
  exit 1
fi
doc=docs/measurements.md
if ! grep -q '^<!-- claims:begin -->$' "$doc" || ! grep -q '^<!-- claims:end -->$' "$doc"; then
  echo "quote-claims: $doc has no <!-- claims:begin --> / <!-- claims:end --> lines" >&2
  exit 1
fi
awk -v table="$table" '
  /^<!-- claims:begin -->$/ { print; while ((getline line < table) > 0) print line; skip = 1; next }
  /^<!-- claims:end -->$/ { skip = 0 }
  !skip { print }' "$doc" > "$doc.tmp"
mv "$doc.tmp" "$doc"
echo "quote-claims: $doc now quotes $table"
