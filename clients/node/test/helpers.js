// SPDX-License-Identifier: MIT
// Shared by the client tests: the server run.sh started (SLUICE_PORT), a second server a test
// starts and stops itself (by PID), and polling with a deadline instead of fixed sleeps.
'use strict';

const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const port = Number(process.env.SLUICE_PORT);
if (!port) throw new Error('SLUICE_PORT is not set: run the tests with test/run.sh');
const connection = { host: '127.0.0.1', port };

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `pred` every 20 ms until it is truthy; rejects after `ms`. */
async function waitFor(pred, ms = 20000, what = 'a condition') {
  const end = Date.now() + ms;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(20);
  }
}

/** Starts `sluice serve` with the test configuration; resolves to {port, pid, stop()}. */
async function startServer({ port: want = 0, dir } = {}) {
  dir = dir || fs.mkdtempSync(path.join(os.tmpdir(), 'sluice-node-'));
  const portFile = path.join(dir, `port-${Date.now()}`);
  const child = spawn(
    process.env.SLUICE_BIN,
    ['serve', '--port', String(want), '--port-file', portFile, '--no-admin', '--data', path.join(dir, 'data'),
     '--config', path.join(__dirname, 'sluice-test.yaml'), '--log-level', 'warn'],
    { stdio: ['ignore', 'ignore', 'inherit'] },
  );
  const exited = new Promise((r) => child.once('exit', r));
  const got = await waitFor(() => fs.existsSync(portFile) && fs.readFileSync(portFile, 'utf8').trim(), 10000, 'the server');
  return {
    port: Number(got),
    pid: child.pid,
    dir,
    async stop(signal = 'SIGTERM') {
      process.kill(child.pid, signal);
      await exited;
    },
  };
}

module.exports = { port, connection, sleep, waitFor, startServer };
