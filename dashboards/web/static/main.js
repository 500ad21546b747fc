// CART Lab dashboard: one page, seven views (#/ sweeps, #/sweep/NAME, #/run/ID, #/compare/A/B,
// #/study, #/workers, #/notify), all read from cartd's JSON API (docs/dashboard.md). ES modules, no build step: this
// file routes;
// each view is a module under pages/, on shared modules for the DOM, the API, tables and charts.
import {fail, show} from './notice.js';
import {viewCompare} from './pages/compare.js';
import {viewNotify} from './pages/notify.js';
import {viewRun} from './pages/run.js';
import {viewStudy} from './pages/study.js';
import {viewSweep} from './pages/sweep.js';
import {viewSweeps} from './pages/sweeps.js';
import {viewWorkers} from './pages/workers.js';
import {setupToken, takeTokenFromAddress} from './token.js';
import {Scope} from './view.js';

const main = document.getElementById('main');
let scope = new Scope();  // what the current view must stop when the route changes

async function route() {
  scope.leave();
  scope = new Scope();
  show('');
  main.replaceChildren();
  const hash = location.hash.replace(/^#/, '') || '/';
  const parts = hash.split('/').filter(Boolean).map(decodeURIComponent);
  document.querySelectorAll('[data-nav]').forEach((a) => {
    a.classList.toggle('active', (parts[0] || 'sweeps').split('?')[0] === a.dataset.nav);
  });
  try {
    if (parts[0] === 'sweep' && parts[1]) {
      await viewSweep(main, scope, parts[1]);
    } else if (parts[0] === 'run' && parts[1]) {
      await viewRun(main, scope, parts[1]);
    } else if (parts[0] === 'compare' && parts[1] && parts[2]) {
      await viewCompare(main, scope, parts[1], parts[2].split('?')[0]);
    } else if (parts[0] && parts[0].split('?')[0] === 'study') {
      await viewStudy(main, scope);
    } else if (parts[0] === 'workers') {
      await viewWorkers(main, scope);
    } else if (parts[0] === 'notify') {
      await viewNotify(main, scope);
    } else {
      await viewSweeps(main, scope);
    }
  } catch (e) {
    fail(e);
  }
  document.body.dataset.ready = hash;
}

// A banner while cartd's disk is full (its /healthz says so, without a token): what still
// works and what waits. Looked at every 10 s, whatever the view.
const storeFull = document.getElementById('store-full');
async function watchStore() {
  try {
    const res = await fetch('/healthz', {cache: 'no-store'});
    const store = res.ok ? (await res.json()).store : null;
    storeFull.hidden = !(store && store.full);
    if (store && store.full) {
      const mib = (b) => Math.round(b / 2 ** 20) + ' MiB';
      storeFull.textContent = `cartd's disk is full (${mib(store.free_bytes || 0)} free, ` +
          `${mib(store.needed_bytes)} needed): pages still read, but submits, changes and ` +
          'new jobs wait, and running workers keep their results until cartd can store them. ' +
          'It carries on by itself once there is room.';
    }
  } catch (e) {
    // cartd unreachable: the views say so themselves.
  }
}

takeTokenFromAddress();
setupToken(route);
window.addEventListener('hashchange', route);
route();
watchStore();
setInterval(watchStore, 10000);
