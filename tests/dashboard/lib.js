// Shared by the dashboard tests: a real cartd (with tokens and the HTTP port), a real cart-worker
// training a tiny CART run on CPU, and the cart CLI, all on loopback ports of this machine.
'use strict';
const { spawn, execFileSync } = require('child_process');
const fs = require('fs');
const net = require('net');
const path = require('path');

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
    s.on('error', reject);
  });
}

function args() {
  const out = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) out[argv[i].replace(/^--/, '')] = argv[i + 1];
  for (const k of ['bin', 'web', 'out']) if (!out[k]) throw new Error(`usage: --bin DIR --web DIR --out DIR (missing --${k})`);
  return out;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what, fn, timeoutMs) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try { last = await fn(); if (last) return last; } catch (e) { last = e; }
    await sleep(250);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${last})`);
}

class Cluster {
  constructor(opts) {
    this.bin = opts.bin;
    this.web = opts.web;
    this.dir = opts.out;
    this.procs = [];
    this.userToken = 'user-token-browser-0123456789';
    this.workerToken = 'worker-token-browser-0123456789';
    fs.rmSync(this.dir, { recursive: true, force: true });
    fs.mkdirSync(this.dir, { recursive: true });
  }
  file(name) { return path.join(this.dir, name); }
  // Runs `exe` of `bin` (default: the build under test) with its output in the file `log`.
  spawn(exe, argv, log, bin) {
    const fd = fs.openSync(this.file(log), 'w');
    const p = spawn(path.join(bin || this.bin, exe), argv, { stdio: ['ignore', fd, fd] });
    this.procs.push(p);
    return p;
  }
  // opts.config: the text of a cartd config file to start with (its keys: cartd --help);
  // opts.users: how many more user tokens to make (this.moreUsers, users other-1, other-2, ...);
  // opts.bin: the folder of the cartd to start (default: the build under test).
  async start(opts) {
    this.grpcPort = await freePort();
    this.httpPort = await freePort();
    this.cartdBin = opts && opts.bin;
    this.moreUsers = Array.from({ length: (opts && opts.users) || 0 }, (_, i) => `user-token-other-${i + 1}-0123456789`);
    const more = this.moreUsers.map((t, i) => `${t} user other-${i + 1}\n`).join('');
    fs.writeFileSync(this.file('tokens'), `${this.userToken} user browser\n${this.workerToken} worker testbox\n${more}`);
    fs.chmodSync(this.file('tokens'), 0o600);
    fs.writeFileSync(this.file('client.yaml'), `server: 127.0.0.1:${this.grpcPort}\ntoken: ${this.userToken}\n`);
    const extra = [];
    if (opts && opts.config) {
      fs.writeFileSync(this.file('cartd.yaml'), opts.config);
      extra.push('--config', this.file('cartd.yaml'));
    }
    this.cartd = this.spawn('cartd', ['--listen', `127.0.0.1:${this.grpcPort}`, '--http', `127.0.0.1:${this.httpPort}`,
      '--data-dir', this.file('cartd'), '--tokens', this.file('tokens'), '--web-dir', this.web, '--lease-ttl', '20', ...extra], 'cartd.log',
      opts && opts.bin);
    this.url = `http://127.0.0.1:${this.httpPort}/`;
    await waitFor('cartd HTTP', async () => (await fetch(this.url + 'healthz')).ok, 30000);
  }
  // A cart-worker on one CPU thread; `bin`: the folder of the cart-worker to run (default: the
  // build under test).
  startWorker(id, bin) {
    return this.spawn('cart-worker', ['--server', `127.0.0.1:${this.grpcPort}`, '--token', this.workerToken, '--device', 'cpu',
      '--worker-id', `testbox-${id}`, '--threads', '1', '--cache-dir', this.file('worker-' + id), '--acquire-wait-ms', '1000',
      '--client-config', '/dev/null'], `worker-${id}.log`, bin);
  }
  // The cart CLI of cartd's build.
  cart(argv) {
    return execFileSync(path.join(this.cartdBin || this.bin, 'cart'), argv, { env: Object.assign({}, process.env, { CART_CONFIG: this.file('client.yaml') }), encoding: 'utf8' });
  }
  // A token file of a random chain (cart data synth) at `file`.
  synth(file, tokens) {
    this.cart(['data', 'synth', '--vocab', '32', '--tokens', String(tokens), '--val-tokens', '2000', '--out', file]);
  }
  async api(p, opts) {
    const res = await fetch(this.url + 'api/v1/' + p, Object.assign({ headers: { Authorization: 'Bearer ' + this.userToken } }, opts || {}));
    const body = await res.json();
    if (!res.ok) throw new Error(`${p}: HTTP ${res.status}: ${JSON.stringify(body)}`);
    return body;
  }
  // A real Prometheus (Debian's, temporary storage) scraping this cartd's /metrics every second
  // with the user token, as a deployment would; `extra`: more top-level config (rule_files,
  // alerting). Returns { proc, port }.
  async startPrometheus(extra) {
    const port = await freePort();
    fs.writeFileSync(this.file('token.txt'), this.userToken);
    fs.writeFileSync(this.file('prometheus.yml'), `global:
  scrape_interval: 1s
  evaluation_interval: 1s
${extra || ''}
scrape_configs:
  - job_name: cartd
    metrics_path: /metrics
    authorization:
      type: Bearer
      credentials_file: ${this.file('token.txt')}
    static_configs:
      - targets: ['127.0.0.1:${this.httpPort}']
`);
    const log = fs.openSync(this.file('prometheus.log'), 'w');
    const proc = spawn('/usr/bin/prometheus', [`--config.file=${this.file('prometheus.yml')}`,
      `--storage.tsdb.path=${this.file('tsdb')}`, `--web.listen-address=127.0.0.1:${port}`], { stdio: ['ignore', log, log] });
    return { proc, port };
  }
  log(name) { try { return fs.readFileSync(this.file(name), 'utf8'); } catch (e) { return ''; } }
  // Stops the workers, then cartd: SIGTERM, and SIGKILL for one still there after 20 s.
  async stop() {
    for (const p of this.procs.reverse()) {
      if (p.exitCode !== null || p.signalCode !== null) continue;
      const exited = new Promise((resolve) => p.once('exit', resolve));
      p.kill('SIGTERM');
      const timer = setTimeout(() => p.kill('SIGKILL'), 20000);
      await exited;
      clearTimeout(timer);
    }
  }
}

// A tiny CART run that trains long enough to be watched (minutes on one CPU thread).
function tinySweep(name, trainData, steps) {
  return `name: ${name}
base:
  model: cart
  vocab: 32
  d: 64
  P: 1
  R: 2
  layers: 4
  steps: ${steps}
  seq_len: 32
  batch: 4
  accum: 1
  lr: 3e-3
  warmup: 10
  log_every: 2
  eval_every: 0
  checkpoint_every: 50
  threads: 1
  train_data: ${JSON.stringify(trainData)}
seeds: [1]
`;
}

module.exports = { Cluster, args, waitFor, sleep, freePort, tinySweep };
