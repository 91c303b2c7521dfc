# SPDX-License-Identifier: MIT
"""Tests of sluice_client against the real server run.sh started (SLUICE_PORT). Each case uses
its own task type or limit (sluice-test.yaml) so that none sees another's tasks. Timing bounds
are lower bounds the server enforces (a rate limit cannot be beaten by a fast machine) or
generous upper bounds (a slow machine only makes the waits longer)."""

import collections
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

import sluice_client
from sluice_client import (BusyError, NoLimitError, Queue, RateLimitedError, RetryAfter,
                           SluiceError, UnrecoverableError, Worker)
from sluice_client.errors import from_response

PORT = int(os.environ.get("SLUICE_PORT", "7379"))
CONN = {"host": "127.0.0.1", "port": PORT}
HERE = os.path.dirname(os.path.abspath(__file__))


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def wait_for(cond, timeout=20.0, step=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


class Base(unittest.TestCase):
    def setUp(self):
        self.q = Queue(connection=CONN)

    def tearDown(self):
        self.q.close()


class TestWorker(Base):
    def test_pool_drains_at_the_limits_pace(self):
        # paced: 10/1s with burst 1: 20 tasks take at least 1.9 s, however many workers.
        n = 20
        started = []
        lock = threading.Lock()
        t0 = time.monotonic()
        ids = [self.q.add("paced.job", {"i": i}) for i in range(n)]
        w = Worker("paced.job", concurrency=4, connection=CONN, block_ms=200)

        @w.handler
        def handle(task):
            with lock:
                started.append((time.monotonic(), task.payload["i"]))

        with w:
            w.start()
            self.assertTrue(wait_for(lambda: w.stats["acked"] == n, timeout=60))
        elapsed = time.monotonic() - t0
        self.assertGreaterEqual(elapsed, 1.85, "drained faster than 10/s allows")
        self.assertEqual(sorted(i for _, i in started), list(range(n)))
        for tid in ids:
            self.assertEqual(self.q.info(tid)["state"], "done")
        self.assertEqual(w.stats["failed"] + w.stats["lost"], 0)

    def test_handler_that_raises_is_retried(self):
        seen = []
        tid = self.q.add("flaky.job", {"x": 1})
        w = Worker("flaky.job", connection=CONN, block_ms=200)

        @w.handler
        def handle(task):
            seen.append(task.attempt)
            if task.attempt == 1:
                raise ValueError("upstream exploded")

        with w:
            w.start()
            self.assertTrue(wait_for(lambda: w.stats["acked"] == 1))
        self.assertEqual(seen, [1, 2])
        self.assertEqual(w.stats["failed"], 1)
        info = self.q.info(tid)
        self.assertEqual(info["state"], "done")
        self.assertEqual(int(info["attempt"]), 2)

    def test_retry_after_delays_the_retry_without_using_an_attempt(self):
        # later.job allows 2 attempts; two RetryAfter failures must not end it.
        seen = []
        self.q.add("later.job", {})
        w = Worker("later.job", connection=CONN, block_ms=200)

        @w.handler
        def handle(task):
            seen.append((time.monotonic(), task.attempt))
            if task.attempt <= 2:
                raise RetryAfter(300)

        with w:
            w.start()
            self.assertTrue(wait_for(lambda: w.stats["acked"] == 1))
        self.assertEqual([a for _, a in seen], [1, 2, 3])
        self.assertGreaterEqual(seen[1][0] - seen[0][0], 0.29)
        self.assertGreaterEqual(seen[2][0] - seen[1][0], 0.29)

    def test_unrecoverable_error_fails_dead(self):
        tid = self.q.add("dead.job", {})
        w = Worker("dead.job", connection=CONN, block_ms=200)
        w.handler(lambda task: (_ for _ in ()).throw(UnrecoverableError("bad input")))
        with w:
            w.start()
            self.assertTrue(wait_for(lambda: w.stats["failed"] == 1))
        info = self.q.info(tid)
        self.assertEqual(info["state"], "failed")
        self.assertEqual(info["fail_reason"], "dead")
        self.assertIn("bad input", info["fail_message"])

    def test_lease_is_renewed_while_the_handler_runs(self):
        # slow.job's lease is 2 s; a 5 s handler keeps it by TASK.TOUCH and acks attempt 1.
        tid = self.q.add("slow.job", {})
        w = Worker("slow.job", concurrency=2, connection=CONN, block_ms=200)
        attempts = []

        @w.handler
        def handle(task):
            attempts.append(task.attempt)
            time.sleep(5)

        with w:
            w.start()
            self.assertTrue(wait_for(lambda: w.stats["acked"] == 1))
        self.assertEqual(attempts, [1])
        self.assertEqual(w.stats["lost"], 0)
        self.assertEqual(int(self.q.info(tid)["attempt"]), 1)

    def test_killed_worker_task_is_redelivered(self):
        started = os.path.join(os.environ.get("SLUICE_TMP", "/tmp"), f"crash-{os.getpid()}")
        tid = self.q.add("crash.job", {"n": 1})
        env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "crash_worker.py"),
                                 str(PORT), started, "crash.job", "hang"], env=env)
        try:
            self.assertTrue(wait_for(lambda: read(started).endswith("\n"), timeout=30))
            self.assertEqual(read(started).split(), [str(tid), "1"])
            self.assertEqual(self.q.info(tid)["state"], "running")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        seen = []
        w = Worker("crash.job", connection=CONN, block_ms=200)
        w.handler(lambda task: seen.append((task.id, task.attempt)))
        with w:
            w.start()
            # The 2 s lease lapses, then the task comes back as attempt 2.
            self.assertTrue(wait_for(lambda: w.stats["acked"] == 1, timeout=30))
        self.assertEqual(seen, [(tid, 2)])
        self.assertEqual(self.q.info(tid)["state"], "done")

    def test_sigterm_finishes_the_running_task(self):
        started = os.path.join(os.environ.get("SLUICE_TMP", "/tmp"), f"term-{os.getpid()}")
        tid = self.q.add("term.job", {})
        env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "crash_worker.py"),
                                 str(PORT), started, "term.job", "finish"], env=env)
        try:
            self.assertTrue(wait_for(lambda: read(started).endswith("\n"), timeout=30))
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=30), 0)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        info = self.q.info(tid)
        self.assertEqual((info["state"], int(info["attempt"])), ("done", 1))

    def test_shutdown_loses_nothing(self):
        n = 40
        ids = [self.q.add("drain.job", {"i": i}) for i in range(n)]
        runs = collections.Counter()
        lock = threading.Lock()

        def handle(task):
            time.sleep(0.03)
            with lock:
                runs[task.id] += 1

        w1 = Worker("drain.job", handle, concurrency=4, connection=CONN, block_ms=200)
        w1.start()
        self.assertTrue(wait_for(lambda: w1.stats["acked"] >= 8))
        w1.close()  # finishes what it holds, takes nothing more
        self.assertEqual(w1.stats["released"] + w1.stats["lost"] + w1.stats["failed"], 0)
        states = collections.Counter(self.q.info(t)["state"] for t in ids)
        self.assertEqual(states["running"], 0, states)
        self.assertEqual(states["done"], w1.stats["acked"])
        self.assertLess(states["done"], n)
        with Worker("drain.job", handle, concurrency=4, connection=CONN, block_ms=200) as w2:
            w2.start()
            self.assertTrue(wait_for(lambda: w1.stats["acked"] + w2.stats["acked"] == n))
        self.assertEqual(sorted(runs), sorted(ids))
        self.assertEqual(set(runs.values()), {1}, "a task ran twice")
        for t in ids:
            self.assertEqual(self.q.info(t)["state"], "done")

    def test_close_timeout_releases_a_running_task(self):
        tid = self.q.add("hold.job", {})
        gate = threading.Event()
        entered = threading.Event()
        w = Worker("hold.job", connection=CONN, block_ms=200)

        @w.handler
        def handle(task):
            entered.set()
            gate.wait(30)

        w.start()
        self.assertTrue(entered.wait(20))
        t0 = time.monotonic()
        w.close(timeout=0.3)
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual(w.stats["released"], 1)
        info = self.q.info(tid)
        self.assertEqual(info["state"], "queued")
        gate.set()  # the old handler returns: its ACK must not be sent (it was released)
        seen = []
        with Worker("hold.job", lambda task: seen.append(task.attempt), connection=CONN,
                    block_ms=200) as w2:
            w2.start()
            self.assertTrue(wait_for(lambda: w2.stats["acked"] == 1))
        self.assertEqual(seen, [2])
        self.assertEqual(w.stats["acked"] + w.stats["lost"], 0)

    def test_cost_reported_on_ack(self):
        # tokens: 1000/1h, units: task. Charged 10 at start, settled with the cost 300.
        before = self.q.throttle("tokens", "", peek=True).remaining
        self.q.add("cost.job", {"model": "x"}, units=10)
        self.q.add("cost.job", {"model": "y"}, units=10)

        @sluice_client.task("cost.job", connection=CONN, block_ms=200)
        def handle(task):
            if task.payload["model"] == "x":
                task.set_cost(100)
                return None
            return 200

        with handle as w:
            w.start()
            self.assertTrue(wait_for(lambda: w.stats["acked"] == 2))
        after = self.q.throttle("tokens", "", peek=True).remaining
        used = before - after
        # 300 settled, less at most a few units refilled meanwhile (1000/h: 1 per 3.6 s).
        self.assertGreaterEqual(used, 290)
        self.assertLessEqual(used, 300)


class TestReconnect(unittest.TestCase):
    """A server of its own (SLUICE_BIN), killed and restarted on the same port under a worker."""

    def start_server(self, port):
        pf = os.path.join(self.tmp, "port")
        if os.path.exists(pf):
            os.unlink(pf)
        proc = subprocess.Popen(
            [os.environ["SLUICE_BIN"], "serve", "--port", str(port), "--port-file", pf,
             "--no-admin", "--data", os.path.join(self.tmp, "data"), "--log-level", "error",
             "--config", os.path.join(HERE, "sluice-test.yaml")])
        self.assertTrue(wait_for(lambda: read(pf).strip() != ""), "server did not start")
        return proc, int(read(pf))

    @unittest.skipUnless(os.environ.get("SLUICE_BIN"), "needs SLUICE_BIN")
    def test_worker_reconnects_after_the_server_restarts(self):
        self.tmp = os.path.join(os.environ.get("SLUICE_TMP", "/tmp"), f"re-{os.getpid()}")
        os.makedirs(self.tmp, exist_ok=True)
        proc, port = self.start_server(0)
        conn = {"port": port}
        seen = []
        w = Worker("drain.job", lambda task: seen.append(task.payload), connection=conn,
                   block_ms=200)
        try:
            w.start()
            with Queue(connection=conn) as q:
                q.add("drain.job", "before")
            self.assertTrue(wait_for(lambda: w.stats["acked"] == 1))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            self.assertTrue(wait_for(lambda: w.stats["reconnects"] >= 1))
            time.sleep(0.5)  # the worker keeps retrying with backoff meanwhile
            proc, _ = self.start_server(port)
            with Queue(connection=conn) as q:
                q.add("drain.job", "after")
            self.assertTrue(wait_for(lambda: w.stats["acked"] == 2, timeout=30))
            self.assertEqual(seen, ["before", "after"])
        finally:
            w.close(timeout=5)
            proc.send_signal(signal.SIGKILL)
            proc.wait()


class TestQueue(Base):
    def test_typed_errors_from_throttle(self):
        with self.assertRaises(NoLimitError) as cm:
            self.q.throttle("no-such-limit", "k")
        self.assertEqual(cm.exception.code, "NOLIMIT")
        self.assertTrue(self.q.throttle("onekey", "k1"))
        with self.assertRaises(BusyError) as cm:
            self.q.throttle("onekey", "k2")  # max_keys 1
        self.assertEqual(cm.exception.code, "BUSY")
        with self.assertRaises(SluiceError) as cm:
            self.q.throttle("keyed", "k", units=0)
        self.assertEqual(cm.exception.code, "WRONGARGS")
        self.assertTrue(self.q.throttle("keyed", "u1"))
        self.assertTrue(self.q.throttle("keyed", "u1"))
        r = self.q.throttle("keyed", "u1")
        self.assertFalse(r)
        self.assertEqual(r.denied_by, "keyed")
        self.assertGreater(r.retry_after_ms, 0)
        with self.assertRaises(RateLimitedError) as cm:
            self.q.throttle("keyed", "u1", raise_on_deny=True)
        e = cm.exception
        self.assertEqual((e.code, e.limit, e.key, e.limit_value), ("RATELIMITED", "keyed", "u1", 2))
        self.assertTrue(0 < e.retry_after_ms <= 30000)

    def test_ratelimited_reply_fields(self):
        lease = self.q.call("LEASE.ACQUIRE", "slots", "")
        with self.assertRaises(RateLimitedError) as cm:
            self.q.call("LEASE.ACQUIRE", "slots", "")
        e = cm.exception
        self.assertEqual((e.limit, e.kind, e.limit_value, e.window_ms),
                         ("slots", "concurrency", 1, 0))
        self.assertGreater(e.retry_after_ms, 0)
        self.q.call("LEASE.RELEASE", dict(zip(lease[::2], lease[1::2]))["lease"])
        e = from_response("RATELIMITED limit=heavy kind=rate tier=big key=a%20b limit_value=5 "
                          "window_ms=60000 retry_after_ms=-1")
        self.assertIsInstance(e, RateLimitedError)
        self.assertEqual((e.key, e.tier, e.retry_after_ms), ("a b", "big", -1))
        e = from_response("no such command")  # redis-py strips "ERR "
        self.assertEqual(e.code, "ERR")

    def test_add_options_and_explain(self):
        tid = self.q.add("explain.job", {"a": [1, 2]}, key="k", priority=5, delay_ms=60000,
                         id="dedup-1")
        self.assertEqual(self.q.add("explain.job", {"a": 3}, id="dedup-1"), tid)
        info = self.q.info(tid)
        self.assertEqual(info["payload"], '{"a":3}')
        self.assertEqual(int(info["priority"]), 5)
        ex = self.q.explain(tid)
        self.assertIn(ex["state"], ("queued", "parked"))
        self.assertTrue(ex["text"])
        self.assertTrue(self.q.cancel(tid))
        with self.assertRaises(sluice_client.NoTaskError):
            self.q.explain(10 ** 12)


if __name__ == "__main__":
    unittest.main()
