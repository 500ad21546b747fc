// Building the page: every value from the server goes in as text (textContent, never
// innerHTML), so a config value like "<script>" shows as itself.

// An element with attributes (`class`, `text`, `onclick`-style listeners, the rest as
// attributes; null, undefined and false are left out) and children (nodes or text).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class')
      el.className = v;
    else if (k === 'text')
      el.textContent = String(v);
    else if (k.startsWith('on'))
      el.addEventListener(k.slice(2), v);
    else
      el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// The same for SVG elements (no listeners).
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'text')
      el.textContent = String(v);
    else
      el.setAttribute(k, String(v));
  }
  for (const c of children.flat())
    if (c) el.append(c);
  return el;
}

// A run's state as a coloured chip (the colours are in style.css, one per state).
export function stateChip(state) {
  return h('span', {class: 'state ' + state, text: state});
}
