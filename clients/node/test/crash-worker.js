// SPDX-License-Identifier: MIT
// A worker process for the redelivery test: it takes one `slow` task, prints "started ID", and
// never finishes it; the test SIGKILLs it mid-task. Usage: node crash-worker.js PORT
'use strict';

const { Worker } = require('..');

const worker = new Worker(
  'slow',
  async (task) => {
    process.stdout.write(`started ${task.id} ${task.attempt}\n`);
    await new Promise(() => {}); // hangs until the process is killed
  },
  { connection: { host: '127.0.0.1', port: Number(process.argv[2]) } },
);
worker.on('error', () => {});
