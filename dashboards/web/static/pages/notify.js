// #/notify : the caller's subscriptions (what they are told of, and where), a form to add one,
// and what was sent with each delivery try (docs/dashboard.md "Notifications").
import {act, api} from '../api.js';
import {h} from '../dom.js';
import {show} from '../notice.js';
import {fmtTime} from '../format.js';
import {emptyRow, table} from '../table.js';
import {drawAndRefresh} from '../view.js';

const EVENTS = [
  'failed', 'lost', 'stuck', 'diverged', 'leak_suspected', 'preempted', 'sweep_finished',
  'verdict_changed', 'finish_slipped',
];

function scopeText(s) {
  if (s.scope === 'run') return h('a', {href: '#/run/' + s.run_id, text: `run ${s.run_id}`});
  if (s.scope === 'sweep') return h('a', {href: '#/sweep/' + s.sweep, text: `sweep ${s.sweep}`});
  return 'my runs';
}

function subscriptionRow(s, redraw) {
  const test = h('button', {type: 'button', text: 'Send a test', 'data-test': s.id});
  test.onclick = async () => {
    if (await act(`subscriptions/${s.id}/test`)) redraw();
  };
  const remove = h('button', {type: 'button', text: 'Remove', 'data-remove': s.id});
  remove.onclick = async () => {
    if (await act(`subscriptions/${s.id}/remove`, `Remove subscription ${s.id}?`)) redraw();
  };
  return h(
      'tr', {'data-subscription': s.id}, h('td', {class: 'num', text: String(s.id)}),
      h('td', {}, scopeText(s)), h('td', {text: s.events.join(', ')}),
      h('td', {text: `${s.channel} ${s.target}`}),
      h('td', {class: 'num', text: `${s.lost_after_s} s / ×${s.stuck_factor} / ${s.slip_share}`}),
      h('td', {text: fmtTime(s.created_us)}), h('td', {}, test, ' ', remove));
}

function notificationRow(n) {
  const last = n.tries.length ? n.tries[n.tries.length - 1] : null;
  const chip = n.state === 'DELIVERED' ? 'SUCCEEDED' : n.state === 'GAVE_UP' ? 'FAILED' : 'QUEUED';
  return h(
      'tr', {'data-notification': n.id}, h('td', {class: 'num', text: String(n.id)}),
      h('td', {class: 'num', text: String(n.subscription_id)}), h('td', {text: n.event}),
      h('td', {}, h('span', {class: 'state ' + chip, text: n.state})),
      h('td', {class: 'num', text: String(n.tries.length)}),
      h('td', {text: last ? `${fmtTime(last.at_us)} ${last.detail}` : '-'}),
      h('td', {text: fmtTime(n.happened_us)}),
      h('td', {},
        n.run_id ? h('a', {href: '#/run/' + n.run_id, text: n.summary}) : n.summary));
}

function addForm(redraw) {
  const scope = h(
      'select', {id: 'notify-scope'}, h('option', {value: 'mine', text: 'all my runs'}),
      h('option', {value: 'sweep', text: 'a sweep'}), h('option', {value: 'run', text: 'a run'}));
  const which = h('input', {id: 'notify-which', placeholder: 'sweep name or run id', size: 16});
  const boxes = EVENTS.map(
      (e) => h('label', {}, h('input', {type: 'checkbox', value: e, 'data-event': e}), ' ' + e));
  const channel = h(
      'select', {id: 'notify-channel'}, h('option', {value: 'webhook', text: 'webhook'}),
      h('option', {value: 'slack', text: 'Slack-compatible hook'}),
      h('option', {value: 'email', text: 'e-mail'}));
  const target = h('input', {id: 'notify-target', placeholder: 'https://… or name@host', size: 40});
  const add = h('button', {type: 'submit', text: 'Subscribe', id: 'notify-add'});
  const form = h(
      'form', {id: 'notify-form'}, h('div', {}, 'Tell me about ', scope, ' ', which),
      h('div', {class: 'events'}, ...boxes), h('div', {}, 'through ', channel, ' ', target, ' ', add));
  form.onsubmit = async (ev) => {
    ev.preventDefault();
    const body = {
      events: boxes.map((b) => b.firstChild).filter((i) => i.checked).map((i) => i.value).join(','),
      channel: channel.value,
      target: target.value.trim(),
    };
    const named = which.value.trim();
    if (scope.value === 'sweep') {
      if (!named) return show('Refused: give the sweep\'s name (or choose all my runs)');
      body.sweep = named;
    }
    if (scope.value === 'run') {
      if (!/^[1-9][0-9]*$/.test(named)) return show('Refused: give the run\'s id (a number)');
      body.run_id = Number(named);
    }
    if (await act('subscriptions', null, body)) {
      target.value = '';
      redraw();
    }
  };
  return form;
}

export async function viewNotify(main, scope) {
  const subs = h('div', {class: 'card'});
  const log = h('div', {class: 'card'});
  let draw = null;
  const redraw = () => draw().catch(() => {});
  main.append(
      h('h1', {text: 'Notifications'}),
      h('p', {class: 'muted',
              text: 'Webhook URLs carry their secret: they are shown up to their host. ' +
                  'The command line does the same: cart notify add | ls | test | log | rm.'}),
      h('div', {class: 'card'}, h('h2', {text: 'Subscribe'}), addForm(() => redraw())),
      h('h2', {text: 'My subscriptions'}), subs, h('h2', {text: 'Sent'}), log);
  draw = async () => {
    const [s, n] = await Promise.all([api('subscriptions'), api('notifications?limit=100')]);
    const subHeads = ['id', 'about', 'events', 'to', 'lost after / stuck × / slip', 'since', ''];
    subs.replaceChildren(table(
        subHeads,
        s.subscriptions.length ? s.subscriptions.map((x) => subscriptionRow(x, redraw)) :
                                 emptyRow(subHeads.length, 'No subscription yet.'),
        {id: 'subscriptions-table'}));
    const logHeads = ['id', 'sub', 'event', 'state', 'tries', 'last try', 'happened', 'summary'];
    log.replaceChildren(table(
        logHeads,
        n.notifications.length ? n.notifications.map(notificationRow) :
                                 emptyRow(logHeads.length, 'Nothing sent yet.'),
        {id: 'notifications-table'}));
  };
  await drawAndRefresh(scope, draw, 5000);
}
