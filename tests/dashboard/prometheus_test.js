// ctest label `prometheus`: a real Prometheus (Debian's binary, temporary storage) scrapes a real
// cartd's /metrics (with a bearer token, as a deployment would) while a real worker trains a tiny
// run; the test reads the series back through Prometheus's HTTP API.
'use strict';
const fs = require('fs');
const { Cluster, args, waitFor, tinySweep } = require('./lib');

(async () => {
  const opts = args();
  const c = new Cluster(opts);
  let prom;
  const failures = [];
  const check = (ok, what) => { console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`); if (!ok) failures.push(what); };
  try {
    await c.start();
    // Without the token, /metrics is refused.
    const bare = await fetch(c.url + 'metrics');
    check(bare.status === 401, `/metrics without a token answers ${bare.status} (401 expected)`);

    c.synth(c.file('train.bin'), 100000);
    fs.writeFileSync(c.file('sweep.yaml'), tinySweep('prom', c.file('train.bin'), 20000));
    c.cart(['sweep', 'submit', c.file('sweep.yaml')]);
    c.startWorker('0');

    const started = await c.startPrometheus();
    prom = started.proc;
    const promPort = started.port;
    const query = async (q) => {
      const res = await fetch(`http://127.0.0.1:${promPort}/api/v1/query?query=${encodeURIComponent(q)}`);
      const body = await res.json();
      return body.status === 'success' ? body.data.result : [];
    };
    const running = await waitFor('cart_runs{state="RUNNING"} = 1 in Prometheus', async () => {
      const r = await query('cart_runs{state="RUNNING"}');
      return r.length && Number(r[0].value[1]) === 1 ? r : null;
    }, 120000);
    check(running.length === 1, 'Prometheus scraped cart_runs{state="RUNNING"} = 1');
    const loss = await waitFor('cart_run_loss of the running run', async () => {
      const r = await query('cart_run_loss{sweep="prom"}');
      return r.length ? r : null;
    }, 60000);
    check(loss[0].metric.run === 'prom/0' && Number(loss[0].value[1]) > 0,
      `cart_run_loss{run="${loss[0].metric.run}"} = ${loss[0].value[1]}`);
    const ingested = await waitFor('ingested points', async () => {
      const r = await query('cart_metric_points_ingested_total');
      return r.length && Number(r[0].value[1]) > 0 ? r : null;
    }, 30000);
    check(Number(ingested[0].value[1]) > 0, `cart_metric_points_ingested_total = ${ingested[0].value[1]}`);
    const p99 = await query('histogram_quantile(0.99, cart_ingest_latency_seconds_bucket)');
    check(p99.length === 1, `ingest latency p99 from the histogram: ${p99.length ? p99[0].value[1] : 'none'} s`);
    // Every query of the Grafana dashboard parses in Prometheus. The series it names that this
    // cartd (a CPU worker) exports are checked here; the GPU's (temperature, power) are exported
    // only with an NVML reading and are checked by server_test's
    // HttpTest.EveryAlertRuleAndGrafanaPanelNamesASeriesCartdExports.
    const exposition = await (await fetch(c.url + 'metrics', { headers: { Authorization: 'Bearer ' + c.userToken } })).text();
    const grafana = JSON.parse(fs.readFileSync(require('path').join(__dirname, '../../dashboards/grafana/cart-lab.json'), 'utf8'));
    const gpuOnly = ['cart_device_temperature_celsius', 'cart_device_power_watts'];
    for (const panel of grafana.panels) {
      for (const target of panel.targets) {
        const res = await (await fetch(`http://127.0.0.1:${promPort}/api/v1/query?query=${encodeURIComponent(target.expr)}`)).json();
        const names = (target.expr.match(/cart_[a-z_]+/g) || []).filter((n) => !gpuOnly.includes(n));
        const missing = names.filter((n) => !exposition.includes('\n' + n + ' ') && !exposition.includes('\n' + n + '{'));
        check(res.status === 'success' && missing.length === 0,
          `Grafana panel "${panel.title}": ${target.expr} (${res.status}${missing.length ? ', not exported: ' + missing.join(' ') : ''})`);
      }
    }
    const up = await query('up{job="cartd"}');
    check(up.length === 1 && up[0].value[1] === '1', 'the scrape target is up');
  } catch (e) {
    failures.push(String(e && e.stack ? e.stack : e));
  } finally {
    if (prom) prom.kill('SIGTERM');
    await c.stop();
  }
  if (failures.length) {
    console.log('FAILED:\n' + failures.join('\n'));
    console.log('--- cartd.log\n' + c.log('cartd.log').slice(-2000));
    console.log('--- prometheus.log\n' + c.log('prometheus.log').slice(-2000));
    process.exit(1);
  }
  process.exit(0);
})();
