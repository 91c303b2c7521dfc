// SPDX-License-Identifier: MIT
// ioredis connections for sluice, and the decoding of its replies.
//
// makeRedis() opens one ioredis client from what a user passes as `connection`: an options
// object ({host, port, password, ...}, any ioredis option), a redis:// URL, or an ioredis client
// (duplicated when the caller needs a connection of its own). It speaks RESP2 unless told
// otherwise, so replies are flat arrays; toObject() accepts both shapes (a flat array of pairs or
// a RESP3 map), so a client handed in with `protocol: 3` decodes the same. Reconnection is
// ioredis's, with an exponential backoff (50 ms doubling to 5 s, with jitter).
'use strict';

const { Redis } = require('ioredis');
const { fromReply, isReplyError } = require('./errors');

/** ioredis retryStrategy: 50 ms doubling to 5 s, each wait jittered down by up to half. */
function backoffMs(times) {
  const base = Math.min(5000, 50 * 2 ** Math.min(Math.max(times - 1, 0), 10));
  return Math.round(base * (0.5 + Math.random() / 2));
}

function isRedis(x) {
  return !!x && typeof x === 'object' && typeof x.call === 'function' && typeof x.duplicate === 'function';
}

/**
 * An ioredis client for `connection`. `overrides` are options this package needs on the
 * connection it owns (e.g. maxRetriesPerRequest: null for a worker); an existing client is
 * duplicated with them when `own` is set, else returned as it is.
 */
function makeRedis(connection, overrides = {}, own = false) {
  if (isRedis(connection)) return own ? connection.duplicate(overrides) : connection;
  const defaults = { host: '127.0.0.1', port: 7379, protocol: 2, retryStrategy: backoffMs };
  if (typeof connection === 'string') return new Redis(connection, { ...defaults, ...overrides });
  return new Redis({ ...defaults, ...(connection || {}), ...overrides });
}

/** Sends one command; a server refusal rejects with a SluiceError, anything else as it came. */
async function call(redis, args) {
  try {
    return await redis.call(...args.map((a) => (typeof a === 'number' ? String(a) : a)));
  } catch (err) {
    throw isReplyError(err) ? fromReply(err) : err;
  }
}

/** A map reply (RESP2 flat array of pairs, a RESP3 Map or object) as a plain object. */
function toObject(reply) {
  if (reply instanceof Map) return Object.fromEntries(reply);
  if (Array.isArray(reply)) {
    const out = {};
    for (let i = 0; i + 1 < reply.length; i += 2) out[String(reply[i])] = reply[i + 1];
    return out;
  }
  return reply && typeof reply === 'object' ? { ...reply } : {};
}

/**
 * Closes a connection at once. ioredis's disconnect() leaves a client that was waiting to
 * reconnect (no socket) in 'reconnecting' with its queued commands pending for ever, so those
 * are rejected here.
 */
function hardClose(conn) {
  conn.disconnect();
  if (conn.status === 'reconnecting' && typeof conn.flushQueue === 'function') {
    conn.flushQueue(new Error('Connection is closed.'));
  }
}

/** The first word of a connection-level problem, for logs. */
function describe(err) {
  return err && err.message ? err.message : String(err);
}

module.exports = { backoffMs, makeRedis, call, toObject, describe, isRedis, hardClose };
