# SPDX-License-Identifier: MIT
"""A worker process for test_client.py: `crash_worker.py PORT FILE TYPE MODE` takes TYPE tasks
and writes "ID ATTEMPT" to FILE when a handler starts; then MODE "hang" hangs until SIGKILLed,
"finish" takes 1 s and returns (the SIGTERM test: run() finishes it before exiting)."""

import sys
import time

from sluice_client import Worker

port, started, type, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
w = Worker(type, concurrency=1, connection={"port": port}, block_ms=200)


@w.handler
def handle(task):
    with open(started, "w") as f:
        f.write(f"{task.id} {task.attempt}\n")
    time.sleep(3600 if mode == "hang" else 1)


w.run()
