# SPDX-License-Identifier: MIT
"""A worker process for test_client.py's kill test: takes crash.job tasks, writes
"ID ATTEMPT" to the file argv[2] when a handler starts, then hangs until SIGKILLed."""

import sys
import time

from sluice_client import Worker

port, started = int(sys.argv[1]), sys.argv[2]
w = Worker("crash.job", concurrency=1, connection={"port": port}, block_ms=200)


@w.handler
def handle(task):
    with open(started, "w") as f:
        f.write(f"{task.id} {task.attempt}\n")
    time.sleep(3600)


w.run()
