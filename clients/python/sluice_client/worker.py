# SPDX-License-Identifier: MIT
"""The blocking worker: N threads take tasks with a blocking TASK.GET, run the handler, and
settle each task with TASK.ACK / TASK.FAIL fenced by its ATTEMPT; a renewal thread keeps the
lease of every running task alive with TASK.TOUCH ... ATTEMPT n.

Invariants:
- Every delivered task is settled exactly once by this worker, or left to its lease: the
  handler's return acks it (with its cost), an exception fails it RETRY (the message as
  REASON), ``RetryAfter`` / ``RateLimitedError`` fail it with RETRY_AFTER, ``UnrecoverableError``
  fails it DEAD. A crash of the whole process settles nothing and the server redelivers when the
  lease lapses, which the renewal thread never lets happen while the handler runs.
- Every ACK, FAIL and TOUCH names the attempt it acts for, so a worker whose lease lapsed can
  never settle the delivery another worker now holds (it gets NOLEASE, counted as ``lost``).
- close() stops taking tasks, waits for running handlers (up to its timeout), and releases the
  ones still running after it (FAIL RETRY RETRY_AFTER 0: back in the queue at once, without
  using up an attempt). Nothing is lost either way.
- A connection error is retried with exponential backoff (capped, with jitter); redis-py
  reconnects on the next command.
"""

import json
import logging
import random
import signal
import threading
import time

import redis

from .client import make_redis
from .errors import (NoLeaseError, NoTaskError, RateLimitedError, RetryAfter, SluiceError,
                     UnrecoverableError, from_response)

log = logging.getLogger("sluice_client")

_CONN_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
_REASON_MAX = 1000  # the server keeps up to 1023 bytes


class Task:
    """One delivery of a task: ``id``, ``type``, ``payload`` (parsed JSON; the raw text when it
    does not parse), ``raw_payload``, ``attempt`` (1 on the first delivery), ``lease_until_ms``.
    ``set_cost(n)`` reports what it really cost (ACK COST n); so does returning an int."""

    def __init__(self, worker, id, type, raw_payload, attempt, lease_until_ms):
        self._worker = worker
        self.id = int(id)
        self.type = type
        self.raw_payload = raw_payload
        try:
            self.payload = json.loads(raw_payload)
        except (TypeError, ValueError):
            self.payload = raw_payload
        self.attempt = int(attempt)
        self.lease_until_ms = int(lease_until_ms)
        self.cost = None
        self.lease_lost = False  # set when a TOUCH found the lease gone: the ACK will be refused

    def set_cost(self, n):
        self.cost = int(n)

    def __repr__(self):
        return f"Task(id={self.id}, type={self.type!r}, attempt={self.attempt})"


def outcome_of(result, task):
    """What a handler's return value asks for: an ack, with its cost when it is an int."""
    if isinstance(result, int) and not isinstance(result, bool):
        task.set_cost(result)
    return "ack", None


def outcome_of_error(e):
    """What a handler's exception asks for: ``(outcome, arg)`` for settle_command."""
    if isinstance(e, RetryAfter):
        return "retry_after", e
    if isinstance(e, RateLimitedError):
        return "retry_after", RetryAfter(max(0, e.retry_after_ms or 0), str(e))
    if isinstance(e, UnrecoverableError):
        return "dead", e
    return "retry", e


def settle_command(task, outcome, arg=None):
    """The ACK or FAIL for an outcome (always fenced by ATTEMPT), and the stats counter."""
    if outcome == "ack":
        args = ["TASK.ACK", task.id]
        if task.cost is not None:
            args += ["COST", task.cost]
        counter = "acked"
    else:
        args = ["TASK.FAIL", task.id]
        if outcome == "dead":
            args.append("DEAD")
        else:
            args.append("RETRY")
            if outcome == "retry_after":
                args += ["RETRY_AFTER", arg.ms]
            elif outcome == "release":
                args += ["RETRY_AFTER", 0]  # back at once, and no attempt used up
        reason = "worker shut down" if outcome == "release" else f"{type(arg).__name__}: {arg}"
        reason = reason.encode("utf-8", "replace")[:_REASON_MAX].decode("utf-8", "ignore")
        args += ["REASON", reason]
        counter = "released" if outcome == "release" else "failed"
    return args + ["ATTEMPT", task.attempt], counter


def touch_interval(task, lease_ms, cap):
    """Seconds until the next TASK.TOUCH: a third of the lease. Given the type's ``lease_ms``
    that is exact; otherwise a third of what is left by the server's lease_until_ms, which
    assumes the two clocks agree, so it is capped (``cap``) against a server clock ahead."""
    if lease_ms:
        return max(0.05, lease_ms / 3000.0)
    left_ms = task.lease_until_ms - time.time() * 1000
    return min(cap, max(0.05, left_ms / 3000.0)) if left_ms > 0 else min(cap, 1.0)


class Worker:
    """``Worker(type, handler, concurrency=N, connection={"host", "port", "password"})``.

    ``type`` is a type name or a list of them. ``handler(task)`` runs in one of ``concurrency``
    threads; may be given later with the ``@worker.handler`` decorator. ``block_ms`` is how long
    one TASK.GET blocks (close() answers within it). ``lease_ms``, the type's lease when known,
    times the renewals exactly; otherwise they follow the server's lease_until_ms, at least
    every ``max_touch_interval`` seconds. ``stats`` counts ``acked``, ``failed``,
    ``released``, ``lost`` (settlement refused: the lease had lapsed) and ``reconnects``.

    ``with Worker(...) as w: w.run()`` runs until SIGINT/SIGTERM (or ``close()`` from another
    thread) and shuts down gracefully; ``start()`` runs in the background instead.
    """

    def __init__(self, type, handler=None, *, concurrency=1, connection=None, block_ms=1000,
                 on_error=None, lease_ms=None, max_touch_interval=5.0, **redis_kwargs):
        self.types = [type] if isinstance(type, str) else list(type)
        if not self.types:
            raise ValueError("a worker needs at least one task type")
        self._handler = handler
        self.concurrency = int(concurrency)
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.block_ms = int(block_ms)
        self.on_error = on_error
        self.lease_ms = lease_ms
        self.max_touch_interval = max_touch_interval
        # A blocked TASK.GET must not hit the socket timeout; anything else answers fast.
        redis_kwargs.setdefault("socket_timeout", self.block_ms / 1000.0 + 10)
        self.redis = make_redis(connection, **redis_kwargs)
        self._owns_redis = self.redis is not connection  # a client passed in stays open
        self.stats = {"acked": 0, "failed": 0, "released": 0, "lost": 0, "reconnects": 0}
        self._stats_lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = threading.Event()
        self._threads = []
        self._running = {}  # id -> [task, next_touch_monotonic, released]
        self._cond = threading.Condition()

    # -- the API ---------------------------------------------------------------------------

    def handler(self, fn):
        """Decorator: ``@worker.handler`` makes ``fn(task)`` the handler."""
        self._handler = fn
        return fn

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self):
        """Starts the fetch threads and the renewal thread; returns at once."""
        if self._handler is None:
            raise ValueError("no handler: pass one or decorate a function with @worker.handler")
        if self._threads:
            return self
        renew = threading.Thread(target=self._renew_loop, name="sluice-renew", daemon=True)
        renew.start()
        self._threads.append(renew)
        for i in range(self.concurrency):
            t = threading.Thread(target=self._fetch_loop, name=f"sluice-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def run(self, install_signals=True, shutdown_timeout=None):
        """Runs until close() or (in the main thread) SIGINT/SIGTERM, then shuts down
        gracefully (``close(shutdown_timeout)``)."""
        self.start()
        previous = {}
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, lambda *_: self._stop.set())
        try:
            while not self._stop.wait(0.2):
                pass
            self.close(shutdown_timeout)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def close(self, timeout=None):
        """Graceful shutdown: takes no more tasks, waits up to ``timeout`` seconds (None:
        forever) for running handlers, and releases the tasks still running after it."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._threads[1:]:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        with self._cond:
            left = [e for e in self._running.values() if not e[2]]
            for e in left:
                e[2] = True
        for task, _, _ in left:
            self._settle(task, "release")
        self._closed.set()
        with self._cond:
            self._cond.notify_all()
        if self._threads:
            self._threads[0].join(5)
        if self._owns_redis:
            self.redis.close()
            self.redis.connection_pool.disconnect()

    @property
    def closing(self):
        return self._stop.is_set()

    # -- inside ----------------------------------------------------------------------------

    def _count(self, name):
        with self._stats_lock:
            self.stats[name] += 1

    def _backoff(self, n):
        return min(5.0, 0.05 * (2 ** min(n, 10))) * (0.5 + random.random() / 2)

    def _fetch_loop(self):
        errors = 0
        while not self._stop.is_set():
            try:
                reply = self.redis.execute_command(
                    "TASK.GET", *self.types, "COUNT", 1, "TIMEOUT", self.block_ms)
                errors = 0
            except _CONN_ERRORS as e:
                errors += 1
                self._count("reconnects")
                log.warning("sluice: %s; reconnecting (try %d)", e, errors)
                self._stop.wait(self._backoff(errors))
                continue
            except redis.exceptions.ResponseError as e:
                errors += 1
                log.error("sluice: TASK.GET refused: %s", from_response(e))
                self._stop.wait(self._backoff(errors))
                continue
            for item in reply or ():
                if isinstance(item, dict):
                    item = [item["id"], item["type"], item["payload"], item["attempt"],
                            item["lease_until_ms"]]
                self._run_one(Task(self, *item[:5]))

    def _run_one(self, task):
        entry = [task, time.monotonic() + self._touch_interval(task), False]
        with self._cond:
            self._running[task.id] = entry
            self._cond.notify_all()
        try:
            outcome, arg = outcome_of(self._handler(task), task)
        except Exception as e:  # any crash of the handler: retried, never lost
            outcome, arg = outcome_of_error(e)
            if outcome == "retry":
                log.warning("sluice: task %d attempt %d failed: %r", task.id, task.attempt, e)
            if self.on_error:
                try:
                    self.on_error(task, e)
                except Exception:
                    log.exception("sluice: on_error raised")
        with self._cond:
            released = entry[2]
            self._running.pop(task.id, None)
        if not released:  # close() released it already when its timeout passed
            self._settle(task, outcome, arg)

    def _touch_interval(self, task):
        return touch_interval(task, self.lease_ms, self.max_touch_interval)

    def _settle(self, task, outcome, arg=None):
        """ACK or FAIL, retried over connection errors for as long as the lease could last."""
        args, counter = settle_command(task, outcome, arg)
        deadline = time.monotonic() + 60
        tries = 0
        while True:
            try:
                self.redis.execute_command(*args)
                self._count(counter)
                return True
            except _CONN_ERRORS as e:
                tries += 1
                if time.monotonic() > deadline:
                    log.error("sluice: could not settle task %d: %s", task.id, e)
                    return False
                self._count("reconnects")
                time.sleep(self._backoff(tries))
            except redis.exceptions.ResponseError as e:
                err = from_response(e)
                if isinstance(err, (NoLeaseError, NoTaskError)):
                    # The lease lapsed (or the reply to an earlier try was lost): the server
                    # hands the task to another worker; nothing to do but count it.
                    self._count("lost")
                    log.warning("sluice: task %d attempt %d: %s", task.id, task.attempt, err)
                else:
                    log.error("sluice: %s refused for task %d: %s", args[0], task.id, err)
                return False

    def _renew_loop(self):
        while not self._closed.is_set():
            with self._cond:
                now = time.monotonic()
                due = [e for e in self._running.values() if not e[2] and e[1] <= now]
                if not due:
                    nxt = min((e[1] for e in self._running.values() if not e[2]), default=None)
                    self._cond.wait(1.0 if nxt is None else max(0.0, min(1.0, nxt - now)))
                    continue
            for entry in due:
                task = entry[0]
                try:
                    until = self.redis.execute_command("TASK.TOUCH", task.id,
                                                       "ATTEMPT", task.attempt)
                    task.lease_until_ms = int(until)
                    entry[1] = time.monotonic() + self._touch_interval(task)
                except _CONN_ERRORS as e:
                    log.warning("sluice: TASK.TOUCH %d: %s", task.id, e)
                    entry[1] = time.monotonic() + 0.1
                except redis.exceptions.ResponseError as e:
                    err = from_response(e)
                    if isinstance(err, SluiceError) and err.code in ("NOLEASE", "NOTASK"):
                        task.lease_lost = True
                        entry[1] = float("inf")
                    else:
                        entry[1] = time.monotonic() + 1.0
                    log.warning("sluice: TASK.TOUCH %d: %s", task.id, err)
