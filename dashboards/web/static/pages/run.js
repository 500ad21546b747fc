// #/run/ID : one run's state and actions (cancel, resume, extend), its metrics as charts that
// follow live, its attempts, events, data files, checkpoints, worker log and resolved config.
import {annotationCard} from '../annotation.js';
import {act, api, follow} from '../api.js';
import {lineChart} from '../charts.js';
import {h, stateChip} from '../dom.js';
import {fmtTime, fmtTokens} from '../format.js';
import {show} from '../notice.js';
import {table} from '../table.js';

const loopPrefixes =
    [['h_norm/', '‖h_r‖ per loop r'], ['rel_update/', 'relative update per loop r']];
const chartOrder = ['loss', 'rho_max', 'lr', 'grad_norm', 'tokens_per_s'];

// The header: name, state and the actions. `stateEl` shows the state the last action left.
function runHeader(run, stateEl) {
  const id = run.id;
  const extendIn = h('input', {
    id: 'extend-steps',
    type: 'number',
    min: run.steps + 1,
    placeholder: 'total steps',
    size: 9,
  });
  // The learning rate after the last step: cartd refuses a jump of more than 2x unless told which.
  const scheduleSel =
      h('select', {id: 'extend-schedule', title: 'learning rate after the last step'},
        h('option', {value: '', text: 'schedule: ask'}),
        h('option', {value: 'hold', text: 'hold the final rate'}),
        h('option', {value: 'stretch', text: 'stretch the cosine (warm restart)'}));
  const cancel = async () => {
    const r = await act(`runs/${id}/cancel`, null, {reason: 'cancelled from the dashboard'});
    if (r) stateEl.replaceChildren(stateChip(r.state));
  };
  const resume = async () => {
    const r = await act(`runs/${id}/resume`);
    if (r) stateEl.replaceChildren(stateChip(r.state));
  };
  const extend = async () => {
    const body = {total_steps: Number(extendIn.value), schedule: scheduleSel.value};
    const r = await act(`runs/${id}/extend`, null, body);
    if (!r) return;
    stateEl.replaceChildren(stateChip(r.state));
    const x = r.extension;
    show(
        `Extended to ${r.steps} steps, schedule ${x.schedule}: learning rate ` +
            `${x.lr_before.toExponential(2)} at step ${x.from_step} → ` +
            `${x.lr_after.toExponential(2)} at step ${x.from_step + 1}`,
        true);
  };
  // Compare with another run: #/compare/THIS/OTHER.
  const otherIn =
      h('input', {id: 'compare-with', type: 'number', min: 1, placeholder: 'run id', size: 7});
  const compare = () => {
    if (otherIn.value) location.hash = `#/compare/${id}/${Number(otherIn.value)}`;
  };
  return h(
      'div', {class: 'controls'}, h('h1', {text: run.name}), stateEl,
      h('button', {class: 'danger', id: 'run-cancel', onclick: cancel}, 'Cancel'),
      h('button', {id: 'run-resume', onclick: resume}, 'Resume'), extendIn, scheduleSel,
      h('button', {id: 'run-extend', onclick: extend}, 'Extend'), otherIn,
      h('button', {id: 'run-compare', onclick: compare}, 'Compare'));
}

function runFacts(run, stepEl) {
  const item = (term, ...value) => [h('dt', {text: term}), h('dd', {}, ...value)];
  const diverged = run.diverged && h('dd', {
                     id: 'run-diverged',
                     text: `loss ${run.diverged.loss} at step ${run.diverged.step}: not retried; ` +
                         `resume with a change (cart runs resume ${run.id} --set lr=…)`,
                   });
  return h(
      'div', {class: 'card'},
      h('dl', {class: 'kv'},
        item('sweep', h('a', {href: '#/sweep/' + encodeURIComponent(run.sweep), text: run.sweep})),
        item('step', stepEl), item('kind', run.kind), item('worker', run.worker || '-'),
        item('attempt', `${run.attempt} of at most ${run.max_attempts}`),
        item(
            'parameters',
            `${fmtTokens(run.stored_params)} stored, ${fmtTokens(run.effective_params)} effective`),
        item('device class', deviceClasses(run)),
        run.waiting_reason ? item('waiting', run.waiting_reason) : null,
        diverged ? [h('dt', {text: 'diverged'}), diverged] : null));
}

// Which card models trained the run, and where its next attempt may go (docs/architecture.md
// "Device classes"); a run whose attempts span models is flagged.
function deviceClasses(run) {
  const classes = run.device_classes || [];
  const spans = classes.length > 1;
  const where = run.any_device_class ? 'later attempts may go to any class (unpinned)' :
      run.checkpoint_class ? `later attempts stay on ${run.checkpoint_class} (its checkpoint's)` :
                             '';
  return h(
      'span', {id: 'run-device-classes'},
      spans ?
          [
            h('span', {class: 'state FAILED', id: 'run-spans-classes', text: 'spans classes'}), ' '
          ] :
          null,
      h('span', {
        text: (classes.length ? classes.join(', then ') : 'none yet') +
            (where ? `; ${where}` : '') +
            (run.balanced ? '; its sweep balances seeds over the classes' : ''),
      }));
}

// What each attempt ran on (its worker's environment record), folded: the first record whole,
// each later one with the items that differ from the one before marked (class "changed").
function environments(attempts, td) {
  const recorded = attempts.filter((a) => a.environment && a.environment.length > 0);
  if (recorded.length === 0) {
    return [h(
        'p', {class: 'muted', text: 'not recorded (workers of a release before the record)'})];
  }
  let before = null;
  return recorded.map((a) => {
    const was = new Map(before ? before.environment : []);
    const changed = before ? a.environment.filter(([k, v]) => was.get(k) !== v).length : 0;
    const summary = before ? `attempt ${a.attempt}: ${
                                 changed ?
                                     `${changed} item(s) differ from attempt ${before.attempt}` :
                                     `as attempt ${before.attempt}`}` :
                                     `attempt ${a.attempt}: ${a.environment.length} items`;
    const rows = a.environment.map(
        ([k, v]) =>
            h('tr', {class: before && was.get(k) !== v ? 'env-item changed' : 'env-item'}, td(k),
              td(v, before && was.has(k) && was.get(k) !== v ? {title: `was ${was.get(k)}`} : {})));
    before = a;
    return h(
        'details', {class: 'environment', open: changed > 0 || undefined},
        h('summary', {text: summary}), table(['item', 'value'], rows));
  });
}

// The tables under the charts: attempts, events, data files, checkpoints.
function runTables(run) {
  const td = (text, attrs) => h('td', Object.assign({text}, attrs || {}));
  const dataCells = (d) => {
    if (d.sha256 === null) {
      return td('not recorded yet: the first worker that opens it records it', {colspan: 5});
    }
    return [
      td(d.sha256.slice(0, 16) + '…', {title: d.sha256}),
      td(fmtTokens(d.size_bytes) + 'B', {class: 'num'}),
      td(d.tokens >= 0 ? fmtTokens(d.tokens) : '-', {class: 'num'}),
      td(d.tokenizer || '-'),
      td(`${d.recorded_by}, ${fmtTime(d.recorded_us)}`),
    ];
  };
  return [
    h('h2', {text: 'Attempts'}),
    table(
        ['attempt', 'worker', 'device', 'leased', 'started', 'ended', 'outcome', 'energy',
         'reason'],
        run.attempts.map(
            (a) =>
                h('tr', {}, td(a.attempt), td(a.worker), td(a.device_class || '-'),
                  td(fmtTime(a.leased_us)), td(fmtTime(a.started_us)), td(fmtTime(a.ended_us)),
                  td(a.outcome || 'holds lease'),
                  td(a.energy_j === null ?
                         'not measured' :
                         `${Math.round(a.energy_j)} J (${(a.energy_j / 3600).toPrecision(3)} Wh, ${
                             a.energy_source})`,
                     {class: 'num energy'}),
                  td(a.reason)))),
    h('p', {id: 'run-spending', class: 'muted', text: 'Spent: ' + run.spending.text}),
    h('h2', {text: 'Environment'}),
    ...environments(run.attempts, td),
    h('h2', {text: 'Events'}),
    table(
        ['time', 'from', 'to', 'who', 'why'],
        run.events.map(
            (e) => h('tr', {}, td(fmtTime(e.at_us)), td(e.from), td(e.to), td(e.who), td(e.why)))),
    h('h2', {text: 'Data'}),
    table(
        ['role', 'file', 'sha256', 'size', 'tokens', 'tokenizer', 'recorded by'],
        run.data.map((d) => h('tr', {class: 'data-file'}, td(d.role), td(d.path), dataCells(d)))),
    h('h2', {text: 'Checkpoints'}),
    table(
        ['step', 'attempt', 'size', 'sha256', 'created'],
        run.checkpoints.map(
            (c) =>
                h('tr', {}, td(c.step), td(c.attempt),
                  td(fmtTokens(c.size_bytes) + 'B', {class: 'num'}),
                  td(c.sha256.slice(0, 16) + '…'), td(fmtTime(c.created_us))))),
  ];
}

// Every metric series as a chart, downsampled by cartd into min/max buckets; `update(points)`
// appends live points and redraws.
async function runCharts(el, run) {
  const names = run.summaries.map((s) => s.name);
  const plain = names.filter((n) => !/^(h_norm|rel_update)\//.test(n));
  const loopIndex = (n) => Number(n.split('/')[1]);
  const loops = (prefix) =>
      names.filter((n) => n.startsWith(prefix)).sort((a, b) => loopIndex(a) - loopIndex(b));
  const series = {};  // name -> {step:[], mean:[], min:[], max:[]}
  await Promise.all(names.map(async (n) => {
    series[n] = await api(`runs/${run.id}/series?metric=${encodeURIComponent(n)}&points=600`);
  }));
  const plots = {};
  const rank = (n) => chartOrder.indexOf(n) + 1 || 99;
  plain.sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
  const single = (n) => [series[n].step, series[n].min, series[n].max, series[n].mean];
  for (const n of plain) {
    const s = series[n];
    const buckets = s.points > s.step.length ?
        `  (${s.points} points in ${s.step.length} buckets; band = min…max)` :
        '';
    plots[n] = lineChart(el, n + buckets, ['min', 'max', n], single(n), {
      series: [{width: 0, stroke: '#9ab'}, {width: 0, stroke: '#9ab'}, {width: 1.5}],
      bands: [{series: [2, 1], fill: '#2f6fdf22'}],
      colors: ['#9ab', '#9ab', '#2f6fdf'],
    });
    if (plots[n]) plots[n].root.dataset.metric = n;
  }
  // One chart per loop-indexed family: the x axis of its first member, the others' means on it.
  const loopData = (ns) => {
    const xs = ns.length ? series[ns[0]].step : [];
    return [xs].concat(ns.map((n) => {
      const m = new Map(series[n].step.map((s, i) => [s, series[n].mean[i]]));
      return xs.map((s) => (m.has(s) ? m.get(s) : null));
    }));
  };
  const families = [];
  for (const [prefix, title] of loopPrefixes) {
    const ns = loops(prefix);
    if (!ns.length) continue;
    const labels = ns.map((n) => 'r=' + n.split('/')[1]);
    families.push({ns, plot: lineChart(el, title, labels, loopData(ns), {width: 460})});
  }
  let after = 0;  // the last step shown: live points follow it
  for (const n of names) {
    const s = series[n].step;
    if (s.length) after = Math.max(after, s[s.length - 1]);
  }
  const update = (points) => {
    for (const [n, s] of Object.entries(points)) {
      if (!series[n]) continue;  // a metric that appeared after the page loaded: shown on reload
      const t = series[n];
      s.step.forEach((st, i) => {
        t.step.push(st);
        t.mean.push(s.mean[i]);
        t.min.push(s.min[i]);
        t.max.push(s.max[i]);
      });
      if (plots[n]) plots[n].setData(single(n));
    }
    for (const f of families) {
      if (f.plot) f.plot.setData(loopData(f.ns));
    }
  };
  // How many points a chart holds (the browser test watches it grow).
  const points = (metric) => (series[metric] ? series[metric].step.length : 0);
  return {after, update, points};
}

export async function viewRun(main, scope, id) {
  const run = await api('runs/' + id);
  const stateEl = h('span', {}, stateChip(run.state));
  const stepEl = h('span', {text: `${run.step}/${run.steps}`});
  main.append(
      runHeader(run, stateEl), runFacts(run, stepEl), annotationCard('runs/' + id, run.annotation));

  const chartsEl = h('div', {class: 'row', id: 'run-charts'});
  main.append(h('h2', {text: 'Metrics'}), chartsEl);
  const charts = await runCharts(chartsEl, run);
  window.cartDashboard = {points: charts.points};

  const logEl = h('pre', {class: 'log', id: 'run-log'});
  main.append(
      h('div', {}, runTables(run), h('h2', {text: 'Worker log (follows live)'}), logEl,
        h('h2', {text: 'Resolved config'}), h('pre', {id: 'run-config', text: run.config_yaml})));
  let logAfter = 0;
  const addLog = (lines) => {
    for (const l of lines) {
      logEl.append(document.createTextNode(`[${fmtTime(l.at_us)}] #${l.attempt} ${l.text}\n`));
      logAfter = Math.max(logAfter, l.id);
    }
    logEl.scrollTop = logEl.scrollHeight;
  };
  addLog((await api(`runs/${id}/log?limit=1000`)).lines);

  // Live: new points and log lines until the run finishes.
  const apply = (data) => {
    stateEl.replaceChildren(stateChip(data.state));
    stepEl.textContent = `${Math.max(data.step, run.step)}/${run.steps}`;
    charts.update(data.series);
    addLog(data.log);
  };
  const live = `runs/${id}/live?after=${charts.after}&log_after=${logAfter}`;
  scope.onLeave(follow(live, (event, data) => {
    if (event === 'update' || event === 'end') apply(data);
  }));
}
