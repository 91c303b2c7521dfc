# SPDX-License-Identifier: MIT
"""Tests of the asyncio flavour (AsyncWorker, AsyncQueue) against the server run.sh started. Same
bounds as test_client.py: lower bounds the server enforces, generous upper bounds."""

import asyncio
import os
import time
import unittest

from sluice_client import AsyncQueue, AsyncWorker, NoLimitError, RateLimitedError, RetryAfter

PORT = int(os.environ.get("SLUICE_PORT", "7379"))
CONN = {"host": "127.0.0.1", "port": PORT}


async def wait_for(cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        await asyncio.sleep(0.02)
    return cond()


class TestAsync(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.q = AsyncQueue(connection=CONN)

    async def asyncTearDown(self):
        await self.q.close()

    async def test_pool_drains_at_the_limits_pace(self):
        n = 15
        t0 = time.monotonic()
        ids = [await self.q.add("apaced.job", {"i": i}) for i in range(n)]
        seen = []
        async with AsyncWorker("apaced.job", concurrency=3, connection=CONN,
                               block_ms=200) as w:
            @w.handler
            async def handle(task):
                seen.append(task.payload["i"])
                await asyncio.sleep(0.01)

            w.start()
            self.assertTrue(await wait_for(lambda: w.stats["acked"] == n, 60))
        self.assertGreaterEqual(time.monotonic() - t0, 1.35, "faster than 10/s allows")
        self.assertEqual(sorted(seen), list(range(n)))
        for tid in ids:
            self.assertEqual((await self.q.info(tid))["state"], "done")

    async def test_raise_retry_after_and_sync_handler(self):
        seen = []

        def handle(task):  # a plain function runs in a thread
            seen.append((time.monotonic(), task.attempt))
            if task.attempt == 1:
                raise RuntimeError("boom")
            if task.attempt == 2:
                raise RetryAfter(300)
            return 7

        tid = await self.q.add("aflaky.job", {})
        async with AsyncWorker("aflaky.job", handle, connection=CONN, block_ms=200) as w:
            w.start()
            self.assertTrue(await wait_for(lambda: w.stats["acked"] == 1))
        self.assertEqual([a for _, a in seen], [1, 2, 3])
        self.assertGreaterEqual(seen[2][0] - seen[1][0], 0.29)
        self.assertEqual(w.stats["failed"], 2)
        self.assertEqual((await self.q.info(tid))["state"], "done")

    async def test_lease_renewed_and_close_releases(self):
        tid = await self.q.add("aslow.job", {})
        w = AsyncWorker("aslow.job", connection=CONN, block_ms=200)

        @w.handler
        async def slow(task):
            await asyncio.sleep(5)  # the lease is 2 s

        w.start()
        self.assertTrue(await wait_for(lambda: w.stats["acked"] == 1))
        await w.close()
        self.assertEqual(int((await self.q.info(tid))["attempt"]), 1)
        self.assertEqual(w.stats["lost"], 0)

        tid = await self.q.add("ahold.job", {})
        entered = asyncio.Event()
        w = AsyncWorker("ahold.job", connection=CONN, block_ms=200)

        @w.handler
        async def hold(task):
            entered.set()
            await asyncio.sleep(60)

        w.start()
        await asyncio.wait_for(entered.wait(), 20)
        await w.close(timeout=0.3)
        self.assertEqual(w.stats["released"], 1)
        self.assertEqual((await self.q.info(tid))["state"], "queued")
        self.assertTrue(await self.q.cancel(tid))

    async def test_typed_errors(self):
        with self.assertRaises(NoLimitError):
            await self.q.throttle("no-such-limit", "k")
        self.assertTrue(await self.q.throttle("keyed", "async-u"))
        self.assertTrue(await self.q.throttle("keyed", "async-u"))
        with self.assertRaises(RateLimitedError) as cm:
            await self.q.throttle("keyed", "async-u", raise_on_deny=True)
        self.assertEqual((cm.exception.limit, cm.exception.key), ("keyed", "async-u"))


if __name__ == "__main__":
    unittest.main()
