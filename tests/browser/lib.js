// SPDX-License-Identifier: MIT
//
// Helpers shared by the browser tests: a headless Debian chromium driven by playwright-core, a
// tiny RESP client over net.Socket, process and file waits, and canvas pixel counts.
'use strict';

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const net = require('node:net');
const { spawn } = require('node:child_process');
const { chromium } = require('playwright-core');

const CHROMIUM = process.env.SLUICE_CHROMIUM || '/usr/bin/chromium';
const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/* The directory for this run's screenshots and logs: $SLUICE_TEST_OUT, else a fresh temp dir. */
function outputDir(name) {
  const base = process.env.SLUICE_TEST_OUT;
  const dir = base ? path.join(base, name) : fs.mkdtempSync(path.join(os.tmpdir(), `sluice-${name}-`));
  fs.mkdirSync(dir, { recursive: true });
  console.log(`# output: ${dir}`);
  return dir;
}

/* Launches chromium with a fresh profile. Returns { context, page, errors, close }. `errors`
 * collects uncaught page exceptions and console errors. */
async function launch(dir, viewport) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS,
    viewport: viewport || { width: 1440, height: 1000 }, deviceScaleFactor: 1,
  });
  const page = context.pages()[0] || await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    const text = m.text();
    /* A refused fetch while the server is away is expected (the disconnect test). */
    if (/Failed to load resource|ERR_CONNECTION_REFUSED|ERR_EMPTY_RESPONSE|ERR_CONNECTION_RESET|401/.test(text)) return;
    errors.push(`console: ${text}`);
  });
  const close = async () => {
    await context.close().catch(() => {});
    fs.rmSync(profile, { recursive: true, force: true });
  };
  return { context, page, errors, close };
}

/* Waits until a file exists and is not empty; returns its content, trimmed. Fails early when
 * `proc` exits. */
async function waitForFile(file, ms, proc) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try {
      const s = fs.readFileSync(file, 'utf8').trim();
      if (s) return s;
    } catch (err) { /* not yet */ }
    if (proc && proc.exitCode !== null) throw new Error(`the process exited (${proc.exitCode}) before writing ${file}`);
    await sleep(25);
  }
  throw new Error(`timed out waiting for ${file}`);
}

/* Starts a child process with stdout+stderr appended to logFile. */
function startProcess(cmd, args, opts) {
  const log = fs.openSync(opts.log, 'a');
  const child = spawn(cmd, args, { cwd: opts.cwd, stdio: ['ignore', log, log], env: opts.env || process.env });
  fs.closeSync(log);
  child.exited = new Promise((r) => child.once('exit', (code, sig) => r({ code, sig })));
  return child;
}

/* Stops a child by its PID: SIGTERM, then SIGKILL after `ms`. Resolves with its exit. */
async function stopProcess(child, ms) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return child && child.exited;
  try { process.kill(child.pid, 'SIGTERM'); } catch (err) { return child.exited; }
  const t = setTimeout(() => { try { process.kill(child.pid, 'SIGKILL'); } catch (err) { /* gone */ } }, ms || 5000);
  const r = await child.exited;
  clearTimeout(t);
  return r;
}

/* ---- A tiny RESP2 client ------------------------------------------------------------------ */

class RespError extends Error {}

/* Parses one RESP value from buf at i. Returns [value, next] or null when incomplete. Errors
 * come back as RespError values (not thrown): a refusal is an answer too. */
function parseResp(buf, i) {
  if (i >= buf.length) return null;
  const eol = buf.indexOf('\r\n', i);
  if (eol < 0) return null;
  const type = String.fromCharCode(buf[i]);
  const line = buf.toString('utf8', i + 1, eol);
  const next = eol + 2;
  switch (type) {
    case '+': return [line, next];
    case '-': return [new RespError(line), next];
    case ':': return [Number(line), next];
    case '_': return [null, next];
    case '#': return [line === 't', next];
    case ',': return [Number(line), next];
    case '$': case '=': {
      const n = Number(line);
      if (n < 0) return [null, next];
      if (buf.length < next + n + 2) return null;
      return [buf.toString('utf8', next, next + n), next + n + 2];
    }
    case '*': case '~': case '%': case '>': {
      let n = Number(line);
      if (n < 0) return [null, next];
      if (type === '%') n *= 2;
      const out = [];
      let at = next;
      for (let k = 0; k < n; k++) {
        const r = parseResp(buf, at);
        if (!r) return null;
        out.push(r[0]);
        at = r[1];
      }
      return [out, at];
    }
    default: throw new Error(`RESP: unexpected type byte ${JSON.stringify(type)}`);
  }
}

function encode(args) {
  const parts = [`*${args.length}\r\n`];
  for (const a of args) {
    const b = Buffer.from(String(a), 'utf8');
    parts.push(`$${b.length}\r\n`, b, '\r\n');
  }
  return Buffer.concat(parts.map((p) => (Buffer.isBuffer(p) ? p : Buffer.from(p))));
}

/* Connects to 127.0.0.1:port. The client pipelines: call() sends at once and resolves in order. */
function respConnect(port) {
  return new Promise((resolve, reject) => {
    const sock = net.createConnection({ host: '127.0.0.1', port });
    const waiting = [];
    let buf = Buffer.alloc(0);
    sock.setNoDelay(true);
    sock.on('data', (d) => {
      buf = buf.length ? Buffer.concat([buf, d]) : d;
      let at = 0;
      for (;;) {
        const r = parseResp(buf, at);
        if (!r) break;
        at = r[1];
        const w = waiting.shift();
        if (w) w.resolve(r[0]);
      }
      buf = buf.subarray(at);
    });
    const fail = (err) => { while (waiting.length) waiting.shift().reject(err); };
    sock.on('error', (err) => { fail(err); reject(err); });
    sock.on('close', () => fail(new Error('connection closed')));
    sock.on('connect', () => resolve({
      call(...args) {
        return new Promise((res, rej) => { waiting.push({ resolve: res, reject: rej }); sock.write(encode(args)); });
      },
      close() { sock.end(); sock.destroy(); },
    }));
  });
}

/* ---- Page helpers --------------------------------------------------------------------------- */

/* Counts a canvas's pixels: `any` not transparent, `match` within `tol` of rgb (opaque enough). */
async function canvasInk(page, selector, rgb, tol) {
  return page.$eval(selector, (c, [color, t]) => {
    const w = c.width, h = c.height;
    if (!w || !h) return { any: 0, match: 0, w, h };
    const d = c.getContext('2d').getImageData(0, 0, w, h).data;
    let any = 0, match = 0;
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] === 0) continue;
      any++;
      if (color && d[i + 3] > 150 && Math.abs(d[i] - color[0]) <= t && Math.abs(d[i + 1] - color[1]) <= t
        && Math.abs(d[i + 2] - color[2]) <= t) match++;
    }
    return { any, match, w, h };
  }, [rgb || null, tol == null ? 40 : tol]);
}

/* A number shown by the page ("1,234", "12.5", "–" = NaN). */
function num(text) {
  const s = String(text || '').replace(/,/g, '').trim();
  return /^-?[0-9.]+(e-?[0-9]+)?$/.test(s) ? Number(s) : NaN;
}

/* Polls fn until it returns a truthy value; returns it, or throws with `what` after ms. */
async function until(what, ms, fn) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (err) { last = err; }
    await sleep(100);
  }
  throw new Error(`timed out after ${ms} ms waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
}

/* GETs a URL from Node (not the browser); resolves { status, body }. */
function httpGet(url, headers) {
  return fetch(url, { headers: headers || {} }).then(async (r) => ({ status: r.status, body: await r.text() }));
}

/* Saves a screenshot in dir and copies it to /tmp/sluice-dashboard.png when `copy` is set. */
async function screenshot(page, dir, name, copy) {
  const file = path.join(dir, name);
  await page.screenshot({ path: file, fullPage: true });
  console.log(`# screenshot: ${file}`);
  if (copy) {
    fs.copyFileSync(file, copy);
    console.log(`# screenshot copied to ${copy}`);
  }
  return file;
}

module.exports = { sleep, outputDir, launch, waitForFile, startProcess, stopProcess, respConnect,
  RespError, parseResp, canvasInk, num, until, httpGet, screenshot };
