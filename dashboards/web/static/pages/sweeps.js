// #/ : every sweep with its progress, tokens, throughput, expected finish and what it used.
import {api} from '../api.js';
import {h, stateChip} from '../dom.js';
import {fmtDuration, fmtTime, fmtTokens} from '../format.js';
import {emptyRow, table} from '../table.js';
import {refreshedCard} from '../view.js';

const heads = [
  'sweep',
  'runs finished',
  'by state',
  'tokens done / planned',
  'tokens/s',
  'expected finish',
  {text: 'energy', title: 'measured by the workers\' device counters (NVML, RAPL); device-hours'},
  {
    text: 'budget',
    title: 'device-hours left of the sweep\'s budget (spent and held by running ' +
        'runs counted); - : none of its own'
  },
  'created',
  'tags',
];

// kWh of the measured attempts (with cost and CO2 where cartd has prices) over device-hours.
export function spendingCell(sp) {
  if (!sp) return h('td', {class: 'muted', text: '-'});
  // Short here; cartd's own line (as `cart sweep show` prints it) in the tooltip.
  const kwh = sp.energy_kwh;
  const energy = kwh === null ? 'not measured' :
      kwh >= 1                ? `${kwh.toFixed(3)} kWh` :
      kwh >= 0.001            ? `${(kwh * 1000).toFixed(2)} Wh` :
                                `${Math.round(kwh * 3.6e6)} J`;
  const hours = sp.device_hours.toPrecision(2);
  return h('td', {class: 'num spending', title: sp.text, text: `${energy} · ${hours} device-h`});
}

// Device-hours as `cart` shows them: four decimals below 0.1 (a CPU-scale sweep), else one.
function fmtHours(x) {
  return Math.abs(x) < 0.1 && x !== 0 ? x.toFixed(4) : x.toFixed(1);
}

// One line for a budget: what is left of it, with what is spent and held.
export function budgetText(b) {
  return `${fmtHours(b.left)} h left of ${fmtHours(b.limit)} h (${fmtHours(b.spent)} h spent, ` +
      `${fmtHours(b.held)} h held by running runs; ${b.source})`;
}

export function budgetCell(b) {
  if (!b) return h('td', {class: 'muted', text: '-'});
  return h('td', {
    class: 'num budget' + (b.left <= 0 ? ' over' : ''),
    title: budgetText(b),
    text: `${fmtHours(b.left)} / ${fmtHours(b.limit)} h`,
  });
}

function sweepRow(s) {
  const pct = s.runs ? Math.round(100 * s.finished / s.runs) : 0;
  const tok = s.planned_tokens ? Math.round(100 * s.done_tokens / s.planned_tokens) : 0;
  const states =
      Object.entries(s.states).map(([k, v]) => h('span', {}, stateChip(k), ' ', String(v), ' '));
  const bar = h('span', {class: 'bar'}, Object.assign(h('span'), {style: `width:${pct}%`}));
  const finish = {class: 'num', text: '-'};
  if (s.expected_finish_us) {
    // The moment in the tooltip: the row stays narrow enough for the page's eleven columns.
    finish.text = `in ${fmtDuration(s.eta_s)}`;
    finish.title = `${fmtTime(s.expected_finish_us)}; ${s.runs_estimated} of ${s.unfinished} ` +
        'unfinished runs estimated (cartd\'s placement plan)';
  } else {
    finish.title = 'no estimate: nothing left, or no live worker fits its runs';
  }
  return h(
      'tr', {},
      h('td', {}, h('a', {href: '#/sweep/' + encodeURIComponent(s.name), text: s.name}),
        s.cancelled ? h('span', {class: 'muted', text: ' (cancelled)'}) : null),
      h('td', {}, bar, ` ${s.finished}/${s.runs}`), h('td', {}, states), h('td', {
        class: 'num',
        text: `${fmtTokens(s.done_tokens)} / ${fmtTokens(s.planned_tokens)} (${tok}%)`,
      }),
      h('td', {
        class: 'num',
        text: s.tokens_per_s ? fmtTokens(Math.round(s.tokens_per_s)) + '/s' : '-',
      }),
      h('td', finish), spendingCell(s.spending), budgetCell(s.budget),
      h('td', {text: fmtTime(s.created_us)}), h('td', {text: (s.tags || []).join(', ')}));
}

export async function viewSweeps(main, scope) {
  await refreshedCard(main, scope, 'Sweeps', 5000, async (card) => {
    const data = await api('sweeps');
    const rows = data.sweeps.slice().reverse().map(sweepRow);
    card.replaceChildren(table(
        heads,
        rows.length ? rows : emptyRow(heads.length, 'No sweeps yet: cart sweep submit FILE')));
  });
}
