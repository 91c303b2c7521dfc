// SPDX-License-Identifier: MIT
// The pure parts of sluice-client, without a server: the error mapping, the ACK/FAIL each
// outcome sends (always fenced by ATTEMPT), and the renewal interval.
'use strict';

const test = require('node:test');
const assert = require('node:assert/strict');
const {
  fromReply,
  SluiceError,
  RateLimitedError,
  BusyError,
  NoLeaseError,
  ExistsError,
  RetryAfterError,
  UnrecoverableError,
} = require('..');
const { Task, settleCommand, outcomeOf, outcomeOfError, touchInterval } = require('../lib/worker');

test('error replies map to typed errors by their code word', () => {
  const rl = fromReply(
    'RATELIMITED limit=heavy kind=rate key=u%201 limit_value=5 window_ms=60000 retry_after_ms=30000',
  );
  assert.ok(rl instanceof RateLimitedError && rl instanceof SluiceError && rl instanceof Error);
  assert.deepEqual(
    [rl.code, rl.limit, rl.kind, rl.key, rl.limitValue, rl.windowMs, rl.retryAfter, rl.tier],
    ['RATELIMITED', 'heavy', 'rate', 'u 1', 5, 60000, 30000, null],
  );
  assert.ok(fromReply('BUSY the limit tracks max_keys keys') instanceof BusyError);
  assert.ok(fromReply(new Error('NOLEASE task 5 is not running')) instanceof NoLeaseError);
  const ex = fromReply('EXISTS running_id=42 the task key is held');
  assert.ok(ex instanceof ExistsError);
  assert.equal(ex.runningId, 42);
  const other = fromReply('unknown command FOO');
  assert.equal(other.code, 'ERR');
  assert.equal(other.detail, 'unknown command FOO');
});

test('each outcome sends its ACK or FAIL, fenced by the attempt', () => {
  const t = new Task(7, 'x', '{"a":1}', 3, 0);
  assert.deepEqual(t.payload, { a: 1 });
  assert.deepEqual(settleCommand(t, 'ack')[0], ['TASK.ACK', 7, 'ATTEMPT', 3]);
  outcomeOf({ cost: 4 }, t);
  assert.deepEqual(settleCommand(t, 'ack')[0], ['TASK.ACK', 7, 'COST', 4, 'ATTEMPT', 3]);
  assert.throws(() => outcomeOf({ cost: 1.5 }, t), TypeError);
  assert.throws(() => t.setCost(-1), TypeError);

  const boom = new Error('boom');
  assert.deepEqual(settleCommand(t, ...outcomeOfError(boom), boom)[0],
    ['TASK.FAIL', 7, 'RETRY', 'REASON', 'Error: boom', 'ATTEMPT', 3]);
  const ra = new RetryAfterError(1500.2);
  assert.deepEqual(settleCommand(t, ...outcomeOfError(ra), ra)[0],
    ['TASK.FAIL', 7, 'RETRY', 'RETRY_AFTER', 1501, 'REASON', `RetryAfterError: ${ra.message}`, 'ATTEMPT', 3]);
  assert.equal(settleCommand(t, 'retry_after', 1e12, ra)[0][4], 2592000000, 'capped at 30 days');
  const rl = fromReply('RATELIMITED limit=a kind=rate key=k limit_value=1 window_ms=1000 retry_after_ms=250');
  assert.deepEqual(outcomeOfError(rl), ['retry_after', 250]);
  const never = fromReply('RATELIMITED limit=a kind=quota key=k limit_value=1 window_ms=0 retry_after_ms=-1');
  assert.deepEqual(outcomeOfError(never), ['retry', null]);
  const dead = new UnrecoverableError('no');
  assert.deepEqual(settleCommand(t, ...outcomeOfError(dead), dead)[0],
    ['TASK.FAIL', 7, 'DEAD', 'REASON', 'UnrecoverableError: no', 'ATTEMPT', 3]);
  assert.deepEqual(settleCommand(t, 'release', null, null)[0],
    ['TASK.FAIL', 7, 'RETRY', 'RETRY_AFTER', 0, 'REASON', 'worker shut down', 'ATTEMPT', 3]);

  const long = new Error('é'.repeat(2000));
  const reason = settleCommand(t, 'retry', null, long)[0][4];
  assert.ok(Buffer.byteLength(reason) <= 1000);
  assert.ok(!reason.includes('\ufffd'), 'cut on a character boundary');
});

test('renewals come every third of the lease, capped when only the server clock tells', () => {
  const t = new Task(1, 'x', 'null', 1, Date.now() + 30000);
  assert.equal(touchInterval(t, 900, 5000), 300);
  const guess = touchInterval(t, null, 5000);
  assert.equal(guess, 5000);
  const short = new Task(1, 'x', 'null', 1, Date.now() + 600);
  assert.ok(touchInterval(short, null, 5000) <= 200);
  const past = new Task(1, 'x', 'null', 1, Date.now() - 10);
  assert.equal(touchInterval(past, null, 5000), 1000);
});
