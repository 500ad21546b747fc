// #/compare/A/B : how two runs differ (docs/dashboard.md "Comparing two runs"), from GET
// /api/v1/compare: the config keys, data files and environment items that differ, the latest
// metrics with their deltas, the device class each attempt trained on and the step it resumed
// from, and the two loss curves overlaid with the first step at which they part.
import {api} from '../api.js';
import {lineChart, palette} from '../charts.js';
import {h} from '../dom.js';
import {fmt} from '../format.js';
import {table} from '../table.js';

const td = (text, attrs) => h('td', Object.assign({text}, attrs || {}));

// A table of differing keys, or one line saying there are none.
function differences(id, title, rows, none) {
  if (rows.length === 0) return [h('h2', {text: title}), h('p', {id, class: 'muted', text: none})];
  return [
    h('h2', {text: `${title} (${rows.length} differ)`}),
    table(['key', 'a', 'b'], rows.map((r) => h('tr', {}, td(r.key), td(r.a), td(r.b))), {id}),
  ];
}

// Each run's attempts as stretches of steps on one device class: where a resume on another
// class began is where a series may part.
function classesOf(side, label) {
  const spans = side.device_classes.length > 1;
  const stretches = side.attempts.map(
      (a) => `from step ${a.from_step} on ${a.device_class || 'an unknown device'} ` +
          `(attempt ${a.attempt}, ${a.worker})`);
  return h(
      'li', {}, h('strong', {text: `${label}: `}),
      h('a', {href: '#/run/' + side.id, text: `run ${side.id} (${side.name})`}), ' ',
      spans ? h('span', {class: 'state FAILED', text: 'spans classes'}) : null, ' ',
      stretches.length ? stretches.join('; ') : 'no attempt has started');
}

function verdict(s) {
  if (s.common_steps === 0) return `${s.metric}: no step that both runs logged`;
  if (s.first_different_step === null) {
    return `${s.metric}: bit-identical at all ${s.common_steps} steps both logged`;
  }
  return `${s.metric}: the series part at step ${s.first_different_step} ` +
      `(${s.a_at_parting} | ${s.b_at_parting}); largest deviation ${fmt(s.largest_deviation, 4)} ` +
      `at step ${s.largest_at}; ${s.common_steps} steps in common`;
}

// Both series on one x axis (the union of their steps), a gap where one has no point.
function overlay(el, cmp) {
  const s = cmp.series;
  const at = new Map();
  const put = (series, k) => series.steps.forEach((step, i) => {
    if (!at.has(step)) at.set(step, [null, null]);
    at.get(step)[k] = series.values[i];
  });
  put(s.a, 0);
  put(s.b, 1);
  const xs = [...at.keys()].sort((x, y) => x - y);
  const title = s.first_different_step === null ?
      `${s.metric}, overlaid` :
      `${s.metric}, overlaid: they part at step ${s.first_different_step}`;
  lineChart(
      el, title, [`a: run ${cmp.a.id}`, `b: run ${cmp.b.id}`],
      [xs, xs.map((x) => at.get(x)[0]), xs.map((x) => at.get(x)[1])],
      {width: 860, height: 300, colors: [palette[0], palette[1]], series: [{}, {dash: [6, 4]}]});
}

export async function viewCompare(main, scope, a, b) {
  const metric = new URLSearchParams(location.hash.split('?')[1] || '').get('metric') || 'loss';
  const cmp = await api(
      `compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}` +
      `&metric=${encodeURIComponent(metric)}`);
  const env = cmp.environment;
  const envNone = env.a_attempt === 0 || env.b_attempt === 0 ?
      'not recorded for ' +
          (env.a_attempt === 0 && env.b_attempt === 0 ? 'either run' :
               env.a_attempt === 0                    ? 'run a' :
                                                        'run b') :
      `the same (attempt ${env.a_attempt} | attempt ${env.b_attempt})`;
  const chartEl = h('div', {class: 'row', id: 'compare-chart'});
  main.append(
      h('h1', {text: `Run ${cmp.a.id} against run ${cmp.b.id}`}),
      h('ul', {id: 'compare-classes'}, classesOf(cmp.a, 'a'), classesOf(cmp.b, 'b')),
      h('p', {id: 'compare-verdict', class: 'card', text: verdict(cmp.series)}), chartEl,
      ...differences('compare-config', 'Config', cmp.config, 'the same'),
      ...differences('compare-data', 'Data', cmp.data, 'the same files, the same sha256'),
      ...differences('compare-environment', 'Environment', env.items, envNone),
      h('h2', {text: 'Latest metrics'}),
      table(
          ['metric', 'a', 'b', 'b − a', '%'],
          cmp.latest.map(
              (m) =>
                  h('tr', {}, td(m.metric), td(fmt(m.a, 6), {class: 'num'}),
                    td(fmt(m.b, 6), {class: 'num'}), td(fmt(m.delta, 4), {class: 'num'}),
                    td(m.a ? (100 * m.delta / m.a).toFixed(2) + ' %' : '-', {class: 'num'}))),
          {id: 'compare-latest'}));
  overlay(chartEl, cmp);
}
