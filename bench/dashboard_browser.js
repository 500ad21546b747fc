// Time to first chart in a real browser (Debian chromium via playwright-core from
// tests/dashboard/node_modules): loads dashboard pages of a running cartd N times each and prints
// the median and worst time from navigation start until the page's charts (or table) are drawn.
// Usage: node bench/dashboard_browser.js URL SWEEP RUN_ID [REPS]
'use strict';
const path = require('path');
const { chromium } = require(path.join(__dirname, '../tests/dashboard/node_modules/playwright-core'));

(async () => {
  const [url, sweep, run, reps = '5'] = process.argv.slice(2);
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run'],
  });
  const pages = [
    ['run page (every metric charted)', `#/run/${run}`, '#run-charts .uplot'],
    ['sweep page (run table)', `#/sweep/${encodeURIComponent(sweep)}`, '#runs-table tbody tr'],
    ['sweeps page', '#/', 'table tbody tr'],
  ];
  for (const [label, hash, selector] of pages) {
    const times = [];
    let bytes = 0;
    for (let i = 0; i < Number(reps); i++) {
      const context = await browser.newContext();  // cold cache every time
      const page = await context.newPage();
      let received = 0;
      page.on('response', async (r) => { try { received += (await r.body()).length; } catch (e) { /* stream */ } });
      await page.goto(url + hash);
      await page.waitForSelector(selector, { timeout: 120000 });
      times.push(await page.evaluate(() => performance.now()));
      bytes = received;
      await context.close();
    }
    times.sort((a, b) => a - b);
    console.log(`  ${label.padEnd(34)} median ${times[Math.floor(times.length / 2)].toFixed(0)} ms, worst ${times[times.length - 1].toFixed(0)} ms, ~${(bytes / 1024).toFixed(0)} KiB received (${reps} cold loads)`);
  }
  await browser.close();
})();
