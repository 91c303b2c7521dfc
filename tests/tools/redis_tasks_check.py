# SPDX-License-Identifier: MIT
"""The many-clients checker of the shared task queue (tests/server/redis_tasks.sh, on Redis or
PostgreSQL: it talks to the nodes only).

Producers on every node add tasks (each payload unique, some with a PRIORITY) while consumers on
every node take them with TASK.GET ... COUNT k TIMEOUT ms and ACK each with its ATTEMPT. At the
end every task added must have been acknowledged exactly once: an ACK answered OK once per task
id, no id delivered that was never added, no payload delivered under two ids, and none left
over (a final TASK.INFO of every id says done).

With --limited TYPE --rate N --period-ms P --burst B, a second phase adds --limited-count
tasks of a type whose one limit is that rate and consumes them on every node; the store time
at which each was granted is its delivery's lease_until_ms minus the type's --lease-ms (Redis's
clock, in ms), and the grants must stay within the single-node bound burst + floor(W / T) over
every interval W (W widened by the 1 ms the reply rounds to).

With --kill-pid PID --kill-port PORT --short TYPE (a type whose lease is short), a third
phase adds --short-count tasks of that type on the other nodes; a worker on node PORT takes a
few and holds them unacknowledged, then the checker kills that node with SIGKILL while workers
on the others consume: every task must still be acknowledged exactly once, the held ones
delivered again with a higher attempt once their lease lapsed.

Prints one summary line; exits 1 on any violation. Uses Debian's python3-redis (redis-py).

Usage: redis_tasks_check.py --nodes P1,P2,P3 [--producers-per-node N]
                            [--consumers-per-node N] [--tasks N] [--limited TYPE --rate N
                            --period-ms MS --burst B --lease-ms MS --limited-count N]
"""
import argparse
import sys
import threading
import time

import redis


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", required=True)
    ap.add_argument("--producers-per-node", type=int, default=2)
    ap.add_argument("--consumers-per-node", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=600)
    ap.add_argument("--type", default="job")
    ap.add_argument("--limited")
    ap.add_argument("--lease-ms", type=int, default=30000)
    ap.add_argument("--rate", type=int)
    ap.add_argument("--period-ms", type=int)
    ap.add_argument("--burst", type=int)
    ap.add_argument("--limited-count", type=int, default=0)
    ap.add_argument("--max-seconds", type=float, default=40)
    ap.add_argument("--kill-pid", type=int)
    ap.add_argument("--kill-port", type=int)
    ap.add_argument("--short")
    ap.add_argument("--short-count", type=int, default=60)
    a = ap.parse_args()
    ports = [int(p) for p in a.nodes.split(",")]
    errors = []
    lock = threading.Lock()

    def client(port):
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=30, decode_responses=True)

    # ---- Phase 1: many producers and consumers on every node ----
    added = {}  # id -> payload
    acked = {}  # id -> count of OK acks
    delivered_payload = {}  # payload -> id
    total = a.tasks
    per_producer = total // (len(ports) * a.producers_per_node)
    total = per_producer * len(ports) * a.producers_per_node
    done_adding = threading.Event()
    deadline = time.time() + a.max_seconds

    def producer(port, n):
        c = client(port)
        for i in range(per_producer):
            payload = '{"p":%d,"n":%d,"i":%d}' % (port, n, i)
            args = ["TASK.ADD", a.type, payload]
            if i % 5 == 0:
                args += ["PRIORITY", str(i % 3)]
            try:
                tid = int(c.execute_command(*args))
            except Exception as e:  # noqa: BLE001 - any failure is a finding
                with lock:
                    errors.append("TASK.ADD on %d: %s" % (port, e))
                return
            with lock:
                if tid in added:
                    errors.append("id %d given twice by TASK.ADD" % tid)
                added[tid] = payload

    def consumer(port):
        c = client(port)
        while time.time() < deadline:
            with lock:
                finished = done_adding.is_set() and sum(acked.values()) >= len(added)
            if finished:
                return
            try:
                got = c.execute_command("TASK.GET", a.type, "COUNT", "4", "TIMEOUT", "300")
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append("TASK.GET on %d: %s" % (port, e))
                return
            for t in got or []:
                tid, typ, payload, attempt = int(t[0]), t[1], t[2], int(t[3])
                with lock:
                    prev = delivered_payload.get(payload)
                    if prev is not None and prev != tid:
                        errors.append("payload %s delivered as %d and %d" % (payload, prev, tid))
                    delivered_payload[payload] = tid
                if typ != a.type:
                    with lock:
                        errors.append("task %d of type %s" % (tid, typ))
                try:
                    r = c.execute_command("TASK.ACK", str(tid), "ATTEMPT", str(attempt))
                except redis.ResponseError as e:
                    with lock:
                        errors.append("ACK %d attempt %d on %d: %s" % (tid, attempt, port, e))
                    continue
                with lock:
                    if r in ("OK", True, b"OK"):
                        acked[tid] = acked.get(tid, 0) + 1

    threads = [threading.Thread(target=consumer, args=(p,)) for p in ports
               for _ in range(a.consumers_per_node)]
    prods = [threading.Thread(target=producer, args=(p, n)) for p in ports
             for n in range(a.producers_per_node)]
    t0 = time.time()
    for t in threads + prods:
        t.start()
    for t in prods:
        t.join()
    done_adding.set()
    for t in threads:
        t.join()
    took = time.time() - t0
    for tid, n in acked.items():
        if n != 1:
            errors.append("task %d acknowledged %d times" % (tid, n))
        if tid not in added:
            errors.append("task %d acknowledged, never added" % tid)
    missing = [tid for tid in added if tid not in acked]
    if missing:
        errors.append("%d tasks never acknowledged (e.g. %s)" % (len(missing), missing[:5]))
    c = client(ports[0])
    notdone = 0
    for tid in list(added)[:: max(1, len(added) // 50)]:
        info = c.execute_command("TASK.INFO", str(tid))
        fields = dict(zip(info[::2], info[1::2])) if isinstance(info, list) else info
        if fields.get("state") != "done":
            notdone += 1
    if notdone:
        errors.append("%d sampled tasks are not done" % notdone)
    summary = "phase 1: %d added, %d acked once, %d nodes x (%d producers, %d consumers), %.1f s" % (
        len(added), sum(1 for n in acked.values() if n == 1), len(ports), a.producers_per_node,
        a.consumers_per_node, took)

    # ---- Phase 2: a rate-limited type's grants within the bound ----
    if a.limited and a.limited_count > 0:
        c = client(ports[0])
        ids = [int(c.execute_command("TASK.ADD", a.limited, '{"i":%d}' % i))
               for i in range(a.limited_count)]
        got = set()
        times = []
        lim_deadline = time.time() + a.max_seconds

        def take(port):
            cc = client(port)
            while time.time() < lim_deadline:
                with lock:
                    if len(got) >= len(ids):
                        return
                ts = cc.execute_command("TASK.GET", a.limited, "COUNT", "2", "TIMEOUT", "300")
                for t in ts or []:
                    cc.execute_command("TASK.ACK", str(t[0]), "ATTEMPT", str(t[3]))
                    with lock:
                        got.add(int(t[0]))
                        times.append(int(t[4]) - a.lease_ms)

        ths = [threading.Thread(target=take, args=(p,)) for p in ports for _ in range(2)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        if len(got) != len(ids):
            errors.append("limited: %d of %d tasks consumed" % (len(got), len(ids)))
        times.sort()
        worst = 0
        for i in range(len(times)):
            for j in range(i, len(times)):
                bound = a.burst + (times[j] - times[i] + 1) * a.rate // a.period_ms
                worst = max(worst, (j - i + 1) - bound)
        span = (times[-1] - times[0]) / 1000 if times else 0
        if worst > 0:
            errors.append("limited: the bound burst + W/T exceeded by %d" % worst)
        # The bound must also bind: with more tasks than the burst, the grants take time.
        least = (len(times) - a.burst) * a.period_ms / a.rate / 1000 - 0.002
        if len(times) > a.burst and span < least:
            errors.append("limited: %d grants over %.3f s, faster than the rate" % (len(times), span))
        summary += "; phase 2: %d grants of %s over %.2f s, over-bound %d" % (
            len(times), a.limited, span, max(worst, 0))
    # ---- Phase 3: SIGKILL of a node holding deliveries ----
    if a.kill_pid and a.short:
        import os
        import signal

        alive = [p for p in ports if p != a.kill_port]
        ids3 = {}
        for i in range(a.short_count):
            c = client(alive[i % len(alive)])
            ids3[int(c.execute_command("TASK.ADD", a.short, '{"k":%d}' % i))] = i
        victim = client(a.kill_port)
        held = {}
        for t in victim.execute_command("TASK.GET", a.short, "COUNT", "5") or []:
            held[int(t[0])] = int(t[3])
        os.kill(a.kill_pid, signal.SIGKILL)
        acks3 = {}
        attempts = {}
        k_deadline = time.time() + a.max_seconds

        def work(port):
            cc = client(port)
            while time.time() < k_deadline:
                with lock:
                    if len(acks3) >= len(ids3):
                        return
                ts = cc.execute_command("TASK.GET", a.short, "COUNT", "3", "TIMEOUT", "300")
                for t in ts or []:
                    tid, att = int(t[0]), int(t[3])
                    try:
                        r = cc.execute_command("TASK.ACK", str(tid), "ATTEMPT", str(att))
                    except redis.ResponseError as e:
                        with lock:
                            errors.append("phase 3: ACK %d attempt %d: %s" % (tid, att, e))
                        continue
                    with lock:
                        if r in ("OK", True):
                            acks3[tid] = acks3.get(tid, 0) + 1
                            attempts[tid] = att

        ths = [threading.Thread(target=work, args=(p,)) for p in alive for _ in range(2)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        for tid in ids3:
            if acks3.get(tid, 0) != 1:
                errors.append("phase 3: task %d acknowledged %d times" % (tid, acks3.get(tid, 0)))
        for tid, att in held.items():
            if attempts.get(tid, 0) <= att:
                errors.append("phase 3: task %d held by the killed node (attempt %d) came back "
                              "with attempt %s" % (tid, att, attempts.get(tid)))
        summary += "; phase 3: %d tasks, %d held by the killed node and redelivered, %d acked" % (
            len(ids3), sum(1 for tid, att in held.items() if attempts.get(tid, 0) > att),
            sum(1 for n in acks3.values() if n == 1))
    print(summary)
    for e in errors[:20]:
        print("VIOLATION:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
