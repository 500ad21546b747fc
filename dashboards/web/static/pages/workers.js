// #/workers : each worker, its device's recent readings, its run and how long it idled.
import {api} from '../api.js';
import {sparkline} from '../charts.js';
import {h} from '../dom.js';
import {fmtTime} from '../format.js';
import {emptyRow, table} from '../table.js';
import {refreshedCard} from '../view.js';

const heads = [
  'worker',
  'state',
  'device',
  'utilisation',
  'memory used',
  'temperature',
  'power',
  'current run',
  // Two counts of the same run's MFU (docs/gpu.md "Two MFUs"), each named.
  {
    text: 'MFU full attn',
    title:
        'model FLOPs per token (matrix and attention products, attention counted in full T x T) ' +
        'x tokens/s / the device peak',
  },
  {
    text: 'MFU 6N',
    title:
        '6 x effective parameters per token (the CART paper\'s count) x tokens/s / the device peak'
  },
  'idle while queued',
  'last heartbeat',
  'host',
];

// A sparkline of a device's readings with the latest value (`text`) beside it.
function deviceCell(values, lo, hi, text, cls) {
  const known = values.filter((v) => v !== null && v !== undefined);
  if (!known.length) return h('td', {class: 'muted', text: '-'});
  return h(
      'td', {class: 'spark-cell'}, sparkline(values, lo, hi, cls), h('span', {class: 'num', text}));
}

const gib = (b) => (b / 2 ** 30).toFixed(1);
const mib = (b) => Math.round(b / 2 ** 20);

function workerRow(w) {
  const d = w.device || {utilization: [], memory_used_bytes: [], temperature_c: [], power_w: []};
  const last = w.latest;
  const total = last ? last.memory_total_bytes : w.memory_bytes;
  const chip = w.state === 'busy'                   ? 'RUNNING' :
      w.state === 'lost' || w.state === 'disk_full' ? 'FAILED' :
                                                      '';
  // A full disk says how full, and why the worker takes nothing.
  const stateTitle = w.state === 'disk_full' ?
      `${mib(w.free_disk_bytes)} MiB free in its cache directory, below its floor of ` +
          `${mib(w.disk_floor_bytes)} MiB (cart-worker --min-free-disk-mib): it takes no job ` +
          'until there is room' :
      '';
  const idle = w.idle_while_queued ? h('span', {
    class: 'state QUEUED',
    title: 'holds no run while runs are queued',
    text: 'idle, work waits',
  }) :
                                     null;
  const maxPower = Math.max(50, ...d.power_w.filter((v) => v !== null));
  const has = (key) => last && last[key] !== null;  // a reading some devices lack
  const run =
      w.run_id ? h('a', {href: '#/run/' + w.run_id, text: w.run_name || 'run ' + w.run_id}) : '-';
  const percent = (v) => v !== null && v !== undefined ? (100 * v).toFixed(1) + ' %' : '-';
  return h(
      'tr', {'data-worker': w.id}, h('td', {text: w.id}),
      h('td', {},
        h('span', {class: 'state ' + chip, text: w.state.replace('_', ' '), title: stateTitle}),
        idle),
      h('td', {text: `${w.device_kind} ${w.device_name}`}),
      deviceCell(
          d.utilization, 0, 1, last ? `${Math.round(100 * last.utilization)} %` : '-', 'util'),
      deviceCell(
          d.memory_used_bytes, 0, total,
          last ? `${gib(last.memory_used_bytes)} / ${gib(total)} GiB` : '-', 'mem'),
      deviceCell(
          d.temperature_c, 20, 100,
          has('temperature_c') ? `${Math.round(last.temperature_c)} °C` : '-', 'temp'),
      deviceCell(
          d.power_w, 0, maxPower, has('power_w') ? `${Math.round(last.power_w)} W` : '-', 'power'),
      h('td', {}, run), h('td', {class: 'num mfu', text: percent(w.run_mfu)}),
      h('td', {class: 'num mfu-6n', text: percent(w.run_mfu_6n)}),
      h('td', {class: 'num', text: w.idle_while_queued_hours.toFixed(2) + ' h'}),
      h('td', {text: fmtTime(w.last_seen_us)}), h('td', {text: w.hostname}));
}

export async function viewWorkers(main, scope) {
  await refreshedCard(main, scope, 'Workers', 5000, async (card) => {
    const data = await api('workers');
    const rows = data.workers.length ? data.workers.map(workerRow) :
                                       emptyRow(heads.length, 'No worker has registered.');
    card.replaceChildren(table(heads, rows, {id: 'workers-table'}));
  });
}
