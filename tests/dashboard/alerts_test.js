// ctest label `prometheus`: the shipped alert rules (dashboards/prometheus/alerts.yml) against real
// programs. promtool checks the file; a real Prometheus (Debian's) scrapes a real cartd and
// evaluates the rules; a real Alertmanager (Debian's prometheus-alertmanager) routes what fires to
// a webhook receiver of this test's own. A real cart-worker on the CPU first takes a run whose
// training data vanished (it FAILS: the failed-run alert arrives), then sits idle while a run it
// cannot fit waits (the idle-while-queued alert arrives, within 120 s). Every rule's expression
// parses and names only series cartd exports. The rules' `for:` durations are shortened to 5 s in
// the copy Prometheus loads, so that the test takes seconds instead of the lab's minutes.
'use strict';
const fs = require('fs');
const http = require('http');
const path = require('path');
const { spawn, execFileSync } = require('child_process');
const { Cluster, args, waitFor, freePort, tinySweep } = require('./lib');

const RULES = path.join(__dirname, '../../dashboards/prometheus/alerts.yml');

(async () => {
  const opts = args();
  const c = new Cluster(opts);
  const children = [];
  const failures = [];
  const check = (ok, what) => { console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`); if (!ok) failures.push(what); };
  const started = Date.now();
  try {
    // promtool: the file parses, each expression is valid PromQL.
    const promtool = execFileSync('/usr/bin/promtool', ['check', 'rules', RULES], { encoding: 'utf8' });
    check(/SUCCESS: \d+ rules found/.test(promtool), `promtool check rules: ${promtool.trim().split('\n').pop()}`);

    // The webhook receiver: Alertmanager POSTs each notification as JSON.
    const received = [];
    const hook = http.createServer((req, res) => {
      let body = '';
      req.on('data', (d) => { body += d; });
      req.on('end', () => {
        try { for (const a of JSON.parse(body).alerts) received.push({ at: Date.now(), status: a.status, labels: a.labels }); } catch (e) { /* not JSON: ignored */ }
        res.end('ok');
      });
    });
    const hookPort = await freePort();
    await new Promise((r) => hook.listen(hookPort, '127.0.0.1', r));

    await c.start();
    // A run whose data is gone by the time a worker opens it (max_attempts 1: it FAILS for good).
    c.synth(c.file('gone.bin'), 20000);
    fs.writeFileSync(c.file('broken.yaml'),
      tinySweep('broken', c.file('gone.bin'), 20) + 'max_attempts: 1\n');
    c.cart(['sweep', 'submit', c.file('broken.yaml')]);
    fs.rmSync(c.file('gone.bin'));
    fs.rmSync(c.file('gone.val.bin'), { force: true });
    // A run too big for the worker's 256 MiB at any micro-batch: it waits while the worker idles.
    c.synth(c.file('train.bin'), 20000);
    fs.writeFileSync(c.file('big.yaml'), tinySweep('big', c.file('train.bin'), 20)
      .replace('d: 64', 'd: 1024').replace('layers: 4', 'layers: 8'));
    c.cart(['sweep', 'submit', c.file('big.yaml')]);
    c.spawn('cart-worker', ['--server', `127.0.0.1:${c.grpcPort}`, '--token', c.workerToken, '--device', 'cpu',
      '--worker-id', 'testbox-0', '--threads', '1', '--cache-dir', c.file('worker-0'), '--acquire-wait-ms', '1000',
      '--memory-mib', '256', '--memory-reserve-mib', '0', '--sample-interval', '1', '--peak-tflops', '1',
      '--client-config', '/dev/null'], 'worker-0.log');

    // Alertmanager on loopback, clustering off, sending every group at once to the receiver.
    const amPort = await freePort();
    fs.writeFileSync(c.file('alertmanager.yml'), `route:
  receiver: hook
  group_by: [alertname, worker, run]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: http://127.0.0.1:${hookPort}/alerts
`);
    const amLog = fs.openSync(c.file('alertmanager.log'), 'w');
    children.push(spawn('/usr/bin/prometheus-alertmanager', [`--config.file=${c.file('alertmanager.yml')}`,
      `--storage.path=${c.file('am-data')}`, `--web.listen-address=127.0.0.1:${amPort}`, '--cluster.listen-address='],
      { stdio: ['ignore', amLog, amLog] }));

    // Prometheus: scrapes cartd every second and evaluates the shipped rules (for: shortened).
    fs.writeFileSync(c.file('alerts.yml'), fs.readFileSync(RULES, 'utf8').replace(/^(\s+for:) .*$/mg, '$1 5s'));
    const prom = await c.startPrometheus(`rule_files: [${c.file('alerts.yml')}]
alerting:
  alertmanagers:
    - static_configs:
        - targets: ['127.0.0.1:${amPort}']`);
    children.push(prom.proc);
    const promPort = prom.port;
    const query = async (q) => {
      const res = await fetch(`http://127.0.0.1:${promPort}/api/v1/query?query=${encodeURIComponent(q)}`);
      return res.json();
    };

    const arrived = (name) => received.find((a) => a.labels.alertname === name && a.status === 'firing');
    const failed = await waitFor('the CartRunFailed alert at the webhook', async () => arrived('CartRunFailed'), 120000);
    check(failed.labels.run === 'broken/0', `CartRunFailed arrived for run ${failed.labels.run} after ${((failed.at - started) / 1000).toFixed(1)} s`);
    const idleFrom = Date.now();
    const idle = await waitFor('the CartDeviceIdleWhileQueued alert at the webhook', async () => arrived('CartDeviceIdleWhileQueued'), 120000);
    check(idle.labels.worker === 'testbox-0' && idle.at - idleFrom <= 120000,
      `CartDeviceIdleWhileQueued arrived for ${idle.labels.worker} ${((idle.at - idleFrom) / 1000).toFixed(1)} s after the failure (<= 120 s)`);
    const stillQueued = JSON.parse(c.cart(['runs', 'ls', '--sweep', 'big', '--json']));
    check(JSON.stringify(stillQueued).includes('QUEUED'), 'the big run is still QUEUED: the worker cannot fit it');

    // The CPU worker's own series, through Prometheus.
    const util = await query('cart_device_utilization_ratio{worker="testbox-0"}');
    check(util.status === 'success' && util.data.result.length === 1,
      `cart_device_utilization_ratio{worker="testbox-0"} = ${util.data.result.length ? util.data.result[0].value[1] : 'none'}`);
    const rss = await query('cart_worker_process_resident_bytes{worker="testbox-0"}');
    check(rss.data.result.length === 1 && Number(rss.data.result[0].value[1]) > 1e6,
      `cart_worker_process_resident_bytes = ${rss.data.result.length ? rss.data.result[0].value[1] : 'none'}`);
    const idleSeconds = await query('cart_worker_idle_while_queued_seconds_total{worker="testbox-0"}');
    check(idleSeconds.data.result.length === 1 && Number(idleSeconds.data.result[0].value[1]) >= 5,
      `cart_worker_idle_while_queued_seconds_total = ${idleSeconds.data.result.length ? idleSeconds.data.result[0].value[1] : 'none'} s`);

    // Every rule's expression parses in Prometheus and evaluates without error. The series it
    // names that this cartd exports now are checked here; the ones cartd exports only when there
    // is something to say (a GPU's temperature and throttling, a run whose loss went non-finite
    // or that leaked) are checked by server_test's HttpTest.EveryAlertRuleNamesASeriesCartdExports,
    // which makes each of them happen.
    const exposition = await (await fetch(c.url + 'metrics', { headers: { Authorization: 'Bearer ' + c.userToken } })).text();
    const rules = (await (await fetch(`http://127.0.0.1:${promPort}/api/v1/rules`)).json()).data.groups.flatMap((g) => g.rules);
    check(rules.length >= 10, `Prometheus loaded ${rules.length} rules`);
    for (const rule of rules) {
      const res = await query(rule.query);
      const names = [...new Set(rule.query.match(/cart_[a-z_]+/g) || [])];
      const here = names.filter((n) => exposition.includes(`# TYPE ${n} `));
      check(rule.health === 'ok' && res.status === 'success',
        `rule ${rule.name}: ${rule.health}, ${res.status}; exported here: ${here.join(' ') || '-'}` +
        (here.length < names.length ? `; only with a GPU or a troubled run: ${names.filter((n) => !here.includes(n)).join(' ')}` : ''));
    }
    // This cartd has a failed run and a CPU device: those rules' series are all here.
    for (const name of ['cart_run_failed_timestamp_seconds', 'cart_worker_idle_while_queued', 'cart_worker_up',
      'cart_artifact_disk_free_bytes', 'cart_artifact_disk_floor_bytes', 'cart_artifact_quota_bytes']) {
      check(exposition.includes(`# TYPE ${name} `), `${name} is exported`);
    }
  } catch (e) {
    failures.push(String(e && e.stack ? e.stack : e));
  } finally {
    for (const p of children) p.kill('SIGTERM');
    await c.stop();
  }
  if (failures.length) {
    console.log('FAILED:\n' + failures.join('\n'));
    for (const log of ['cartd.log', 'worker-0.log', 'prometheus.log', 'alertmanager.log']) {
      console.log(`--- ${log}\n` + c.log(log).slice(-2000));
    }
    process.exit(1);
  }
  process.exit(0);
})();
