// SPDX-License-Identifier: MIT
// The worker: a blocking TASK.GET on a connection of its own hands out up to `concurrency`
// tasks at once; each runs the handler while a timer keeps its lease alive with TASK.TOUCH ...
// ATTEMPT n, and is settled with TASK.ACK / TASK.FAIL fenced by its ATTEMPT on a second
// connection (a blocked TASK.GET would hold those replies back).
//
// Invariants:
// - Every delivered task is settled exactly once by this worker, or left to its lease: the
//   handler's result acks it (with its cost), a throw fails it RETRY (the message as REASON),
//   RetryAfterError / RateLimitedError fail it RETRY RETRY_AFTER ms, UnrecoverableError fails it
//   DEAD. A process that dies settles nothing, and the server redelivers when the lease lapses,
//   which the touch timer never lets happen while a handler runs.
// - Every ACK, FAIL and TOUCH names its attempt, so a worker whose lease lapsed cannot settle
//   the delivery another worker now holds: it gets NOLEASE, counted as `lost`.
// - close() stops fetching, lets the blocked TASK.GET return (it never cuts it: a reply in
//   flight would carry tasks nobody runs until their leases lapse), runs what that last
//   TASK.GET handed out, waits for running handlers (up to its timeout) and releases the ones
//   still running after it (FAIL RETRY RETRY_AFTER 0: back at once, no attempt used up).
// - Connections are ioredis's with maxRetriesPerRequest: null: a command waits through a
//   reconnect and an unanswered TASK.GET is sent again on the new connection. The loop also
//   retries a failed TASK.GET itself with backoff, and ACK/FAIL are retried for up to
//   `settleTimeout` ms.
'use strict';

const { EventEmitter } = require('node:events');
const { makeRedis, call, toObject, backoffMs, describe, hardClose } = require('./connection');
const {
  SluiceError,
  RateLimitedError,
  NoLeaseError,
  NoTaskError,
  RetryAfterError,
  UnrecoverableError,
} = require('./errors');

const REASON_MAX = 1000; // bytes; the server keeps up to 1023
const COST_MAX = 1e9;
const RETRY_AFTER_MAX = 2592000000; // 30 days: the most TASK.FAIL ... RETRY_AFTER accepts

function checkCost(n) {
  if (!Number.isInteger(n) || n < 0 || n > COST_MAX) {
    throw new TypeError(`a task's cost is an integer from 0 to ${COST_MAX}, got ${n}`);
  }
  return n;
}

class Task {
  /**
   * One delivery of a task: id, type, payload (parsed JSON; the raw text when it does not
   * parse), rawPayload, attempt (1 on the first delivery), leaseUntil (Unix ms). `signal` aborts
   * when the worker loses the lease (a TOUCH answered NOLEASE) or releases the task at close().
   */
  constructor(id, type, rawPayload, attempt, leaseUntil) {
    this.id = Number(id);
    this.type = String(type);
    this.rawPayload = Buffer.isBuffer(rawPayload) ? rawPayload.toString('utf8') : String(rawPayload);
    try {
      this.payload = JSON.parse(this.rawPayload);
    } catch {
      this.payload = this.rawPayload;
    }
    this.attempt = Number(attempt);
    this.leaseUntil = Number(leaseUntil);
    this.cost = null;
    this.leaseLost = false;
    this._abort = new AbortController();
    this.signal = this._abort.signal;
  }

  /** What the task really cost, reported with TASK.ACK ... COST n (an integer 0..10^9). */
  setCost(n) {
    this.cost = checkCost(n);
  }
}

/**
 * A Task from one item of TASK.GET's reply: an array in RESP2; in RESP3 a map, which ioredis
 * gives as an object or Map (replyMapping "resp3") or flattened into [name, value, ...].
 */
function parseTask(item) {
  if (!Array.isArray(item) || item[0] === 'id') {
    const m = toObject(item);
    return new Task(m.id, m.type, m.payload, m.attempt, m.lease_until_ms);
  }
  return new Task(item[0], item[1], item[2], item[3], item[4]);
}

/** What a handler's result asks for: an ack, with a cost from {cost} or a bare integer. */
function outcomeOf(result, task) {
  let cost = null;
  if (typeof result === 'number') cost = result;
  else if (result && typeof result === 'object' && result.cost !== undefined) cost = result.cost;
  if (cost !== null) task.setCost(cost); // throws on a bad cost: the caller acks without it
  return ['ack', null];
}

/** What a handler's throw asks for: [outcome, argument] for settleCommand. */
function outcomeOfError(err) {
  if (err instanceof RetryAfterError) return ['retry_after', err.retryAfter];
  if (err instanceof RateLimitedError && err.retryAfter !== null && err.retryAfter >= 0) {
    return ['retry_after', err.retryAfter];
  }
  if (err instanceof UnrecoverableError) return ['dead', null];
  return ['retry', null];
}

function reasonOf(err) {
  const name = (err && err.name) || 'Error';
  const msg = err && err.message !== undefined ? err.message : String(err);
  const buf = Buffer.from(`${name}: ${msg}`, 'utf8');
  if (buf.length <= REASON_MAX) return buf.toString('utf8');
  // Cut on a character boundary: drop a partial UTF-8 sequence at the end.
  let end = REASON_MAX;
  while (end > 0 && (buf[end] & 0xc0) === 0x80) end--;
  return buf.subarray(0, end).toString('utf8');
}

/** The ACK or FAIL for an outcome (always fenced by ATTEMPT), and the stats counter it bumps. */
function settleCommand(task, outcome, arg, err) {
  if (outcome === 'ack') {
    const args = ['TASK.ACK', task.id];
    if (task.cost !== null) args.push('COST', task.cost);
    return [[...args, 'ATTEMPT', task.attempt], 'acked'];
  }
  const args = ['TASK.FAIL', task.id];
  if (outcome === 'dead') args.push('DEAD');
  else {
    args.push('RETRY');
    if (outcome === 'retry_after') args.push('RETRY_AFTER', Math.min(arg, RETRY_AFTER_MAX));
    else if (outcome === 'release') args.push('RETRY_AFTER', 0); // back at once, no attempt used
  }
  const reason = outcome === 'release' ? 'worker shut down' : reasonOf(err);
  args.push('REASON', reason, 'ATTEMPT', task.attempt);
  return [args, outcome === 'release' ? 'released' : 'failed'];
}

/**
 * Milliseconds until the next TASK.TOUCH: a third of the lease. Given the type's leaseMs that
 * is exact; otherwise a third of what the server's leaseUntil leaves, which assumes the two
 * clocks agree, so it is capped by maxTouchInterval against a server clock running ahead.
 */
function touchInterval(task, leaseMs, cap) {
  if (leaseMs) return Math.max(50, leaseMs / 3);
  const left = task.leaseUntil - Date.now();
  return left > 0 ? Math.min(cap, Math.max(50, left / 3)) : Math.min(cap, 1000);
}

const CUT = Symbol('cut'); // what the wait for a TASK.GET gives when close() stops waiting
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Resolves to `promise`'s value, or rejects with a timeout error after `ms`. */
function withDeadline(promise, ms) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(Object.assign(new Error(`no reply in ${ms} ms`), { code: 'ETIMEDOUT' })), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

class Worker extends EventEmitter {
  /**
   * `new Worker(type, async (task) => ..., {concurrency, connection, ...})`; `type` is a type
   * name or an array of them. Options: concurrency (1), connection ({host, port, password, ...}
   * ioredis options, a URL, or an ioredis client, which is duplicated), blockTimeout (ms one
   * TASK.GET blocks: 1000), leaseMs (the type's lease when known: exact renewals),
   * maxTouchInterval (5000 ms), settleTimeout (60000 ms of retrying an ACK/FAIL over a lost
   * connection), autorun (true: start fetching at once; else call run()).
   */
  constructor(types, handler, opts = {}) {
    super();
    this.types = Array.isArray(types) ? [...types] : [types];
    if (this.types.length === 0 || this.types.some((t) => typeof t !== 'string' || t === '')) {
      throw new TypeError('a worker needs one or more task type names');
    }
    if (typeof handler !== 'function') throw new TypeError('a worker needs a handler function');
    this.handler = handler;
    this.concurrency = opts.concurrency ?? 1;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1 || this.concurrency > 1000) {
      throw new RangeError('concurrency is an integer from 1 to 1000');
    }
    this.blockTimeout = opts.blockTimeout ?? 1000;
    this.leaseMs = opts.leaseMs ?? null;
    this.maxTouchInterval = opts.maxTouchInterval ?? 5000;
    this.settleTimeout = opts.settleTimeout ?? 60000;
    this.stats = { acked: 0, failed: 0, released: 0, lost: 0, reconnects: 0 };

    const own = { maxRetriesPerRequest: null, autoResendUnfulfilledCommands: true };
    this.blocking = makeRedis(opts.connection, own, true);
    this.redis = makeRedis(opts.connection, own, true);
    for (const conn of [this.blocking, this.redis]) {
      conn.on('error', (err) => this._report(err));
      conn.on('reconnecting', () => this.stats.reconnects++);
    }

    this._running = new Map(); // id -> {task, timer, done, released}
    this._inflight = new Set(); // each task's run-and-settle promise
    this._settling = new Set(); // ACKs and FAILs under way (a released handler may never end)
    this._wakers = new Set(); // resolvers of the loop's waits (a free slot, a backoff)
    this._closing = false;
    this._closed = null;
    this._cutDone = new Promise((resolve) => (this._cut = () => resolve(CUT)));
    this._loop = null;
    this._lastWarn = 0;
    if (opts.autorun !== false) this.run();
  }

  /** Starts fetching (once); resolves when the fetch loop ends, after close(). */
  run() {
    if (!this._loop) this._loop = this._fetchLoop();
    return this._loop;
  }

  /** True once close() was called. */
  get closing() {
    return this._closing;
  }

  /** Tasks whose handler is running now. */
  get running() {
    return this._running.size;
  }

  /**
   * Graceful shutdown: no more TASK.GET; tasks handed out are run; running handlers are waited
   * for up to `timeout` ms (default: as long as they take), then released. Resolves once every
   * task is settled and the connections are closed.
   */
  close(opts = {}) {
    if (!this._closed) this._closed = this._close(opts.timeout ?? Infinity);
    return this._closed;
  }

  async _close(timeout) {
    this._closing = true;
    this._wake();
    if (this._loop) {
      // A TASK.GET sent on a live connection returns within blockTimeout: let it, so that
      // whatever it hands out is run. On a connection that is down nothing is in flight.
      if (this.blocking.status !== 'ready') this._cutGet();
      let timer;
      const done = await Promise.race([
        this._loop.then(() => true),
        new Promise((resolve) => (timer = setTimeout(resolve, this.blockTimeout + 3000, false))),
      ]);
      clearTimeout(timer);
      if (!done) {
        this._cutGet(); // no answer: a reply it may still carry lapses with its leases
        await this._loop;
      }
    }
    const all = Promise.allSettled([...this._inflight]);
    if (Number.isFinite(timeout)) {
      let timer;
      await Promise.race([all, new Promise((r) => (timer = setTimeout(r, timeout)))]);
      clearTimeout(timer);
      const releases = [];
      for (const entry of this._running.values()) {
        if (entry.done || entry.released) continue;
        entry.released = true;
        clearTimeout(entry.timer);
        entry.task._abort.abort(new Error('worker shut down: the task was released'));
        releases.push(this._settle(entry.task, 'release', null, null));
      }
      await Promise.allSettled([...releases, ...this._settling]);
    } else {
      await all;
    }
    for (const conn of [this.blocking, this.redis]) {
      try {
        if (conn.status === 'ready') await withDeadline(conn.quit(), 2000);
        else hardClose(conn);
      } catch {
        hardClose(conn);
      }
    }
    this.emit('closed');
  }

  /** Stops waiting for the TASK.GET in flight and drops its connection. */
  _cutGet() {
    this._cut();
    hardClose(this.blocking);
  }

  _wake() {
    for (const w of this._wakers) w();
    this._wakers.clear();
  }

  /** Waits `ms`, or less when close() or a freed slot wakes the loop. */
  _pause(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this._wakers.add(done);
    });
  }

  _report(err, context) {
    const e = context ? Object.assign(err instanceof Error ? err : new Error(String(err)), { context }) : err;
    if (this.listenerCount('error') > 0) {
      this.emit('error', e);
      return;
    }
    const now = Date.now();
    if (now - this._lastWarn < 5000) return; // one line per outage, not one per retry
    this._lastWarn = now;
    console.warn(`sluice worker: ${context ? context + ': ' : ''}${describe(err)}`);
  }

  async _fetchLoop() {
    let errors = 0;
    while (!this._closing) {
      const free = this.concurrency - this._running.size;
      if (free <= 0) {
        await this._pause(60000);
        continue;
      }
      let reply;
      try {
        reply = await Promise.race([
          call(this.blocking, ['TASK.GET', ...this.types, 'COUNT', free, 'TIMEOUT', this.blockTimeout]),
          this._cutDone,
        ]);
        if (reply === CUT) break;
        errors = 0;
      } catch (err) {
        if (this._closing) break;
        errors++;
        this._report(err, 'TASK.GET');
        await this._pause(backoffMs(errors));
        continue;
      }
      // Tasks handed out are ours even when close() began meanwhile: run them.
      for (const item of reply || []) {
        let task;
        try {
          task = parseTask(item);
        } catch (err) {
          this._report(err, 'a TASK.GET reply that does not parse');
          continue;
        }
        this._start(task);
      }
    }
  }

  _start(task) {
    const entry = { task, timer: null, done: false, released: false };
    this._running.set(task.id, entry);
    this._scheduleTouch(entry);
    const p = this._runOne(entry);
    this._inflight.add(p);
    p.finally(() => this._inflight.delete(p));
  }

  async _runOne(entry) {
    const { task } = entry;
    let outcome;
    let arg = null;
    let error = null;
    let result;
    try {
      result = await this.handler(task);
      try {
        [outcome, arg] = outcomeOf(result, task);
      } catch (err) {
        this._report(err, `task ${task.id}: the handler's cost`);
        outcome = 'ack';
      }
    } catch (err) {
      error = err;
      [outcome, arg] = outcomeOfError(err);
      this.emit('failed', task, err);
    }
    entry.done = true;
    clearTimeout(entry.timer);
    this._running.delete(task.id);
    this._wake();
    if (entry.released) return; // close() released it when its timeout passed
    const settling = this._settle(task, outcome, arg, error);
    this._settling.add(settling);
    const ok = await settling;
    this._settling.delete(settling);
    if (ok && outcome === 'ack') this.emit('completed', task, result);
  }

  _scheduleTouch(entry, ms) {
    const wait = ms ?? touchInterval(entry.task, this.leaseMs, this.maxTouchInterval);
    entry.timer = setTimeout(() => this._touch(entry), wait);
  }

  async _touch(entry) {
    const { task } = entry;
    if (entry.done || entry.released) return;
    try {
      const until = await call(this.redis, ['TASK.TOUCH', task.id, 'ATTEMPT', task.attempt]);
      task.leaseUntil = Number(until);
      if (!entry.done && !entry.released) this._scheduleTouch(entry);
    } catch (err) {
      if (entry.done || entry.released) return;
      if (err instanceof NoLeaseError || err instanceof NoTaskError) {
        // The lease lapsed: the server hands the task to another worker. Tell the handler.
        task.leaseLost = true;
        task._abort.abort(err);
        this.emit('lost', task, err);
        return;
      }
      this._report(err, `TASK.TOUCH ${task.id}`);
      this._scheduleTouch(entry, err instanceof SluiceError ? 1000 : 100);
    }
  }

  /** ACK or FAIL, retried over connection errors for up to settleTimeout ms. */
  async _settle(task, outcome, arg, error) {
    const [args, counter] = settleCommand(task, outcome, arg, error);
    const deadline = Date.now() + this.settleTimeout;
    for (let tries = 1; ; tries++) {
      try {
        await withDeadline(call(this.redis, args), Math.max(1, deadline - Date.now()));
        this.stats[counter]++;
        return true;
      } catch (err) {
        if (err instanceof NoLeaseError || err instanceof NoTaskError) {
          // The lease lapsed (or the reply to an earlier try was lost): the task is another
          // worker's now; nothing to do but count it.
          this.stats.lost++;
          task.leaseLost = true;
          this.emit('lost', task, err);
          return false;
        }
        if (err instanceof SluiceError && err.code !== 'IOERR' && err.code !== 'NOMEM') {
          this._report(err, `${args[0]} ${task.id}`);
          return false;
        }
        if (Date.now() >= deadline) {
          this._report(err, `${args[0]} ${task.id} given up`);
          return false;
        }
        await sleep(backoffMs(tries));
      }
    }
  }
}

module.exports = { Worker, Task, parseTask, settleCommand, outcomeOf, outcomeOfError, touchInterval };
