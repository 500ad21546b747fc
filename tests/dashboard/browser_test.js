// ctest label `browser`: headless Debian chromium (playwright-core) against a real cartd with a
// real worker training a tiny run. Checks that the run page's loss chart gains points while the
// test watches, that Cancel is refused without a token and works with one, that a config value
// holding <script> is shown as text, that the Data table shows the run's recorded training file,
// that tags and a note written on the run page reach cartd and filter the runs table, that a
// finished grid fills the pivot, groups and parallel-coordinates tabs, and that a tab left stops
// its refresh, and that a subscription made on the notifications page delivers a test to a
// webhook here. Screenshots of every page go to --out.
'use strict';
const fs = require('fs');
const http = require('http');
const path = require('path');
const {chromium} = require('playwright-core');
const {Cluster, args, waitFor, tinySweep} = require('./lib');

(async () => {
  const opts = args();
  const c = new Cluster(opts);
  let browser;
  const failures = [];
  const check = (ok, what) => {
    console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
    if (!ok) failures.push(what);
  };
  try {
    await c.start();
    // The training file's path holds markup: it reaches the page through the run's config.
    const evilDir = c.file('<script>alert(1)<');
    fs.mkdirSync(evilDir, {recursive: true});
    const data = c.file('<script>alert(1)</script>.bin');
    c.synth(data, 200000);
    fs.writeFileSync(
        c.file('sweep.yaml'), tinySweep('browser', data, 20000) + 'budget_device_hours: 50\n');
    c.cart(['sweep', 'submit', c.file('sweep.yaml')]);
    c.startWorker('0');
    const runs = await waitFor('the run to start', async () => {
      const r = await c.api('sweeps/browser/runs');
      return r.runs[0].state === 'RUNNING' && r.runs[0].step > 0 ? r : null;
    }, 120000);
    const runId = runs.runs[0].id;

    browser = await chromium.launch({
      executablePath: '/usr/bin/chromium',
      args: [
        '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync'
      ],
    });
    const page = await browser.newPage({viewport: {width: 1400, height: 1000}});
    const dialogs = [];
    let acceptNextDialog = false;  // a confirm the test answers yes (Remove)
    page.on('dialog', (d) => {
      dialogs.push(d.message());
      if (acceptNextDialog) {
        acceptNextDialog = false;
        d.accept();
      } else {
        d.dismiss();
      }
    });
    page.on('pageerror', (e) => failures.push('page error: ' + e.message));
    const open = async (hash) => {
      await page.goto(c.url + hash);
      await page.waitForFunction(
          (h) => document.body.dataset.ready === h, hash.replace(/^#/, '') || '/');
    };
    const shot = (name) =>
        page.screenshot({path: path.join(opts.out, name + '.png'), fullPage: true});

    // Without a token the API refuses, and the page says so.
    await open('#/');
    await waitFor('the token notice', () => page.locator('#notice').isVisible(), 10000);
    check(
        (await page.textContent('#notice')).includes('token'),
        'without a token the sweeps page asks for one');
    await page.fill('#token-input', c.userToken);
    await page.click('#token-save');
    await waitFor(
        'the sweeps table', () => page.locator('a[href="#/sweep/browser"]').count(), 10000);
    // The running sweep shows when cartd's plan expects it to finish ("in 7m 43s", the moment
    // in its tooltip), and its table fits the page's card at 1400 px.
    const finish = await page.locator('tbody tr td:nth-child(6)').first().textContent();
    check(/^in \d/.test(finish), `the sweeps page shows an expected finish ("${finish}")`);
    // Its device-hour budget: what is left of the 50 while its run spends and holds some.
    const left = await page.locator('tbody tr td.budget').first().textContent();
    check(
        /^\d+\.\d \/ 50\.0 h$/.test(left) && parseFloat(left) > 0,
        `the sweeps page shows the budget left ("${left}")`);
    const fits = await page.evaluate(() => {
      const card = document.querySelector('main .card');
      const table = card.querySelector('table');
      return table.getBoundingClientRect().right <= card.getBoundingClientRect().right + 0.5 &&
          document.documentElement.scrollWidth <= window.innerWidth;
    });
    check(fits, 'the sweeps table fits its card and the page needs no sideways scroll');
    await shot('sweeps');

    await open('#/sweep/browser');
    await waitFor('the runs table', () => page.locator('#runs-table tbody tr').count(), 10000);
    const budget = (await page.textContent('#sweep-budget')) || '';
    check(
        budget.startsWith('Budget: ') && budget.includes('h left of 50.0 h') &&
            budget.includes('held by running runs'),
        `the sweep page says its budget ("${budget}")`);
    await shot('sweep-runs');
    await page.click('button[data-tab=live]');
    await waitFor('a live chart', () => page.locator('.uplot').count(), 15000);
    await page.waitForTimeout(2500);
    await shot('sweep-live');
    await open('#/workers');
    await waitFor(
        'the workers table', () => page.locator('#workers-table tbody tr td').count(), 10000);
    // The CPU worker's device readings: a utilisation sparkline with its latest value, memory in
    // use, and the MFU of the run it trains (its series comes with its steps' tokens/s).
    const row = page.locator('#workers-table tbody tr[data-worker="testbox-0"]');
    await waitFor(
        'the worker\'s utilisation sparkline',
        () => row.locator('td.spark-cell svg.util polyline').count(), 20000);
    const util = await row.locator('td.spark-cell').first().textContent();
    check(
        /^\d+ %$/.test(util.trim()),
        `the workers page shows the device's utilisation ("${util.trim()}")`);
    const mem = await row.locator('td.spark-cell').nth(1).textContent();
    check(/GiB$/.test(mem.trim()), `and its memory in use ("${mem.trim()}")`);
    const mfu = await waitFor('the run\'s MFU on the workers page', async () => {
      await page.reload();
      await page.waitForSelector('#workers-table');
      const t = (await page.locator('#workers-table tbody tr[data-worker="testbox-0"] td.mfu')
                     .textContent())
                    .trim();
      return /%$/.test(t) ? t : null;
    }, 60000);
    check(/^\d+\.\d %$/.test(mfu), `and the MFU of its run ("${mfu}")`);
    // Beside it, the same run's MFU by the paper's count (6 x effective parameters), labelled.
    const mfu6n = (await page.locator('#workers-table tbody tr[data-worker="testbox-0"] td.mfu-6n')
                       .textContent())
                      .trim();
    check(/^\d+\.\d %$/.test(mfu6n) && mfu6n !== mfu, `and its 6N MFU ("${mfu6n}")`);
    const heads = await page.locator('#workers-table thead th').allTextContents();
    check(
        heads.some((t) => t.includes('MFU 6N')) && heads.some((t) => t.includes('MFU full attn')),
        `each MFU column names its count (${JSON.stringify(heads)})`);
    await shot('workers');

    // The run page's loss chart gains points while we watch.
    await open(`#/run/${runId}`);
    // What the run used: this machine's kernel has no RAPL, so the energy is not measured and
    // the page says so rather than showing a figure; the device-hours are there.
    const spent = (await page.textContent('#run-spending')) || '';
    check(
        /^Spent: energy not measured · [0-9.]+ device-hours$/.test(spent) &&
            (await page.locator('td.energy').first().textContent()) === 'not measured',
        `the run page says what the run used ("${spent}")`);
    const points = () => page.evaluate(() => window.cartDashboard.points('loss'));
    const first = await points();
    const grown = await waitFor(
        'new loss points', async () => ((await points()) >= first + 3 ? await points() : null),
        60000);
    check(grown >= first + 3, `the loss chart grew from ${first} to ${grown} points while watched`);
    await shot('run');

    // The config value with markup is text, and nothing ran.
    const config = await page.textContent('#run-config');
    check(
        config.includes('<script>alert(1)</script>.bin'),
        'the <script> config value is shown as text');
    check(
        await page.evaluate(() => document.querySelectorAll('main script').length) === 0,
        'no script element was created from data');
    check(dialogs.length === 0, 'no dialog was opened by page data');

    // Data lineage: the training file was bound to the run at submit; the Data table shows it.
    const detail = await c.api(`runs/${runId}`);
    const train = detail.data.find((d) => d.role === 'train');
    check(
        train && /^[0-9a-f]{64}$/.test(train.sha256) && train.recorded_by === 'submit' &&
            train.tokens === 200000,
        `the run's training file was recorded at submit (${train && train.sha256}, ${
            train && train.tokens} tokens)`);
    const dataRow = train ? await page.textContent('tr.data-file') : '';
    check(
        dataRow.includes('<script>alert(1)</script>.bin') &&
            dataRow.includes(train.sha256.slice(0, 16)),
        'the Data table shows the file, its markup as text, and its sha256');

    // The attempt's environment record: in the API, and on the page under Environment.
    const env = new Map((detail.attempts[0] && detail.attempts[0].environment) || []);
    check(
        env.get('device') === 'cpu' && /^[0-9a-f]{64}$/.test(env.get('cart.binary_sha256') || '') &&
            (env.get('torch.version') || '').length > 0,
        `the attempt's environment is recorded (torch ${env.get('torch.version')}, device ${
            env.get('device')})`);
    const envText = await page.textContent('details.environment').catch(() => '');
    check(
        envText.includes('torch.version') && envText.includes(env.get('torch.version')) &&
            envText.includes('blas.library'),
        'the run page shows the attempt\'s environment');

    // Cancel without the token: refused, and the run keeps running.
    await page.click('#token-forget');
    await page.click('#run-cancel');
    await waitFor(
        'the refusal', async () => (await page.textContent('#notice')).includes('Refused'), 10000);
    const refusal = await page.textContent('#notice');
    check(
        /Refused/.test(refusal) && /token|authorization/i.test(refusal),
        `cancel without a token is refused ("${refusal.trim()}")`);
    const still = await c.api(`runs/${runId}`);
    check(
        still.state === 'RUNNING' && !still.cancel_requested,
        `the run is still ${still.state} after the refused cancel`);

    // With the token: the run is CANCELLED (the worker checkpoints and reports).
    await page.fill('#token-input', c.userToken);
    await page.click('#token-save');
    await open(`#/run/${runId}`);
    await page.click('#run-cancel');
    const done = await waitFor(
        'CANCELLED',
        async () => ((await c.api(`runs/${runId}`)).state === 'CANCELLED' ? 'CANCELLED' : null),
        60000);
    check(done === 'CANCELLED', 'cancel with the token moves the run to CANCELLED');
    await waitFor(
        'the page to show CANCELLED',
        async () => (await page.textContent('h1 + span')).includes('CANCELLED'), 20000);
    await shot('run-cancelled');

    // Tags and a note, written on the run page with the token, shown with who wrote them, and
    // the runs table filtered by the tag.
    await page.fill('#tag-add', 'leak');
    await page.click('#tag-add-button');
    await waitFor('the tag chip', () => page.locator('#tags .tag').count(), 10000);
    const note = 'overlaps val <b>wiki</b>: rerun';
    await page.fill('#note-text', note);
    await page.click('#note-save');
    await waitFor(
        'the note\'s writer', async () => (await page.textContent('#note-who')).includes('user:'),
        10000);
    const annotated = await c.api(`runs/${runId}`);
    check(
        JSON.stringify(annotated.tags) === '["leak"]',
        `the tag reached cartd (${JSON.stringify(annotated.tags)})`);
    check(
        annotated.annotation.note.text === note, 'the note reached cartd as typed, markup as text');
    check(
        /user:browser/.test(await page.textContent('#note-who')),
        'the page says who wrote the note');
    await shot('run-annotated');
    await open('#/sweep/browser');
    await page.fill('#tag-filter', 'leak');
    await page.click('#filter-apply');
    await waitFor(
        'the filtered table',
        async () => (await page.locator('#runs-table tbody tr td.tags').first().textContent())
                        .includes('leak'),
        10000);
    check(
        await page.locator('#runs-table tbody tr').count() === 1,
        'the runs table filtered by the tag shows the tagged run only');
    await shot('sweep-runs-tagged');
    await open(`#/run/${runId}`);
    await page.click('#tags .tag-remove');
    await waitFor(
        'the tag to go', async () => (await page.locator('#tags .tag').count()) === 0, 10000);
    check((await c.api(`runs/${runId}`)).tags.length === 0, 'the tag is removed from the run page');

    // A finished grid (layers x R, two seeds) in the sweep page's other tabs: the pivot table holds
    // a mean ± half its 95 % interval per cell, the groups chart a curve per R, parallel
    // coordinates a line per run.
    const grid = tinySweep('tabs', data, 30)
                     .replace('seeds: [1]', 'grid:\n  layers: [2, 4]\n  R: [1, 2]\nseeds: [1, 2]');
    fs.writeFileSync(c.file('tabs.yaml'), grid);
    c.cart(['sweep', 'submit', c.file('tabs.yaml')]);
    await waitFor('the grid to finish', async () => {
      const r = await c.api('sweeps/tabs/runs');
      return r.runs.length === 8 && r.runs.every((x) => x.state === 'SUCCEEDED') ? r : null;
    }, 180000);
    await open('#/sweep/tabs');
    await waitFor(
        'the runs table', async () => (await page.locator('#runs-table tbody tr').count()) === 8,
        10000);
    // Leaving the Runs tab stops its refresh (every 10 s): no runs page is asked for after.
    let refreshes = 0;
    page.on('request', (r) => {
      if (/\/api\/v1\/sweeps\/tabs\/runs\?offset=/.test(r.url())) ++refreshes;
    });
    await page.click('button[data-tab=pivot]');
    await waitFor('the pivot table', () => page.locator('#pivot-table tbody td').count(), 10000);
    const cells = await page.locator('#pivot-table tbody td').allTextContents();
    check(
        cells.length === 4 && cells.every((t) => /^\d+\.\d{4} ± \d+\.\d{3} n 2$/.test(t)),
        `the pivot of ρ by layers x R has a mean ± half its interval and n in each of its 4 cells (${
            JSON.stringify(cells)})`);
    // The ± is half the 95 % interval of the mean over two runs: t(0.975, 1) · s / √2, with
    // t(0.975, 1) = 12.706204736174698 (SciPy), from the server's own std.
    const piv = await c.api('sweeps/tabs/pivot?metric=rho_max&rows=layers&cols=R&value=latest');
    const flat = piv.cells.flat();
    check(
        flat.length === 4 &&
            flat.every(
                (x) => x.n === 2 &&
                    Math.abs(
                        (x.ci_high - x.ci_low) / 2 - 12.706204736174698 * x.std / Math.SQRT2) <=
                        1e-9 * (1 + x.std) &&
                    Math.abs((x.ci_high + x.ci_low) / 2 - x.mean) <=
                        1e-12 * (1 + Math.abs(x.mean))),
        `the pivot's intervals are mean ± t(0.975, 1) · std / √2 (${JSON.stringify(flat)})`);
    check(
        cells.every(
            (t, i) => t.startsWith(`${flat[i].mean.toFixed(4)} ± ${
                ((flat[i].ci_high - flat[i].ci_low) / 2).toFixed(3)}`)),
        'each pivot cell shows its mean and the half width of its interval');
    await shot('sweep-pivot');
    await page.click('button[data-tab=groups]');
    await waitFor('the groups chart', () => page.locator('.uplot').count(), 10000);
    const legend = await page.locator('.uplot .u-legend').textContent();
    check(
        legend.includes('R=1 (4 runs)') && legend.includes('R=2 (4 runs)'),
        'the groups chart has a curve per R over 4 runs each');
    await shot('sweep-groups');
    await page.click('button[data-tab=parallel]');
    await waitFor(
        'the parallel coordinates', () => page.locator('#parallel-svg polyline').count(), 10000);
    check(
        await page.locator('#parallel-svg polyline').count() === 8,
        'parallel coordinates draw one line per run');
    await shot('sweep-parallel');
    // The sweep file's tab: where it came from at submit (path and sha256 here), then its text.
    await page.click('button[data-tab=spec]');
    await waitFor('the provenance table', () => page.locator('tr.provenance-item').count(), 10000);
    const origin = await page.locator('main').textContent();
    const sha = require('crypto')
                    .createHash('sha256')
                    .update(fs.readFileSync(c.file('tabs.yaml')))
                    .digest('hex');
    check(
        origin.includes('Submitted from') && origin.includes(sha) &&
            origin.includes(c.file('tabs.yaml')),
        `the Sweep file tab shows where the file came from (its path and sha256 ${
            sha.slice(0, 12)}…)`);
    await shot('sweep-file');
    await page.waitForTimeout(11000);
    check(
        refreshes === 0,
        `the Runs tab stopped refreshing when another tab opened (${refreshes} refreshes after)`);

    // Two runs compared (docs/dashboard.md "Comparing two runs"), reached from the run page: the
    // seed is the one config key that differs, the loss curves are overlaid, and the step where
    // they part is the first step both logged (another seed, another first batch).
    const tabs = (await c.api('sweeps/tabs/runs')).runs;
    const [ra, rb] = [tabs.find((r) => r.name === 'tabs/0'), tabs.find((r) => r.name === 'tabs/1')];
    await open(`#/run/${ra.id}`);
    await page.fill('#compare-with', String(rb.id));
    await page.click('#run-compare');
    await page.waitForFunction(
        (h) => document.body.dataset.ready === h, `/compare/${ra.id}/${rb.id}`);
    await waitFor(
        'the overlaid curves', () => page.locator('#compare-chart .uplot').count(), 10000);
    const cmp = await c.api(`compare?a=${ra.id}&b=${rb.id}`);
    check(
        cmp.config.length === 1 && cmp.config[0].key === 'seed',
        `the compare API names the seed as the one config key that differs (${
            JSON.stringify(cmp.config)})`);
    check(
        cmp.series.first_different_step === cmp.series.a.steps[0] &&
            cmp.series.common_steps === cmp.series.a.steps.length && cmp.series.common_steps >= 10,
        `the losses part at the first step both logged (${cmp.series.first_different_step}, ${
            cmp.series.common_steps} in common)`);
    const verdictText = await page.textContent('#compare-verdict');
    check(
        verdictText.includes(`the series part at step ${cmp.series.first_different_step}`),
        `the compare view says where the series part ("${verdictText}")`);
    const cmpLegend = await page.locator('#compare-chart .u-legend').textContent();
    check(
        cmpLegend.includes(`a: run ${ra.id}`) && cmpLegend.includes(`b: run ${rb.id}`),
        'the chart overlays both runs\' loss curves');
    check(
        (await page.textContent('#compare-config')).includes('seed'),
        'the Config table lists the seed');
    check(
        (await page.textContent('#compare-classes')).includes('from step 0 on '),
        'each run\'s attempts are listed with the device class they trained on');
    await shot('compare');

    // The study view (docs/dashboard.md "The study and its plan"), its stage 2 the finished grid:
    // every claim of the paper with the verdict `cart report` computes, the claims that cannot
    // tell with their plan or why none, and the plans applied (none here).
    const study = await c.api('study?stage2=tabs');
    await open('#/study?stage2=tabs');
    await waitFor('the claims', () => page.locator('#study-claims tbody tr').count(), 10000);
    const claimRows = await page.locator('#study-claims tbody tr').count();
    check(
        study.claims.length >= 16 && claimRows === study.claims.length,
        `the study view lists every claim (${claimRows} rows, ${
            study.claims.length} from the API)`);
    let verdictsMatch = true;
    for (const cl of study.claims) {
      const shown = await page.locator(`#study-claim-${cl.id} td:nth-child(2)`).textContent();
      if (!shown.startsWith(cl.verdict)) verdictsMatch = false;
    }
    check(verdictsMatch, 'each claim shows the verdict the API computed');
    // What each claim's evidence cost: the stage 2 claims read the grid's runs, which trained
    // here (device-hours from their attempts; this machine's kernel gives no energy counter).
    const rhoBand = study.claims.find((cl) => cl.id === 'rho_band');
    const tabsCost = study.costs.find((p) => p.sweep === 'tabs');
    check(
        rhoBand && rhoBand.runs > 0 && rhoBand.spending.attempts >= rhoBand.runs &&
            rhoBand.spending.device_hours > 0 && tabsCost && tabsCost.runs >= rhoBand.runs &&
            tabsCost.spending.device_hours >= rhoBand.spending.device_hours - 1e-12,
        `a claim counts the runs its tests read and the sweep every run (${
            JSON.stringify(rhoBand && rhoBand.spending)}; ${JSON.stringify(tabsCost)})`);
    check(
        (await page.locator('#study-claim-rho_band td.spending').textContent())
            .includes('device-h'),
        'each claim shows what its evidence cost');
    check(
        (await page.locator('#study-costs tbody tr').count()) === study.costs.length &&
            (await page.textContent('#study-costs')).includes('stage2 (tabs)'),
        'the study\'s cost is listed per sweep');
    const unplanned = study.plans.filter((p) => !p.planned).length;
    check(
        (await page.locator('#study-unplanned li').count()) === unplanned && unplanned > 0,
        `the claims no plan can decide are listed with why (${unplanned})`);
    check(
        (await page.textContent('#study-applied')).includes('no plan applied yet'),
        'the plans applied: none yet');
    check(
        (await page.locator('a[data-nav=study].active').count()) === 1,
        'the Study link is marked as the current view');
    let refused = '';
    try {
      await c.api('study?power=2');
    } catch (e) {
      refused = e.message;
    }
    check(
        refused.includes('HTTP 400') &&
            refused.includes('\'power\': \'2\' is not a number in (0, 1)'),
        `a power outside (0, 1) is refused naming it (${refused})`);
    await shot('study');
    const same = await c.api(`compare?a=${ra.id}&b=${ra.id}`);
    check(
        same.series.first_different_step === null && same.config.length === 0 &&
            same.environment.items.length === 0,
        'a run compared with itself differs in nothing and its losses never part');

    // Notifications (docs/dashboard.md "Notifications"): a subscription made in the form, its
    // webhook URL shown only up to its host, a test sent from its row reaching a receiver here,
    // and the Sent table saying it was delivered.
    const received = [];
    const hook = http.createServer((req, res) => {
      let body = '';
      req.on('data', (d) => body += d);
      req.on('end', () => {
        received.push({path: req.url, key: req.headers['idempotency-key'], body});
        res.writeHead(204);
        res.end();
      });
    });
    await new Promise((ok) => hook.listen(0, '127.0.0.1', ok));
    const hookUrl = `http://127.0.0.1:${hook.address().port}/hooks/T0/B0/XSECRETX`;
    try {
      await open('#/notify');
      await page.selectOption('#notify-scope', 'sweep');
      await page.fill('#notify-which', 'browser');
      await page.check('input[data-event=failed]');
      await page.check('input[data-event=sweep_finished]');
      await page.selectOption('#notify-channel', 'webhook');
      await page.fill('#notify-target', hookUrl);
      await page.click('#notify-add');
      const subRow = page.locator('#subscriptions-table tbody tr[data-subscription]');
      await waitFor('the new subscription', () => subRow.count(), 10000);
      const subText = await subRow.first().textContent();
      check(
          subText.includes('sweep browser') && subText.includes('failed, sweep_finished') &&
              subText.includes(`http://127.0.0.1:${hook.address().port}/…`) &&
              !(await page.content()).includes('XSECRETX'),
          `the subscription is listed with its URL up to the host ("${subText}")`);
      await subRow.first().locator('button[data-test]').click();
      await waitFor('the test notification at the receiver', () => received.length > 0, 20000);
      const got = JSON.parse(received[0].body);
      check(
          received[0].path === '/hooks/T0/B0/XSECRETX' && got.event === 'test' &&
              /^cart-\d+-test-/.test(received[0].key),
          `the receiver got the test with its idempotency key (${received[0].key})`);
      const sent = page.locator('#notifications-table tbody tr[data-notification]');
      await waitFor('the Sent table to say DELIVERED', async () => {
        await open('#/notify');
        return (await sent.count()) && (await sent.first().textContent()).includes('DELIVERED');
      }, 20000);
      check(
          (await sent.first().textContent()).includes('HTTP 204'),
          'the Sent table shows the receiver\'s answer');
      await page.fill('#notify-target', 'ftp://x/y');
      await page.check('input[data-event=failed]');
      await page.click('#notify-add');
      await waitFor(
          'the refusal', async () => (await page.textContent('#notice')).includes('not http'),
          10000);
      check(true, 'a webhook URL that is not http(s) is refused by name');
      await shot('notify');
      acceptNextDialog = true;
      await subRow.first().locator('button[data-remove]').click();
      await waitFor('the subscription gone', async () => (await subRow.count()) === 0, 10000);
      check(true, 'Remove takes the subscription away');
    } finally {
      hook.close();
    }
  } catch (e) {
    failures.push(String(e && e.stack ? e.stack : e));
  } finally {
    if (browser) await browser.close();
    await c.stop();
  }
  if (failures.length) {
    console.log('FAILED:\n' + failures.join('\n'));
    console.log('--- cartd.log\n' + c.log('cartd.log').slice(-3000));
    console.log('--- worker-0.log\n' + c.log('worker-0.log').slice(-3000));
    process.exit(1);
  }
  process.exit(0);
  console.log('screenshots in ' + opts.out);
})();
