// Writes a LAMBADA-format task (JSON Lines, {"text": ...}: predict the passage's last word from
// everything before it) from held-out speeches, for the scaled-down study (deploy/study.sh).
// Each passage is two consecutive sentences of one speech, the second one's final punctuation
// removed; only passages whose last word is alphabetic, 4+ letters and not the first sentence's
// last word are kept, so the target is a content word. Deterministic: the same input gives the
// same file.
//
//   node deploy/make-lambada.js HELDOUT.jsonl OUT.jsonl [MAX_ITEMS]
'use strict';
const fs = require('fs');
const [input, output, maxArg] = process.argv.slice(2);
if (!input || !output) {
  console.error('usage: node deploy/make-lambada.js HELDOUT.jsonl OUT.jsonl [MAX_ITEMS]');
  process.exit(2);
}
const max = Number(maxArg || 400);
const items = [];
for (const line of fs.readFileSync(input, 'utf8').split('\n')) {
  if (!line.trim()) continue;
  const text = JSON.parse(line).text.replace(/\s+/g, ' ');
  const sentences = text.split(/(?<=[.!?])\s+(?=[A-Z])/);
  for (let i = 1; i < sentences.length; i += 2) {
    const body = sentences[i].replace(/[.!?]+$/, '');
    const words = body.split(' ');
    const last = words[words.length - 1];
    const n = sentences[i - 1].split(' ').length + words.length;
    if (!/^[a-z]{4,}$/.test(last) || n < 20 || n > 80) continue;
    items.push({text: sentences[i - 1] + ' ' + body});
  }
}
// Spread the kept items over all speeches rather than taking the first ones.
const step = Math.max(1, items.length / max);
const picked = [];
for (let k = 0; k < items.length && picked.length < max; k += step) picked.push(items[Math.floor(k)]);
fs.writeFileSync(output, picked.map((o) => JSON.stringify(o)).join('\n') + '\n');
console.log(`make-lambada: ${picked.length} passages from ${items.length} candidates -> ${output}`);
