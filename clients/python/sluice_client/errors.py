# SPDX-License-Identifier: MIT
"""Typed errors for sluice's error replies.

Every sluice error reply starts with a stable code word (docs/commands.md, "Errors"); redis-py
hands them over as ``ResponseError`` with the text, stripping the word only for ``ERR`` and a
few Redis codes. ``from_response`` turns one back into a ``SluiceError`` whose ``code`` is that
word, of the subclass for the codes a program reacts to. Invariant: every exception this
package raises for a server refusal is a ``SluiceError``; connection failures stay redis-py's
``ConnectionError`` / ``TimeoutError`` so that callers can tell "the server said no" from "no
server".
"""

from urllib.parse import unquote

import redis.exceptions

# The code words sluice uses; a first word not in this set means redis-py stripped "ERR".
CODES = frozenset(
    "ERR WRONGARGS NOAUTH WRONGPASS NOPROTO NOLIMIT RATELIMITED BUSY NOLEASE INUSE NOTASK "
    "EXISTS NOMEM CONFIG DENIED IOERR".split()
)


class SluiceError(Exception):
    """A refusal by the server: ``code`` is the code word, ``message`` the sentence after it."""

    def __init__(self, code, message=""):
        super().__init__(f"{code} {message}".strip())
        self.code = code
        self.message = message


class RateLimitedError(SluiceError):
    """A limit said no. Fields as in ``-RATELIMITED``: ``limit``, ``kind``, ``tier``, ``key``,
    ``limit_value``, ``window_ms``, ``retry_after_ms`` (-1: never); ``fields`` holds them all
    (and any the server adds later). From ``throttle(raise_on_deny=True)`` also ``remaining``
    and ``reset_after_ms``."""

    def __init__(self, message="", fields=None):
        super().__init__("RATELIMITED", message)
        self.fields = dict(fields or {})
        f = self.fields
        self.limit = f.get("limit")
        self.kind = f.get("kind")
        self.tier = f.get("tier")
        self.key = f.get("key")
        self.limit_value = _int_or_none(f.get("limit_value"))
        self.window_ms = _int_or_none(f.get("window_ms"))
        self.retry_after_ms = _int_or_none(f.get("retry_after_ms"))
        self.remaining = _int_or_none(f.get("remaining"))
        self.reset_after_ms = _int_or_none(f.get("reset_after_ms"))


class BusyError(SluiceError):
    """A table is full (a limit's max_keys, the engine's max_tasks or max_parked): back off."""


class NoLimitError(SluiceError):
    """No limit (or task type) of that name."""


class NoLeaseError(SluiceError):
    """The task (or lease) is not running any more for this attempt: another worker has it."""


class NoTaskError(SluiceError):
    """No task of that id."""


class ExistsError(SluiceError):
    """The task key is held by a running task; ``running_id`` names it."""

    def __init__(self, code, message=""):
        super().__init__(code, message)
        fields = parse_fields(message)
        self.running_id = _int_or_none(fields.get("running_id"))


_CLASSES = {
    "BUSY": BusyError,
    "NOLIMIT": NoLimitError,
    "NOLEASE": NoLeaseError,
    "NOTASK": NoTaskError,
    "EXISTS": ExistsError,
}


class RetryAfter(Exception):
    """Raised by a handler whose upstream answered "too many requests, retry after ms" (HTTP 429
    with Retry-After): the worker fails the task with ``RETRY_AFTER ms``, so it comes back no
    earlier than that, and the failure does not use up one of the task's attempts."""

    def __init__(self, ms, reason=None):
        self.ms = max(0, int(ms))
        super().__init__(reason or f"upstream asked to retry after {self.ms} ms")


class UnrecoverableError(Exception):
    """Raised by a handler for a task that can never succeed: it is failed ``DEAD``, not retried."""


def _int_or_none(v):
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def parse_fields(text):
    """The ``name=value`` words of an error sentence, values percent-decoded."""
    out = {}
    for word in text.split(" "):
        name, sep, value = word.partition("=")
        if sep and name:
            out[name] = unquote(value)
    return out


def from_response(err):
    """A SluiceError for a redis-py ResponseError (or its text)."""
    text = str(err)
    code, _, rest = text.partition(" ")
    if code not in CODES:
        # redis-py strips "ERR " (and maps NOAUTH to its own class, which is no ResponseError).
        code, rest = "ERR", text
    if code == "RATELIMITED":
        return RateLimitedError(rest, parse_fields(rest))
    return _CLASSES.get(code, SluiceError)(code, rest)


def translate(fn, *args, **kwargs):
    """Calls fn, re-raising a server refusal as a SluiceError (connection errors pass through)."""
    try:
        return fn(*args, **kwargs)
    except redis.exceptions.ResponseError as e:
        raise from_response(e) from None
