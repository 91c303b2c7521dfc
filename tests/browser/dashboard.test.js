// SPDX-License-Identifier: MIT
//
// The dashboard in a real browser against the real server: `sluice serve` with its admin port,
// the page it embeds, load driven over RESP while the page watches.
//
//   SLUICE_BIN=build/sluice SLUICE_SOURCE_DIR=. node --test tests/browser/
//   node tests/browser/dashboard.test.js build/sluice .          (the same, from argv)
//
// What it checks: the page the binary serves is the one in src/server/admin/dashboard/; it connects
// and lists every configured limit; its numbers move while a load script runs (grants and
// denials per second, parked tasks, totals); the big chart draws grants against the dashed limit
// line, the parked chart and the sparklines draw; the most throttled keys of a keyed limit show
// a next slot as a relative time, and in their rate column a key whose rate an adaptive limit
// lowered after a 429 is marked; a task parked on a rate limit looks up with an explanation
// naming that limit and a "throttled until"; events arrive in the feed; filter and sort work;
// the server going away shows the disconnected badge and the page recovers when it comes back.
// A screenshot is saved in the output dir ($SLUICE_TEST_OUT or a temp dir, printed) and copied
// to /tmp/sluice-dashboard.png.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const lib = require('./lib');

const BIN = process.env.SLUICE_BIN || process.argv[2];
const SRC = process.env.SLUICE_SOURCE_DIR || process.argv[3] || path.resolve(__dirname, '../..');
const COPY_TO = '/tmp/sluice-dashboard.png';

const CONFIG = `# Written by tests/browser/dashboard.test.js
engine:
  event_interval: 2s
limits:
  api:                      # one global bucket, driven over its rate by THROTTLE
    rate: 30/1s
    burst: 10
  tenant:                   # per key, slow: tasks of type sync park on it
    rate: 2/1s
    burst: 1
    key: explicit
  reports:                  # one every 30 s: the second task parks
    rate: 2/1m
    burst: 1
types:
  sync:
    limits: [tenant]
  report:
    limits: [reports]
`;

const ALLOWED_RGB = [31, 95, 191];
const LIMIT_RGB = [27, 33, 41];
const PARKED_RGB = [183, 121, 31];

/* Offered load, per second of wall time: well over api's 30/s so that it is certainly both granted
 * and denied, and over what three tenant keys at 2/s can take so that sync tasks park. */
const THROTTLE_PER_SEC = 60;
const ADD_PER_SEC = 20;

/* Drives load for at least `minMs`, then until done() holds or `maxMs` has passed: THROTTLE api and
 * TASK.ADD sync over three keys at the rates above, and a worker taking (and acking) what it is
 * granted. The rates are paced on the clock, not on the loop: each round sends what is due since
 * the start, so a busy machine that runs fewer rounds sends bigger ones and the offered load stays
 * the same. Returns the tallies. */
async function driveLoad(port, minMs, maxMs, done) {
  const c = await lib.respConnect(port);
  const tally = { allowed: 0, denied: 0, added: 0, got: 0, errors: [] };
  const start = Date.now();
  let throttles = 0, adds = 0, i = 0;
  try {
    for (;;) {
      const elapsed = Date.now() - start;
      if (elapsed >= maxMs || (elapsed >= minMs && done(tally))) break;
      const jobs = [];
      for (; throttles < Math.ceil(THROTTLE_PER_SEC * elapsed / 1000) + 1; throttles++) {
        jobs.push(c.call('THROTTLE', 'api', `user${throttles % 2}`).then((r) => {
          if (Array.isArray(r)) { if (r[0] === 1) tally.allowed++; else tally.denied++; } else tally.errors.push(String(r.message || r));
        }));
      }
      for (; adds < Math.ceil(ADD_PER_SEC * elapsed / 1000) + 1; adds++) {
        jobs.push(c.call('TASK.ADD', 'sync', JSON.stringify({ n: adds }), 'KEY', `t${adds % 3}`).then((r) => {
          if (typeof r === 'number') tally.added++; else tally.errors.push(String(r.message || r));
        }));
      }
      if (i % 5 === 0) {
        jobs.push(c.call('TASK.GET', 'sync', 'COUNT', '50').then(async (r) => {
          if (!Array.isArray(r)) { tally.errors.push(String(r && r.message)); return; }
          for (const d of r) {
            tally.got++;
            await c.call('TASK.ACK', String(d[0]));
          }
        }));
      }
      await Promise.all(jobs);
      i++;
      await lib.sleep(50);
    }
  } finally {
    c.close();
  }
  return tally;
}

/* Starts `sluice serve`; resolves { proc, port, adminPort }. */
async function startServer(dir, adminPort, tag) {
  const portFile = path.join(dir, `port-${tag}`);
  const adminFile = path.join(dir, `admin-port-${tag}`);
  for (const f of [portFile, adminFile]) fs.rmSync(f, { force: true });
  const log = path.join(dir, `server-${tag}.log`);
  const args = ['serve', '--port', '0', '--port-file', portFile, '--admin-port', String(adminPort || 0),
    '--admin-port-file', adminFile, '--config', path.join(dir, 'sluice.yaml')];
  const proc = lib.startProcess(BIN, args, { cwd: dir, log });
  try {
    const port = Number(await lib.waitForFile(portFile, 15000, proc));
    const admin = Number(await lib.waitForFile(adminFile, 15000, proc));
    return { proc, port, adminPort: admin, log };
  } catch (err) {
    await lib.stopProcess(proc, 2000);
    const text = fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : '';
    throw new Error(`sluice serve did not start: ${err.message}\n${text}`);
  }
}

const rowCell = (page, limit, cls) => page.textContent(`tr[data-limit="${limit}"] .${cls}`);

test('dashboard against sluice serve', { timeout: 240000 }, async (t) => {
  assert.ok(BIN, 'set SLUICE_BIN (or pass the sluice binary as the first argument)');
  assert.ok(fs.existsSync(BIN), `no sluice binary at ${BIN}`);
  const dir = lib.outputDir('browser');
  fs.writeFileSync(path.join(dir, 'sluice.yaml'), CONFIG);

  let server = await startServer(dir, 0, 'a');
  console.log(`# sluice serve pid ${server.proc.pid}: RESP on ${server.port}, admin on ${server.adminPort}`);
  const base = `http://127.0.0.1:${server.adminPort}`;
  const browser = await lib.launch(dir);
  const { page } = browser;
  t.after(async () => {
    await browser.close();
    await lib.stopProcess(server.proc, 5000);
  });

  await t.test('the binary serves the dashboard of the source tree', async () => {
    for (const f of ['index.html', 'app.js', 'style.css']) {
      const r = await lib.httpGet(`${base}/${f === 'index.html' ? '' : f}`);
      assert.equal(r.status, 200, `GET /${f}`);
      const want = fs.readFileSync(path.join(SRC, 'src/server/admin/dashboard', f), 'utf8');
      assert.ok(r.body === want, `the /${f} the binary serves (${r.body.length} bytes) differs from `
        + `src/server/admin/dashboard/${f} (${want.length} bytes): rebuild sluice`);
    }
    const st = JSON.parse((await lib.httpGet(`${base}/api/stats`)).body);
    assert.deepEqual(st.limits.map((l) => l.name).sort(), ['api', 'reports', 'tenant']);
  });

  await t.test('the page connects and lists the limits', async () => {
    await page.goto(`${base}/`);
    await page.waitForSelector('body[data-conn="live"]', { timeout: 10000 });
    for (const name of ['api', 'reports', 'tenant']) await page.waitForSelector(`tr[data-limit="${name}"]`, { timeout: 5000 });
    assert.equal(await page.locator('#limits-body tr').count(), 3);
    assert.equal((await page.textContent('#conn-text')).trim(), 'live');
    await lib.until('the rule of api from /api/limits', 5000, async () => (await rowCell(page, 'api', 'c-rule')) === '30/1s');
    await lib.until('api selected with its definition', 5000, async () =>
      (await page.textContent('#detail-name')) === 'api' && /30/.test(await page.textContent('#f-rate')));
  });

  await t.test('a parked task looks up with its explanation', async () => {
    const c = await lib.respConnect(server.port);
    const first = await c.call('TASK.ADD', 'report', '{"r":1}');
    const second = await c.call('TASK.ADD', 'report', '{"r":2}');
    assert.equal(typeof second, 'number', `TASK.ADD: ${second && second.message}`);
    const got = await c.call('TASK.GET', 'report', 'COUNT', '2');
    c.close();
    assert.ok(Array.isArray(got) && got.length === 1 && got[0][0] === first, `one report granted: ${JSON.stringify(got)}`);

    await page.fill('#task-id', String(second));
    await page.press('#task-id', 'Enter');
    await lib.until('the task card', 5000, async () => (await page.textContent('#task-state')) === 'parked');
    const explain = await page.textContent('#task-explain');
    assert.match(explain, /reports/, `the explanation should name the limit: ${explain}`);
    assert.ok(await page.isVisible('#tf-throttled'), 'throttled until is shown for a parked task');
    assert.match(await page.textContent('#tf-throttled'), /^in \d+(\.\d)? s/);
    assert.match(await page.textContent('#tf-start'), /^(in \d|now)/);
    assert.match(await page.textContent('#tf-position'), /^1 of 1$/);
    assert.match(await page.textContent('#tf-limit'), /^reports/);

    await page.fill('#task-id', '987654321');
    await page.press('#task-id', 'Enter');
    await lib.until('the not-found message', 5000, async () => page.isVisible('#task-msg.err'));
    assert.equal(await page.isVisible('#task'), false);
    await page.fill('#task-id', String(second));
    await page.press('#task-id', 'Enter');
    await lib.until('the task again', 5000, async () => (await page.textContent('#task-state')) === 'parked');
  });

  await t.test('the numbers change while load runs, and the charts draw', async () => {
    const samples = [];
    const max = (k) => Math.max(...samples.map((x) => x[k]).filter((v) => !Number.isNaN(v)));
    const distinct = (k) => new Set(samples.map((x) => x[k])).size;
    /* What the assertions below look for. The load runs 10 s, and longer (up to a minute) on a
     * machine too busy for the page to have shown all of it by then; the assertions are the
     * same either way. */
    const seenAll = (tally) => tally.allowed > 0 && tally.denied > 0 && samples.length > 0
      && max('allowed') >= 15 && max('denied') > 5 && max('tenantParked') > 0 && max('totalParked') > 0
      && distinct('granted') >= 4 && distinct('grantsPerSec') >= 3;
    const load = driveLoad(server.port, 10000, 60000, seenAll);
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        samples.push({
          allowed: lib.num(await rowCell(page, 'api', 'c-allowed')),
          denied: lib.num(await rowCell(page, 'api', 'c-denied')),
          tenantParked: lib.num(await rowCell(page, 'tenant', 'c-parked')),
          totalParked: lib.num(await page.textContent('#t-parked')),
          granted: lib.num(await page.textContent('#f-allowed')),
          grantsPerSec: lib.num(await page.textContent('#t-allowed')),
        });
        await lib.sleep(400);
      }
    })();

    let tally;
    try {
      /* Mid-load: the charts, and the screenshot. */
      await lib.sleep(7500);
      const main = await lib.canvasInk(page, '#chart-main', ALLOWED_RGB, 45);
      assert.ok(main.match > 40, `the grants line should be drawn in the big chart (${JSON.stringify(main)})`);
      const line = await lib.canvasInk(page, '#chart-main', LIMIT_RGB, 30);
      assert.ok(line.match > 100, `the limit line should be drawn (${JSON.stringify(line)})`);
      assert.ok(Number(await page.getAttribute('#chart-main', 'data-points')) > 5, 'points plotted');
      const spark = await lib.canvasInk(page, 'tr[data-limit="api"] canvas', ALLOWED_RGB, 60);
      assert.ok(spark.match > 10, `the api sparkline should be drawn (${JSON.stringify(spark)})`);
      await lib.screenshot(page, dir, 'dashboard.png', COPY_TO);
      tally = await load;
      await lib.sleep(1500);
    } finally {
      sampling = false;
      await sampler;
      await load.catch(() => {});
    }
    console.log(`# load: ${JSON.stringify(tally)}; ${samples.length} samples`);
    assert.deepEqual(tally.errors, [], 'the load script got errors');
    assert.ok(tally.allowed > 0 && tally.denied > 0, 'the load should be both granted and denied by api');
    assert.ok(max('allowed') >= 15, `api granted/s should reach its rate (~30/s), saw max ${max('allowed')}`);
    assert.ok(max('allowed') <= 45, `api granted/s should stay near its rate of 30/s (+ burst), saw ${max('allowed')}`);
    assert.ok(max('denied') > 5, `api denied/s should show the excess, saw max ${max('denied')}`);
    assert.ok(max('tenantParked') > 0, 'tasks should park on tenant');
    assert.ok(max('totalParked') > 0, 'the parked total should move');
    assert.ok(distinct('granted') >= 4, 'the granted total of the selected limit should keep changing');
    assert.ok(distinct('grantsPerSec') >= 3, 'the grants/s total should change');
  });

  await t.test('events arrive in the feed', async () => {
    await lib.until('an event about tenant', 10000, async () => (await page.locator('#feed li[data-limit="tenant"]').count()) > 0);
    const n = await page.locator('#feed li').count();
    assert.ok(n >= 1 && n <= 200, `feed entries: ${n}`);
    const first = await page.textContent('#feed li:first-child .ev-kind');
    assert.match(first, /^(throttled|deferred|rejected|unknown limit|budget|key cap|dropped)$/);
    const summaries = await page.locator('#feed li.summary').count();
    console.log(`# feed: ${n} entries, ${summaries} summaries`);
    if (summaries > 0) assert.match(await page.textContent('#feed li.summary .ev-tag'), /^summary ×\d+/);
  });

  await t.test('the most throttled keys of a keyed limit', async () => {
    await page.click('tr[data-limit="tenant"]');
    await lib.until('tenant selected', 3000, async () => (await page.textContent('#detail-name')) === 'tenant');
    await lib.until('top keys of tenant', 5000, async () => (await page.locator('#topkeys-body tr').count()) > 0);
    const rows = await page.$$eval('#topkeys-body tr', (trs) => trs.map((tr) => Array.from(tr.cells, (c) => c.textContent)));
    console.log(`# top keys: ${JSON.stringify(rows)}`);
    assert.ok(rows.every((r) => /^t[0-2]$/.test(r[0])), 'keys are t0..t2');
    assert.ok(rows.some((r) => Number(r[1]) > 0), 'a key has tasks parked');
    for (const r of rows) assert.match(r[2], /^(in \d+(\.\d)? s|in \d+ m \d+ s|now|–)$/, `next slot ${r[2]}`);
    assert.match(await page.textContent('#lg-limit'), /per key/);
    await lib.sleep(1200);
    const parked = await lib.canvasInk(page, '#chart-parked', PARKED_RGB, 40);
    assert.ok(parked.match > 20, `the parked chart should be drawn (${JSON.stringify(parked)})`);
  });

  await t.test('the rate column marks a key running below its configured rate', async () => {
    /* t1 gets an adaptive limit of its own (LIMIT.KEY), then a 429 for a minute (LIMIT.BACKOFF):
     * its rate halves to 1/1s and the row says so; t0 keeps tenant's 2/1s, unmarked. */
    const c = await lib.respConnect(server.port);
    const set = await c.call('LIMIT.KEY', 'tenant', 't1', 'rate=2/1s,burst=1,decrease=0.5');
    const held = await c.call('LIMIT.BACKOFF', 'tenant', 't1', '60000');
    const added = await c.call('TASK.ADD', 'sync', '{"n":-1}', 'KEY', 't1');
    c.close();
    assert.equal(set, 'OK', `LIMIT.KEY: ${set && set.message}`);
    assert.equal(typeof held, 'number', `LIMIT.BACKOFF: ${held && held.message}`);
    assert.equal(typeof added, 'number', `TASK.ADD: ${added && added.message}`);
    const rateRows = () => page.$$eval('#topkeys-body tr', (trs) => trs.map((tr) => ({
      key: tr.cells[0].textContent, rate: tr.cells[4].textContent,
      slowed: tr.cells[4].dataset.slowed, marked: tr.cells[4].classList.contains('rate-slowed'),
      title: tr.cells[4].title })));
    await lib.until('t1 shown below its rate', 10000, async () =>
      (await rateRows()).some((r) => r.key === 't1' && r.rate === '▼ 1/1s' && r.slowed === '1' && r.marked));
    const rows = await rateRows();
    console.log(`# key rates: ${JSON.stringify(rows)}`);
    const t1 = rows.find((r) => r.key === 't1');
    assert.match(t1.title, /configured 2\/1s.*lowered from 2\/1s by its upstream's 429s/);
    assert.match(t1.title, /held back until \d\d:\d\d:\d\d/);
    for (const r of rows.filter((x) => x.key !== 't1')) {
      assert.equal(r.rate, '2/1s', `${r.key} keeps tenant's rate`);
      assert.equal(r.slowed, '0');
      assert.equal(r.marked, false);
    }
    assert.equal((await page.textContent('#topkeys thead th:nth-child(5)')).trim(), 'Rate');
    await lib.screenshot(page, dir, 'dashboard-key-rates.png');
  });

  await t.test('filter and sort', async () => {
    await page.fill('#filter', 'ten');
    await lib.until('the filter', 3000, async () => (await page.locator('#limits-body tr:not([hidden])').count()) === 1);
    assert.equal(await page.getAttribute('#limits-body tr:not([hidden])', 'data-limit'), 'tenant');
    assert.equal((await page.textContent('#limits-count')).trim(), '1 of 3');
    await page.fill('#filter', '');
    await lib.until('all rows back', 3000, async () => (await page.locator('#limits-body tr:not([hidden])').count()) === 3);
    await page.click('th[data-sort="parked"]');
    assert.equal(await page.getAttribute('th[data-sort="parked"]', 'aria-sort'), 'descending');
    await lib.until('tenant first by parked', 3000, async () =>
      (await page.getAttribute('#limits-body tr:first-child', 'data-limit')) === 'tenant');
    await page.click('th[data-sort="name"]');
    await lib.until('api first by name', 3000, async () =>
      (await page.getAttribute('#limits-body tr:first-child', 'data-limit')) === 'api');
  });

  await t.test('the server goes away and comes back', async () => {
    const port = server.adminPort;
    const r = await lib.stopProcess(server.proc, 8000);
    console.log(`# server stopped: ${JSON.stringify(r)}`);
    await page.waitForSelector('body[data-conn="down"]', { timeout: 10000 });
    assert.match(await page.textContent('#conn-text'), /disconnected/);
    await lib.screenshot(page, dir, 'dashboard-disconnected.png');
    server = await startServer(dir, port, 'b');
    await page.waitForSelector('body[data-conn="live"]', { timeout: 15000 });
    assert.equal(await page.locator('#limits-body tr').count(), 3);
  });

  await t.test('no script errors', async () => {
    assert.deepEqual(browser.errors, []);
  });

  const r = await lib.stopProcess(server.proc, 8000);
  assert.equal(r.code, 0, `sluice serve should exit 0 on SIGTERM: ${JSON.stringify(r)}`);
});
