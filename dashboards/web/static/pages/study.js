// #/study[?stage2=SWEEP&…] : the paper's claims decided from cartd's database as `cart report`
// decides them, each sequential claim's look, the seeds `cart plan` would add to decide the
// claims that cannot tell (cheapest decision first), and the plans already applied, from
// GET /api/v1/study (docs/dashboard.md "The study and its plan"). Read-only: `cart plan --apply`
// queues a plan. Each claim shows what its evidence cost (the runs its tests read, in any state),
// and each sweep of the study what it cost.
import {api} from '../api.js';
import {h} from '../dom.js';
import {fmtTime} from '../format.js';
import {emptyRow, table} from '../table.js';

import {spendingCell} from './sweeps.js';

const td = (text, attrs) => h('td', Object.assign({text}, attrs || {}));
const PARTS = ['stage1', 'stage2', 'baselines', 'ablations', 'faithfulness', 'leak', 'variable_r'];
const CHIP = {'holds': 'SUCCEEDED', 'does not hold': 'FAILED', 'cannot tell': 'QUEUED'};
const hours = (x) => x === null ? '-' : x < 0.1 ? x.toPrecision(2) : x.toFixed(1);

function claimRow(c) {
  return h(
      'tr', {id: 'study-claim-' + c.id}, td(c.claim),
      h('td', {}, h('span', {class: 'state ' + CHIP[c.verdict], text: c.verdict}),
        c.confounded ? h('span', {class: 'state FAILED', text: 'confounded'}) : null),
      td(c.evidence, {class: 'evidence'}),
      td(c.look ? c.look.text : 'fixed design', {class: c.look ? 'look' : 'muted'}),
      td(String(c.runs), {class: 'num'}),
      c.runs ? spendingCell(c.spending) : td('-', {class: 'muted num'}));
}

function costRow(p) {
  return h(
      'tr', {}, td(`${p.part} (${p.sweep})`), td(String(p.runs), {class: 'num'}),
      spendingCell(p.spending), td(p.spending.text, {class: 'muted'}));
}

function planRows(plans) {
  const rows = [];
  for (const p of plans) {
    if (!p.planned) continue;
    for (const t of p.tests) {
      rows.push(h(
          'tr', {}, td(p.claim), td(t.test), td(t.design + (t.prior ? ' (prior sd)' : '')),
          td(String(t.seeds_now), {class: 'num'}), td(String(t.seeds_needed), {class: 'num'}),
          td(String(t.fixed_seeds), {class: 'num'}), td(String(t.runs), {class: 'num'}),
          td(hours(t.rtx3090_hours), {class: 'num'})));
    }
  }
  return rows;
}

function appliedRow(p) {
  const looks = p.claims.map((c) => `${c.claim}: ${c.seeds_now} → ${c.seeds_target} seeds`);
  return h(
      'tr', {}, td(String(p.plan_id)), td(fmtTime(p.created_us)), td(p.created_by),
      td(looks.join('; ')), td(String(p.runs), {class: 'num'}),
      td(p.budget_hours === null ? '-' : hours(p.budget_hours), {class: 'num'}));
}

export async function viewStudy(main, scope) {
  const params = new URLSearchParams(location.hash.split('?')[1] || '');
  const query = new URLSearchParams();
  for (const key of ['power', 'alpha', ...PARTS]) {
    if (params.get(key)) query.set(key, params.get(key));
  }
  const study = await api('study' + (query.toString() ? '?' + query : ''));
  const planned = planRows(study.plans);
  const unplanned = study.plans.filter((p) => !p.planned);
  main.append(
      h('h1', {text: 'The study'}), h('p', {
        class: 'muted',
        text: 'Each claim of the paper decided from the finished runs, as `cart report` decides ' +
            'it; a claim seeds were planned for is decided at its look, spending its level ' +
            'by the boundary.'
      }),
      table(
          ['claim (paper)', 'verdict', 'evidence', 'look', 'runs', 'cost'],
          study.claims.map(claimRow), {id: 'study-claims'}),
      h('h2', {text: 'What the study cost'}), h('p', {
        class: 'muted',
        text: 'Energy where the workers\' device counters measured it (NVML, RAPL), never ' +
            'estimated; device-hours from the attempts\' times. A run read by several claims ' +
            'counts in each; here every run of a sweep counts once.'
      }),
      table(
          ['part (sweep)', 'runs', 'cost', 'in full'], study.costs.map(costRow),
          {id: 'study-costs'}),
      h('h2', {
        text: `Seeds to decide what cannot tell (power ${study.power}, alpha ${study.alpha}), ` +
            'cheapest first'
      }),
      table(
          ['claim', 'test', 'design', 'seeds', 'needed', 'fixed design', 'new runs', '3090 h'],
          planned.length ? planned : [emptyRow(8, 'no claim that cannot tell can be planned')],
          {id: 'study-plan'}),
      h('ul', {id: 'study-unplanned', class: 'muted'},
        unplanned.map((p) => h('li', {text: `${p.claim}: ${p.note}`}))),
      h('p', {
        class: 'card',
        text: '`cart plan --apply [--budget HOURS]` queues these seeds as new seeds of the same ' +
            'sweeps, with their derived jobs, and records the plan.'
      }),
      h('h2', {text: 'Plans applied'}),
      table(
          ['plan', 'when', 'by', 'claims (seeds per side: then → planned)', 'runs', 'budget (h)'],
          study.applied.length ? study.applied.map(appliedRow) :
                                 [emptyRow(6, 'no plan applied yet')],
          {id: 'study-applied'}));
}
