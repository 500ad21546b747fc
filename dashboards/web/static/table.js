// Tables and the selects that drive them.
import {h} from './dom.js';

// A table with one header row (`heads`, plain text) and the given body rows.
export function table(heads, rows, attrs) {
  return h(
      'table', attrs || {}, h('thead', {}, h('tr', {}, heads.map((t) => h('th', {text: t})))),
      h('tbody', {}, rows));
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
