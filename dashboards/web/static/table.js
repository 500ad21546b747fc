// Tables and the selects that drive them.
import {h} from './dom.js';

// A table with one header row (`heads`: plain text, or {text, title} for a header that explains
// itself on hover) and the given body rows.
export function table(heads, rows, attrs) {
  const th = (t) =>
      typeof t === 'string' ? h('th', {text: t}) : h('th', {text: t.text, title: t.title});
  return h('table', attrs || {}, h('thead', {}, h('tr', {}, heads.map(th))), h('tbody', {}, rows));
}

// A body row of one cell across the table, for "nothing here yet".
export function emptyRow(columns, text) {
  return h('tr', {}, h('td', {colspan: columns, class: 'muted', text}));
}

// A select of `keys` with `value` chosen.
export function keySelect(id, keys, value) {
  return h(
      'select', {id}, keys.map((k) => h('option', {value: k, text: k, selected: k === value})));
}
