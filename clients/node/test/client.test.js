// SPDX-License-Identifier: MIT
// sluice-client against a real `sluice serve` (started by run.sh with test/sluice-test.yaml):
// pacing by a rate limit, retries, redelivery after a crash, graceful close, lease renewal,
// cost settlement, typed errors and reconnection. Timing assertions only bound from below what
// the server's limits allow (never how fast a busy machine is); upper bounds are generous.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const {
  Worker,
  Queue,
  SluiceError,
  RateLimitedError,
  BusyError,
  NoLimitError,
  NoTaskError,
  RetryAfterError,
  UnrecoverableError,
} = require('..');
const { connection, sleep, waitFor, startServer } = require('./helpers');

let q;
test.before(() => {
  q = new Queue({ connection });
});
test.after(async () => {
  await q.close();
});

/** A worker that reports errors to the test output instead of throwing them. */
function worker(type, handler, opts = {}) {
  const w = new Worker(type, handler, { connection, blockTimeout: 300, ...opts });
  w.on('error', (err) => console.log(`# worker error: ${err.context || ''} ${err.message}`));
  return w;
}

test('a worker pool drains tasks at the pace of the rate limit (5/1s, burst 2)', async () => {
  const n = 12;
  const seen = [];
  const t0 = Date.now();
  const ids = [];
  for (let i = 0; i < n; i++) ids.push(await q.add('paced', { i }));
  const handler = async (task) => {
    seen.push({ id: task.id, at: Date.now() - t0 });
    await sleep(5);
  };
  const pool = [worker('paced', handler, { concurrency: 4 }), worker('paced', handler, { concurrency: 4 })];
  await waitFor(() => seen.length === n, 60000, 'all paced tasks');
  await Promise.all(pool.map((w) => w.close()));
  assert.equal(new Set(seen.map((s) => s.id)).size, n, 'each task ran once');
  assert.deepEqual(new Set(seen.map((s) => s.id)), new Set(ids));
  // Two pass at once (the burst), then one every 200 ms: the k-th start (0-based) cannot come
  // before (k - 1) * 200 ms after the first was added, however fast the machine.
  const at = seen.map((s) => s.at).sort((a, b) => a - b);
  for (let k = 2; k < n; k++) {
    assert.ok(at[k] >= (k - 1) * 200 - 30, `start ${k} at ${at[k]} ms, before the limit allows`);
  }
  const stats = pool.reduce((a, w) => a + w.stats.acked, 0);
  assert.equal(stats, n);
  console.log(`# ${n} tasks at 5/1s burst 2: last started at ${at[n - 1]} ms (limit allows >= ${(n - 2) * 200})`);
});

test('a handler that throws is retried (attempt 2)', async () => {
  const id = await q.add('flaky', { x: 1 });
  const attempts = [];
  const failed = [];
  const w = worker('flaky', async (task) => {
    attempts.push(task.attempt);
    if (task.attempt === 1) throw new Error('boom on the first try');
  });
  w.on('failed', (task, err) => failed.push([task.attempt, err.message]));
  await waitFor(async () => (await q.info(id)).state === 'done', 20000, 'the retried task');
  await w.close();
  assert.deepEqual(attempts, [1, 2]);
  assert.equal(w.stats.failed, 1);
  assert.equal(w.stats.acked, 1);
  assert.deepEqual(failed, [[1, 'boom on the first try']]);
});

test('UnrecoverableError fails a task DEAD; a plain throw on the last attempt fails it for good', async () => {
  const dead = await q.add('flaky', { dead: true });
  const spent = await q.add('once', { spent: true });
  const w = worker(['flaky', 'once'], async (task) => {
    if (task.payload.dead) throw new UnrecoverableError('never going to work');
    throw new TypeError('still broken');
  });
  await waitFor(async () => (await q.info(dead)).state === 'failed' && (await q.info(spent)).state === 'failed');
  await w.close();
  const d = await q.info(dead);
  assert.equal(d.fail_reason, 'dead');
  assert.equal(d.attempt, 1);
  assert.match(d.fail_message, /^UnrecoverableError: never going to work/);
  const s = await q.info(spent);
  assert.equal(s.fail_reason, 'attempts');
  assert.match(s.fail_message, /^TypeError: still broken/);
});

test("RetryAfterError brings the task back no earlier than the upstream asked, without using up an attempt", async () => {
  const id = await q.add('once', { upstream: 429 }); // max_attempts 1: a plain failure would end it
  const starts = [];
  const w = worker('once', async (task) => {
    starts.push({ attempt: task.attempt, at: Date.now() });
    if (task.attempt === 1) throw new RetryAfterError(400);
  });
  await waitFor(async () => (await q.info(id)).state === 'done', 20000, 'the task retried after 400 ms');
  await w.close();
  assert.deepEqual(starts.map((s) => s.attempt), [1, 2]);
  assert.ok(starts[1].at - starts[0].at >= 390, `retried after ${starts[1].at - starts[0].at} ms`);
});

test('a worker process killed mid-task has its task redelivered to another worker', async () => {
  const id = await q.add('slow', { crash: true });
  const child = spawn(process.execPath, [path.join(__dirname, 'crash-worker.js'), String(connection.port)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise((r) => child.once('exit', r));
  let out = '';
  child.stdout.on('data', (b) => (out += b));
  await waitFor(() => out.includes('started'), 20000, 'the child to start the task');
  assert.equal(out.trim(), `started ${id} 1`);
  // The child renews its 2 s lease: still running well past it.
  await sleep(3000);
  assert.equal((await q.info(id)).state, 'running');
  child.kill('SIGKILL');
  await exited;
  const got = [];
  const w = worker('slow', async (task) => {
    got.push([task.id, task.attempt]);
  });
  await waitFor(async () => (await q.info(id)).state === 'done', 20000, 'the redelivery');
  await w.close();
  assert.deepEqual(got, [[id, 2]]);
});

test('a handler running past its lease keeps the task: TASK.TOUCH renews it', async () => {
  const id = await q.add('slow', { long: true }); // lease 2 s
  const attempts = [];
  const w = worker('slow', async (task) => {
    attempts.push(task.attempt);
    await sleep(5000);
    assert.equal(task.leaseLost, false);
  });
  const lost = [];
  w.on('lost', (t) => lost.push(t.id));
  await waitFor(async () => (await q.info(id)).state === 'done', 20000, 'the long task');
  await w.close();
  assert.deepEqual(attempts, [1]);
  assert.deepEqual(lost, []);
});

test('a worker whose lease lapsed cannot ack: NOLEASE, counted as lost, and the task runs again', async () => {
  const id = await q.add('slow', { lapse: true }); // lease 2 s
  const attempts = [];
  let abortedBy = null;
  // leaseMs far above the real lease: the worker renews too late, as after a long pause.
  const w = worker('slow', async (task) => {
    attempts.push(task.attempt);
    if (task.attempt === 1) {
      task.signal.addEventListener('abort', () => (abortedBy = task.signal.reason));
      await waitFor(async () => (await q.info(id)).attempt === 1 && (await q.info(id)).state === 'queued', 20000, 'the lease to lapse');
    }
  }, { leaseMs: 60000 });
  const lost = [];
  w.on('lost', (task, err) => lost.push([task.attempt, err.code]));
  await waitFor(async () => (await q.info(id)).state === 'done', 30000, 'the second attempt');
  await w.close();
  assert.deepEqual(attempts, [1, 2]);
  assert.deepEqual(lost, [[1, 'NOLEASE']]);
  assert.equal(w.stats.lost, 1);
  assert.equal(w.stats.acked, 1);
  assert.equal(abortedBy, null, 'no TOUCH was sent, so nothing told the handler before its ACK');
});

test('close() loses nothing: every task ends acked exactly once', async () => {
  const n = 30;
  const ids = [];
  for (let i = 0; i < n; i++) ids.push(await q.add('plain', { i }));
  const runs = new Map();
  const handler = async (task) => {
    await sleep(20 + (task.payload.i % 3) * 20);
    runs.set(task.id, (runs.get(task.id) || 0) + 1);
  };
  const a = worker('plain', handler, { concurrency: 3 });
  await waitFor(() => runs.size >= 5, 20000, 'five tasks done');
  await a.close(); // in the middle of the work
  const afterClose = runs.size;
  assert.ok(afterClose < n, 'the first worker stopped early');
  assert.equal(a.running, 0);
  const b = worker('plain', handler, { concurrency: 3 });
  await waitFor(() => runs.size === n, 30000, 'the rest drained');
  await b.close();
  for (const id of ids) {
    assert.equal(runs.get(id), 1, `task ${id} ran ${runs.get(id)} times`);
    const info = await q.info(id);
    assert.equal(info.state, 'done');
    assert.equal(info.attempt, 1);
  }
  assert.equal(a.stats.acked + b.stats.acked, n);
  assert.equal(a.stats.lost + b.stats.lost, 0);
});

test('close({timeout}) releases a stuck task at once, for the next worker', async () => {
  const id = await q.add('plain', { stuck: true });
  let aborted = null;
  const a = worker('plain', (task) => new Promise((resolve) => {
    task.signal.addEventListener('abort', () => {
      aborted = task.signal.reason;
      resolve();
    });
  }));
  await waitFor(async () => (await q.info(id)).state === 'running', 20000, 'the task to run');
  await a.close({ timeout: 200 });
  assert.ok(aborted, 'the handler was told');
  assert.equal(a.stats.released, 1);
  assert.equal(a.stats.acked, 0);
  const got = [];
  const b = worker('plain', async (task) => got.push(task.attempt));
  await waitFor(async () => (await q.info(id)).state === 'done', 20000, 'the released task');
  await b.close();
  assert.deepEqual(got, [2]);
});

test('the cost a handler reports is settled on ACK', async () => {
  const before = (await q.throttle('budget', '', { peek: true })).remaining;
  const a = await q.add('metered', {}, { units: 10 });
  const b = await q.add('metered', {}, { units: 5 });
  const w = worker('metered', async (task) => {
    if (task.id === a) return { cost: 3 }; // charged 10 at start, settled to 3
    task.setCost(2); // charged 5, settled to 2
  });
  await waitFor(async () => (await q.info(a)).state === 'done' && (await q.info(b)).state === 'done');
  await w.close();
  const after = (await q.throttle('budget', '', { peek: true })).remaining;
  assert.equal(before - after, 5, `the quota went from ${before} to ${after}`);
});

test('throttle, explain and the typed errors', async () => {
  await q.call('LIMIT.SET', 'node_deny', 'rate=1/1m,key=explicit');
  const ok = await q.throttle('node_deny', 'u1');
  assert.equal(ok.allowed, true);
  assert.equal(ok.deniedBy, null);
  const no = await q.throttle('node_deny', 'u1');
  assert.equal(no.allowed, false);
  assert.equal(no.deniedBy, 'node_deny');
  assert.ok(no.retryAfter > 0);
  await assert.rejects(q.throttle('node_deny', 'u1', { throwOnDeny: true }), (err) => {
    assert.ok(err instanceof RateLimitedError && err instanceof SluiceError);
    assert.equal(err.code, 'RATELIMITED');
    assert.equal(err.limit, 'node_deny');
    assert.equal(err.key, 'u1');
    assert.equal(err.limitValue, 1);
    assert.ok(err.retryAfter > 0 && err.retryAfter <= 60000);
    return true;
  });
  // A real -RATELIMITED reply, fields percent-decoded (the key has a space).
  await q.call('LEASE.ACQUIRE', 'slots', 'a b');
  await assert.rejects(q.call('LEASE.ACQUIRE', 'slots', 'a b'), (err) => {
    assert.ok(err instanceof RateLimitedError);
    assert.equal(err.limit, 'slots');
    assert.equal(err.kind, 'concurrency');
    assert.equal(err.key, 'a b');
    assert.equal(err.limitValue, 1);
    assert.equal(err.windowMs, 0);
    assert.ok(err.retryAfter > 0);
    return true;
  });
  await assert.rejects(q.throttle('no_such_limit', 'k'), (err) => err instanceof NoLimitError && err.code === 'NOLIMIT');
  await q.throttle('tiny', 'first');
  await assert.rejects(q.throttle('tiny', 'second'), (err) => err instanceof BusyError && err.code === 'BUSY');
  await assert.rejects(q.explain(987654321), (err) => err instanceof NoTaskError);
  await assert.rejects(q.add('plain', {}, { units: 0 }), (err) => err instanceof SluiceError && err.code === 'WRONGARGS');

  const id = await q.add('plain', { later: true }, { delay: 60000, priority: 3, id: 'node-later' });
  assert.equal(await q.add('plain', { later: 2 }, { delay: 60000, id: 'node-later' }), id, 'the task key deduplicates');
  const why = await q.explain(id);
  assert.equal(why.state, 'queued');
  assert.equal(typeof why.text, 'string');
  assert.ok(why.text.length > 0);
  assert.equal(await q.cancel(id), true);
  assert.equal((await q.info(id)).state, 'cancelled');
});

test('connections in RESP3 (either reply mapping) decode the same', async () => {
  for (const extra of [{ protocol: 3 }, { protocol: 3, replyMapping: 'resp3' }]) {
    const conn = { ...connection, ...extra };
    const q3 = new Queue({ connection: conn });
    const id = await q3.add('plain', { resp: 3 }, { delay: 60000 });
    assert.equal((await q3.info(id)).state, 'queued');
    assert.equal((await q3.explain(id)).state, 'queued');
    await q3.cancel(id);
    const id2 = await q3.add('plain', { resp: 3, go: true });
    const got = [];
    const w = worker('plain', async (task) => got.push([task.id, task.payload, task.attempt]), { connection: conn });
    await waitFor(() => got.length === 1, 20000, 'the task over RESP3');
    await w.close();
    assert.deepEqual(got, [[id2, { resp: 3, go: true }, 1]]);
    assert.equal((await q3.info(id2)).state, 'done');
    await q3.close();
  }
});

test('a worker blocked in TASK.GET carries on after the server restarts', async () => {
  let srv = await startServer();
  const conn = { host: '127.0.0.1', port: srv.port };
  const got = [];
  const w = new Worker('plain', async (task) => got.push(task.payload), { connection: conn, blockTimeout: 5000 });
  w.on('error', () => {});
  const pq = new Queue({ connection: conn });
  await pq.add('plain', { n: 1 });
  await waitFor(() => got.length === 1, 20000, 'the first task');
  await sleep(200); // the worker is blocked in TASK.GET now
  await srv.stop();
  srv = await startServer({ port: srv.port, dir: srv.dir });
  await waitFor(async () => {
    try {
      await pq.add('plain', { n: 2 });
      return true;
    } catch {
      return false;
    }
  }, 20000, 'the restarted server');
  await waitFor(() => got.length >= 2, 30000, 'the task after the restart');
  assert.deepEqual(got[1], { n: 2 });
  await w.close();
  await pq.close();
  assert.ok(w.stats.reconnects >= 1);
  await srv.stop();
});

test('close() returns promptly when the server is gone', async () => {
  const srv = await startServer();
  const conn = { host: '127.0.0.1', port: srv.port };
  const w = new Worker('plain', async () => {}, { connection: conn, blockTimeout: 5000 });
  w.on('error', () => {});
  const pq = new Queue({ connection: conn });
  pq.on('error', () => {});
  await pq.add('plain', { n: 1 });
  await waitFor(() => w.stats.acked === 1, 20000, 'the first task');
  await srv.stop('SIGKILL');
  await sleep(300); // both clients are reconnecting now
  const t = Date.now();
  await w.close();
  await pq.close();
  assert.ok(Date.now() - t < 9000, `close took ${Date.now() - t} ms`);
});
