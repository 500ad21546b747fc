// CART Lab dashboard: one page, four views (#/ sweeps, #/sweep/NAME, #/run/ID, #/workers), all
// read from cartd's JSON API (docs/dashboard.md). Every value from the server is put into the page
// as text (textContent, never innerHTML), so a config value like "<script>" shows as itself.
// The token is kept in localStorage and sent as a bearer header, never as a cookie.
'use strict';

(function () {
  const main = document.getElementById('main');
  const notice = document.getElementById('notice');
  let cleanup = [];  // what the current view must stop when the route changes

  // ---- Small helpers

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = String(v);
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }
  function svg(tag, attrs, ...children) {
    const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'text') el.textContent = String(v); else el.setAttribute(k, String(v));
    }
    for (const c of children.flat()) if (c) el.append(c);
    return el;
  }
  const token = () => localStorage.getItem('cart.token') || '';
  function headers(extra) {
    const out = Object.assign({}, extra || {});
    if (token()) out['Authorization'] = 'Bearer ' + token();
    return out;
  }
  async function api(path, opts) {
    const res = await fetch('/api/v1/' + path, Object.assign({ headers: headers() }, opts || {}));
    let body = null;
    try { body = await res.json(); } catch (e) { body = null; }
    if (!res.ok) {
      const err = new Error((body && body.error) || ('HTTP ' + res.status));
      err.status = res.status;
      throw err;
    }
    return body;
  }
  async function post(path, body) {
    return api(path, {
      method: 'POST',
      headers: headers({ 'Content-Type': 'application/json' }),
      body: JSON.stringify(body || {}),
    });
  }
  function show(message, ok) {
    notice.hidden = !message;
    notice.textContent = message || '';
    notice.className = ok ? 'notice ok' : 'notice';
  }
  function fail(e) {
    if (e && e.status === 401) show('cartd needs a token: ' + e.message + '. Enter a user token above.');
    else show(String(e && e.message ? e.message : e));
  }
  function fmt(v, digits) {
    if (v === null || v === undefined || Number.isNaN(v)) return '-';
    if (typeof v !== 'number') return String(v);
    if (Math.abs(v) >= 1e6) return v.toExponential(2);
    return v.toFixed(digits === undefined ? 4 : digits);
  }
  function fmtTokens(n) {
    if (!n) return '0';
    const units = [[1e12, 'T'], [1e9, 'B'], [1e6, 'M'], [1e3, 'k']];
    for (const [d, u] of units) if (n >= d) return (n / d).toFixed(1) + u;
    return String(n);
  }
  function fmtDuration(s) {
    if (s === null || s === undefined) return '-';
    s = Math.round(s);
    const hh = Math.floor(s / 3600), mm = Math.floor((s % 3600) / 60), ss = s % 60;
    return hh ? `${hh}h ${mm}m` : mm ? `${mm}m ${ss}s` : `${ss}s`;
  }
  function fmtTime(us) {
    return us ? new Date(us / 1000).toLocaleString() : '-';
  }
  function stateChip(state) { return h('span', { class: 'state ' + state, text: state }); }
  function onLeave(fn) { cleanup.push(fn); }
  // Draws a view now and again every `ms` until the route changes.
  async function drawAndRefresh(draw, ms, onError) {
    await draw();
    const timer = setInterval(() => draw().catch(onError || fail), ms);
    onLeave(() => clearInterval(timer));
  }

  // Server-sent events over fetch, so that the bearer header can go with them (EventSource
  // cannot send headers). Calls onEvent(name, data) per event; returns a stop function.
  function follow(path, onEvent) {
    const ctrl = new AbortController();
    (async () => {
      try {
        const res = await fetch('/api/v1/' + path, { headers: headers(), signal: ctrl.signal });
        if (!res.ok) { fail(new Error('live updates: HTTP ' + res.status)); return; }
        const reader = res.body.getReader();
        const dec = new TextDecoder();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true });
          let at;
          while ((at = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, at);
            buf = buf.slice(at + 2);
            let name = 'message', data = '';
            for (const line of block.split('\n')) {
              if (line.startsWith('event: ')) name = line.slice(7);
              else if (line.startsWith('data: ')) data += line.slice(6);
            }
            if (data) onEvent(name, JSON.parse(data));
          }
        }
      } catch (e) {
        if (e.name !== 'AbortError') fail(e);
      }
    })();
    return () => ctrl.abort();
  }

  // ---- Charts (uPlot)

  const palette = ['#2f6fdf', '#d9480f', '#2b8a3e', '#862e9c', '#e67700', '#0b7285', '#c2255c',
                   '#5c940d', '#364fc7', '#a61e4d', '#087f5b', '#495057'];
  function hasUplot() { return typeof window.uPlot === 'function'; }
  function chartBox(title, width) {
    const box = h('div', { class: 'chart' }, h('div', { class: 'chart-title', text: title }));
    box.style.width = (width + 14) + 'px';
    return box;
  }
  // Y-axis labels: on an axis that reaches 10,000, compact (5K, 12.5K, 1.25M) with as many
  // decimals as the tick step needs (up to two; beyond that, in full: 10,020 and 10,040 must not
  // both read 10K); else with at most six significant digits. The axis is as wide as its longest
  // label, so none is cut off.
  function compactFormat(splits, incr) {
    const top = Math.max(0, ...splits.filter((v) => v != null && isFinite(v)).map(Math.abs));
    if (top < 1e4 || !(incr > 0)) return null;
    const step = incr / Math.pow(1000, Math.floor(Math.log10(top) / 3));  // in K, M, B units
    for (let digits = 0; digits <= 2; ++digits) {
      const scaled = step * Math.pow(10, digits);
      if (Math.abs(scaled - Math.round(scaled)) < 1e-6 * Math.max(1, scaled)) {
        return new Intl.NumberFormat('en', { notation: 'compact', maximumFractionDigits: digits });
      }
    }
    return null;
  }
  function yLabels(self, splits, axisIdx, space, incr) {
    const compact = compactFormat(splits, incr);
    return splits.map((v) => (v == null ? '' : compact ? compact.format(v)
      : Number(v.toPrecision(6)).toLocaleString('en', { maximumFractionDigits: 6 })));
  }
  function yAxisSize(self, values) {
    const longest = Math.max(1, ...(values || []).map((v) => String(v).length));
    return 22 + 7 * longest;
  }
  // A line chart of several series sharing one x axis: data = [xs, ys1, ys2, ...].
  function lineChart(el, title, names, data, opts) {
    opts = opts || {};
    const width = opts.width || 430, height = opts.height || 220;
    const box = chartBox(title, width);
    el.append(box);
    if (!hasUplot()) { box.append(h('div', { class: 'muted', text: 'charting library missing (npm ci in dashboards/web)' })); return null; }
    const series = [{ label: 'step' }];
    names.forEach((n, i) => series.push(Object.assign({
      label: n, stroke: (opts.colors && opts.colors[i]) || palette[i % palette.length], width: 1.5,
      points: { show: false }, spanGaps: true,
    }, (opts.series && opts.series[i]) || {})));
    const plot = new window.uPlot({
      width, height, series, bands: opts.bands || [],
      scales: { x: { time: false }, y: opts.log ? { distr: 3 } : {} },
      legend: { show: names.length <= 12 },
      axes: [{ label: opts.xlabel || 'step' }, { values: yLabels, size: yAxisSize }],
    }, data, box);
    return plot;
  }

  // ---- Token bar

  function setupToken() {
    const input = document.getElementById('token-input');
    const state = document.getElementById('token-state');
    const refresh = () => { state.textContent = token() ? 'token set' : 'no token'; };
    document.getElementById('token-form').addEventListener('submit', (e) => {
      e.preventDefault();
      if (input.value) localStorage.setItem('cart.token', input.value.trim());
      input.value = '';
      refresh();
      route();
    });
    document.getElementById('token-forget').addEventListener('click', () => {
      localStorage.removeItem('cart.token');
      refresh();
    });
    refresh();
  }

  // ---- Sweeps

  // Tags and the note of a run or sweep (`path`: "runs/ID" or "sweeps/NAME"), editable with a
  // user token: each change is one POST to PATH/annotate, whose answer redraws the card.
  function annotationCard(path, annotation) {
    const card = h('div', { class: 'card annotation', id: 'annotation' });
    const draw = (a) => {
      const chips = a.tags.map((t) => h('span', { class: 'tag', title: `set by ${t.who}, ${fmtTime(t.at_us)}` }, t.name,
        h('button', { class: 'tag-remove', title: 'remove tag ' + t.name, onclick: () => change({ remove_tags: [t.name] }) }, '×')));
      const tagIn = h('input', { id: 'tag-add', placeholder: 'new tag', size: 14, maxlength: 64 });
      const noteIn = h('textarea', { id: 'note-text', rows: 3, cols: 70, maxlength: 8192, placeholder: 'a note: what this is, why it failed, what to rerun' });
      noteIn.value = a.note.text;
      const who = a.note.who ? `last written by ${a.note.who}, ${fmtTime(a.note.at_us)}` : 'no note yet';
      card.replaceChildren(
        h('div', { class: 'controls' }, h('label', { text: 'tags' }), h('span', { id: 'tags' }, chips.length ? chips : h('span', { class: 'muted', text: 'none' })),
          tagIn, h('button', { id: 'tag-add-button', onclick: () => { const t = tagIn.value.trim(); if (t) change({ add_tags: [t] }); } }, 'Add tag')),
        h('div', {}, h('label', { text: 'note' }), h('span', { class: 'muted', id: 'note-who', text: ' ' + who })),
        noteIn,
        h('div', {}, h('button', { id: 'note-save', onclick: () => change({ note: noteIn.value }) }, 'Save note')));
    };
    const change = async (body) => {
      const out = await act(path + '/annotate', null, body);
      if (out) draw(out);
    };
    draw(annotation);
    return card;
  }

  async function viewSweeps() {
    main.append(h('h1', { text: 'Sweeps' }));
    const holder = h('div', { class: 'card' });
    main.append(holder);
    const draw = async () => {
      const data = await api('sweeps');
      const rows = data.sweeps.slice().reverse().map((s) => {
        const pct = s.runs ? Math.round(100 * s.finished / s.runs) : 0;
        const tok = s.planned_tokens ? Math.round(100 * s.done_tokens / s.planned_tokens) : 0;
        const states = Object.entries(s.states).map(([k, v]) => h('span', {}, stateChip(k), ' ', String(v), ' '));
        return h('tr', {},
          h('td', {}, h('a', { href: '#/sweep/' + encodeURIComponent(s.name), text: s.name }),
            s.cancelled ? h('span', { class: 'muted', text: ' (cancelled)' }) : null),
          h('td', {}, h('span', { class: 'bar' }, Object.assign(h('span'), { style: `width:${pct}%` })), ` ${s.finished}/${s.runs}`),
          h('td', {}, states),
          h('td', { class: 'num', text: `${fmtTokens(s.done_tokens)} / ${fmtTokens(s.planned_tokens)} (${tok}%)` }),
          h('td', { class: 'num', text: s.tokens_per_s ? fmtTokens(Math.round(s.tokens_per_s)) + '/s' : '-' }),
          h('td', {
            class: 'num',
            text: s.expected_finish_us ? `in ${fmtDuration(s.eta_s)} (${fmtTime(s.expected_finish_us)})` : '-',
            title: s.expected_finish_us ? `${s.runs_estimated} of ${s.unfinished} unfinished runs estimated (cartd's placement plan)` : 'no estimate: nothing left, or no live worker fits its runs',
          }),
          h('td', { text: fmtTime(s.created_us) }),
          h('td', { text: (s.tags || []).join(', ') }));
      });
      holder.replaceChildren(h('table', {},
        h('thead', {}, h('tr', {}, ['sweep', 'runs finished', 'by state', 'tokens done / planned', 'tokens/s', 'expected finish', 'created', 'tags'].map((t) => h('th', { text: t })))),
        h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 8, class: 'muted', text: 'No sweeps yet: cart sweep submit FILE' })))));
    };
    await drawAndRefresh(draw, 5000);
  }

  // ---- One sweep

  async function viewSweep(name) {
    const sweep = await api('sweeps/' + encodeURIComponent(name));
    const header = h('div', { class: 'controls' },
      h('h1', { text: 'Sweep ' + sweep.name }),
      h('button', { class: 'danger', id: 'sweep-cancel', onclick: () => act(`sweeps/${encodeURIComponent(name)}/cancel`, 'Cancel every unfinished run of ' + name + '?') }, 'Cancel sweep'),
      h('button', { id: 'sweep-resume', onclick: () => act(`sweeps/${encodeURIComponent(name)}/resume`) }, 'Resume sweep'));
    const states = h('div', { class: 'muted' });
    const drawStates = (s) => states.replaceChildren(...Object.entries(s).map(([k, v]) => h('span', {}, stateChip(k), ' ', String(v), '  ')));
    drawStates(sweep.states);
    main.append(header, states, annotationCard('sweeps/' + encodeURIComponent(name), sweep.annotation));

    const tabs = h('div', { class: 'tabs' });
    const body = h('div');
    main.append(tabs, body);
    const sections = {
      runs: () => sweepRuns(body, sweep),
      live: () => sweepLive(body, sweep, drawStates),
      pivot: () => sweepPivot(body, sweep),
      groups: () => sweepGroups(body, sweep),
      parallel: () => sweepParallel(body, sweep),
      spec: () => body.append(h('pre', { text: sweep.spec })),
    };
    const labels = { runs: 'Runs', live: 'Live', pivot: 'Pivot', groups: 'Groups', parallel: 'Parallel coordinates', spec: 'Sweep file' };
    let stopSection = [];
    const open = (key) => {
      stopSection.forEach((f) => f()); stopSection = [];
      const saved = cleanup; cleanup = [];
      body.replaceChildren();
      [...tabs.children].forEach((b) => b.classList.toggle('on', b.dataset.tab === key));
      Promise.resolve(sections[key]()).catch(fail).finally(() => {});
      stopSection = cleanup; cleanup = saved;
    };
    for (const key of Object.keys(sections)) {
      const b = h('button', { 'data-tab': key, onclick: () => open(key) }, labels[key]);
      tabs.append(b);
    }
    onLeave(() => stopSection.forEach((f) => f()));
    open('runs');
  }

  async function act(path, confirmText, body) {
    if (confirmText && !window.confirm(confirmText)) return null;
    try {
      const out = await post(path, body);
      show('Done: ' + JSON.stringify(out), true);
      return out;
    } catch (e) {
      if (e.status === 401) show('Refused: ' + e.message + ' (enter a user token above)');
      else show('Refused: ' + e.message);
      return null;
    }
  }

  async function sweepRuns(el, sweep) {
    const state = { offset: 0, limit: 50, sort: 'id', order: 'asc', stateFilter: '', param: '' };
    const stateSel = h('select', { id: 'state-filter' }, ['', 'QUEUED', 'BLOCKED', 'LEASED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'].map((s) => h('option', { value: s, text: s || 'any state' })));
    const paramIn = h('input', { id: 'param-filter', placeholder: 'key=value, e.g. d=256', size: 18 });
    const tagIn = h('input', { id: 'tag-filter', placeholder: 'tag (a,b: both)', size: 14 });
    const table = h('div');
    const pager = h('div', { class: 'pager' });
    el.append(h('div', { class: 'controls' }, h('label', { text: 'state' }), stateSel, h('label', { text: 'config' }), paramIn,
      h('label', { text: 'tag' }), tagIn,
      h('button', { id: 'filter-apply', onclick: () => { state.offset = 0; draw().catch(fail); } }, 'Filter')), table, pager);
    stateSel.addEventListener('change', () => { state.stateFilter = stateSel.value; state.offset = 0; draw().catch(fail); });
    const cols = [['name', 'run'], ['state', 'state'], ['step', 'step']]
      .concat(sweep.varying.map((k) => ['param:' + k, k]))
      .concat([['metric:loss', 'loss'], ['metric:rho_max', 'ρ'], ['metric:tokens_per_s', 'tokens/s'], [null, 'worker'], [null, 'tags']]);
    async function draw() {
      const q = new URLSearchParams({ offset: state.offset, limit: state.limit, sort: state.sort, order: state.order });
      if (state.stateFilter) q.set('state', state.stateFilter);
      const p = paramIn.value.trim();
      if (p.includes('=')) q.set('param.' + p.slice(0, p.indexOf('=')).trim(), p.slice(p.indexOf('=') + 1).trim());
      if (tagIn.value.trim()) q.set('tag', tagIn.value.trim());
      const data = await api(`sweeps/${encodeURIComponent(sweep.name)}/runs?${q}`);
      const head = h('tr', {}, cols.map(([key, label]) => {
        const th = h('th', { class: key ? 'sortable' + (state.sort === key ? ' sorted' : '') : '', text: label + (state.sort === key ? (state.order === 'asc' ? ' ▲' : ' ▼') : '') });
        if (key) th.addEventListener('click', () => {
          if (state.sort === key) state.order = state.order === 'asc' ? 'desc' : 'asc'; else { state.sort = key; state.order = 'asc'; }
          draw().catch(fail);
        });
        return th;
      }));
      const rows = data.runs.map((r) => h('tr', { 'data-run': r.id },
        h('td', {}, h('a', { href: '#/run/' + r.id, text: r.name })),
        h('td', {}, stateChip(r.state)),
        h('td', { class: 'num', text: `${r.step}/${r.steps}` }),
        sweep.varying.map((k) => h('td', { text: r.params[k] === undefined ? '' : r.params[k] })),
        h('td', { class: 'num', text: fmt(r.latest.loss) }),
        h('td', { class: 'num', text: fmt(r.latest.rho_max) }),
        h('td', { class: 'num', text: r.latest.tokens_per_s === undefined ? '-' : fmtTokens(Math.round(r.latest.tokens_per_s)) }),
        h('td', { text: r.worker || '' }),
        h('td', { class: 'tags', text: r.tags.join(', ') + (r.has_note ? ' ✎' : ''), title: r.has_note ? 'has a note' : null })));
      table.replaceChildren(h('table', { id: 'runs-table' }, h('thead', {}, head), h('tbody', {}, rows)));
      const last = Math.min(data.total, state.offset + data.runs.length);
      pager.replaceChildren(
        h('button', { disabled: state.offset === 0, onclick: () => { state.offset = Math.max(0, state.offset - state.limit); draw().catch(fail); } }, '‹ prev'),
        h('span', { class: 'muted', text: `${data.total ? state.offset + 1 : 0}–${last} of ${data.total}` }),
        h('button', { disabled: last >= data.total, onclick: () => { state.offset += data.runs.length; draw().catch(fail); } }, 'next ›'));
    }
    await drawAndRefresh(draw, 10000, () => {});
  }

  // Live loss and ρ of the running runs: one stream for the sweep, one line per run.
  function sweepLive(el, sweep, drawStates) {
    const metrics = ['loss', 'rho_max'];
    const runs = new Map();  // id -> {name, data: {metric: Map(step -> value)}}
    const charts = h('div', { class: 'row' });
    const info = h('div', { class: 'muted', text: 'Waiting for running runs…' });
    el.append(info, charts);
    const redraw = () => {
      charts.replaceChildren();
      const ids = [...runs.keys()];
      info.textContent = ids.length ? `${ids.length} running run(s), updated live` : 'No run is running.';
      for (const m of metrics) {
        const steps = new Set();
        for (const r of runs.values()) for (const s of r.data[m].keys()) steps.add(s);
        const xs = [...steps].sort((a, b) => a - b);
        const data = [xs].concat(ids.map((id) => xs.map((s) => { const v = runs.get(id).data[m].get(s); return v === undefined ? null : v; })));
        lineChart(charts, m === 'rho_max' ? 'ρ (max σ(a))' : m, ids.map((id) => runs.get(id).name), data, { width: 560 });
      }
    };
    const stop = follow(`sweeps/${encodeURIComponent(sweep.name)}/live?metrics=${metrics.join(',')}`, (event, data) => {
      if (event !== 'update') return;
      drawStates(data.states);
      const live = new Set(data.runs.map((r) => r.id));
      for (const id of [...runs.keys()]) if (!live.has(id)) runs.delete(id);
      for (const r of data.runs) {
        if (!runs.has(r.id)) runs.set(r.id, { name: r.name, data: Object.fromEntries(metrics.map((m) => [m, new Map()])) });
        for (const m of metrics) {
          const s = r.series[m];
          if (!s) continue;
          s.step.forEach((st, i) => runs.get(r.id).data[m].set(st, s.mean[i]));
        }
      }
      redraw();
    });
    onLeave(stop);
  }

  function keySelect(id, keys, value) {
    return h('select', { id }, keys.map((k) => h('option', { value: k, text: k, selected: k === value })));
  }

  async function sweepPivot(el, sweep) {
    const keys = sweep.varying.filter((k) => k !== 'seed');
    const metricSel = keySelect('pivot-metric', sweep.metrics.filter((m) => !/^(h_norm|rel_update)\//.test(m)), sweep.metrics.includes('rho_max') ? 'rho_max' : sweep.metrics[0]);
    const rowSel = keySelect('pivot-rows', keys, keys.includes('d') ? 'd' : keys[0]);
    const colSel = keySelect('pivot-cols', keys, keys.includes('R') ? 'R' : keys[1] || keys[0]);
    const valueSel = h('select', { id: 'pivot-value' }, h('option', { value: 'latest', text: 'latest' }), h('option', { value: 'final', text: 'final (finished runs)' }));
    const out = h('div');
    el.append(h('div', { class: 'controls' }, h('label', { text: 'metric' }), metricSel, h('label', { text: 'rows' }), rowSel,
      h('label', { text: 'columns' }), colSel, valueSel), out);
    if (keys.length === 0) { out.append(h('p', { class: 'muted', text: 'Every run of this sweep has the same config: nothing to pivot.' })); return; }
    const draw = async () => {
      const q = new URLSearchParams({ metric: metricSel.value, rows: rowSel.value, cols: colSel.value, value: valueSel.value });
      let t;
      try { t = await api(`sweeps/${encodeURIComponent(sweep.name)}/pivot?${q}`); } catch (e) { out.replaceChildren(h('p', { class: 'muted', text: e.message })); return; }
      const vals = t.cells.flat().filter((c) => c.mean !== null).map((c) => c.mean);
      const lo = Math.min(...vals), hi = Math.max(...vals);
      const color = (v) => {
        if (v === null || !vals.length) return '';
        const f = hi > lo ? (v - lo) / (hi - lo) : 0.5;
        return `background: hsl(${220 - 190 * f}, 70%, ${88 - 30 * f}%)`;
      };
      out.replaceChildren(h('table', { class: 'heat', id: 'pivot-table' },
        h('thead', {}, h('tr', {}, h('th', { text: `${t.rows} \\ ${t.cols}` }), t.col_values.map((c) => h('th', { text: c })))),
        h('tbody', {}, t.row_values.map((r, i) => h('tr', {}, h('th', { text: r }), t.cells[i].map((c) => {
          const td = h('td', { class: c.n ? '' : 'empty', text: c.n ? fmt(c.mean) + (c.std !== null ? ' ± ' + fmt(c.std, 3) : '') : '–', title: `n = ${c.n}` });
          if (c.n) td.setAttribute('style', color(c.mean));
          return td;
        }))))),
        h('p', { class: 'muted', text: `${t.metric} (${t.value}), mean ± sample std over the runs in each cell; colour from ${fmt(lo)} to ${fmt(hi)}.` }));
    };
    [metricSel, rowSel, colSel, valueSel].forEach((s) => s.addEventListener('change', () => draw().catch(fail)));
    await draw();
  }

  async function sweepGroups(el, sweep) {
    const keys = sweep.varying.filter((k) => k !== 'seed');
    const bySel = keySelect('groups-by', keys, keys.includes('R') ? 'R' : keys[0]);
    const metricSel = keySelect('groups-metric', sweep.metrics.filter((m) => !/^(h_norm|rel_update)\//.test(m)), sweep.metrics.includes('loss') ? 'loss' : sweep.metrics[0]);
    const out = h('div');
    el.append(h('div', { class: 'controls' }, h('label', { text: 'group by' }), bySel, h('label', { text: 'metric' }), metricSel), out);
    if (!keys.length) { out.append(h('p', { class: 'muted', text: 'No config key varies.' })); return; }
    const draw = async () => {
      const q = new URLSearchParams({ by: bySel.value, metric: metricSel.value, points: 120 });
      const g = await api(`sweeps/${encodeURIComponent(sweep.name)}/groups?${q}`);
      out.replaceChildren();
      if (!g.groups.length) { out.append(h('p', { class: 'muted', text: 'No run has logged ' + g.metric + ' yet.' })); return; }
      // One x axis for every group: the union of their grid steps.
      const xs = [...new Set(g.groups.flatMap((gr) => gr.step))].sort((a, b) => a - b);
      const data = [xs], names = [], series = [], bands = [], colors = [];
      g.groups.forEach((gr, i) => {
        const at = new Map(gr.step.map((s, j) => [s, j]));
        const pick = (arr, f) => xs.map((s) => { const j = at.get(s); return j === undefined || arr[j] === null ? null : f(j); });
        const c = palette[i % palette.length];
        const base = data.length;
        data.push(pick(gr.mean, (j) => gr.mean[j] - (gr.std[j] || 0)));
        data.push(pick(gr.mean, (j) => gr.mean[j] + (gr.std[j] || 0)));
        data.push(pick(gr.mean, (j) => gr.mean[j]));
        names.push(`${g.by}=${gr.value} −σ`, `${g.by}=${gr.value} +σ`, `${g.by}=${gr.value} (${gr.runs} runs)`);
        series.push({ width: 0, stroke: c }, { width: 0, stroke: c }, { width: 2 });
        colors.push(c, c, c);
        bands.push({ series: [base + 1, base], fill: c + '33' });
      });
      lineChart(out, `${g.metric} by ${g.by}: mean ± std over runs`, names, data, { width: 900, height: 320, series, bands, colors });
      out.append(h('p', { class: 'muted', text: `${g.runs} runs${g.truncated ? ' (the first ones only: narrow with a filter)' : ''}.` }));
    };
    [bySel, metricSel].forEach((s) => s.addEventListener('change', () => draw().catch(fail)));
    await draw();
  }

  // Parallel coordinates: one vertical axis per varying key and one for the metric; one line per run.
  async function sweepParallel(el, sweep) {
    const metricSel = keySelect('parallel-metric', sweep.metrics.filter((m) => !/^(h_norm|rel_update)\//.test(m)), sweep.metrics.includes('loss') ? 'loss' : sweep.metrics[0]);
    const out = h('div');
    el.append(h('div', { class: 'controls' }, h('label', { text: 'metric' }), metricSel), out);
    const draw = async () => {
      const m = metricSel.value;
      const data = await api(`sweeps/${encodeURIComponent(sweep.name)}/runs?limit=2000&metrics=${encodeURIComponent(m)}`);
      const runs = data.runs.filter((r) => r.latest[m] !== undefined && r.latest[m] !== null);
      const axes = sweep.varying.concat([m]);
      const W = Math.max(500, 140 * axes.length), H = 340, top = 24, bottom = 300;
      const scales = axes.map((a, i) => {
        const vals = runs.map((r) => (i === axes.length - 1 ? r.latest[m] : r.params[a]));
        const nums = vals.every((v) => v !== undefined && v !== '' && !isNaN(Number(v)));
        if (nums) {
          const xs = vals.map(Number); const lo = Math.min(...xs), hi = Math.max(...xs);
          return { pos: (v) => bottom - (hi > lo ? (Number(v) - lo) / (hi - lo) : 0.5) * (bottom - top), ticks: [lo, hi].map((v) => [v, fmt(v, 3)]) };
        }
        const cats = [...new Set(vals.map(String))].sort();
        return { pos: (v) => bottom - (cats.length > 1 ? cats.indexOf(String(v)) / (cats.length - 1) : 0.5) * (bottom - top), ticks: cats.map((c) => [c, c]) };
      });
      const x = (i) => 40 + i * (W - 80) / Math.max(1, axes.length - 1);
      const mvals = runs.map((r) => r.latest[m]);
      const mlo = Math.min(...mvals), mhi = Math.max(...mvals);
      const root = svg('svg', { width: W, height: H, id: 'parallel-svg' });
      for (const r of runs) {
        const pts = axes.map((a, i) => `${x(i)},${scales[i].pos(i === axes.length - 1 ? r.latest[m] : r.params[a])}`).join(' ');
        const f = mhi > mlo ? (r.latest[m] - mlo) / (mhi - mlo) : 0.5;
        root.append(svg('polyline', { points: pts, fill: 'none', stroke: `hsl(${220 - 200 * f}, 75%, 45%)`, 'stroke-opacity': 0.6 },
          svg('title', { text: `${r.name}: ${m} = ${fmt(r.latest[m])}` })));
      }
      axes.forEach((a, i) => {
        root.append(svg('line', { x1: x(i), x2: x(i), y1: top, y2: bottom, stroke: '#555' }));
        root.append(svg('text', { x: x(i), y: bottom + 22, 'text-anchor': 'middle', text: a }));
        for (const [v, label] of scales[i].ticks) root.append(svg('text', { x: x(i) + 4, y: scales[i].pos(v) + 4, text: label }));
      });
      out.replaceChildren(root, h('p', { class: 'muted', text: `${runs.length} runs with ${m} (latest value); colour from low (blue) to high (red).` }));
    };
    metricSel.addEventListener('change', () => draw().catch(fail));
    await draw();
  }

  // ---- One run

  async function viewRun(id) {
    const run = await api('runs/' + id);
    const stateEl = h('span', {}, stateChip(run.state));
    const stepEl = h('span', { text: `${run.step}/${run.steps}` });
    const extendIn = h('input', { id: 'extend-steps', type: 'number', min: run.steps + 1, placeholder: 'total steps', size: 9 });
    // The learning rate after the last step: cartd refuses a jump of more than 2x unless told which.
    const scheduleSel = h('select', { id: 'extend-schedule', title: 'learning rate after the last step' },
      h('option', { value: '', text: 'schedule: ask' }), h('option', { value: 'hold', text: 'hold the final rate' }),
      h('option', { value: 'stretch', text: 'stretch the cosine (warm restart)' }));
    main.append(
      h('div', { class: 'controls' },
        h('h1', { text: run.name }), stateEl,
        h('button', { class: 'danger', id: 'run-cancel', onclick: async () => { const r = await act(`runs/${id}/cancel`, null, { reason: 'cancelled from the dashboard' }); if (r) stateEl.replaceChildren(stateChip(r.state)); } }, 'Cancel'),
        h('button', { id: 'run-resume', onclick: async () => { const r = await act(`runs/${id}/resume`); if (r) stateEl.replaceChildren(stateChip(r.state)); } }, 'Resume'),
        extendIn, scheduleSel,
        h('button', { id: 'run-extend', onclick: async () => {
          const r = await act(`runs/${id}/extend`, null, { total_steps: Number(extendIn.value), schedule: scheduleSel.value });
          if (!r) return;
          stateEl.replaceChildren(stateChip(r.state));
          const x = r.extension;
          show(`Extended to ${r.steps} steps, schedule ${x.schedule}: learning rate ${x.lr_before.toExponential(2)} at step ${x.from_step} → ${x.lr_after.toExponential(2)} at step ${x.from_step + 1}`, true);
        } }, 'Extend')),
      h('div', { class: 'card' }, h('dl', { class: 'kv' },
        h('dt', { text: 'sweep' }), h('dd', {}, h('a', { href: '#/sweep/' + encodeURIComponent(run.sweep), text: run.sweep })),
        h('dt', { text: 'step' }), h('dd', {}, stepEl),
        h('dt', { text: 'kind' }), h('dd', { text: run.kind }),
        h('dt', { text: 'worker' }), h('dd', { text: run.worker || '-' }),
        h('dt', { text: 'attempt' }), h('dd', { text: `${run.attempt} of at most ${run.max_attempts}` }),
        h('dt', { text: 'parameters' }), h('dd', { text: `${fmtTokens(run.stored_params)} stored, ${fmtTokens(run.effective_params)} effective` }),
        run.waiting_reason ? [h('dt', { text: 'waiting' }), h('dd', { text: run.waiting_reason })] : null,
        run.diverged ? [h('dt', { text: 'diverged' }), h('dd', { id: 'run-diverged', text: `loss ${run.diverged.loss} at step ${run.diverged.step}: not retried; resume with a change (cart runs resume ${run.id} --set lr=…)` })] : null)),
      annotationCard('runs/' + id, run.annotation));

    // Every metric series, downsampled by cartd into min/max buckets; live points appended.
    const names = run.summaries.map((s) => s.name);
    const plain = names.filter((n) => !/^(h_norm|rel_update)\//.test(n));
    const loops = (prefix) => names.filter((n) => n.startsWith(prefix)).sort((a, b) => Number(a.split('/')[1]) - Number(b.split('/')[1]));
    const charts = h('div', { class: 'row', id: 'run-charts' });
    main.append(h('h2', { text: 'Metrics' }), charts);
    const series = {};  // name -> {step:[], mean:[], min:[], max:[]}
    await Promise.all(names.map(async (n) => {
      series[n] = await api(`runs/${id}/series?metric=${encodeURIComponent(n)}&points=600`);
    }));
    const plots = {};
    const order = ['loss', 'rho_max', 'lr', 'grad_norm', 'tokens_per_s'];
    plain.sort((a, b) => (order.indexOf(a) + 1 || 99) - (order.indexOf(b) + 1 || 99) || a.localeCompare(b));
    const single = (n) => [series[n].step, series[n].min, series[n].max, series[n].mean];
    for (const n of plain) {
      plots[n] = lineChart(charts, n + (series[n].points > series[n].step.length ? `  (${series[n].points} points in ${series[n].step.length} buckets; band = min…max)` : ''),
        ['min', 'max', n], single(n), { series: [{ width: 0, stroke: '#9ab' }, { width: 0, stroke: '#9ab' }, { width: 1.5 }], bands: [{ series: [2, 1], fill: '#2f6fdf22' }], colors: ['#9ab', '#9ab', '#2f6fdf'] });
      if (plots[n]) plots[n].root.dataset.metric = n;
    }
    const loopData = (ns) => {
      const xs = ns.length ? series[ns[0]].step : [];
      return [xs].concat(ns.map((n) => { const m = new Map(series[n].step.map((s, i) => [s, series[n].mean[i]])); return xs.map((s) => (m.has(s) ? m.get(s) : null)); }));
    };
    for (const [prefix, title] of [['h_norm/', '‖h_r‖ per loop r'], ['rel_update/', 'relative update per loop r']]) {
      const ns = loops(prefix);
      if (ns.length) plots[prefix] = { ns, plot: lineChart(charts, title, ns.map((n) => 'r=' + n.split('/')[1]), loopData(ns), { width: 460 }) };
    }

    const details = h('div');
    main.append(details);
    const tableOf = (heads, rows) => h('table', {}, h('thead', {}, h('tr', {}, heads.map((t) => h('th', { text: t })))), h('tbody', {}, rows));
    details.append(
      h('h2', { text: 'Attempts' }),
      tableOf(['attempt', 'worker', 'leased', 'started', 'ended', 'outcome', 'reason'], run.attempts.map((a) => h('tr', {},
        h('td', { text: a.attempt }), h('td', { text: a.worker }), h('td', { text: fmtTime(a.leased_us) }), h('td', { text: fmtTime(a.started_us) }),
        h('td', { text: fmtTime(a.ended_us) }), h('td', { text: a.outcome || 'holds lease' }), h('td', { text: a.reason })))),
      h('h2', { text: 'Events' }),
      tableOf(['time', 'from', 'to', 'who', 'why'], run.events.map((e) => h('tr', {},
        h('td', { text: fmtTime(e.at_us) }), h('td', { text: e.from }), h('td', { text: e.to }), h('td', { text: e.who }), h('td', { text: e.why })))),
      h('h2', { text: 'Data' }),
      tableOf(['role', 'file', 'sha256', 'size', 'tokens', 'tokenizer', 'recorded by'], run.data.map((d) => h('tr', { class: 'data-file' },
        h('td', { text: d.role }), h('td', { text: d.path }),
        d.sha256 === null
          ? h('td', { colspan: 5, text: 'not recorded yet: the first worker that opens it records it' })
          : [h('td', { title: d.sha256, text: d.sha256.slice(0, 16) + '…' }), h('td', { class: 'num', text: fmtTokens(d.size_bytes) + 'B' }),
            h('td', { class: 'num', text: d.tokens >= 0 ? fmtTokens(d.tokens) : '-' }), h('td', { text: d.tokenizer || '-' }),
            h('td', { text: `${d.recorded_by}, ${fmtTime(d.recorded_us)}` })]))),
      h('h2', { text: 'Checkpoints' }),
      tableOf(['step', 'attempt', 'size', 'sha256', 'created'], run.checkpoints.map((c) => h('tr', {},
        h('td', { text: c.step }), h('td', { text: c.attempt }), h('td', { class: 'num', text: fmtTokens(c.size_bytes) + 'B' }),
        h('td', { text: c.sha256.slice(0, 16) + '…' }), h('td', { text: fmtTime(c.created_us) })))));
    const logEl = h('pre', { class: 'log', id: 'run-log' });
    details.append(h('h2', { text: 'Worker log (follows live)' }), logEl, h('h2', { text: 'Resolved config' }), h('pre', { id: 'run-config', text: run.config_yaml }));
    let logAfter = 0;
    const addLog = (lines) => {
      for (const l of lines) { logEl.append(document.createTextNode(`[${fmtTime(l.at_us)}] #${l.attempt} ${l.text}\n`)); logAfter = Math.max(logAfter, l.id); }
      logEl.scrollTop = logEl.scrollHeight;
    };
    addLog((await api(`runs/${id}/log?limit=1000`)).lines);

    // Live: new points and log lines until the run finishes.
    let after = 0;
    for (const n of names) { const s = series[n].step; if (s.length) after = Math.max(after, s[s.length - 1]); }
    const apply = (data) => {
      stateEl.replaceChildren(stateChip(data.state));
      stepEl.textContent = `${Math.max(data.step, run.step)}/${run.steps}`;
      for (const [n, s] of Object.entries(data.series)) {
        if (!series[n]) continue;  // a metric that appeared after the page loaded: shown on reload
        const t = series[n];
        s.step.forEach((st, i) => { t.step.push(st); t.mean.push(s.mean[i]); t.min.push(s.min[i]); t.max.push(s.max[i]); });
        if (plots[n] && plots[n].setData) plots[n].setData(single(n));
      }
      for (const prefix of ['h_norm/', 'rel_update/']) if (plots[prefix] && plots[prefix].plot) plots[prefix].plot.setData(loopData(plots[prefix].ns));
      addLog(data.log);
    };
    // How many points a chart holds (the browser test watches it grow).
    window.cartDashboard = { points: (metric) => (series[metric] ? series[metric].step.length : 0) };
    const stop = follow(`runs/${id}/live?after=${after}&log_after=${logAfter}`, (event, data) => {
      if (event === 'update' || event === 'end') apply(data);
    });
    onLeave(stop);
  }

  // ---- Workers

  // A small line of a device's recent readings (oldest left), scaled to [lo, hi]; nulls are
  // gaps. The latest value is printed beside it by the caller.
  function sparkline(values, lo, hi, cls) {
    const w = 90, hgt = 22;
    const pts = values.map((v, i) => (v === null || v === undefined ? null
      : [values.length > 1 ? (i * w) / (values.length - 1) : w, hgt - 1 - ((Math.min(Math.max(v, lo), hi) - lo) / (hi - lo || 1)) * (hgt - 2)]));
    const runs = [];
    let cur = [];
    for (const p of pts) {
      if (p) cur.push(p.map((x) => x.toFixed(1)).join(','));
      else if (cur.length) { runs.push(cur); cur = []; }
    }
    if (cur.length) runs.push(cur);
    return svg('svg', { class: 'spark ' + (cls || ''), width: w, height: hgt, viewBox: `0 0 ${w} ${hgt}` },
      runs.map((r) => svg('polyline', { points: r.length === 1 ? `${r[0]} ${r[0]}` : r.join(' ') })));
  }
  function deviceCell(values, lo, hi, text, cls) {
    const known = values.filter((v) => v !== null && v !== undefined);
    if (!known.length) return h('td', { class: 'muted', text: '-' });
    return h('td', { class: 'spark-cell' }, sparkline(values, lo, hi, cls), h('span', { class: 'num', text }));
  }

  async function viewWorkers() {
    main.append(h('h1', { text: 'Workers' }));
    const holder = h('div', { class: 'card' });
    main.append(holder);
    const draw = async () => {
      const data = await api('workers');
      const gib = (b) => (b / 2 ** 30).toFixed(1);
      holder.replaceChildren(h('table', { id: 'workers-table' },
        h('thead', {}, h('tr', {}, ['worker', 'state', 'device', 'utilisation', 'memory used', 'temperature', 'power', 'current run', 'MFU', 'idle while queued', 'last heartbeat', 'host'].map((t) => h('th', { text: t })))),
        h('tbody', {}, data.workers.length ? data.workers.map((w) => {
          const d = w.device || { utilization: [], memory_used_bytes: [], temperature_c: [], power_w: [] };
          const last = w.latest;
          const total = last ? last.memory_total_bytes : w.memory_bytes;
          return h('tr', { 'data-worker': w.id },
            h('td', { text: w.id }),
            h('td', {}, h('span', { class: 'state ' + (w.state === 'busy' ? 'RUNNING' : w.state === 'lost' ? 'FAILED' : ''), text: w.state }),
              w.idle_while_queued ? h('span', { class: 'state QUEUED', title: 'holds no run while runs are queued', text: 'idle, work waits' }) : null),
            h('td', { text: `${w.device_kind} ${w.device_name}` }),
            deviceCell(d.utilization, 0, 1, last ? `${Math.round(100 * last.utilization)} %` : '-', 'util'),
            deviceCell(d.memory_used_bytes, 0, total, last ? `${gib(last.memory_used_bytes)} / ${gib(total)} GiB` : '-', 'mem'),
            deviceCell(d.temperature_c, 20, 100, last && last.temperature_c !== null ? `${Math.round(last.temperature_c)} °C` : '-', 'temp'),
            deviceCell(d.power_w, 0, Math.max(50, ...d.power_w.filter((v) => v !== null)), last && last.power_w !== null ? `${Math.round(last.power_w)} W` : '-', 'power'),
            h('td', {}, w.run_id ? h('a', { href: '#/run/' + w.run_id, text: w.run_name || 'run ' + w.run_id }) : '-'),
            h('td', { class: 'num mfu', text: w.run_mfu !== null && w.run_mfu !== undefined ? (100 * w.run_mfu).toFixed(1) + ' %' : '-' }),
            h('td', { class: 'num', text: w.idle_while_queued_hours.toFixed(2) + ' h' }),
            h('td', { text: fmtTime(w.last_seen_us) }), h('td', { text: w.hostname }));
        }) : h('tr', {}, h('td', { colspan: 12, class: 'muted', text: 'No worker has registered.' })))));
    };
    await drawAndRefresh(draw, 5000);
  }

  // ---- Routing

  async function route() {
    cleanup.forEach((f) => f());
    cleanup = [];
    show('');
    main.replaceChildren();
    const hash = location.hash.replace(/^#/, '') || '/';
    const parts = hash.split('/').filter(Boolean).map(decodeURIComponent);
    document.querySelectorAll('[data-nav]').forEach((a) => a.classList.toggle('active', (parts[0] || 'sweeps') === a.dataset.nav));
    try {
      if (parts[0] === 'sweep' && parts[1]) await viewSweep(parts[1]);
      else if (parts[0] === 'run' && parts[1]) await viewRun(parts[1]);
      else if (parts[0] === 'workers') await viewWorkers();
      else await viewSweeps();
      document.body.dataset.ready = hash;
    } catch (e) {
      fail(e);
      document.body.dataset.ready = hash;
    }
  }

  // `cart up` prints the address with #token=…: keep the token, drop it from the address bar.
  if (location.hash.startsWith('#token=')) {
    localStorage.setItem('cart.token', decodeURIComponent(location.hash.slice(7)));
    history.replaceState(null, '', location.pathname + '#/');
  }
  setupToken();
  window.addEventListener('hashchange', route);
  route();
})();
