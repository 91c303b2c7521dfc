# SPDX-License-Identifier: MIT
"""The multi-node checker of the shared store (tests/server/cluster.sh).

Drives THROTTLE (a named rate limit, a fixed and a sliding window, a chain type of a per-key and
a global rate limit) and CL.THROTTLE from many clients on every node at once, pipelined, on a few hot keys so the nodes
contend; counts every grant each client was told; then reads the audit lists the limits script
wrote in Redis (`sluice:{TAG}:audit`, entries "limit_id key units store_now_ns", in the order
Redis ran them, started with --store-audit), or with --pg the table sluice_limit_audit the
PostgreSQL store's function wrote (through psql, in store time: each (limit, key)'s clock only
moves forward), and checks, for every (limit, key):

  - the grants replay through a reference model with zero violations, in store time that never
    goes back: GCRA for rates (exact rationals: T = period / permits, a grant of u units needs
    max(tat, now) + u*T - now <= burst*T), at most `limit` units per epoch-aligned window for
    fixed windows, at most `limit` units within any W for sliding windows;
  - the units granted over [first, last] never exceed the single-node bound burst + (last -
    first) / T, whichever node granted them;
  - the grants in Redis are exactly the grants the clients were told (none lost, none invented);
  - a chain is all-or-nothing: its global link has as many grants as its per-key links together;
  - every reply comes back in its command's place (an ECHO answered at once between deferred
    decisions returns its own token).

Prints one summary line; exits 1 on any violation. Uses Debian's python3-redis (redis-py).

On a Redis Cluster (--redis-cluster P1,P2,P3: the masters' ports, tests/server/redis_cluster.sh)
the audit lists are read from every master with a plain client each (a list lives on its tag's
master), and the configuration is --print-config --cluster's: the chain type `job` there chains
two per-key limits (perkey, pair), so that the atomicity check compares the two links key by
key (as limits a type names, both keep their states in the task queue's slot). --keys spreads the keys over more slots; --migrate KEY moves the slot of
KEY's state to another master mid-run (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT
NODE), so the nodes meet ASK and MOVED while they decide; --tolerate-storedown counts
`-STOREDOWN` replies (closed mode: nothing granted, e.g. TRYAGAIN while a slot's keys are split
between two masters) instead of failing on them.

Usage: cluster_check.py --nodes P1,P2,P3 (--redis RPORT [--db N] | --pg CONNINFO --psql PATH |
                        --redis-cluster P1,P2,P3 [--migrate KEY] [--tolerate-storedown])
                        [--clients-per-node N] [--target N] [--max-seconds S] [--pipeline K]
                        [--seed N] [--keys N]
"""
import argparse
import random
import subprocess
import sys
import threading
import time
from collections import defaultdict
from fractions import Fraction

import redis

NS = 10**9
# The limits of the test's configuration (cluster.sh writes the same): id -> (permits, period_ns,
# burst). Kept in one place here so the replay and the configuration cannot drift apart.
LIMITS = {
    "api": ("rate", 20, 1 * NS, 5),
    "perkey": ("rate", 10, 1 * NS, 3),
    "global": ("rate", 40, 1 * NS, 8),
    "win": ("window", 15, 1 * NS),
    "slide": ("sliding", 12, 1 * NS),
}
CONFIG_YAML = """limits:
  api: {rate: 20/1s, burst: 5, key: explicit}
  perkey: {rate: 10/1s, burst: 3, key: explicit}
  global: {rate: 40/1s, burst: 8}
  slow: {rate: 1/1h, key: explicit}
  slots: {concurrency: 2, ttl: 30s, key: explicit}
  win: {window: 15/1s, key: explicit}
  slide: {sliding: 12/1s, key: explicit}
types:
  job: {limits: [perkey, global]}
"""
# On a Redis Cluster: the chain is of two per-key limits (both tagged by the key: one slot).
CONFIG_YAML_CLUSTER = CONFIG_YAML.replace(
    "types:\n  job: {limits: [perkey, global]}\n",
    "  pair: {rate: 15/1s, burst: 4, key: explicit}\n"
    "types:\n  job: {limits: [perkey, pair]}\n")
LIMITS["pair"] = ("rate", 15, 1 * NS, 4)
CLUSTER = False
# CL.THROTTLE triples used: (max_burst, count, period s) -> limit id "!cell:B:C:P".
CELLS = [(4, 30, 1), (0, 5, 1)]
KEYS = ["k%d" % i for i in range(6)]


def cell_id(b, c, p):
    return "!cell:%d:%d:%d" % (b, c, p)


for b, c, p in CELLS:
    LIMITS[cell_id(b, c, p)] = ("rate", c, p * NS, b + 1)


class Client(threading.Thread):
    """One connection to one node, sending pipelines of random decisions until told to stop."""

    def __init__(self, port, seed, pipeline, stop, counts):
        super().__init__(daemon=True)
        self.r = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
        self.rng = random.Random(seed)
        self.pipeline = pipeline
        self.stop = stop
        self.granted = defaultdict(int)  # (limit_id, key) -> units the client was told
        self.decisions = 0
        self.errors = []
        self.counts = counts
        self.tolerate_storedown = False
        self.storedown = 0

    def one(self, p):
        """Queues one random decision; returns how to read its reply."""
        k = self.rng.choice(KEYS)
        x = self.rng.random()
        if x < 0.35:
            units = 1 if self.rng.random() < 0.8 else 2
            if units == 1:
                p.execute_command("THROTTLE", "api", k)
            else:
                p.execute_command("THROTTLE", "api", k, "UNITS", units)
            return ("throttle", [("api", k)], units)
        if x < 0.65:
            p.execute_command("THROTTLE", "job", k)
            if CLUSTER:
                return ("throttle", [("perkey", k), ("pair", k)], 1)
            return ("throttle", [("perkey", k), ("global", "")], 1)
        if x < 0.70:
            p.execute_command("THROTTLE", "api", k, "PEEK")
            return ("peek", [], 0)
        if x < 0.78:
            lid = "win" if self.rng.random() < 0.5 else "slide"
            units = 1 if self.rng.random() < 0.8 else 3
            p.execute_command("THROTTLE", lid, k, "UNITS", units)
            return ("throttle", [(lid, k)], units)
        if x < 0.82:
            # Answered at once, between deferred replies: it must come back in its place.
            token = "t%d" % self.rng.randrange(10**9)
            p.execute_command("ECHO", token)
            return ("echo", token, 0)
        b, c, per = self.rng.choice(CELLS)
        q = 1 if self.rng.random() < 0.9 else self.rng.choice([0, 2])
        p.execute_command("CL.THROTTLE", k, b, c, per, q)
        return ("cell", [(cell_id(b, c, per), k)], q)

    def run(self):
        try:
            while not self.stop.is_set():
                p = self.r.pipeline(transaction=False)
                how = [self.one(p) for _ in range(self.pipeline)]
                replies = p.execute(raise_on_error=False)
                for (kind, links, units), rep in zip(how, replies):
                    self.decisions += 1
                    if isinstance(rep, Exception):
                        if self.tolerate_storedown and str(rep).startswith("STOREDOWN"):
                            self.storedown += 1
                        else:
                            self.errors.append(str(rep))
                        continue
                    if kind == "echo":
                        if rep != links.encode():
                            self.errors.append("reply out of order: ECHO %s answered %r" %
                                               (links, rep))
                        continue
                    if not isinstance(rep, list) or len(rep) != (5 if kind == "cell" else 6):
                        self.errors.append("reply out of order: %s answered %r" % (kind, rep))
                        continue
                    if kind == "throttle" and rep[0] == 1:
                        for link in links:
                            self.granted[link] += units
                    elif kind == "cell" and rep[0] == 0 and units > 0:
                        self.granted[links[0]] += units
        except Exception as e:  # a dead connection is a failure of the run, reported below
            self.errors.append("client: %r" % (e,))


def read_audit(r):
    """Every audit entry, per (limit_id, key), in the order Redis appended them."""
    streams = defaultdict(list)
    lists = 0
    for name in r.scan_iter(match="sluice:{*}:audit", count=1000):
        lists += 1
        for e in r.lrange(name, 0, -1):
            first = e.index(b" ")
            rest = e[first + 1:]
            key, units, now = rest.rsplit(b" ", 2)
            streams[(e[:first].decode(), key.decode())].append((int(now), int(units)))
    return streams, lists


def read_audit_cluster(ports):
    """read_audit over every master of a Redis Cluster: each list is on its tag's master."""
    streams = defaultdict(list)
    lists = 0
    per_master = []
    for port in ports:
        s, n = read_audit(redis.Redis(host="127.0.0.1", port=port))
        for k, v in s.items():
            if k in streams:
                raise RuntimeError("%r audited on two masters" % (k,))
            streams[k] = v
        lists += n
        per_master.append(n)
    return streams, lists, per_master


def slot_owner(conns, slot):
    """The port of the master CLUSTER SLOTS names for slot."""
    for start, end, master, *_ in conns[0].execute_command("CLUSTER", "SLOTS"):
        if start <= slot <= end:
            return int(master[1])
    raise RuntimeError("slot %d has no owner" % slot)


def migrate_slot(ports, key):
    """Moves the slot of key's state (its tag is the key) to another master, as redis-cli
    --cluster reshard does it for one slot. Returns (slot, from, to)."""
    conns = {p: redis.Redis(host="127.0.0.1", port=p) for p in ports}
    first = conns[ports[0]]
    slot = int(first.execute_command("CLUSTER", "KEYSLOT", key))
    src = slot_owner([first], slot)
    dst = [p for p in ports if p != src][0]
    ids = {p: conns[p].execute_command("CLUSTER", "MYID").decode() for p in ports}
    conns[dst].execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src])
    conns[src].execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst])
    moved = 0
    while True:
        keys = conns[src].execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
        if not keys:
            break
        conns[src].execute_command("MIGRATE", "127.0.0.1", dst, "", 0, 10000, "KEYS", *keys)
        moved += len(keys)
    conns[dst].execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[dst])
    conns[src].execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[dst])
    for p in ports:
        if p not in (src, dst):
            conns[p].execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[dst])
    return slot, src, dst, moved


def read_audit_pg(psql, conninfo):
    """Every audited grant of the PostgreSQL store, per (limit_id, key), in store time."""
    out = subprocess.run([psql, conninfo, "-AtF", " ", "-c",
                          "SELECT lim, encode(key, 'hex'), units, now_ns FROM sluice_limit_audit "
                          "ORDER BY now_ns"], check=True, capture_output=True, text=True).stdout
    streams = defaultdict(list)
    for line in out.splitlines():
        lid, key, units, now = line.split(" ")
        streams[(lid, bytes.fromhex(key).decode())].append((int(now), int(units)))
    return streams, 1


def replay(lid, key, grants, problems):
    """Replays one stream through its reference model; appends what does not hold."""
    last = None
    for now, _ in grants:
        if last is not None and now < last:
            problems.append("%s %r: store time went back (%d after %d)" % (lid, key, now, last))
        last = now
    kind = LIMITS[lid][0]
    if kind == "window":
        # Fixed windows aligned to multiples of W since the epoch: at most `limit` units each.
        _, limit, w = LIMITS[lid]
        per = defaultdict(int)
        for now, units in grants:
            per[now // w] += units
        for idx, total in per.items():
            if total > limit:
                problems.append("%s %r: %d units in window %d, limit %d" %
                                (lid, key, total, idx, limit))
        return
    if kind == "sliding":
        # At most `limit` units in any interval of length W: a grant counts while now - at < W.
        _, limit, w = LIMITS[lid]
        live, total, first = [], 0, 0
        for now, units in grants:
            while first < len(live) and now - live[first][0] >= w:
                total -= live[first][1]
                first += 1
            total += units
            live.append((now, units))
            if total > limit:
                problems.append("%s %r: %d units within %d ns of %d, limit %d" %
                                (lid, key, total, w, now, limit))
        return
    _, permits, period, burst = LIMITS[lid]
    t = Fraction(period, permits)
    bt = burst * t
    tat = None
    total = 0
    for now, units in grants:
        base = now if tat is None or tat < now else tat
        need = base + units * t - now
        if need > bt:
            problems.append("%s %r: a grant of %d at %d the model denies (%s ns ahead, burst*T "
                            "%s)" % (lid, key, units, now, float(need), float(bt)))
        tat = base + units * t
        total += units
    first = grants[0][0]
    bound = burst + Fraction(last - first) / t
    if total > bound:
        problems.append("%s %r: %d units granted over %d ns, bound %s" %
                        (lid, key, total, last - first, float(bound)))


def selftest():
    """The models must catch what they are there to catch: each case below breaks one rule."""
    ms = NS // 1000
    cases = [
        # api: burst 5, T = 50 ms: six grants at one instant is one too many.
        ("api", [(10**18, 1)] * 6, True),
        ("api", [(10**18, 1)] * 5, False),
        ("api", [(10**18, 1)] * 5 + [(10**18 + 50 * ms, 1)], False),
        ("api", [(10**18, 1)] * 5 + [(10**18 + 49 * ms, 1)], True),
        # win: 15 a window of 1 s aligned to the epoch.
        ("win", [(10**18 + 1, 15), (10**18 + NS - 1, 1)], True),
        ("win", [(10**18 + NS - 1, 15), (10**18 + NS, 15)], False),
        # slide: 12 within any second.
        ("slide", [(10**18, 12), (10**18 + NS - 1, 1)], True),
        ("slide", [(10**18, 12), (10**18 + NS, 12)], False),
        # time going back is a violation whatever the counts.
        ("api", [(10**18 + 1, 1), (10**18, 1)], True),
    ]
    bad = 0
    for lid, grants, want in cases:
        problems = []
        replay(lid, "k", grants, problems)
        if bool(problems) != want:
            bad += 1
            print("SELFTEST: %s %r: violations %r, wanted %s" % (lid, grants[:3], problems, want))
    print("selftest: %d cases, %d wrong" % (len(cases), bad))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes")
    ap.add_argument("--redis", type=int)
    ap.add_argument("--db", type=int, default=0)
    ap.add_argument("--pg")
    ap.add_argument("--psql", default="psql")
    ap.add_argument("--clients-per-node", type=int, default=6)
    ap.add_argument("--target", type=int, default=60000)
    ap.add_argument("--max-seconds", type=float, default=25)
    ap.add_argument("--pipeline", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--print-config", action="store_true")
    ap.add_argument("--cluster", action="store_true", help="with --print-config: the Cluster's")
    ap.add_argument("--redis-cluster")
    ap.add_argument("--migrate")
    ap.add_argument("--tolerate-storedown", action="store_true")
    ap.add_argument("--keys", type=int, default=6)
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args()
    if a.selftest:
        return selftest()
    if a.print_config:
        sys.stdout.write(CONFIG_YAML_CLUSTER if a.cluster else CONFIG_YAML)
        return 0
    if not a.nodes or not (a.redis or a.pg or a.redis_cluster):
        ap.error("--nodes and --redis, --pg or --redis-cluster are required")
    global CLUSTER, KEYS
    CLUSTER = bool(a.redis_cluster)
    KEYS = ["k%d" % i for i in range(a.keys)]
    ports = [int(p) for p in a.nodes.split(",")]
    stop = threading.Event()
    clients = []
    for i, port in enumerate(ports):
        for j in range(a.clients_per_node):
            clients.append(Client(port, a.seed * 1000 + i * 100 + j, a.pipeline, stop, None))
            clients[-1].tolerate_storedown = a.tolerate_storedown
    start = time.monotonic()
    for c in clients:
        c.start()
    migration = ""
    if a.migrate:
        # A third of the way in, while every client keeps deciding.
        while time.monotonic() - start < a.max_seconds / 3 and \
                sum(c.decisions for c in clients) < a.target / 3:
            time.sleep(0.05)
        cports = [int(p) for p in a.redis_cluster.split(",")]
        slot, src, dst, nkeys = migrate_slot(cports, a.migrate)
        migration = " migrated=slot:%d:%d->%d:keys:%d:at:%d" % (
            slot, src, dst, nkeys, sum(c.decisions for c in clients))
    # Until the target count or the time cap, whichever first: a slow machine checks fewer
    # decisions, never different ones.
    while time.monotonic() - start < a.max_seconds:
        if sum(c.decisions for c in clients) >= a.target:
            break
        time.sleep(0.05)
    stop.set()
    for c in clients:
        c.join()
    elapsed = time.monotonic() - start
    decisions = sum(c.decisions for c in clients)
    errors = [e for c in clients for e in c.errors]
    told = defaultdict(int)
    for c in clients:
        for k, v in c.granted.items():
            told[k] += v

    per_master = None
    if a.pg:
        streams, lists = read_audit_pg(a.psql, a.pg)
    elif a.redis_cluster:
        streams, lists, per_master = read_audit_cluster([int(p) for p in a.redis_cluster.split(",")])
    else:
        streams, lists = read_audit(redis.Redis(host="127.0.0.1", port=a.redis, db=a.db))
    problems = []
    grants = 0
    for (lid, key), g in streams.items():
        if lid not in LIMITS:
            problems.append("unexpected limit id in the audit: %r" % lid)
            continue
        replay(lid, key, g, problems)
        grants += len(g)
    audited = {k: sum(u for _, u in g) for k, g in streams.items()}
    for k in set(audited) | set(told):
        if audited.get(k, 0) != told.get(k, 0):
            problems.append("%s %r: the store recorded %d units granted, the clients were told %d" %
                            (k[0], k[1], audited.get(k, 0), told.get(k, 0)))
    if CLUSTER:
        for k in KEYS:
            if audited.get(("perkey", k), 0) != audited.get(("pair", k), 0):
                problems.append("chain not atomic on %r: perkey granted %d, pair %d" %
                                (k, audited.get(("perkey", k), 0), audited.get(("pair", k), 0)))
    else:
        per = sum(v for (lid, _), v in audited.items() if lid == "perkey")
        glob = audited.get(("global", ""), 0)
        if per != glob:
            problems.append("chain not atomic: perkey links granted %d, the global link %d" %
                            (per, glob))
    if errors:
        problems.append("%d error replies, e.g. %s" % (len(errors), errors[0]))
    storedown = sum(c.storedown for c in clients)
    print("decisions=%d grants=%d streams=%d audit_lists=%d nodes=%d clients=%d seconds=%.1f "
          "violations=%d%s%s%s" % (decisions, grants, len(streams), lists, len(ports),
                                   len(clients), elapsed, len(problems),
                                   " storedown=%d" % storedown if a.tolerate_storedown else "",
                                   " lists_per_master=%s" % ",".join(map(str, per_master))
                                   if per_master else "", migration))
    for p in problems[:20]:
        print("VIOLATION: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
