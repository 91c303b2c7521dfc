#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A runnable sluice worker in Python (clients/python): sends the e-mails of examples/sluice.yaml's
`email.send` type, which its `emails` limit paces at 5 a minute per user with bursts of 10.

    sluice serve --config examples/sluice.yaml &
    PYTHONPATH=clients/python /usr/bin/python3 examples/worker.py --produce 15

It submits 15 e-mails for alice, then works: the first 10 go at once (the burst), the rest one
every 12 s. Ctrl-C stops it gracefully: the e-mail being sent is finished first. A fake upstream
answers "429, retry after 2 s" now and then; the task comes back after that, without using up
one of its attempts.
"""

import argparse
import logging
import random
import time

from sluice_client import Queue, RetryAfter, Worker

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--host", default="127.0.0.1")
ap.add_argument("--port", type=int, default=7379)
ap.add_argument("--password")
ap.add_argument("--produce", type=int, default=0, help="submit N e-mails for alice first")
ap.add_argument("--concurrency", type=int, default=4)
args = ap.parse_args()
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
conn = {"host": args.host, "port": args.port, "password": args.password}

if args.produce:
    with Queue(connection=conn) as q:
        for i in range(args.produce):
            q.add("email.send", {"to": "alice@example.com", "n": i}, key="alice")

worker = Worker("email.send", concurrency=args.concurrency, connection=conn)


@worker.handler
def send(task):
    if random.random() < 0.1:  # the mail provider's "429 Too Many Requests, Retry-After: 2"
        raise RetryAfter(2000)
    time.sleep(0.2)  # talking to the mail provider
    logging.info("sent #%s to %s (task %d, attempt %d)",
                 task.payload["n"], task.payload["to"], task.id, task.attempt)
    return 1  # its cost (ACK COST 1)


with worker:
    worker.run()  # until Ctrl-C / SIGTERM
