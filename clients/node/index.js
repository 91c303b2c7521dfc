// SPDX-License-Identifier: MIT
// sluice-client: workers and producers for the sluice task-dispatch server, on ioredis.
//
// Worker (lib/worker.js) runs handlers for tasks taken with a blocking TASK.GET, renewing,
// acking and failing them fenced by their attempt; Queue (lib/queue.js) submits tasks and asks
// for rate-limit decisions; lib/errors.js maps the server's error code words to typed errors.
// The types are in index.d.ts (hand-written; there is no build step).
'use strict';

const { Worker, Task } = require('./lib/worker');
const { Queue } = require('./lib/queue');
const errors = require('./lib/errors');

module.exports = {
  Worker,
  Task,
  Queue,
  SluiceError: errors.SluiceError,
  RateLimitedError: errors.RateLimitedError,
  BusyError: errors.BusyError,
  NoLimitError: errors.NoLimitError,
  NoLeaseError: errors.NoLeaseError,
  NoTaskError: errors.NoTaskError,
  ExistsError: errors.ExistsError,
  RetryAfterError: errors.RetryAfterError,
  UnrecoverableError: errors.UnrecoverableError,
  fromReply: errors.fromReply,
};
