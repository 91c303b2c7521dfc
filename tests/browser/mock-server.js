#!/usr/bin/env node
// SPDX-License-Identifier: MIT
//
// A stand-in for sluice's admin HTTP server, for working on the dashboard without the C server
// and for the page-only test (mock.test.js). It serves src/server/admin/dashboard/ at / and /<file>,
// and fake but plausible /api/* answers with the exact JSON shapes of the real server:
//
//   /api/stats, /api/limits, /api/limits/{name}, /api/tasks/{id}, /api/events (SSE)
//
// The traffic is simulated once a second: every limit gets a demand that drifts, grants what its
// rate allows, denies or parks the rest; tasks 1..9999 exist and are parked on a limit when their
// id is odd. Controls, for tests:
//
//   POST /__mock/down?ms=N   the server "goes away" for N ms (connections dropped, SSE closed)
//   POST /__mock/up          it comes back now, however long the outage was meant to last
//
// Usage: node mock-server.js [--port N] [--port-file F] [--limits N] [--password P] [--root DIR]
'use strict';

const http = require('node:http');
const fs = require('node:fs');
const path = require('node:path');

function parseArgs(argv) {
  const o = { port: 8089, portFile: null, extra: 0, password: null,
    root: path.resolve(__dirname, '../../src/server/admin/dashboard') };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i], v = argv[i + 1];
    if (a === '--port') { o.port = Number(v); i++; }
    else if (a === '--port-file') { o.portFile = v; i++; }
    else if (a === '--limits') { o.extra = Number(v); i++; }
    else if (a === '--password') { o.password = v; i++; }
    else if (a === '--root') { o.root = path.resolve(v); i++; }
    else { console.error(`mock-server: unknown argument ${a}`); process.exit(2); }
  }
  return o;
}

const MIME = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8', '.svg': 'image/svg+xml', '.png': 'image/png',
  '.ico': 'image/x-icon', '.json': 'application/json' };

// ---- The simulated engine -------------------------------------------------------------------

const PERIODS = { s: 1000, m: 60000, h: 3600000, d: 86400000 };

function makeLimit(name, kind, limit, period, extra) {
  const periodMs = typeof period === 'number' ? period : PERIODS[period];
  const unit = Object.keys(PERIODS).find((k) => PERIODS[k] === periodMs);
  let spec;
  if (kind === 'concurrency') spec = `concurrency=${limit}`;
  else if (kind === 'quota') spec = `quota=${limit}/day`;
  else spec = `${kind}=${limit}/1${unit}`;
  const l = Object.assign({ name, kind, limit, period_ms: kind === 'concurrency' ? 0 : periodMs,
    burst: kind === 'rate' ? limit : null, key: 'none', overflow: 'wait', keys: 0, bytes: 0,
    allowed_total: 0, denied_total: 0, units_total: 0, parked: 0, untracked_total: 0,
    refused_total: 0, demand: 0, phase: Math.random() * 6.28, keyNames: [], mode: 'enforce',
    shadow_denied_total: 0, backoffs_total: 0 }, extra || {});
  if (l.burst && l.burst !== limit) spec += `,burst=${l.burst}`;
  if (l.key !== 'none') spec += `,key=${l.key}`;
  if (l.overflow !== 'wait') spec += `,overflow=${l.overflow}`;
  l.spec = spec;
  return l;
}

function buildLimits(extra) {
  const ls = [
    makeLimit('stripe', 'rate', 100, 's', { burst: 20, key: 'explicit', base: 88 }),
    makeLimit('tenant_api', 'rate', 15, 'm', { key: 'input.tenant_id', base: 0.6, mode: 'shadow' }),
    makeLimit('llm_provider', 'rate', 600, 'm', { burst: 100, base: 9, backoffs_total: 3 }),
    makeLimit('agent_slots', 'concurrency', 10, 0, { key: 'input.workflow_id', base: 4 }),
    makeLimit('daily_budget', 'quota', 10000, 'd', { key: 'input.user', overflow: 'reject', base: 2 }),
    makeLimit('runaway_breaker', 'window', 50, 'h', { key: 'input.workflow_id', overflow: 'reject',
      base: 0.01 }),
    makeLimit('webhooks', 'sliding', 30, 's', { key: 'input.endpoint', base: 22 }),
  ];
  for (let i = 0; i < extra; i++) {
    const rate = [5, 10, 20, 50, 120][i % 5];
    ls.push(makeLimit(`tenant-${String(i).padStart(4, '0')}`, 'rate', rate, 's',
      { key: 'explicit', base: rate * (0.2 + ((i * 37) % 100) / 80) }));
  }
  for (const l of ls) {
    const n = l.key === 'none' ? 1 : 6 + (l.name.length % 9);
    for (let k = 0; k < n; k++) l.keyNames.push(l.key === 'none' ? '' : `${l.name.slice(0, 3)}-${k + 1}`);
  }
  return ls;
}

function rps(l) {
  if (l.kind === 'quota') return l.limit / 86400;
  return l.period_ms > 0 ? (l.limit * 1000) / l.period_ms : l.limit;
}

function createSim(extra) {
  const sim = { start: Date.now(), limits: buildLimits(extra), commands: 0, clients: 3,
    tasks: { queued: 12, parked: 0, running: 4, done: 0, failed: 0, cancelled: 0 },
    listeners: new Set(), t: 0 };

  sim.step = function step() {
    sim.t++;
    let parkedAll = 0;
    for (const l of sim.limits) {
      const wave = 1 + 0.55 * Math.sin(sim.t / 9 + l.phase) + 0.25 * Math.sin(sim.t / 2.3 + l.phase * 2);
      const demand = Math.max(0, l.base * wave * (0.85 + Math.random() * 0.3));
      const cap = l.kind === 'concurrency' ? l.limit * 0.8 : rps(l) * (l.kind === 'quota' ? 1e4 : 1);
      let allowed = Math.min(demand + (l.overflow === 'wait' ? Math.min(l.parked, cap) : 0), cap);
      allowed = Math.floor(allowed + Math.random());
      const fresh = Math.floor(demand + Math.random());
      const denied = Math.max(0, fresh - Math.min(fresh, Math.floor(cap)));
      l.allowed_total += allowed;
      l.units_total += allowed * (l.kind === 'quota' ? 7 : 1);
      l.denied_total += denied;
      if (l.overflow === 'wait') l.parked = Math.max(0, l.parked + denied - Math.max(0, allowed - fresh));
      l.keys = Math.min(l.keyNames.length, Math.ceil(demand / Math.max(rps(l), 0.01) * 3) + 1);
      l.bytes = l.keys * 96;
      parkedAll += l.parked;
      sim.commands += allowed + denied + Math.floor(Math.random() * 5);
      if (denied > 0) {
        const key = l.keyNames[Math.floor(Math.random() * l.keyNames.length)];
        sim.emit({ kind: l.overflow === 'wait' ? 'deferred' : 'rejected', limit: l.name, key,
          type: l.name.startsWith('tenant') ? 'sync' : 'charge', count: denied, summary: denied > 1,
          at_ms: Date.now() });
      }
    }
    sim.tasks.parked = parkedAll;
    sim.tasks.done += Math.floor(Math.random() * 30);
    sim.tasks.running = 3 + Math.floor(Math.random() * 6);
    sim.tasks.queued = Math.floor(Math.random() * 20);
    if (Math.random() < 0.05) sim.tasks.failed++;
  };

  sim.emit = function emit(ev) {
    const data = JSON.stringify({ kind: ev.kind, limit: ev.limit, key: ev.key, type: ev.type,
      count: ev.count, summary: !!ev.summary, at_ms: ev.at_ms,
      ...(ev.kind === 'deferred' ? { next_slot_ms: Date.now() + 500 + Math.floor(Math.random() * 4000) } : {}) });
    for (const res of sim.listeners) res.write(`data: ${data}\n\n`);
  };

  sim.stats = function stats() {
    return { time_ms: Date.now(), uptime_s: Math.floor((Date.now() - sim.start) / 1000),
      clients: sim.clients, commands_total: sim.commands, tasks: { ...sim.tasks },
      limits: sim.limits.map((l) => ({ name: l.name, kind: l.kind, allowed_total: l.allowed_total,
        denied_total: l.denied_total, units_total: l.units_total, parked: l.parked, keys: l.keys,
        mode: l.mode, shadow_denied_total: l.shadow_denied_total, backoffs_total: l.backoffs_total })) };
  };

  sim.limitObject = function limitObject(l) {
    return { name: l.name, kind: l.kind, spec: l.spec, limit: l.limit, period_ms: l.period_ms,
      burst: l.burst, key: l.key, overflow: l.overflow, keys: l.keys, bytes: l.bytes,
      allowed_total: l.allowed_total, denied_total: l.denied_total, units_total: l.units_total,
      parked: l.parked, untracked_total: l.untracked_total, refused_total: l.refused_total,
      parked_keys: l.parked > 0 ? Math.min(l.keys, 1 + (l.parked % 7)) : 0,
      next_slot_ms: l.parked > 0 ? Date.now() + Math.round(1000 / rps(l)) : null,
      rejected_total: { ratelimited: l.overflow === 'reject' ? l.denied_total : 0, horizon: 0, never: 0, skipped: 0 },
      throttled_wanted_total: l.allowed_total + l.denied_total, throttled_granted_total: l.allowed_total,
      ...(l.kind === 'quota' ? { period: 'day', quota_spent: l.units_total % l.limit } : {}) };
  };

  /* A rate limit's key's rate as /api/limits/{name} gives it (the second key of each runs at
   * half its rate, lowered by 429s); null for the other kinds. */
  function keyRate(l, i, now) {
    if (l.kind !== 'rate' || !l.period_ms) return null;
    const per = l.period_ms % 60000 === 0 ? `${l.period_ms / 60000}m` : `${l.period_ms / 1000}s`;
    const slowed = i === 1 && l.limit > 1;
    const permits = slowed ? Math.floor(l.limit / 2) : l.limit;
    return { rate: `${permits}/${per}`, configured: `${l.limit}/${per}`, permits,
      configured_permits: l.limit, period_ms: l.period_ms, adaptive: slowed, slowed,
      since_ms: slowed ? now - 4200 : null, held_until_ms: slowed ? now + 3000 : null,
      why: slowed ? `lowered from ${l.limit}/${per} by its upstream's 429s, the last 4200 ms ago; regains 10% every 1m`
        : 'configured (not adaptive)' };
  }

  sim.topKeys = function topKeys(l) {
    const now = Date.now();
    const interval = 1000 / rps(l);
    return l.keyNames.slice(0, 10).map((key, i) => {
      const parked = Math.max(0, Math.round(l.parked / (i + 2)));
      return { key, parked, next_slot_ms: parked > 0 ? now + Math.round(interval * (i + 1) + (sim.t % 7) * 130) : now,
        denied_total: Math.round(l.denied_total / (i + 1.5)), rate: keyRate(l, i, now) };
    }).sort((a, b) => b.parked - a.parked || b.denied_total - a.denied_total);
  };

  sim.task = function task(id) {
    if (!(id >= 1 && id <= 9999)) return null;
    const now = Date.now();
    const parked = id % 2 === 1;
    const l = sim.limits[id % sim.limits.length];
    const key = l.keyNames[id % l.keyNames.length];
    const cycle = 4000 + ((id * 733) % 9000);
    let wake = now + cycle - ((now - sim.start) % cycle);
    /* At least 2 s ahead: a wake due within the lookup's own round trip would read "now" on a
     * loaded machine, and the page's "in N s" is what the test checks. */
    if (wake - now < 2000) wake += cycle;
    const pos = id % 5, qlen = pos + 3; /* tasks ahead on the key, 0 = next */
    return { id, state: parked ? 'parked' : (id % 4 === 0 ? 'done' : 'running'), type: 'charge',
      payload: JSON.stringify({ tenant_id: key, amount: id * 3 }), attempt: 1, priority: 0, units: 1,
      submitted_ms: now - 4200, lease_until_ms: parked ? null : now + 30000, failure: null,
      explain: parked ? { state: 'parked', limit: l.name, key, position: pos, queue_length: qlen,
        wake_ms: wake, estimated_start_ms: wake + 250,
        text: `Parked on limit "${l.name}" key "${key}" with ${pos} task(s) ahead of ${qlen}; the key wakes in ${((wake - now) / 1000).toFixed(3)} s.` }
        : { state: 'running', limit: null, key: null, position: null, queue_length: null,
          wake_ms: null, estimated_start_ms: null, text: 'running under a lease' } };
  };
  return sim;
}

// ---- HTTP -------------------------------------------------------------------------------------

function main() {
  const opt = parseArgs(process.argv);
  const sim = createSim(opt.extra);
  let downUntil = 0;
  const sockets = new Set();
  const timer = setInterval(sim.step, 1000);
  sim.step();

  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    const p = url.pathname;
    if (p === '/__mock/down' && req.method === 'POST') {
      downUntil = Date.now() + Number(url.searchParams.get('ms') || 3000);
      res.writeHead(204).end();
      for (const r of sim.listeners) r.destroy();
      sim.listeners.clear();
      return;
    }
    if (p === '/__mock/up' && req.method === 'POST') {
      downUntil = 0;
      res.writeHead(204).end();
      return;
    }
    if (Date.now() < downUntil) { req.socket.destroy(); return; }
    const json = (code, obj) => {
      const body = JSON.stringify(obj);
      res.writeHead(code, { 'content-type': 'application/json', 'cache-control': 'no-store' });
      res.end(body);
    };
    if (p.startsWith('/api/')) {
      // Only the API needs the password here: the page itself holds no data.
      if (opt.password && req.headers.authorization !== `Bearer ${opt.password}`) {
        json(401, { error: 'unauthorized', message: 'a password is required' });
        return;
      }
      if (p === '/api/stats') return json(200, sim.stats());
      if (p === '/api/limits') return json(200, { limits: sim.limits.map(sim.limitObject) });
      let m = /^\/api\/limits\/(.+)$/.exec(p);
      if (m) {
        const l = sim.limits.find((x) => x.name === decodeURIComponent(m[1]));
        if (!l) return json(404, { error: 'not_found', message: `no limit ${decodeURIComponent(m[1])}` });
        return json(200, { ...sim.limitObject(l), top_keys: sim.topKeys(l) });
      }
      m = /^\/api\/tasks\/(.+)$/.exec(p);
      if (m) {
        const t = sim.task(Number(m[1]));
        if (!t) return json(404, { error: 'not_found', message: `no task ${decodeURIComponent(m[1])}` });
        return json(200, t);
      }
      if (p === '/api/events') {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store',
          connection: 'keep-alive' });
        res.write(': sluice mock events\n\n');
        sim.listeners.add(res);
        req.on('close', () => sim.listeners.delete(res));
        return;
      }
      return json(404, { error: 'not_found', message: `no such endpoint ${p}` });
    }
    const file = p === '/' ? 'index.html' : p.slice(1);
    if (file.includes('/') || file.includes('..')) { res.writeHead(404).end('not found'); return; }
    fs.readFile(path.join(opt.root, file), (err, buf) => {
      if (err) { res.writeHead(404, { 'content-type': 'text/plain' }).end('not found'); return; }
      res.writeHead(200, { 'content-type': MIME[path.extname(file)] || 'application/octet-stream',
        'cache-control': 'no-store' });
      res.end(buf);
    });
  });
  server.on('connection', (s) => { sockets.add(s); s.on('close', () => sockets.delete(s)); });
  server.listen(opt.port, '127.0.0.1', () => {
    const port = server.address().port;
    if (opt.portFile) fs.writeFileSync(opt.portFile, `${port}\n`);
    console.log(`mock sluice admin on http://127.0.0.1:${port}/ (${sim.limits.length} limits)`);
  });
  const stop = () => { clearInterval(timer); for (const s of sockets) s.destroy(); server.close(() => process.exit(0)); };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

if (require.main === module) main();
module.exports = { createSim };
