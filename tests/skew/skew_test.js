// Version skew between cartd and cart-worker, as a lab meets it when it upgrades its boxes one at
// a time: the build under test against the previous release (--prev-bin, built from git by
// tests/skew/run.sh), each side both ways, with real processes on loopback.
//   1. this cartd, a worker of the previous release: the run trains to the end, one attempt,
//      every loss point there once;
//   2. the previous cartd, this worker: the same;
//   3. an upgrade mid-run: the previous release's worker trains past a checkpoint and is
//      stopped, this release's worker takes the run over from the checkpoint; the loss series
//      ends complete, every step once;
//   4. a cartd that accepts only this protocol (min_worker_protocol: 2): the previous worker is
//      refused at registration naming both versions and exits; the run waits, uncharged.
'use strict';
const fs = require('fs');
const path = require('path');
const { Cluster, args, waitFor, sleep, tinySweep } = require('../dashboard/lib');

const failures = [];
const check = (ok, what) => { console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`); if (!ok) failures.push(what); };

// A run of `steps` steps that logs its loss every 4 steps and checkpoints every 100.
function sweep(name, data, steps) {
  return tinySweep(name, data, steps).replace('log_every: 2', 'log_every: 4').replace('checkpoint_every: 50', 'checkpoint_every: 100');
}

// The run's record and its loss steps (all of them: at most 20,000 points a read).
async function runAndLosses(c, name) {
  const run = (await c.api(`sweeps/${name}/runs`)).runs[0];
  const detail = await c.api(`runs/${run.id}`);
  const loss = await c.api(`runs/${run.id}/series?metric=loss&points=20000`);
  return { run, detail, steps: loss.step || [] };
}

// True when `steps` is exactly every 4th step from 4 to `total`, each once.
function complete(steps, total) {
  if (steps.length !== total / 4) return false;
  return steps.every((s, i) => s === 4 * (i + 1));
}

// Starts a cluster whose cartd is `cartdBin`'s, submits one run of `steps` steps and returns it.
async function cluster(opts, name, steps, cartdBin, config) {
  const c = new Cluster(Object.assign({}, opts, { out: path.join(opts.out, name) }));
  await c.start({ bin: cartdBin, config });
  c.synth(c.file('train.bin'), 50000);
  fs.writeFileSync(c.file('sweep.yaml'), sweep(name, c.file('train.bin'), steps));
  c.cart(['sweep', 'submit', c.file('sweep.yaml')]);
  return c;
}

async function trainsToTheEnd(opts, name, cartdBin, workerBin, what) {
  const steps = 400;
  const c = await cluster(opts, name, steps, cartdBin);
  try {
    c.startWorker('0', workerBin);
    await waitFor(`${name}: the run to finish`, async () => {
      const r = (await c.api(`sweeps/${name}/runs`)).runs[0];
      return r && ['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(r.state) ? r : null;
    }, 240000);
    const { run, detail, steps: losses } = await runAndLosses(c, name);
    check(run.state === 'SUCCEEDED' && detail.attempt === 1,
      `${what}: the run ${run.state} in attempt ${detail.attempt} (SUCCEEDED in 1 expected)`);
    check(complete(losses, steps), `${what}: ${losses.length} loss points of ${steps / 4}, every 4th step once`);
    const log = c.log('worker-0.log');
    console.log(`  worker says: ${(log.split('\n').find((l) => l.includes('registered')) || '(no registration line)').trim()}`);
  } finally {
    await c.stop();
  }
}

(async () => {
  const opts = args();
  const prev = opts['prev-bin'];
  if (!prev || !fs.existsSync(path.join(prev, 'cart-worker'))) {
    console.log(`skew: no previous release at --prev-bin ${prev}`);
    process.exit(1);
  }
  console.log(`this build: ${opts.bin}; previous release: ${prev}`);
  try {
    await trainsToTheEnd(opts, 'newcartd', opts.bin, prev, 'this cartd, previous worker');
    await trainsToTheEnd(opts, 'oldcartd', prev, opts.bin, 'previous cartd, this worker');

    // 3. Upgrade mid-run.
    {
      const steps = 2000;
      const c = await cluster(opts, 'upgrade', steps, opts.bin);
      try {
        const old = c.startWorker('old', prev);
        const id = (await c.api('sweeps/upgrade/runs')).runs[0].id;
        await waitFor('a checkpoint of the previous worker', async () => {
          const d = await c.api(`runs/${id}`);
          return d.checkpoints.length > 0 ? d : null;
        }, 240000);
        const exited = new Promise((resolve) => old.once('exit', resolve));
        old.kill('SIGTERM');
        await exited;
        c.startWorker('new');
        await waitFor('the run to finish on this worker', async () => {
          const r = (await c.api('sweeps/upgrade/runs')).runs[0];
          return r && ['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(r.state) ? r : null;
        }, 240000);
        const { run, detail, steps: losses } = await runAndLosses(c, 'upgrade');
        const from = /attempt 2, from step (\d+)/.exec(c.log('worker-new.log'));
        check(run.state === 'SUCCEEDED', `upgrade: the run ${run.state} after ${detail.attempt} attempts (SUCCEEDED expected)`);
        check(complete(losses, steps), `upgrade: ${losses.length} loss points of ${steps / 4}, every 4th step once`);
        check(from && Number(from[1]) > 0 && detail.checkpoints.length > 0,
          `upgrade: this worker took the run over from the previous worker's checkpoint (${from ? 'from step ' + from[1] : 'its log names no step'})`);
      } finally {
        await c.stop();
      }
    }

    // 4. A cartd that accepts only this protocol refuses the previous worker at registration.
    {
      const c = await cluster(opts, 'refused', 400, opts.bin, 'min_worker_protocol: 2\n');
      try {
        const old = c.startWorker('old', prev);
        const code = await Promise.race([new Promise((resolve) => old.once('exit', resolve)), sleep(60000).then(() => 'running')]);
        const log = c.log('worker-old.log');
        const said = (log.split('\n').find((l) => l.includes('protocol')) || '').trim();
        check(code !== 0 && code !== 'running', `refused: the previous worker exited (code ${code})`);
        check(/speaks worker protocol 1/.test(log) && /this cartd \S+ \(protocol 2\)/.test(log),
          `refused: its log names both versions: ${said}`);
        const run = (await c.api('sweeps/refused/runs')).runs[0];
        check(run.state === 'QUEUED', `refused: the run waits ${run.state}, no attempt charged`);
      } finally {
        await c.stop();
      }
    }
  } catch (e) {
    failures.push(String(e && e.stack || e));
    console.log(e);
  }
  if (failures.length) {
    console.log(`\n${failures.length} failure(s):\n  ${failures.join('\n  ')}`);
    process.exit(1);
  }
  console.log('skew suite passed');
})();
