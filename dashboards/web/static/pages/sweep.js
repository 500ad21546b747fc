// #/sweep/NAME : one sweep's runs (filtered, sorted, paged), its live curves, a pivot table,
// curves grouped by a config key, parallel coordinates and the sweep file, one tab each.
import {annotationCard} from '../annotation.js';
import {act, api, follow} from '../api.js';
import {lineChart, palette} from '../charts.js';
import {h, stateChip, svg} from '../dom.js';
import {fmt, fmtTokens} from '../format.js';
import {fail} from '../notice.js';
import {keySelect, table} from '../table.js';
import {drawAndRefresh} from '../view.js';

import {budgetText} from './sweeps.js';

const runStates =
    ['', 'QUEUED', 'BLOCKED', 'LEASED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'];

// The metrics a chart or table offers: not the per-loop ones (h_norm/r, rel_update/r).
const plainMetrics = (sweep) => sweep.metrics.filter((m) => !/^(h_norm|rel_update)\//.test(m));
const preferred = (list, name, fallback) => (list.includes(name) ? name : fallback);

async function sweepRuns(el, sweep, scope) {
  const state = {offset: 0, limit: 50, sort: 'id', order: 'asc', stateFilter: ''};
  const stateSel =
      h('select', {id: 'state-filter'},
        runStates.map((s) => h('option', {value: s, text: s || 'any state'})));
  const paramIn = h('input', {id: 'param-filter', placeholder: 'key=value, e.g. d=256', size: 18});
  const tagIn = h('input', {id: 'tag-filter', placeholder: 'tag (a,b: both)', size: 14});
  const holder = h('div');
  const pager = h('div', {class: 'pager'});
  const redraw = () => draw().catch(fail);
  const applyFilter = () => {
    state.offset = 0;
    redraw();
  };
  el.append(
      h('div', {class: 'controls'}, h('label', {text: 'state'}), stateSel,
        h('label', {text: 'config'}), paramIn, h('label', {text: 'tag'}), tagIn,
        h('button', {id: 'filter-apply', onclick: applyFilter}, 'Filter')),
      holder, pager);
  stateSel.addEventListener('change', () => {
    state.stateFilter = stateSel.value;
    applyFilter();
  });
  const cols = [['name', 'run'], ['state', 'state'], ['step', 'step']]
                   .concat(sweep.varying.map((k) => ['param:' + k, k]))
                   .concat([
                     ['metric:loss', 'loss'],
                     ['metric:rho_max', 'ρ'],
                     ['metric:tokens_per_s', 'tokens/s'],
                     [null, 'worker'],
                     [null, 'tags'],
                   ]);
  const sortBy = (key) => {
    if (state.sort === key) {
      state.order = state.order === 'asc' ? 'desc' : 'asc';
    } else {
      state.sort = key;
      state.order = 'asc';
    }
    redraw();
  };
  const headCell = ([key, label]) => {
    const sorted = state.sort === key;
    const arrow = sorted ? (state.order === 'asc' ? ' ▲' : ' ▼') : '';
    const th =
        h('th', {class: key ? 'sortable' + (sorted ? ' sorted' : '') : '', text: label + arrow});
    if (key) th.addEventListener('click', () => sortBy(key));
    return th;
  };
  const runRow = (r) =>
      h('tr', {'data-run': r.id}, h('td', {}, h('a', {href: '#/run/' + r.id, text: r.name})),
        h('td', {}, stateChip(r.state),
          // Its attempts trained on more than one card model (docs/architecture.md "Device
          // classes"): its results mix them.
          (r.device_classes || []).length > 1 ?
              [
                ' ', h('span', {
                  class: 'state FAILED',
                  title: r.device_classes.join(', then '),
                  text: 'spans classes'
                })
              ] :
              null),
        h('td', {class: 'num', text: `${r.step}/${r.steps}`}),
        sweep.varying.map((k) => h('td', {text: r.params[k] === undefined ? '' : r.params[k]})),
        h('td', {class: 'num', text: fmt(r.latest.loss)}),
        h('td', {class: 'num', text: fmt(r.latest.rho_max)}), h('td', {
          class: 'num',
          text: r.latest.tokens_per_s === undefined ? '-' :
                                                      fmtTokens(Math.round(r.latest.tokens_per_s)),
        }),
        h('td', {text: r.worker || ''}), h('td', {
          class: 'tags',
          text: r.tags.join(', ') + (r.has_note ? ' ✎' : ''),
          title: r.has_note ? 'has a note' : null,
        }));
  async function draw() {
    const q = new URLSearchParams(
        {offset: state.offset, limit: state.limit, sort: state.sort, order: state.order});
    if (state.stateFilter) q.set('state', state.stateFilter);
    const p = paramIn.value.trim();
    if (p.includes('=')) {
      q.set('param.' + p.slice(0, p.indexOf('=')).trim(), p.slice(p.indexOf('=') + 1).trim());
    }
    if (tagIn.value.trim()) q.set('tag', tagIn.value.trim());
    const data = await api(`sweeps/${encodeURIComponent(sweep.name)}/runs?${q}`);
    holder.replaceChildren(
        h('table', {id: 'runs-table'}, h('thead', {}, h('tr', {}, cols.map(headCell))),
          h('tbody', {}, data.runs.map(runRow))));
    const last = Math.min(data.total, state.offset + data.runs.length);
    const prev = () => {
      state.offset = Math.max(0, state.offset - state.limit);
      redraw();
    };
    const next = () => {
      state.offset += data.runs.length;
      redraw();
    };
    pager.replaceChildren(
        h('button', {disabled: state.offset === 0, onclick: prev}, '‹ prev'),
        h('span',
          {class: 'muted', text: `${data.total ? state.offset + 1 : 0}–${last} of ${data.total}`}),
        h('button', {disabled: last >= data.total, onclick: next}, 'next ›'));
  }
  await drawAndRefresh(scope, draw, 10000, () => {});
}

// Live loss and ρ of the running runs: one stream for the sweep, one line per run.
function sweepLive(el, sweep, scope, drawStates) {
  const metrics = ['loss', 'rho_max'];
  const runs = new Map();  // id -> {name, data: {metric: Map(step -> value)}}
  const charts = h('div', {class: 'row'});
  const info = h('div', {class: 'muted', text: 'Waiting for running runs…'});
  el.append(info, charts);
  const redraw = () => {
    charts.replaceChildren();
    const ids = [...runs.keys()];
    info.textContent =
        ids.length ? `${ids.length} running run(s), updated live` : 'No run is running.';
    for (const m of metrics) {
      const steps = new Set();
      for (const r of runs.values()) {
        for (const s of r.data[m].keys()) steps.add(s);
      }
      const xs = [...steps].sort((a, b) => a - b);
      const at = (id, s) => {
        const v = runs.get(id).data[m].get(s);
        return v === undefined ? null : v;
      };
      const data = [xs].concat(ids.map((id) => xs.map((s) => at(id, s))));
      lineChart(
          charts, m === 'rho_max' ? 'ρ (max σ(a))' : m, ids.map((id) => runs.get(id).name), data,
          {width: 560});
    }
  };
  const path = `sweeps/${encodeURIComponent(sweep.name)}/live?metrics=${metrics.join(',')}`;
  const stop = follow(path, (event, data) => {
    if (event !== 'update') return;
    drawStates(data.states);
    const live = new Set(data.runs.map((r) => r.id));
    for (const id of [...runs.keys()]) {
      if (!live.has(id)) runs.delete(id);
    }
    for (const r of data.runs) {
      if (!runs.has(r.id)) {
        runs.set(
            r.id, {name: r.name, data: Object.fromEntries(metrics.map((m) => [m, new Map()]))});
      }
      for (const m of metrics) {
        const s = r.series[m];
        if (!s) continue;
        s.step.forEach((st, i) => runs.get(r.id).data[m].set(st, s.mean[i]));
      }
    }
    redraw();
  });
  scope.onLeave(stop);
}

async function sweepPivot(el, sweep) {
  const keys = sweep.varying.filter((k) => k !== 'seed');
  const metrics = plainMetrics(sweep);
  const metricSel =
      keySelect('pivot-metric', metrics, preferred(sweep.metrics, 'rho_max', sweep.metrics[0]));
  // Rows d and columns R (the paper's tables) where the sweep varies them, else two other keys.
  const row = preferred(keys, 'd', keys.find((k) => k !== 'R') || keys[0]);
  const col = keys.includes('R') && row !== 'R' ? 'R' : keys.find((k) => k !== row) || row;
  const rowSel = keySelect('pivot-rows', keys, row);
  const colSel = keySelect('pivot-cols', keys, col);
  const valueSel =
      h('select', {id: 'pivot-value'}, h('option', {value: 'latest', text: 'latest'}),
        h('option', {value: 'final', text: 'final (finished runs)'}));
  const out = h('div');
  el.append(
      h('div', {class: 'controls'}, h('label', {text: 'metric'}), metricSel,
        h('label', {text: 'rows'}), rowSel, h('label', {text: 'columns'}), colSel, valueSel),
      out);
  if (keys.length === 0) {
    out.append(h(
        'p',
        {class: 'muted', text: 'Every run of this sweep has the same config: nothing to pivot.'}));
    return;
  }
  const draw = async () => {
    const q = new URLSearchParams(
        {metric: metricSel.value, rows: rowSel.value, cols: colSel.value, value: valueSel.value});
    let t;
    try {
      t = await api(`sweeps/${encodeURIComponent(sweep.name)}/pivot?${q}`);
    } catch (e) {
      out.replaceChildren(h('p', {class: 'muted', text: e.message}));
      return;
    }
    const vals = t.cells.flat().filter((c) => c.mean !== null).map((c) => c.mean);
    const lo = Math.min(...vals), hi = Math.max(...vals);
    const color = (v) => {
      const f = hi > lo ? (v - lo) / (hi - lo) : 0.5;
      return `background: hsl(${220 - 190 * f}, 70%, ${88 - 30 * f}%)`;
    };
    // A cell: the mean, ± half its 95 % interval where there are two runs or more, and n.
    const cell = (c) => {
      if (!c.n) return h('td', {class: 'empty', text: '–', title: 'n = 0'});
      const ci = c.ci_low !== null && c.ci_high !== null;
      const text = fmt(c.mean) + (ci ? ' ± ' + fmt((c.ci_high - c.ci_low) / 2, 3) : '');
      const title = `n = ${c.n}` +
          (ci ? `, 95 % interval [${fmt(c.ci_low)}, ${fmt(c.ci_high)}], std ${fmt(c.std, 3)}` : '');
      const td = h('td', {title}, text, h('span', {class: 'n', text: ` n ${c.n}`}));
      if (c.mean !== null) td.setAttribute('style', color(c.mean));
      return td;
    };
    out.replaceChildren(
        h('table', {class: 'heat', id: 'pivot-table'},
          h('thead', {},
            h('tr', {}, h('th', {text: `${t.rows} \\ ${t.cols}`}),
              t.col_values.map((c) => h('th', {text: c})))),
          h('tbody', {},
            t.row_values.map((r, i) => h('tr', {}, h('th', {text: r}), t.cells[i].map(cell))))),
        h('p', {
          class: 'muted',
          text: `${t.metric} (${t.value}): the mean over the n runs of each cell ± half its ` +
              `95 % confidence interval (Student's t); colour from ${fmt(lo)} to ${fmt(hi)}.`,
        }));
  };
  for (const s of [metricSel, rowSel, colSel, valueSel]) {
    s.addEventListener('change', () => draw().catch(fail));
  }
  await draw();
}

async function sweepGroups(el, sweep) {
  const keys = sweep.varying.filter((k) => k !== 'seed');
  const bySel = keySelect('groups-by', keys, preferred(keys, 'R', keys[0]));
  const metricSel = keySelect(
      'groups-metric', plainMetrics(sweep), preferred(sweep.metrics, 'loss', sweep.metrics[0]));
  const out = h('div');
  el.append(
      h('div', {class: 'controls'}, h('label', {text: 'group by'}), bySel,
        h('label', {text: 'metric'}), metricSel),
      out);
  if (!keys.length) {
    out.append(h('p', {class: 'muted', text: 'No config key varies.'}));
    return;
  }
  const draw = async () => {
    const q = new URLSearchParams({by: bySel.value, metric: metricSel.value, points: 120});
    const g = await api(`sweeps/${encodeURIComponent(sweep.name)}/groups?${q}`);
    out.replaceChildren();
    if (!g.groups.length) {
      out.append(h('p', {class: 'muted', text: 'No run has logged ' + g.metric + ' yet.'}));
      return;
    }
    // One x axis for every group: the union of their grid steps.
    const xs = [...new Set(g.groups.flatMap((gr) => gr.step))].sort((a, b) => a - b);
    const data = [xs], names = [], series = [], bands = [], colors = [];
    g.groups.forEach((gr, i) => {
      const at = new Map(gr.step.map((s, j) => [s, j]));
      const pick = (f) => xs.map((s) => {
        const j = at.get(s);
        return j === undefined || gr.mean[j] === null ? null : f(j);
      });
      const c = palette[i % palette.length];
      const base = data.length;
      // The band is the mean's 95 % interval; a step with one run has none (the band closes).
      data.push(pick((j) => gr.ci_low[j] ?? gr.mean[j]));
      data.push(pick((j) => gr.ci_high[j] ?? gr.mean[j]));
      data.push(pick((j) => gr.mean[j]));
      const label = `${g.by}=${gr.value}`;
      names.push(`${label} 95 % low`, `${label} 95 % high`, `${label} (${gr.runs} runs)`);
      series.push({width: 0, stroke: c}, {width: 0, stroke: c}, {width: 2});
      colors.push(c, c, c);
      bands.push({series: [base + 1, base], fill: c + '33'});
    });
    lineChart(
        out, `${g.metric} by ${g.by}: mean and its 95 % interval over runs`, names, data,
        {width: 900, height: 320, series, bands, colors});
    const cut = g.truncated ? ' (the first ones only: narrow with a filter)' : '';
    out.append(h('p', {class: 'muted', text: `${g.runs} runs${cut}.`}));
  };
  [bySel, metricSel].forEach((s) => s.addEventListener('change', () => draw().catch(fail)));
  await draw();
}

// The vertical position of a value on one parallel-coordinates axis, and its tick labels:
// numbers from their low to their high, anything else as sorted categories.
function axisScale(vals, top, bottom) {
  const span = (f) => bottom - f * (bottom - top);
  if (vals.every((v) => v !== undefined && v !== '' && !isNaN(Number(v)))) {
    const xs = vals.map(Number);
    const lo = Math.min(...xs), hi = Math.max(...xs);
    return {
      pos: (v) => span(hi > lo ? (Number(v) - lo) / (hi - lo) : 0.5),
      ticks: [lo, hi].map((v) => [v, fmt(v, 3)]),
    };
  }
  const cats = [...new Set(vals.map(String))].sort();
  return {
    pos: (v) => span(cats.length > 1 ? cats.indexOf(String(v)) / (cats.length - 1) : 0.5),
    ticks: cats.map((c) => [c, c]),
  };
}

// Parallel coordinates: one vertical axis per varying key and one for the metric; one line per
// run.
async function sweepParallel(el, sweep) {
  const metricSel = keySelect(
      'parallel-metric', plainMetrics(sweep), preferred(sweep.metrics, 'loss', sweep.metrics[0]));
  const out = h('div');
  el.append(h('div', {class: 'controls'}, h('label', {text: 'metric'}), metricSel), out);
  const draw = async () => {
    const m = metricSel.value;
    const data = await api(`sweeps/${encodeURIComponent(sweep.name)}/runs?limit=2000&metrics=${
        encodeURIComponent(m)}`);
    const runs = data.runs.filter((r) => r.latest[m] !== undefined && r.latest[m] !== null);
    const axes = sweep.varying.concat([m]);
    const value = (r, i) => (i === axes.length - 1 ? r.latest[m] : r.params[axes[i]]);
    const W = Math.max(500, 140 * axes.length), H = 340, top = 24, bottom = 300;
    const scales = axes.map((a, i) => axisScale(runs.map((r) => value(r, i)), top, bottom));
    const x = (i) => 40 + i * (W - 80) / Math.max(1, axes.length - 1);
    const mvals = runs.map((r) => r.latest[m]);
    const mlo = Math.min(...mvals), mhi = Math.max(...mvals);
    const root = svg('svg', {width: W, height: H, id: 'parallel-svg'});
    for (const r of runs) {
      const pts = axes.map((a, i) => `${x(i)},${scales[i].pos(value(r, i))}`).join(' ');
      const f = mhi > mlo ? (r.latest[m] - mlo) / (mhi - mlo) : 0.5;
      root.append(
          svg('polyline', {
            points: pts,
            fill: 'none',
            stroke: `hsl(${220 - 200 * f}, 75%, 45%)`,
            'stroke-opacity': 0.6,
          },
              svg('title', {text: `${r.name}: ${m} = ${fmt(r.latest[m])}`})));
    }
    axes.forEach((a, i) => {
      root.append(svg('line', {x1: x(i), x2: x(i), y1: top, y2: bottom, stroke: '#555'}));
      root.append(svg('text', {x: x(i), y: bottom + 22, 'text-anchor': 'middle', text: a}));
      for (const [v, label] of scales[i].ticks) {
        root.append(svg('text', {x: x(i) + 4, y: scales[i].pos(v) + 4, text: label}));
      }
    });
    out.replaceChildren(root, h('p', {
                          class: 'muted',
                          text: `${runs.length} runs with ${m} (latest value); ` +
                              'colour from low (blue) to high (red).',
                        }));
  };
  metricSel.addEventListener('change', () => draw().catch(fail));
  await draw();
}

const tabLabels = {
  runs: 'Runs',
  live: 'Live',
  pivot: 'Pivot',
  groups: 'Groups',
  parallel: 'Parallel coordinates',
  spec: 'Sweep file',
};

// Where the sweep file came from at submit (docs/architecture.md "Sweep provenance"): its path,
// sha256 and git state, and the checkout's diff against its commit, folded.
function provenance(p) {
  if (!p)
    return [h('p', {
      class: 'muted',
      text: 'Submitted from: not recorded (a client of a release before the record).'
    })];
  const td = (text) => h('td', {text});
  const rows = p.items.map(([k, v]) => h('tr', {class: 'provenance-item'}, td(k), td(v)));
  const out = [h('h2', {text: 'Submitted from'}), table(['item', 'value'], rows)];
  if (p.git_diff) {
    out.push(
        h('details', {class: 'provenance-diff'},
          h('summary',
            {text: `git diff against the commit (${p.git_diff.split('\n').length - 1} lines)`}),
          h('pre', {text: p.git_diff})));
  }
  out.push(h('h2', {text: 'Sweep file'}));
  return out;
}

export async function viewSweep(main, scope, name) {
  const sweep = await api('sweeps/' + encodeURIComponent(name));
  const path = 'sweeps/' + encodeURIComponent(name);
  const header =
      h('div', {class: 'controls'}, h('h1', {text: 'Sweep ' + sweep.name}),
        h('button', {
          class: 'danger',
          id: 'sweep-cancel',
          onclick: () => act(path + '/cancel', 'Cancel every unfinished run of ' + name + '?'),
        },
          'Cancel sweep'),
        h('button', {id: 'sweep-resume', onclick: () => act(path + '/resume')}, 'Resume sweep'));
  const states = h('div', {class: 'muted'});
  const drawStates = (s) => states.replaceChildren(
      ...Object.entries(s).map(([k, v]) => h('span', {}, stateChip(k), ' ', String(v), '  ')));
  drawStates(sweep.states);
  // Its device-hour budget (docs/operations.md "Budgets"): runs that would overrun it wait.
  const budget = sweep.budget ? h('p', {
    id: 'sweep-budget',
    class: sweep.budget.left <= 0 ? 'over' : 'muted',
    text: 'Budget: ' + budgetText(sweep.budget)
  }) :
                                null;
  main.append(header, states, ...(budget ? [budget] : []), annotationCard(path, sweep.annotation));

  const tabs = h('div', {class: 'tabs'});
  const body = h('div');
  main.append(tabs, body);
  const sections = {
    runs: (tab) => sweepRuns(body, sweep, tab),
    live: (tab) => sweepLive(body, sweep, tab, drawStates),
    pivot: () => sweepPivot(body, sweep),
    groups: () => sweepGroups(body, sweep),
    parallel: () => sweepParallel(body, sweep),
    spec: () => body.append(...provenance(sweep.provenance), h('pre', {text: sweep.spec})),
  };
  let tab = scope.child();  // what the open tab must stop when another opens
  const open = (key) => {
    tab.leave();
    tab = scope.child();
    body.replaceChildren();
    [...tabs.children].forEach((b) => b.classList.toggle('on', b.dataset.tab === key));
    Promise.resolve(sections[key](tab)).catch(fail);
  };
  for (const key of Object.keys(sections)) {
    tabs.append(h('button', {'data-tab': key, onclick: () => open(key)}, tabLabels[key]));
  }
  open('runs');
}
