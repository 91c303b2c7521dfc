#!/usr/bin/env node
// SPDX-License-Identifier: MIT
// A runnable sluice worker in Node.js (clients/node, sluice-client on ioredis).
//
//   cd clients/node && npm ci && cd ../..
//   build/sluice serve --config examples/sluice.yaml &
//   node examples/worker.js            # SLUICE_HOST, SLUICE_PORT, SLUICE_PASSWORD to point elsewhere
//   redis-cli -p 7379 TASK.ADD email.send '{"to":"bob@example.com"}' KEY bob
//
// It takes `email.send` tasks (examples/sluice.yaml paces them at 5 a minute per user), "sends"
// each one, passes an upstream's 429 on as RetryAfterError, and shuts down gracefully on
// SIGINT/SIGTERM: the tasks it is running finish, nothing is lost.
'use strict';

const { Worker, RetryAfterError } = require('../clients/node');

const worker = new Worker(
  'email.send',
  async (task) => {
    console.log(`task ${task.id} attempt ${task.attempt}: e-mail to ${task.payload.to}`);
    const res = await sendMail(task.payload, task.signal);
    if (res.status === 429) throw new RetryAfterError(res.retryAfterMs); // back no earlier than asked
    if (res.status >= 500) throw new Error(`mail API answered ${res.status}`); // retried after the type's backoff
    return { cost: 1 }; // settled with TASK.ACK ... COST 1
  },
  {
    concurrency: 4,
    connection: {
      host: process.env.SLUICE_HOST || '127.0.0.1',
      port: Number(process.env.SLUICE_PORT || 7379),
      password: process.env.SLUICE_PASSWORD || undefined,
    },
  },
);
worker.on('failed', (task, err) => console.log(`task ${task.id} failed: ${err.message}`));
worker.on('error', (err) => console.error(`sluice: ${err.message}`));

// Stand-in for a real mail API: takes 100-300 ms, now and then answers 429 or 503.
async function sendMail(payload, signal) {
  await new Promise((resolve) => setTimeout(resolve, 100 + Math.random() * 200));
  if (signal.aborted) throw signal.reason;
  const roll = Math.random();
  if (roll < 0.05) return { status: 429, retryAfterMs: 2000 };
  if (roll < 0.1) return { status: 503 };
  return { status: 200 };
}

for (const sig of ['SIGINT', 'SIGTERM']) {
  process.once(sig, async () => {
    console.log(`${sig}: finishing the running tasks`);
    await worker.close({ timeout: 30000 });
    process.exit(0);
  });
}
console.log(`worker for email.send, ${worker.concurrency} at once; Ctrl-C to stop`);
