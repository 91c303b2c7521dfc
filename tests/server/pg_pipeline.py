# SPDX-License-Identifier: MIT
# Many clients pipelining on one sluice node (tests/server/pg_conn.sh, a node with several
# PostgreSQL connections): every client writes ROUNDS pipelines of DEPTH commands at once, each
# a TASK.ADD of a payload naming the client and the command, a THROTTLE (a decision: another
# connection than the client's task requests, rstore_pg.h) or an ECHO of a word naming them, and
# checks that the replies come back in command order (each ECHO's word in its place, an id or an
# error for each ADD, an array for each THROTTLE) and that a client's ADDs got increasing ids
# (ids come from one sequence as the calls run: a client's commands ran in its order).
#
# Prints the acknowledged tasks ("ACK <id> <payload>", one a line) and "ERRORS n" (ADDs answered
# an error: allowed while a connection is lost, never acknowledged); exits 1 with a message on
# the first reply out of place.
#
# Usage: python3 pg_pipeline.py PORT CLIENTS ROUNDS DEPTH
import socket
import sys
import threading

port, nclients, rounds, depth = (int(a) for a in sys.argv[1:5])
lock = threading.Lock()
acked = []
errors = [0]
failures = []


def cmd(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


class Reader:
    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the node closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the node closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"-", b":"):
            return (kind, rest)
        if kind == b"$":
            n = int(rest)
            return (kind, None if n < 0 else self.exact(n))
        if kind in (b"*", b"%"):
            n = int(rest) * (2 if kind == b"%" else 1)
            return (b"*", [self.reply() for _ in range(max(n, 0))])
        raise ValueError("unexpected reply %r" % line)


def client(c):
    try:
        s = socket.create_connection(("127.0.0.1", port))
        r = Reader(s)
        last_id = 0
        for rnd in range(rounds):
            kinds, out = [], b""
            for j in range(depth):
                word = "c%d-r%d-%d" % (c, rnd, j)
                k = j % 3
                if k == 0:
                    out += cmd("TASK.ADD", "pipe", '{"w":"%s"}' % word)
                elif k == 1:
                    out += cmd("THROTTLE", "api", "key%d" % c)
                else:
                    out += cmd("ECHO", word)
                kinds.append((k, word))
            s.sendall(out)
            for k, word in kinds:
                kind, val = r.reply()
                if k == 0:
                    if kind == b"-":
                        with lock:
                            errors[0] += 1
                        continue
                    if kind != b":":
                        raise ValueError("%s: TASK.ADD answered %r %r" % (word, kind, val))
                    tid = int(val)
                    if tid <= last_id:
                        raise ValueError("%s: id %d after %d: ran out of order" % (word, tid, last_id))
                    last_id = tid
                    with lock:
                        acked.append((tid, '{"w":"%s"}' % word))
                elif k == 1:
                    if kind not in (b"*", b"-"):
                        raise ValueError("%s: THROTTLE answered %r %r" % (word, kind, val))
                elif kind != b"$" or val != word.encode():
                    raise ValueError("%s: ECHO answered %r %r: a reply out of place" % (word, kind, val))
        s.close()
    except Exception as e:  # noqa: BLE001 - any failure of a client is the test's failure
        with lock:
            failures.append("client %d: %s" % (c, e))


threads = [threading.Thread(target=client, args=(c,)) for c in range(nclients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for tid, payload in acked:
    print("ACK %d %s" % (tid, payload))
print("ERRORS %d" % errors[0])
if failures:
    print("FAIL " + "; ".join(failures[:5]))
    sys.exit(1)
