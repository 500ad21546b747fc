// ctest label `attack`: the HTTP port attacked as a careless or hostile client would, against a
// real cartd (tokens on, http_idle_timeout 3 s) and a real cart-worker training a tiny run, all on
// loopback. Each attack runs while a normal client (127.0.0.1) reads the sweeps page over HTTP and
// lists sweeps over gRPC with the cart CLI; the suite fails when either takes longer than
// NORMAL_MS, when cartd's resident memory grows past RSS_GROWTH_MB over its start, or when an
// attack gets an answer it should not (a 500, a file outside the web folder, SQL in an error).
// Other loopback addresses (127.0.0.2, ...) stand for other client machines.
'use strict';
const fs = require('fs');
const net = require('net');
const path = require('path');
const { execFile } = require('child_process');
const { Cluster, args, waitFor, sleep, tinySweep } = require('./lib');

const IDLE_S = 3;            // cartd's http_idle_timeout in this suite
const NORMAL_MS = 2000;      // the most a normal client's read may take while an attack runs
const RSS_GROWTH_MB = 300;   // the most cartd's memory may grow over the whole suite
const PER_CLIENT = 256;      // cartd's default http_max_connections_per_client
const MAX_CONNECTIONS = 300; // the HTTP port's connection limit in this suite (http_max_connections)
const FOLLOWS = 64;          // cartd's default max_follows_per_caller

const failures = [];
const check = (ok, what) => { console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`); if (!ok) failures.push(what); };

function rssMb(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

// A raw TCP connection from `from`; resolves once connected. Collects what the server sends and
// notes when it closes.
function open(port, from) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port, localAddress: from });
    s.data = '';
    s.closedAt = null;
    s.on('data', (d) => { s.data += d.toString('latin1'); });
    s.on('close', () => { s.closedAt = Date.now(); });
    s.on('error', () => {});
    s.on('connect', () => resolve(s));
    setTimeout(() => resolve(s), 2000);
  });
}

// One request as raw bytes on a new connection; resolves with the status and body once the server
// closes (the request says Connection: close).
async function raw(port, text, from) {
  const s = await open(port, from || '127.0.0.1');
  s.write(text);
  await waitFor('the answer', async () => s.closedAt !== null, 10000).catch(() => {});
  s.destroy();
  const split = s.data.indexOf('\r\n\r\n');
  return { status: Number(s.data.slice(9, 12)) || 0, body: split < 0 ? '' : s.data.slice(split + 4) };
}

(async () => {
  const opts = args();
  const c = new Cluster(opts);
  const port = () => c.httpPort;
  const auth = () => `Authorization: Bearer ${c.userToken}\r\n`;
  let worst = { http: 0, grpc: 0 };
  try {
    await c.start({ config: `http_idle_timeout: ${IDLE_S}\nhttp_max_connections: ${MAX_CONNECTIONS}\n` });
    c.synth(c.file('train.bin'), 100000);
    fs.writeFileSync(c.file('sweep.yaml'), tinySweep('atk', c.file('train.bin'), 20000));
    c.cart(['sweep', 'submit', c.file('sweep.yaml')]);
    c.startWorker('0');
    const run = await waitFor('the run to train', async () => {
      const r = (await c.api('sweeps/atk/runs')).runs[0];
      return r && r.state === 'RUNNING' && r.step > 0 ? r : null;
    }, 120000);
    const rss0 = rssMb(c.cartd.pid);
    console.log(`cartd RSS at start ${rss0.toFixed(0)} MB; run ${run.name} at step ${run.step}`);

    // The normal client: one HTTP read and one gRPC read, each timed.
    const normal = async (during) => {
      const t0 = Date.now();
      const res = await fetch(c.url + 'api/v1/sweeps', { headers: { Authorization: 'Bearer ' + c.userToken } });
      await res.text();
      const http = Date.now() - t0;
      const t1 = Date.now();
      const grpcOk = await new Promise((resolve) => execFile(path.join(c.bin, 'cart'), ['sweep', 'ls'],
        { env: Object.assign({}, process.env, { CART_CONFIG: c.file('client.yaml') }), timeout: 10000 },
        (err, out) => resolve(!err && out.includes('atk'))));
      const grpc = Date.now() - t1;
      worst = { http: Math.max(worst.http, http), grpc: Math.max(worst.grpc, grpc) };
      check(res.status === 200 && http <= NORMAL_MS, `${during}: normal HTTP read ${res.status} in ${http} ms`);
      check(grpcOk && grpc <= NORMAL_MS, `${during}: normal gRPC read (cart sweep ls) in ${grpc} ms`);
    };

    // 1. Idle connections: one address opens its 64 and sends half a request line on each. The 65th
    // gets 429; others are unaffected; the watchdog closes the 64 within the idle timeout.
    {
      const t0 = Date.now();
      const idle = [];
      for (let i = 0; i < PER_CLIENT; ++i) { const s = await open(port(), '127.0.0.2'); s.write('GET /api/v1/swe'); idle.push(s); }
      await sleep(200);
      const extra = await raw(port(), 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n', '127.0.0.2');
      check(extra.status === 429, `idle: the ${PER_CLIENT + 1}th connection of one address gets ${extra.status} (429 expected)`);
      await normal('idle connections held');
      await waitFor('the idle connections to be cut', async () => idle.every((s) => s.closedAt !== null), (IDLE_S + 5) * 1000).catch(() => {});
      const latest = Math.max(...idle.map((s) => (s.closedAt || Infinity) - t0));
      check(idle.every((s) => s.closedAt !== null) && latest <= (IDLE_S + 3) * 1000,
        `idle: all ${PER_CLIENT} half-sent connections closed by cartd, the last after ${latest} ms (idle timeout ${IDLE_S} s)`);
      idle.forEach((s) => s.destroy());
    }

    // 2. Slow trickle: a header byte every 200 ms keeps each connection busy but never finishes a
    // request; the deadline covers the whole request, so they are cut all the same.
    {
      const t0 = Date.now();
      const slow = [];
      for (let i = 0; i < 20; ++i) { const s = await open(port(), '127.0.0.3'); s.write('GET /api/v1/sweeps HTTP/1.1\r\nX-Slow: '); slow.push(s); }
      const timer = setInterval(() => slow.forEach((s) => { if (s.closedAt === null) s.write('a'); }), 200);
      await normal('slow clients trickling');
      await waitFor('the trickling connections to be cut', async () => slow.every((s) => s.closedAt !== null), (IDLE_S + 5) * 1000).catch(() => {});
      clearInterval(timer);
      const latest = Math.max(...slow.map((s) => (s.closedAt || Infinity) - t0));
      check(latest <= (IDLE_S + 3) * 1000, `slow: 20 trickling connections cut, the last after ${latest} ms`);
      slow.forEach((s) => s.destroy());
    }

    // 3. Every connection taken: five addresses hold 70 half-sent requests each (350 > 300). A
    // newcomer is served at once, in place of the connection that has waited longest (it used
    // to be refused 503 until the idle timeout cut the flood).
    {
      const flood = [];
      for (let a = 0; a < 5; ++a) {
        for (let i = 0; i < 70; ++i) { const s = await open(port(), `127.0.1.${a + 1}`); s.write('G'); flood.push(s); }
      }
      await sleep(200);
      const newcomer = await raw(port(), 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
      const cut = flood.filter((s) => s.closedAt !== null).length;
      check(newcomer.status === 200, `capacity: with ${MAX_CONNECTIONS} half-sent connections held a newcomer gets ${newcomer.status} (200 expected)`);
      check(cut >= flood.length - MAX_CONNECTIONS + 1, `capacity: ${cut} of the flood's ${flood.length} connections closed to make room (at least ${flood.length - MAX_CONNECTIONS + 1})`);
      flood.forEach((s) => s.destroy());
      await sleep(300);
      await normal('after the capacity flood');
    }

    // 4. Oversized requests get their 4xx, not a closed connection.
    {
      const longUrl = await raw(port(), `GET /api/v1/sweeps?x=${'a'.repeat(20000)} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
      const bigHeader = await raw(port(), `GET /api/v1/sweeps HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ${'b'.repeat(20000)}\r\n\r\n`);
      const body = 'x'.repeat(2 << 20);
      const bigBody = await raw(port(), `POST /api/v1/runs/1/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\n${auth()}Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
      check(longUrl.status === 414, `oversized: a 20 KB URL gets ${longUrl.status} (414)`);
      check(bigHeader.status === 431, `oversized: a 20 KB header gets ${bigHeader.status} (431)`);
      check(bigBody.status === 413, `oversized: a 2 MiB body gets ${bigBody.status} (413)`);
      await normal('after oversized requests');
    }

    // 5. Stream flood: one token opens 80 live streams; 64 are served, the rest get 429, and
    // cartd's memory stays bounded while they stream.
    {
      const streams = [];
      const req = `GET /api/v1/sweeps/atk/live?metrics=loss HTTP/1.1\r\nHost: 127.0.0.1\r\n${auth()}\r\n`;
      for (let i = 0; i < 80; ++i) { const s = await open(port(), '127.0.0.4'); s.write(req); streams.push(s); }
      await waitFor('the streams to answer', async () => streams.every((s) => s.data.length > 0 || s.closedAt !== null), 15000).catch(() => {});
      const ok = streams.filter((s) => s.data.startsWith('HTTP/1.1 200')).length;
      const limited = streams.filter((s) => s.data.startsWith('HTTP/1.1 429')).length;
      check(ok === FOLLOWS && limited === 80 - FOLLOWS, `streams: ${ok} live streams served, ${limited} refused 429 (64 and 16 expected)`);
      await sleep(2500);  // they stream an update or two
      await normal('64 live streams open');
      const rss = rssMb(c.cartd.pid);
      check(rss - rss0 <= RSS_GROWTH_MB, `streams: cartd RSS ${rss.toFixed(0)} MB (+${(rss - rss0).toFixed(0)} MB)`);
      streams.forEach((s) => s.destroy());
    }

    // 6. Path traversal in its variants: never a file outside the web folder.
    {
      const secret = c.userToken;
      const paths = ['/static/../tokens', '/static/%2e%2e/tokens', '/static/..%2ftokens', '/static/%252e%252e/tokens',
        '/static/....//tokens', '/node_modules/uplot/dist/../../../../tokens', '/static//etc/passwd', '/static/%2fetc%2fpasswd',
        '/index.html%00.js', '/static/..\\..\\tokens', '/%2e%2e/%2e%2e/etc/passwd', '/static/', '/static', '/vendor/../tokens'];
      for (const p of paths) {
        const r = await raw(port(), `GET ${p} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
        check((r.status === 400 || r.status === 404) && !r.body.includes(secret) && !r.body.includes('root:'),
          `traversal: GET ${p} -> ${r.status}`);
      }
    }

    // 7. Hostile query parameters: 400 naming the problem, never a 500, never SQL.
    {
      const many = Array.from({ length: 40 }, (_, i) => `param.k${i}=v`).join('&');
      const queries = ['runs?limit=-1', 'runs?limit=99999999999999999999', 'runs?offset=-5', "runs?sort=param:'%3B%20DROP%20TABLE%20runs%3B--",
        'runs?sort=metric:%00', `runs?${many}`, 'runs?state=ALL', 'runs?order=sideways', 'groups?by=R&points=1000000000',
        'pivot?rows=d&cols=R&value=mean', `runs?metrics=${'m,'.repeat(40)}`, 'pivot?rows=%FF%FE&cols=R'];
      for (const q of queries) {
        const r = await raw(port(), `GET /api/v1/sweeps/atk/${q} HTTP/1.1\r\nHost: 127.0.0.1\r\n${auth()}Connection: close\r\n\r\n`);
        const sql = /SELECT|sqlite|FROM |WHERE /i.test(r.body);
        check(r.status >= 400 && r.status < 500 && !sql, `query: ${q.slice(0, 60)} -> ${r.status}${sql ? ' (SQL in the answer)' : ''}`);
      }
    }

    // 8. Hostile JSON bodies on changes: 4xx, never a 500, and the run keeps training.
    {
      const bodies = ['not json', '['.repeat(100000), '{"reason": 5}', '{"reason": "' + 'r'.repeat(5000) + '"}',
        '{"total_steps": 1e400}', '{"total_steps": -1}', '{"total_steps": "many"}', '[]', 'null', '{"a":' + '{"a":'.repeat(5000) + '1' + '}'.repeat(5001)];
      for (const [i, b] of bodies.entries()) {
        const action = i >= 4 && i <= 6 ? 'extend' : 'cancel';
        const r = await raw(port(), `POST /api/v1/runs/${run.id}/${action} HTTP/1.1\r\nHost: 127.0.0.1\r\n${auth()}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(b)}\r\nConnection: close\r\n\r\n${b}`);
        check(r.status >= 400 && r.status < 500, `json: ${action} with ${JSON.stringify(b.slice(0, 30))}… -> ${r.status}`);
      }
      const still = (await c.api(`runs/${run.id}`));
      check(still.state === 'RUNNING' && !still.cancel_requested, `json: run ${run.id} is still ${still.state} after the hostile bodies`);
    }

    // 9. Host and Origin forgeries (DNS rebinding, cross-site posts).
    {
      const rebound = await raw(port(), `GET /api/v1/sweeps HTTP/1.1\r\nHost: evil.example\r\n${auth()}Connection: close\r\n\r\n`);
      const both = await raw(port(), `POST /api/v1/runs/${run.id}/cancel HTTP/1.1\r\nHost: evil.example:${port()}\r\nOrigin: http://evil.example:${port()}\r\n${auth()}Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`);
      const cross = await raw(port(), `POST /api/v1/runs/${run.id}/cancel HTTP/1.1\r\nHost: 127.0.0.1:${port()}\r\nOrigin: http://evil.example\r\n${auth()}Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`);
      const page = await raw(port(), `GET / HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n`);
      check(rebound.status === 403, `host: Host evil.example -> ${rebound.status} (403)`);
      check(both.status === 403, `host: POST with Host and Origin both evil.example -> ${both.status} (403)`);
      check(cross.status === 403, `origin: POST from Origin evil.example -> ${cross.status} (403)`);
      check(page.status === 403, `host: the page itself under evil.example -> ${page.status} (403)`);
    }

    // 10. Parallel scrapers: 32 loops for 5 s over the heaviest reads (every run with every
    // param, groups, series, /metrics). Extra large reads get 429; the normal client and memory
    // hold.
    {
      const targets = ['api/v1/sweeps/atk/runs?limit=5000&params=all', 'api/v1/sweeps/atk/groups?by=seed&points=1000',
        `api/v1/runs/${run.id}/series?metric=loss&max_points=5000`, 'metrics', 'api/v1/sweeps'];
      const counts = {};
      const errors = new Set();  // why a read got no answer at all
      const end = Date.now() + 5000;
      const loops = Array.from({ length: 32 }, (_, i) => (async () => {
        while (Date.now() < end) {
          const r = await fetch(c.url + targets[i % targets.length], { headers: { Authorization: 'Bearer ' + c.userToken } })
            .catch((e) => { errors.add(String((e.cause && (e.cause.code || e.cause.message)) || e.message)); return null; });
          const code = r ? r.status : 0;
          if (r) await r.arrayBuffer();
          counts[code] = (counts[code] || 0) + 1;
        }
      })());
      await sleep(1000);
      await normal('32 parallel scrapers');
      await Promise.all(loops);
      const total = Object.values(counts).reduce((a, b) => a + b, 0);
      check(!counts[500] && !counts[0], `scrapers: ${total} reads in 5 s, by status ${JSON.stringify(counts)}${errors.size ? ', failed: ' + [...errors].join('; ') : ''}`);
      const rss = rssMb(c.cartd.pid);
      check(rss - rss0 <= RSS_GROWTH_MB, `scrapers: cartd RSS ${rss.toFixed(0)} MB (+${(rss - rss0).toFixed(0)} MB)`);
    }

    // 11. A busy client: its event loop is blocked just as a kept connection nears the idle
    // timeout, and its next read goes out the moment it wakes. cartd's Keep-Alive hint has the
    // client retire the connection first, so the read gets a fresh one instead of a closing one.
    {
      const codes = [];
      for (const blockMs of [300, 500, 700]) {
        await fetch(c.url + 'healthz').then((r) => r.text());
        await sleep(IDLE_S * 1000 - 200);
        const t = Date.now();
        while (Date.now() - t < blockMs) { /* busy */ }
        const r = await fetch(c.url + 'healthz').catch(() => null);
        codes.push(r ? r.status : 0);
        if (r) await r.text();
      }
      check(codes.every((code) => code === 200), `busy client: reads after a blocked event loop -> ${codes.join(', ')} (200 each)`);
    }

    // The worker trained through it all.
    const after = (await c.api(`runs/${run.id}`));
    check(after.step > run.step, `the run trained on through the suite (step ${run.step} -> ${after.step})`);
    console.log(`worst normal-client times: HTTP ${worst.http} ms, gRPC ${worst.grpc} ms (bound ${NORMAL_MS} ms)`);
  } catch (e) {
    failures.push(String(e && e.stack || e));
    console.log(e);
  } finally {
    await c.stop();
  }
  if (failures.length) {
    console.log(`\n${failures.length} failure(s):\n  ${failures.join('\n  ')}`);
    console.log(c.log('cartd.log').slice(-3000));
    process.exit(1);
  }
  console.log('attack suite passed');
})();
