/* SPDX-License-Identifier: MIT */
/*
 * The insides of the shared store's node side (rstore.h), shared by its two files: rstore.c
 * (the turn's batches, the calls in flight and their FIFO, the replies, the requests) and
 * rstore_life.c (opening the store, closing it, its figures and INFO). Nothing else includes
 * this header.
 */
#ifndef SLUICE_SERVER_RSTORE_IMPL_H
#define SLUICE_SERVER_RSTORE_IMPL_H

#include "server/rstore.h"

#include "config/config_store.h"
#include "server/rstore_pg.h"
#include "server/rtag.h"
#include "store/pg_limits.h"
#include "store/redis_cluster.h"
#include "store/redis_conn.h"
#include "store/redis_limits.h"

/* Applied batches kept for reuse. */
#define SPARE_MAX 8
/* Links of a request converted on the stack; longer chains are allocated. */
#define LINKS_STACK 16
/* The hash tag of every link on a standalone Redis is the queue's (rtag.h). Any tag is correct as
 * long as one (limit, key) always gets the same; one tag for everything makes a call read and
 * write one clock key instead of one per key (about half the script's Redis work per decision,
 * measured with bench/cluster.sh) and ratchets one clock for every key. On Redis Cluster only the
 * limits that task types name keep it (rstore_link_tag), so that the other keys spread over
 * slots. */
/* PostgreSQL: one call in flight per connection (rstore_pg.h, rpg_may_send); the turn's batch
 * of a connection waits for its answer (unless it is full). A call is a transaction whose commit
 * waits for the WAL flush, and calls on a hot key queue on its row: pipelining a call per turn
 * would commit a few decisions per flush, while holding them back makes the next call carry
 * everything that arrived during the flush (group commit, as the embedded store does it).
 * Measured with bench/pg_cluster.sh. */
/* At most one summary line of fail-open grants per this many ns. */
#define OPEN_LOG_NS SLUICE_NS_PER_SEC

typedef enum wait_kind {
    WAIT_THROTTLE = 1,
    WAIT_CELL,
    WAIT_BACKOFF, /* LIMIT.BACKOFF */
    WAIT_RATE,    /* LIMIT.RATE of an adaptive rate: the limit's definition, then the key, in
                   * the arena at names (keylen bytes) */
    WAIT_ACQUIRE, /* LEASE.ACQUIRE */
    WAIT_RENEW,   /* LEASE.RENEW */
    WAIT_RELEASE, /* LEASE.RELEASE */
} wait_kind;

/* One request's client and how to write its reply. */
typedef struct rstore_wait {
    conn *c;           /* NULL once the client closed */
    size_t ticket;     /* conn_defer's */
    wait_kind kind;    /* which reply */
    int req;           /* the request's index in the batch */
    size_t nlinks;     /* links of the request */
    size_t dec;        /* its first decision in the batch's decision array */
    size_t names;      /* THROTTLE: its links' names, NUL-separated, at this offset of the arena;
                        * leases: the limit's name, NUL, then the key's keylen bytes */
    size_t keylen;     /* leases: the key's length */
    int64_t ttl_ns;    /* LEASE.ACQUIRE: the lease's time to live */
    int64_t limit;     /* fail-open: the capacity reported */
    int64_t quantity;  /* CELL: 0 for a peek */
    int64_t t_ns;      /* CELL: the emission interval */
    int64_t units;     /* THROTTLE, LEASE.ACQUIRE: the units asked (rcounters_limit) */
    int peek;          /* THROTTLE: a peek, which the counters do not count */
    rlim_result res;   /* the decoded answer */
    rstore_peek_fn fn; /* rstore_peek_then: the answer goes to fn, no slot (c is NULL) */
    void *fn_arg;
    int failed; /* Redis Cluster: its master's call failed (rbatch.part_why) */
} rstore_wait;

typedef struct rstore rstore;
typedef struct rgroup rgroup;

typedef struct rbatch {
    rstore_call base; /* first: the FIFO holds rstore_call pointers */
    rstore *st;
    rlim_batch *rb; /* the encoded requests: Redis */
    pgl_batch *pb;  /* or PostgreSQL */
    rstore_wait *w; /* one per request, in order */
    size_t n, cap;
    sluice_decision *dec; /* the decoded links' decisions */
    size_t ndec, deccap;
    char *arena; /* THROTTLE names */
    size_t alen, acap;
    struct rbatch *next;  /* spare */
    struct rbatch *tnext; /* the turn's batches (rstore.cur), in creation order */
    int slot;             /* Redis Cluster: the slot of its first request (else 0) */
    /* Redis Cluster: slots[i] is request i's slot. When it is sent (send_groups), its requests
     * are grouped by the master of their slot (rcl_group, rcl_split by gkey): group g's requests
     * are order[groups[g].first ..] and go as one script call (groups[g].m), across slots when
     * they are in several; the batch is answered when every group is (pending). cmds hold the
     * single-slot commands (a group of one slot, or the parts of a split call: part p of a group
     * is cmds[first + p]), part_why the first failure of a group or part. */
    int *slots, *gkey, *gslot;
    size_t *order, *scratch;
    rcl_span *spans;
    rlim_cmd *cmds;
    size_t slotcap; /* entries of slots, gkey, gslot, order, scratch, spans and cmds */
    rgroup *groups;
    size_t capgroups;
    size_t pending;
    char part_why[256];
} rbatch;

/* One master's share of a Redis Cluster batch: one script call (rcl_multi). */
struct rgroup {
    rcl_multi m;
    rbatch *b;
    size_t first; /* its requests: b->order[first .. first + m.n) */
    rlim_cmd cmd; /* its command across slots */
};

struct rstore {
    server *s;
    config_store_kind kind;
    rconn *conn;                          /* Redis */
    rcluster *cl;                         /* or Redis Cluster */
    rpg *pg;                              /* or PostgreSQL: its connections (rstore_pg.h) */
    char url[CONFIG_STORE_HOST_MAX + 64]; /* the URL, for INFO and messages */
    config_store_url u;
    int fail_open;
    int64_t timeout_ms;
    int replicas;                /* --store-replicas: a task write waits for this many (0: none) */
    int64_t replicas_timeout_ms; /* WAIT's timeout, below timeout_ms */
    /* The one WAIT in flight (rstore_call's replicas): calls sent while it is are covered by the
     * next one, sent when it answers. */
    rconn_call wait;
    rcl_call cwait; /* Redis Cluster: the WAIT, sent to the queue slot's master */
    const char *wait_argv[3];
    size_t wait_argvlen[3];
    char wait_n[24], wait_ms[24];
    int wait_busy;          /* the WAIT is in flight */
    int wait_pending;       /* calls wait for the next WAIT */
    uint64_t wait_gen_sent; /* the generation of the WAIT in flight */
    uint64_t wait_gen_next; /* the generation of the next one */
    int audit;
    int closed;
    /* The turn's batches, NULL until its first request: one batch on Redis and on Redis Cluster
     * (where it leaves as one script call per master, send_groups, and its replies are applied
     * together, so a client's replies are filled in its order); on PostgreSQL one per lane
     * (open[lane] takes the lane's requests; a client keeps its lane while it waits for a reply,
     * rstore_pg.h). Sent in this order. */
    rbatch *cur, *cur_tail;
    rbatch **open;            /* PostgreSQL: per lane, the batch taking its requests */
    rbatch *added;            /* the batch the last request went to */
    rstore_call *head, *tail; /* sent (limits and tasks), oldest first */
    rbatch *spare;
    size_t nspare;
    rstore_stats stats;
    char logged_why[256];   /* the last failure logged, so an outage logs once per reason */
    uint64_t open_unlogged; /* fail-open grants not yet in a log line */
    int64_t open_logged_ns;
    rtag_map queued; /* Redis Cluster: the limits the types name, in the queue's slot */
};

static inline rstore *state_of(const server *s)
{
    return s->rstore_state;
}

/* Shared by rstore.c (batches, replies, calls, requests) and rstore_life.c (opening, closing,
 * figures). */

/* Applies the answered calls at the head of the FIFO to their clients, in order. */
void rstore_drain(rstore *st);

/* Sends the turn's batches (and the held-back ones PostgreSQL's lanes may send now). */
void rstore_send_batch(rstore *st);

void rstore_batch_free(rbatch *b);

/* Why the store cannot be used now, for messages ("stopping", a connection's last error...). */
const char *rstore_down_why(const rstore *st);

/* 1 when the store refused this node for good (PostgreSQL: a newer schema). */
int rstore_refused(const rstore *st);

/* 1 when the store can take calls now. */
int rstore_is_up(const rstore *st);

/* Redis Cluster: which limits live in the queue's slot, read once from the file at start (a
 * reload may not change them, rtag_cluster_moves). 0 or SLUICE_ENOMEM; 0 on other stores. */
int rstore_build_queued(rstore *st);

#endif
