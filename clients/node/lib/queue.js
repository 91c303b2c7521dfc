// SPDX-License-Identifier: MIT
// The producer side: Queue submits tasks, asks for rate-limit decisions and explains waits.
//
// A Queue wraps one ioredis client (commands are pipelined on it, so one Queue serves a whole
// process). Replies are decoded to plain values: integers as numbers, maps as objects keyed by
// the server's field names (docs/commands.md). Every server refusal rejects with a SluiceError
// subclass (errors.js); THROTTLE's denial is an answer, not an error, unless throwOnDeny asks
// for a RateLimitedError.
'use strict';

const { EventEmitter } = require('node:events');
const { makeRedis, call, toObject, hardClose } = require('./connection');
const { RateLimitedError } = require('./errors');

/** A task's payload as JSON text: a Buffer is taken as JSON already, anything else is encoded. */
function encodePayload(payload) {
  if (Buffer.isBuffer(payload)) return payload;
  const text = JSON.stringify(payload === undefined ? null : payload);
  return text === undefined ? 'null' : text;
}

class Queue extends EventEmitter {
  /**
   * `new Queue({connection: {host, port, password}})`; connection may also be a URL or an
   * ioredis client. Connection errors of a connection it opened are emitted as 'error' when
   * someone listens (commands reject with them anyway), never thrown as unhandled.
   */
  constructor(opts = {}) {
    super();
    this.redis = makeRedis(opts.connection);
    this._owned = this.redis !== opts.connection;
    if (this._owned) {
      this.redis.on('error', (err) => {
        if (this.listenerCount('error') > 0) this.emit('error', err);
      });
    }
  }

  /** Any command, with refusals rejected as SluiceError. */
  call(...args) {
    return call(this.redis, args);
  }

  /**
   * TASK.ADD: submits a task; resolves to its id. `payload` is JSON-encoded. Options: key (the
   * explicit rate-limit key), units, priority, id (the task key, for deduplication), delay (ms).
   */
  async add(type, payload, opts = {}) {
    const args = ['TASK.ADD', type, encodePayload(payload)];
    for (const [word, value] of [
      ['KEY', opts.key],
      ['UNITS', opts.units],
      ['PRIORITY', opts.priority],
      ['ID', opts.id],
      ['DELAY', opts.delay],
    ]) {
      if (value !== undefined && value !== null) args.push(word, value);
    }
    return Number(await this.call(...args));
  }

  /**
   * THROTTLE: a decision from a limit or a task type's chain. Resolves to {allowed, limit,
   * remaining, retryAfter, resetAfter, deniedBy} (ms); with throwOnDeny a denial rejects with a
   * RateLimitedError instead. `peek` decides without charging.
   */
  async throttle(limit, key = '', opts = {}) {
    const args = ['THROTTLE', limit, key ?? ''];
    if (opts.units !== undefined && opts.units !== null) args.push('UNITS', opts.units);
    if (opts.peek) args.push('PEEK');
    const r = await this.call(...args);
    const res = {
      allowed: Number(r[0]) === 1,
      limit: Number(r[1]),
      remaining: Number(r[2]),
      retryAfter: Number(r[3]),
      resetAfter: Number(r[4]),
      deniedBy: r[5] ?? null,
    };
    if (opts.throwOnDeny && !res.allowed) {
      const fields = {
        limit: res.deniedBy,
        key: String(key ?? ''),
        limit_value: String(res.limit),
        retry_after_ms: String(res.retryAfter),
        remaining: String(res.remaining),
        reset_after_ms: String(res.resetAfter),
      };
      const detail = Object.entries(fields)
        .map(([k, v]) => `${k}=${encodeURIComponent(v ?? '')}`)
        .join(' ');
      throw new RateLimitedError(detail, fields);
    }
    return res;
  }

  /** TASK.EXPLAIN: why a task waits and when it should start (state, limit, key, position, queue_length, wake_ms, estimated_start_ms, text). */
  async explain(id) {
    return toObject(await this.call('TASK.EXPLAIN', id));
  }

  /** TASK.INFO: a task's state, attempts and failure, as an object of the server's 20 fields. */
  async info(id) {
    return toObject(await this.call('TASK.INFO', id));
  }

  /** TASK.CANCEL: true when cancelled, false when it had already finished. */
  async cancel(id) {
    return Number(await this.call('TASK.CANCEL', id)) === 1;
  }

  /** Closes the connection (only one this Queue opened itself). */
  async close() {
    if (!this._owned) return;
    if (this.redis.status !== 'ready') {
      hardClose(this.redis); // nothing to flush on a connection that is down
      return;
    }
    try {
      await this.redis.quit();
    } catch {
      hardClose(this.redis);
    }
  }
}

module.exports = { Queue, encodePayload };
