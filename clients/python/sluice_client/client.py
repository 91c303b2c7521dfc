# SPDX-License-Identifier: MIT
"""The producer side: ``Queue`` submits tasks, asks for rate-limit decisions and explains waits.

A ``Queue`` wraps one ``redis.Redis`` (its connection pool is thread-safe, so one Queue may be
shared by threads). Replies are decoded to ``str``/``int``; maps (RESP2 flat arrays of pairs)
become dicts. Every server refusal is raised as a ``SluiceError`` subclass (errors.py).
"""

import json
from collections import namedtuple

import redis

from .errors import RateLimitedError, translate


def make_redis(connection=None, **overrides):
    """A redis.Redis for ``connection``: a dict of redis.Redis keyword arguments (host, port,
    password, ...), a ``redis://`` URL, or an existing redis.Redis (returned as is)."""
    if isinstance(connection, redis.Redis):
        return connection
    if isinstance(connection, str):
        return redis.Redis.from_url(connection, decode_responses=True, **overrides)
    kwargs = {"host": "127.0.0.1", "port": 7379, "socket_connect_timeout": 5,
              "socket_keepalive": True}
    kwargs.update(connection or {})
    kwargs.update(overrides)
    kwargs["decode_responses"] = True
    return redis.Redis(**kwargs)


def encode_payload(payload):
    """A task's payload as JSON text: bytes are taken as JSON already, anything else is dumped."""
    if isinstance(payload, (bytes, bytearray)):
        return bytes(payload)
    return json.dumps(payload, separators=(",", ":"))


def pairs_to_dict(reply):
    if isinstance(reply, dict):
        return reply
    it = iter(reply)
    return {k: v for k, v in zip(it, it)}


class ThrottleResult(
    namedtuple("ThrottleResult",
               "allowed limit remaining retry_after_ms reset_after_ms denied_by")
):
    """THROTTLE's reply. True when allowed; ``limit`` is the capacity reported, ``denied_by`` the
    limit that said no (None when allowed)."""

    __slots__ = ()

    def __bool__(self):
        return self.allowed


class Queue:
    """Producer and decision client. ``Queue(connection={"host":..., "port":..., "password":...})``.
    Usable as a context manager (closes its connections)."""

    def __init__(self, connection=None, **redis_kwargs):
        self.redis = make_redis(connection, **redis_kwargs)
        self._owns_redis = self.redis is not connection  # a client passed in stays open

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._owns_redis:
            self.redis.close()
            self.redis.connection_pool.disconnect()

    def call(self, *args):
        """Any command, with refusals raised as SluiceError."""
        return translate(self.redis.execute_command, *args)

    def add(self, type, payload=None, *, key=None, units=None, priority=None, id=None,
            delay_ms=None):
        """TASK.ADD: submits a task; returns its id. ``payload`` is JSON-encoded (bytes are sent
        as JSON text as they are). ``id`` is the task key for deduplication."""
        args = ["TASK.ADD", type, encode_payload(payload)]
        for word, value in (("KEY", key), ("UNITS", units), ("PRIORITY", priority),
                            ("ID", id), ("DELAY", delay_ms)):
            if value is not None:
                args += [word, value]
        return int(self.call(*args))

    def throttle(self, limit, key="", *, units=None, peek=False, raise_on_deny=False):
        """THROTTLE: a rate-limit decision from a limit or a task type's chain. Returns a
        ThrottleResult (falsy when denied), or with ``raise_on_deny`` raises RateLimitedError
        (``limit``, ``key``, ``retry_after_ms``, ``limit_value``, ``remaining``,
        ``reset_after_ms``) when denied."""
        args = ["THROTTLE", limit, key]
        if units is not None:
            args += ["UNITS", units]
        if peek:
            args.append("PEEK")
        r = self.call(*args)
        res = ThrottleResult(bool(int(r[0])), int(r[1]), int(r[2]), int(r[3]), int(r[4]), r[5])
        if raise_on_deny and not res.allowed:
            raise RateLimitedError(
                f"limit={res.denied_by} key={key} retry_after_ms={res.retry_after_ms}",
                {"limit": res.denied_by, "key": key, "limit_value": res.limit,
                 "retry_after_ms": res.retry_after_ms, "remaining": res.remaining,
                 "reset_after_ms": res.reset_after_ms})
        return res

    def explain(self, id):
        """TASK.EXPLAIN: why a task waits and when it should start, as a dict (``state``,
        ``limit``, ``key``, ``position``, ``queue_length``, ``wake_ms``, ``estimated_start_ms``,
        ``text``)."""
        return pairs_to_dict(self.call("TASK.EXPLAIN", id))

    def info(self, id):
        """TASK.INFO: a task's state, attempts and failure, as a dict."""
        return pairs_to_dict(self.call("TASK.INFO", id))

    def cancel(self, id):
        """TASK.CANCEL: True when cancelled, False when it had already finished."""
        return bool(self.call("TASK.CANCEL", id))
