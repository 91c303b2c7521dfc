# SPDX-License-Identifier: MIT
"""The asyncio flavour, on redis.asyncio (redis-py 4.3): ``AsyncWorker`` and ``AsyncQueue``, the
same concepts as worker.py and client.py with coroutines instead of threads.

Invariants (as worker.py): every delivery is settled once by ACK or FAIL with its ATTEMPT, or
left to its lease; a running handler's lease is renewed by a TOUCH task of its own, cancelled
when the handler ends; close() takes nothing more, waits for running handlers (up to its
timeout), then releases the rest (FAIL RETRY RETRY_AFTER 0) and cancels their handlers. A
command in flight is never cancelled (redis-py 4.3's asyncio connections do not survive a
cancelled read): a blocked TASK.GET is left to return within ``block_ms``.
"""

import asyncio
import inspect
import logging
import random
import time

import redis
import redis.asyncio

from .client import ThrottleResult, encode_payload, pairs_to_dict
from .errors import NoLeaseError, NoTaskError, RateLimitedError, from_response
from .worker import Task, outcome_of, outcome_of_error, settle_command, touch_interval

log = logging.getLogger("sluice_client")

_CONN_ERRORS = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


def make_async_redis(connection=None, **overrides):
    """A redis.asyncio.Redis for a dict of arguments, a URL, or an existing client."""
    if isinstance(connection, redis.asyncio.Redis):
        return connection
    if isinstance(connection, str):
        return redis.asyncio.Redis.from_url(connection, decode_responses=True, **overrides)
    kwargs = {"host": "127.0.0.1", "port": 7379, "socket_connect_timeout": 5,
              "socket_keepalive": True}
    kwargs.update(connection or {})
    kwargs.update(overrides)
    kwargs["decode_responses"] = True
    return redis.asyncio.Redis(**kwargs)


class AsyncQueue:
    """``Queue`` for asyncio: ``async with AsyncQueue(connection=...) as q: await q.add(...)``."""

    def __init__(self, connection=None, **redis_kwargs):
        self.redis = make_async_redis(connection, **redis_kwargs)
        self._owns_redis = self.redis is not connection  # a client passed in stays open

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def close(self):
        if self._owns_redis:
            await self.redis.close()
            await self.redis.connection_pool.disconnect()

    async def call(self, *args):
        try:
            return await self.redis.execute_command(*args)
        except redis.exceptions.ResponseError as e:
            raise from_response(e) from None

    async def add(self, type, payload=None, *, key=None, units=None, priority=None, id=None,
                  delay_ms=None):
        args = ["TASK.ADD", type, encode_payload(payload)]
        for word, value in (("KEY", key), ("UNITS", units), ("PRIORITY", priority),
                            ("ID", id), ("DELAY", delay_ms)):
            if value is not None:
                args += [word, value]
        return int(await self.call(*args))

    async def throttle(self, limit, key="", *, units=None, peek=False, raise_on_deny=False):
        args = ["THROTTLE", limit, key]
        if units is not None:
            args += ["UNITS", units]
        if peek:
            args.append("PEEK")
        r = await self.call(*args)
        res = ThrottleResult(bool(int(r[0])), int(r[1]), int(r[2]), int(r[3]), int(r[4]), r[5])
        if raise_on_deny and not res.allowed:
            raise RateLimitedError(
                f"limit={res.denied_by} key={key} retry_after_ms={res.retry_after_ms}",
                {"limit": res.denied_by, "key": key, "limit_value": res.limit,
                 "retry_after_ms": res.retry_after_ms, "remaining": res.remaining,
                 "reset_after_ms": res.reset_after_ms})
        return res

    async def explain(self, id):
        return pairs_to_dict(await self.call("TASK.EXPLAIN", id))

    async def info(self, id):
        return pairs_to_dict(await self.call("TASK.INFO", id))

    async def cancel(self, id):
        return bool(await self.call("TASK.CANCEL", id))


class AsyncWorker:
    """``AsyncWorker(type, handler, concurrency=N, connection={...})``: ``handler(task)`` is a
    coroutine function (a plain function runs in a thread, asyncio.to_thread). Options and
    ``stats`` as ``Worker``. ``async with AsyncWorker(...) as w: await w.run()`` runs until
    ``close()``; ``start()`` runs in the background."""

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
        redis_kwargs.setdefault("socket_timeout", self.block_ms / 1000.0 + 10)
        self.redis = make_async_redis(connection, **redis_kwargs)
        self._owns_redis = self.redis is not connection  # a client passed in stays open
        self.stats = {"acked": 0, "failed": 0, "released": 0, "lost": 0, "reconnects": 0}
        self._stop = None
        self._fetchers = []
        self._running = {}  # id -> [task, handler asyncio.Task, released]

    def handler(self, fn):
        """Decorator: ``@worker.handler`` makes ``fn(task)`` the handler."""
        self._handler = fn
        return fn

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    def start(self):
        if self._handler is None:
            raise ValueError("no handler: pass one or decorate a function with @worker.handler")
        if not self._fetchers:
            self._stop = asyncio.Event()
            self._fetchers = [asyncio.ensure_future(self._fetch_loop())
                              for _ in range(self.concurrency)]
        return self

    async def run(self, shutdown_timeout=None):
        """Runs until close() is called (or the task running it is cancelled), then shuts down
        gracefully."""
        self.start()
        try:
            await self._stop.wait()
        finally:
            await self.close(shutdown_timeout)

    async def close(self, timeout=None):
        if self._stop is None:
            if self._owns_redis:
                await self.redis.close()
                await self.redis.connection_pool.disconnect()
            return
        self._stop.set()
        if self._fetchers:
            await asyncio.wait(self._fetchers, timeout=timeout)
        left = [e for e in self._running.values() if not e[2]]
        for e in left:
            e[2] = True
        for task, handler_task, _ in left:
            await self._settle(task, "release")
            handler_task.cancel()
        if self._fetchers:
            await asyncio.wait(self._fetchers, timeout=5)
        if self._owns_redis:
            await self.redis.close()
            await self.redis.connection_pool.disconnect()

    def _backoff(self, n):
        return min(5.0, 0.05 * (2 ** min(n, 10))) * (0.5 + random.random() / 2)

    async def _sleep_unless_stopped(self, s):
        try:
            await asyncio.wait_for(self._stop.wait(), s)
        except asyncio.TimeoutError:
            pass

    async def _fetch_loop(self):
        errors = 0
        while not self._stop.is_set():
            try:
                reply = await self.redis.execute_command(
                    "TASK.GET", *self.types, "COUNT", 1, "TIMEOUT", self.block_ms)
                errors = 0
            except _CONN_ERRORS as e:
                errors += 1
                self.stats["reconnects"] += 1
                log.warning("sluice: %s; reconnecting (try %d)", e, errors)
                await self._sleep_unless_stopped(self._backoff(errors))
                continue
            except redis.exceptions.ResponseError as e:
                errors += 1
                log.error("sluice: TASK.GET refused: %s", from_response(e))
                await self._sleep_unless_stopped(self._backoff(errors))
                continue
            for item in reply or ():
                if isinstance(item, dict):
                    item = [item["id"], item["type"], item["payload"], item["attempt"],
                            item["lease_until_ms"]]
                await self._run_one(Task(self, *item[:5]))

    async def _call_handler(self, task):
        if inspect.iscoroutinefunction(self._handler):
            return await self._handler(task)
        result = await asyncio.to_thread(self._handler, task)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _run_one(self, task):
        handler_task = asyncio.ensure_future(self._call_handler(task))
        entry = [task, handler_task, False]
        self._running[task.id] = entry
        done = asyncio.Event()
        toucher = asyncio.ensure_future(self._renew(task, done))
        try:
            outcome, arg = outcome_of(await handler_task, task)
        except asyncio.CancelledError:
            if not entry[2]:
                raise  # the worker itself was cancelled, not a released handler
            outcome, arg = "release", None
        except Exception as e:
            outcome, arg = outcome_of_error(e)
            if outcome == "retry":
                log.warning("sluice: task %d attempt %d failed: %r", task.id, task.attempt, e)
            if self.on_error:
                try:
                    self.on_error(task, e)
                except Exception:
                    log.exception("sluice: on_error raised")
        finally:
            self._running.pop(task.id, None)
            entry_released = entry[2]
            done.set()  # stops the toucher (never cancelled: it may be mid-command)
        if not entry_released:
            await self._settle(task, outcome, arg)
        await toucher

    async def _renew(self, task, done):
        while True:
            try:
                await asyncio.wait_for(
                    done.wait(), touch_interval(task, self.lease_ms, self.max_touch_interval))
                return
            except asyncio.TimeoutError:
                pass
            try:
                until = await self.redis.execute_command("TASK.TOUCH", task.id,
                                                         "ATTEMPT", task.attempt)
                task.lease_until_ms = int(until)
            except _CONN_ERRORS as e:
                log.warning("sluice: TASK.TOUCH %d: %s", task.id, e)
            except redis.exceptions.ResponseError as e:
                err = from_response(e)
                log.warning("sluice: TASK.TOUCH %d: %s", task.id, err)
                if isinstance(err, (NoLeaseError, NoTaskError)):
                    task.lease_lost = True
                    return

    async def _settle(self, task, outcome, arg=None):
        args, counter = settle_command(task, outcome, arg)
        deadline = time.monotonic() + 60
        tries = 0
        while True:
            try:
                await self.redis.execute_command(*args)
                self.stats[counter] += 1
                return True
            except _CONN_ERRORS as e:
                tries += 1
                if time.monotonic() > deadline:
                    log.error("sluice: could not settle task %d: %s", task.id, e)
                    return False
                self.stats["reconnects"] += 1
                await asyncio.sleep(self._backoff(tries))
            except redis.exceptions.ResponseError as e:
                err = from_response(e)
                if isinstance(err, (NoLeaseError, NoTaskError)):
                    self.stats["lost"] += 1
                    log.warning("sluice: task %d attempt %d: %s", task.id, task.attempt, err)
                else:
                    log.error("sluice: %s refused for task %d: %s", args[0], task.id, err)
                return False
