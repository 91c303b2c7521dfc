// SPDX-License-Identifier: MIT
// Typed errors for sluice's error replies, and the errors a handler throws to steer its task.
//
// Every sluice error reply starts with a stable code word (docs/commands.md, "Errors"); ioredis
// hands it over as a ReplyError whose message is the whole reply text. fromReply() turns one into
// a SluiceError whose `code` is that word, of the subclass for the codes a program reacts to.
// Invariant: every rejection this package makes for a server refusal is a SluiceError;
// connection failures stay ioredis's own errors, so a caller can tell "the server said no" from
// "no server". RetryAfterError and UnrecoverableError are never sent by the server: a handler
// throws them and the worker turns them into TASK.FAIL ... RETRY_AFTER ms / DEAD.
'use strict';

// The code words sluice uses; a first word not among them is answered as ERR.
const CODES = new Set(
  'ERR WRONGARGS NOAUTH WRONGPASS NOPROTO NOLIMIT RATELIMITED BUSY NOLEASE INUSE NOTASK EXISTS NOMEM CONFIG DENIED IOERR'.split(
    ' ',
  ),
);

class SluiceError extends Error {
  /** A refusal by the server: `code` is the code word, `detail` the sentence after it. */
  constructor(code, detail = '') {
    super(`${code} ${detail}`.trim());
    this.name = new.target.name;
    this.code = code;
    this.detail = detail;
  }
}

function intOrNull(v) {
  if (v === undefined || v === null || v === '') return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : null;
}

/** The `name=value` words of an error sentence, values percent-decoded. */
function parseFields(text) {
  const out = {};
  for (const word of String(text).split(' ')) {
    const eq = word.indexOf('=');
    if (eq <= 0) continue;
    let value = word.slice(eq + 1);
    try {
      value = decodeURIComponent(value);
    } catch {
      // a stray '%' that is no escape: keep the text as sent
    }
    out[word.slice(0, eq)] = value;
  }
  return out;
}

class RateLimitedError extends SluiceError {
  /**
   * A limit said no. Fields as in `-RATELIMITED`: limit, kind, tier, key, limitValue, windowMs,
   * retryAfter (ms; -1: never); `fields` keeps them all as sent (and any the server adds later).
   * From throttle({throwOnDeny: true}) also remaining and resetAfter (ms).
   */
  constructor(detail = '', fields = {}) {
    super('RATELIMITED', detail);
    this.fields = { ...fields };
    const f = this.fields;
    this.limit = f.limit ?? null;
    this.kind = f.kind ?? null;
    this.tier = f.tier ?? null;
    this.key = f.key ?? null;
    this.limitValue = intOrNull(f.limit_value);
    this.windowMs = intOrNull(f.window_ms);
    this.retryAfter = intOrNull(f.retry_after_ms);
    this.remaining = intOrNull(f.remaining);
    this.resetAfter = intOrNull(f.reset_after_ms);
  }
}

/** A table is full (a limit's max_keys, the engine's max_tasks or max_parked): back off. */
class BusyError extends SluiceError {}
/** No limit (or task type) of that name. */
class NoLimitError extends SluiceError {}
/** The task (or lease) is not running for this attempt any more: another worker may have it. */
class NoLeaseError extends SluiceError {}
/** No task of that id. */
class NoTaskError extends SluiceError {}
/** The task key is held by a running task; `runningId` names it. */
class ExistsError extends SluiceError {
  constructor(code, detail = '') {
    super(code, detail);
    this.runningId = intOrNull(parseFields(detail).running_id);
  }
}

const CLASSES = {
  BUSY: BusyError,
  NOLIMIT: NoLimitError,
  NOLEASE: NoLeaseError,
  NOTASK: NoTaskError,
  EXISTS: ExistsError,
};

/** A SluiceError for an ioredis ReplyError (or the text of an error reply). */
function fromReply(err) {
  const text = typeof err === 'string' ? err : String(err && err.message);
  const sp = text.indexOf(' ');
  let code = sp < 0 ? text : text.slice(0, sp);
  let rest = sp < 0 ? '' : text.slice(sp + 1);
  if (!CODES.has(code)) {
    code = 'ERR';
    rest = text;
  }
  let out;
  if (code === 'RATELIMITED') out = new RateLimitedError(rest, parseFields(rest));
  else out = new (CLASSES[code] || SluiceError)(code, rest);
  if (err && typeof err === 'object') out.cause = err;
  return out;
}

/** True for an error reply of the server (as opposed to a connection failure). */
function isReplyError(err) {
  return !!err && (err.name === 'ReplyError' || err instanceof SluiceError);
}

/**
 * Thrown by a handler whose upstream answered "too many requests, retry after ms" (HTTP 429
 * with Retry-After): the worker fails the task with RETRY_AFTER ms, so it comes back no earlier
 * than that, and the failure does not use up one of the task's attempts.
 */
class RetryAfterError extends Error {
  constructor(ms, message) {
    const n = Math.max(0, Math.ceil(Number(ms) || 0));
    super(message || `upstream asked to retry after ${n} ms`);
    this.name = 'RetryAfterError';
    this.retryAfter = n;
  }
}

/** Thrown by a handler for a task that can never succeed: it is failed DEAD, not retried. */
class UnrecoverableError extends Error {
  constructor(message) {
    super(message);
    this.name = 'UnrecoverableError';
  }
}

module.exports = {
  CODES,
  SluiceError,
  RateLimitedError,
  BusyError,
  NoLimitError,
  NoLeaseError,
  NoTaskError,
  ExistsError,
  RetryAfterError,
  UnrecoverableError,
  fromReply,
  isReplyError,
  parseFields,
};
