# SPDX-License-Identifier: MIT
"""sluice_client: workers and producers for sluice, on redis-py.

``Worker`` takes and runs tasks (worker.py); ``Queue`` submits them, throttles and explains
(client.py); ``AsyncWorker`` and ``AsyncQueue`` are their asyncio flavour (aio.py); errors.py
has the typed refusals and the exceptions a handler raises.
"""

from .client import Queue, ThrottleResult, make_redis
from .errors import (BusyError, ExistsError, NoLeaseError, NoLimitError, NoTaskError,
                     RateLimitedError, RetryAfter, SluiceError, UnrecoverableError)
from .worker import Task, Worker
from .aio import AsyncQueue, AsyncWorker

__all__ = [
    "Queue", "ThrottleResult", "make_redis", "Worker", "Task", "SluiceError",
    "RateLimitedError", "BusyError", "NoLimitError", "NoLeaseError", "NoTaskError",
    "ExistsError", "RetryAfter", "UnrecoverableError", "task", "AsyncWorker", "AsyncQueue",
]


def task(type, **worker_kwargs):
    """Decorator: ``@task("email.send", concurrency=4, connection=...)`` turns a handler into a
    Worker for that type (``handler.run()`` / ``with handler: ...``)."""
    def wrap(fn):
        return Worker(type, fn, **worker_kwargs)
    return wrap
