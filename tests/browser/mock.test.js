// SPDX-License-Identifier: MIT
//
// The page alone, against mock-server.js (fake /api/* with the real shapes): what is hard to
// produce with the real server in a few seconds. A password (the prompt, then Bearer), hundreds
// of limits (filter, sort, keyed rows patched in place), an event flood (the feed stays bounded
// at 200), the server dropping away and returning, and a narrow screen.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const lib = require('./lib');

const SRC = process.env.SLUICE_SOURCE_DIR || path.resolve(__dirname, '../..');

test('dashboard against the mock server', { timeout: 180000 }, async (t) => {
  const dir = lib.outputDir('browser-mock');
  const portFile = path.join(dir, 'mock-port');
  fs.rmSync(portFile, { force: true });
  const mock = lib.startProcess(process.execPath, [path.join(__dirname, 'mock-server.js'), '--port', '0',
    '--port-file', portFile, '--limits', '250', '--password', 's3cret',
    '--root', path.join(SRC, 'src/server/admin/dashboard')], { cwd: dir, log: path.join(dir, 'mock.log') });
  const port = Number(await lib.waitForFile(portFile, 10000, mock));
  const base = `http://127.0.0.1:${port}`;
  const browser = await lib.launch(dir);
  const { page } = browser;
  t.after(async () => {
    await browser.close();
    await lib.stopProcess(mock, 3000);
  });

  await t.test('a password is asked for, then sent as a Bearer token', async () => {
    await page.goto(`${base}/`);
    await page.waitForSelector('#auth:not([hidden])', { timeout: 5000 });
    assert.equal(await page.getAttribute('body', 'data-conn'), 'locked');
    await page.fill('#auth-pass', 'wrong');
    await page.press('#auth-pass', 'Enter');
    await page.waitForSelector('#auth-err:not([hidden])', { timeout: 5000 });
    await page.fill('#auth-pass', 's3cret');
    await page.press('#auth-pass', 'Enter');
    await page.waitForSelector('body[data-conn="live"]', { timeout: 5000 });
    assert.equal(await page.evaluate(() => sessionStorage.getItem('sluice.password')), 's3cret');
    await lib.until('257 rows', 5000, async () => (await page.locator('#limits-body tr').count()) === 257);
  });

  await t.test('rows are patched in place, not rebuilt', async () => {
    await page.evaluate(() => { window.__row = document.querySelector('tr[data-limit="stripe"]'); });
    const before = await page.textContent('tr[data-limit="stripe"] .c-allowed');
    await lib.until('stripe granted/s to change', 6000, async () =>
      (await page.textContent('tr[data-limit="stripe"] .c-allowed')) !== before);
    assert.equal(await page.evaluate(() => window.__row === document.querySelector('tr[data-limit="stripe"]')), true);
  });

  await t.test('filter and sort hundreds of limits', async () => {
    await page.fill('#filter', 'tenant-01');
    await lib.until('filtered', 3000, async () => (await page.textContent('#limits-count')).trim() === '100 of 257');
    await page.fill('#filter', 'tenant-012');
    await lib.until('filtered more', 3000, async () => (await page.textContent('#limits-count')).trim() === '10 of 257');
    await page.fill('#filter', '');
    await page.click('th[data-sort="denied"]');
    await lib.sleep(1200);
    const vals = await page.$$eval('#limits-body tr', (trs) => trs.slice(0, 20).map((tr) =>
      Number(tr.querySelector('.c-denied').textContent.replace(/,/g, '')) || 0));
    for (let i = 1; i < vals.length; i++) assert.ok(vals[i - 1] >= vals[i], `sorted by denied/s: ${vals}`);
    await page.click('th[data-sort="name"]');
  });

  await t.test('shadow and 429 badges', async () => {
    await lib.until('shadow badge', 5000, async () =>
      page.locator('tr[data-limit="tenant_api"] .badge-shadow').isVisible());
    assert.equal(await page.locator('tr[data-limit="stripe"] .badge-shadow').isVisible(), false);
    await lib.until('429 badge', 5000, async () =>
      page.locator('tr[data-limit="llm_provider"] .badge-backoff').isVisible());
    assert.match(await page.textContent('tr[data-limit="llm_provider"] .badge-backoff'), /^429 ×3$/);
    assert.equal(await page.locator('tr[data-limit="stripe"] .badge-backoff').isVisible(), false);
  });

  await t.test('select a limit: chart, top keys, relative next slot', async () => {
    await page.click('tr[data-limit="stripe"]');
    await lib.until('stripe selected', 3000, async () => (await page.textContent('#detail-name')) === 'stripe');
    assert.match(page.url(), /#limit=stripe$/);
    await lib.until('top keys', 5000, async () => (await page.locator('#topkeys-body tr').count()) > 0);
    const slots = await page.$$eval('#topkeys-body tr td:nth-child(3)', (tds) => tds.map((td) => td.textContent));
    for (const s of slots) assert.match(s, /^(in \d+(\.\d)? s|now|–)$/);
    /* The rate column: the mock lowers each rate limit's second key to half its rate. */
    const rates = await page.$$eval('#topkeys-body tr td:nth-child(5)', (tds) => tds.map((td) => [td.textContent, td.dataset.slowed]));
    assert.ok(rates.length > 1 && rates.every(([text]) => /^(▼ )?\d+\/\d+[sm]$/.test(text)), `rates ${JSON.stringify(rates)}`);
    assert.equal(rates.filter(([text, slowed]) => text.startsWith('▼') && slowed === '1').length, 1, `one key slowed: ${JSON.stringify(rates)}`);
    await lib.sleep(1500);
    const ink = await lib.canvasInk(page, '#chart-main', [31, 95, 191], 45);
    assert.ok(ink.match > 25, `chart drawn: ${JSON.stringify(ink)}`);
  });

  await t.test('task lookup', async () => {
    await page.fill('#task-id', '7');
    await page.press('#task-id', 'Enter');
    await lib.until('task 7', 5000, async () => (await page.textContent('#task-state')) === 'parked');
    assert.match(await page.textContent('#tf-throttled'), /^in \d/);
    assert.match(await page.textContent('#task-explain'), /Parked on limit/);
    await page.fill('#task-id', 'abc');
    await page.press('#task-id', 'Enter');
    assert.match(await page.textContent('#task-msg'), /positive whole number/);
    await page.fill('#task-id', '123456');
    await page.press('#task-id', 'Enter');
    await lib.until('not found', 5000, async () => /no task/i.test(await page.textContent('#task-msg')));
  });

  await t.test('the event feed stays bounded', async () => {
    await lib.until('200 events', 20000, async () => (await page.locator('#feed li').count()) === 200);
    await lib.sleep(1500);
    assert.equal(await page.locator('#feed li').count(), 200);
    assert.ok(await page.locator('#feed li.summary .ev-tag').count() > 0, 'summaries are marked');
    await page.check('#events-only');
    const shown = await page.$$eval('#feed li:not([hidden])', (lis) => lis.map((li) => li.dataset.limit));
    assert.ok(shown.every((l) => l === 'stripe'), 'only the selected limit');
    await page.uncheck('#events-only');
  });

  await t.test('the server goes away and comes back', async () => {
    /* Down until the page has seen it (however slow the machine), then back. */
    await fetch(`${base}/__mock/down?ms=120000`, { method: 'POST' });
    await page.waitForSelector('body[data-conn="down"]', { timeout: 30000 });
    assert.equal((await page.textContent('#conn-text')).trim(), 'disconnected — retrying');
    await fetch(`${base}/__mock/up`, { method: 'POST' });
    await page.waitForSelector('body[data-conn="live"]', { timeout: 30000 });
  });

  await t.test('a narrow screen keeps the table usable', async () => {
    await page.setViewportSize({ width: 420, height: 900 });
    await lib.sleep(1200);
    const w = await page.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(w <= 420, `no horizontal page scroll at 420 px (scrollWidth ${w})`);
    assert.equal(await page.isVisible('tr[data-limit="stripe"] .c-allowed'), true);
    await lib.screenshot(page, dir, 'dashboard-narrow.png');
    await page.setViewportSize({ width: 1440, height: 1000 });
  });

  await t.test('no script errors', async () => {
    assert.deepEqual(browser.errors, []);
  });
});
