// SPDX-License-Identifier: MIT
// The HTTP decision API driven by Node's own fetch, as a caller that does not speak RESP would
// use it: run by tests/server/http_fetch.sh, which starts the server (SLUICE_HTTP, its admin
// URL; SLUICE_PASSWORD, its password) with a limit `api` (rate 3/1h, key explicit) and a type
// `sync` (keyed by input.tenant).
import { test } from 'node:test';
import assert from 'node:assert/strict';

const base = process.env.SLUICE_HTTP;
const auth = { Authorization: `Bearer ${process.env.SLUICE_PASSWORD}` };

async function call(path, { body, method = 'POST', headers = auth, raw } = {}) {
  const res = await fetch(base + path, {
    method,
    headers: { 'Content-Type': 'application/json', ...headers },
    body: raw !== undefined ? raw : body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { res, json: text ? JSON.parse(text) : null };
}

test('200 with the remaining budget, then 429 with Retry-After and the error body', async () => {
  let r = await call('/v1/throttle', { body: { limit: 'api', key: 'node-1' } });
  assert.equal(r.res.status, 200);
  assert.equal(r.json.allowed, true);
  assert.equal(r.json.limit, 3);
  assert.equal(r.json.remaining, 2);
  assert.equal(r.res.headers.get('ratelimit-remaining'), '2');

  r = await call('/v1/throttle', { body: { limit: 'api', key: 'node-1', units: 2 } });
  assert.equal(r.res.status, 200);
  assert.equal(r.json.remaining, 0);

  r = await call('/v1/throttle', { body: { limit: 'api', key: 'node-1' } });
  assert.equal(r.res.status, 429);
  const retry = Number(r.res.headers.get('retry-after'));
  assert.ok(retry >= 1 && retry <= 1200, `Retry-After ${retry}`);
  assert.equal(r.json.status, 'failed');
  assert.equal(r.json.error, 'Rate limit exceeded');
  assert.equal(r.json.error_type, 'RateLimitError');
  assert.equal(typeof r.json.help, 'string');
  const d = r.json.details;
  assert.equal(d.limit_type, 'rate');
  assert.equal(d.limit_name, 'api');
  assert.equal(d.limit, 3);
  assert.equal(d.window, '3600 seconds');
  assert.equal(d.retry_after_seconds, retry);
  assert.match(d.message, /Please wait \d+s/);
});

test('peek decides without charging', async () => {
  for (let i = 0; i < 5; i++) {
    const r = await call('/v1/throttle', { body: { limit: 'api', key: 'node-peek', peek: true } });
    assert.equal(r.res.status, 200);
    assert.equal(r.json.peek, true);
  }
  const r = await call('/v1/throttle', { body: { limit: 'api', key: 'node-peek', units: 3 } });
  assert.equal(r.res.status, 200, 'the peeks left the whole budget');
  assert.equal(r.json.remaining, 0);
});

test('400 for a bad body, 404 for an unknown limit, 413 for a huge body', async () => {
  let r = await call('/v1/throttle', { raw: '{"limit": "api",' });
  assert.equal(r.res.status, 400);
  assert.equal(r.json.error_type, 'ValidationError');
  r = await call('/v1/throttle', { body: { limit: 'api', key: 'x', units: -1 } });
  assert.equal(r.res.status, 400);
  assert.equal(r.json.code, 'WRONGARGS');
  r = await call('/v1/throttle', { body: { limit: 'missing', key: 'x' } });
  assert.equal(r.res.status, 404);
  assert.equal(r.json.code, 'NOLIMIT');
  r = await call('/v1/throttle', { body: { limit: 'api', key: 'x'.repeat(100000) } });
  assert.equal(r.res.status, 413);
  assert.equal(r.json.code, 'TOOLARGE');
});

test('401 without the bearer token or with a wrong one', async () => {
  let r = await call('/v1/throttle', { body: { limit: 'api', key: 'x' }, headers: {} });
  assert.equal(r.res.status, 401);
  assert.match(r.res.headers.get('www-authenticate'), /Bearer/);
  r = await call('/v1/throttle', {
    body: { limit: 'api', key: 'x' },
    headers: { Authorization: 'Bearer wrong' },
  });
  assert.equal(r.res.status, 401);
});

test('submit a task, then explain it', async () => {
  let r = await call('/v1/tasks', { body: { type: 'sync', payload: { tenant: 'acme' }, priority: 3 } });
  assert.equal(r.res.status, 201);
  const id = r.json.id;
  assert.ok(Number.isInteger(id) && id > 0);
  assert.equal(r.res.headers.get('location'), `/v1/tasks/${id}/explain`);

  r = await call(`/v1/tasks/${id}/explain`, { method: 'GET' });
  assert.equal(r.res.status, 200);
  assert.equal(r.json.id, id);
  assert.equal(r.json.state, 'queued');
  assert.equal(typeof r.json.text, 'string');

  r = await call('/v1/tasks', { body: { type: 'sync', payload: { other: 1 } } });
  assert.equal(r.res.status, 400, 'the key path input.tenant is missing: TASK.ADD refuses it');
  r = await call('/v1/tasks/987654/explain', { method: 'GET' });
  assert.equal(r.res.status, 404);
});
