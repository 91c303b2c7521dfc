/* SPDX-License-Identifier: MIT */
/*
 * The PostgreSQL transport of the shared store: the node's lanes, routing and the wake-up
 * NOTIFY (rstore_pg.h says what and why).
 *
 * Invariants:
 * - lanes[0] exists from rpg_new on; lanes[1..n) exist once lanes[0] has been UP (started);
 * - in_flight[k] counts rstore's calls sent on lane k and not answered yet (each answered
 *   exactly once by pg_conn, so it never goes below 0); the NOTIFY is not counted;
 * - at most one NOTIFY is in flight (notify_busy); notify_pending asks for one more after it.
 */
#include "server/rstore_pg.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <libpq-fe.h>

#include "base/alloc.h"
#include "config/config_store.h"
#include "server/log.h"
#include "server/rcounters.h"
#include "server/rdefs.h"
#include "server/rrecur.h"
#include "server/rtasks.h"
#include "sluice/error.h"
#include "store/pg_batch.h"
#include "store/pg_limits.h"
#include "store/pg_recur.h"
#include "store/pg_schema.h"
#include "store/pg_tasks.h"
#include "store/shared_defs.h"

/* The wake-up, sent by the node after a call that made work ready (007_pgconns.sql). */
#define RPG_NOTIFY_STMT "sluice_notify"
#define RPG_NOTIFY_SQL  "SELECT pg_notify('" PGT_WAKE_CHANNEL "', '1')"
/* The probe of an idle lane when another lane timed out (on_state). */
#define RPG_PROBE_STMT "sluice_probe"
#define RPG_PROBE_SQL  "SELECT 1"

#define RPG_URL_MAX (CONFIG_STORE_HOST_MAX + 64)

/* One lane's side of a callback: which rpg, which lane. */
typedef struct rpg_lane_arg {
    rpg *pg;
    int lane;
} rpg_lane_arg;

struct rpg {
    server *s;
    int n;                                  /* lanes, as configured */
    int started;                            /* lanes[1..n) were created */
    pgconn *lanes[RPG_CONNECTIONS_MAX];     /* NULL until created */
    rpg_lane_arg args[RPG_CONNECTIONS_MAX]; /* each lane's callback argument */
    uint64_t in_flight[RPG_CONNECTIONS_MAX];
    uint64_t lost[RPG_CONNECTIONS_MAX];   /* times the lane went down after being UP */
    int was_lane_up[RPG_CONNECTIONS_MAX]; /* the lane is UP, or its last attempt has not
                                           * failed since it was: a loss logs once */
    /* A probe per lane: when one lane's call times out, the server may have stopped answering
     * (frozen, cut off): an idle lane would go on looking UP until a call found out, so each
     * gets a probe with the same deadline. */
    pgconn_call probe[RPG_CONNECTIONS_MAX];
    int probing[RPG_CONNECTIONS_MAX];
    char *conninfo;
    char url[RPG_URL_MAX];
    int64_t timeout_ms;
    int fail_open;
    int stopping;         /* rpg_free runs: nothing more is sent */
    int was_up;           /* the store (some lane) was UP at the last change */
    char logged_why[256]; /* the last outage logged: an outage logs once per reason */
    /* The NOTIFY. */
    pgconn_call notify;
    int notify_lane;
    int notify_busy;
    int notify_pending;
    uint64_t notifies_sent;
};

/* Statements prepared on every lane. */
static const pgconn_stmt pg_stmts[] = {
    {RPG_LIMITS_STMT, PGL_CALL_SQL, PGL_CALL_NPARAMS, 0},
    {RTASKS_PG_STMT, PGT_CALL_SQL, PGT_CALL_NPARAMS, PGT_CALL_RESULT_FORMAT},
    {RRECUR_PG_STMT, PGR_CALL_SQL, PGR_CALL_NPARAMS, PGR_CALL_RESULT_FORMAT},
    {RCOUNTERS_PG_STMT, RCOUNTERS_PG_SQL, RCOUNTERS_PG_NPARAMS, 0},
    {SDEFS_PG_GET_STMT, SDEFS_PG_GET_SQL, SDEFS_PG_GET_NPARAMS, 0},
    {SDEFS_PG_SET_STMT, SDEFS_PG_SET_SQL, SDEFS_PG_SET_NPARAMS, 0},
    {SDEFS_PG_RESET_STMT, SDEFS_PG_RESET_SQL, SDEFS_PG_RESET_NPARAMS, 0},
    {SDEFS_PG_RESET_ALL_STMT, SDEFS_PG_RESET_ALL_SQL, SDEFS_PG_RESET_ALL_NPARAMS, 0},
    {SDEFS_PG_SPEND_STMT, SDEFS_PG_SPEND_SQL, SDEFS_PG_SPEND_NPARAMS, 0},
    {RPG_NOTIFY_STMT, RPG_NOTIFY_SQL, 0, 0},
    {RPG_PROBE_STMT, RPG_PROBE_SQL, 0, 0},
};

/* ---- Lanes ------------------------------------------------------------------------------- */

static int lane_up(const rpg *pg, int k)
{
    return pg->lanes[k] && pgconn_get_state(pg->lanes[k]) == PGCONN_UP;
}

int rpg_count(const rpg *pg)
{
    return pg->n;
}

int rpg_up(const rpg *pg)
{
    for (int k = 0; k < pg->n; k++)
        if (lane_up(pg, k))
            return 1;
    return 0;
}

int rpg_all_up(const rpg *pg)
{
    for (int k = 0; k < pg->n; k++)
        if (!lane_up(pg, k))
            return 0;
    return 1;
}

int rpg_refused(const rpg *pg)
{
    return pgconn_get_state(pg->lanes[0]) == PGCONN_REFUSED;
}

const char *rpg_why(const rpg *pg)
{
    const char *e = pgconn_last_error(pg->lanes[0]);

    return e[0] ? e : pgconn_state_name(pgconn_get_state(pg->lanes[0]));
}

const char *rpg_state_name(const rpg *pg)
{
    return rpg_up(pg) ? pgconn_state_name(PGCONN_UP)
                      : pgconn_state_name(pgconn_get_state(pg->lanes[0]));
}

const char *rpg_last_error(const rpg *pg)
{
    return pgconn_last_error(pg->lanes[0]);
}

int rpg_listening(const rpg *pg)
{
    return lane_up(pg, 0);
}

int rpg_may_send(const rpg *pg, int lane)
{
    return lane < 0 || lane >= pg->n || pg->in_flight[lane] == 0;
}

static int create_lane(rpg *pg, int k);

static void on_probe_answer(void *arg, const PGresult *result, const char *why)
{
    rpg_lane_arg *a = arg;

    (void)result;
    (void)why; /* a probe that timed out has dropped its lane: that was its purpose */
    a->pg->probing[a->lane] = 0;
}

/* Lane `timed_out` got no answer in time: probes every other lane that is UP and idle. */
static void probe_others(rpg *pg, int timed_out)
{
    for (int k = 0; k < pg->n; k++) {
        pgconn_call *p = &pg->probe[k];
        pgconn_stats cs;

        if (k == timed_out || pg->probing[k] || !lane_up(pg, k))
            continue;
        pgconn_get_stats(pg->lanes[k], &cs);
        if (cs.in_flight > 0)
            continue; /* its oldest call's deadline tells already */
        memset(p, 0, sizeof *p);
        p->stmt = RPG_PROBE_STMT;
        p->fn = on_probe_answer;
        p->arg = &pg->args[k];
        if (pgconn_send(pg->lanes[k], p) == 0)
            pg->probing[k] = 1;
    }
}

static void on_state(void *arg, pgconn_state state, const char *why)
{
    rpg_lane_arg *a = arg;
    rpg *pg = a->pg;
    int up = rpg_up(pg);

    if (state == PGCONN_UP) {
        if (!pg->was_up) {
            pgconn_stats cs;

            pgconn_get_stats(pg->lanes[a->lane], &cs);
            log_info("store %s: up (schema version %d%s, %d connection%s)", pg->url, PGS_VERSION,
                     cs.schema_from != PGS_VERSION ? ", migrated" : "", pg->n,
                     pg->n == 1 ? "" : "s");
        } else if (pg->lost[a->lane] > 0) {
            log_info("store %s: connection %d of %d up again", pg->url, a->lane + 1, pg->n);
        }
        pg->was_up = 1;
        pg->was_lane_up[a->lane] = 1;
        pg->logged_why[0] = '\0';
        if (!pg->started) {
            pg->started = 1;
            for (int k = 1; k < pg->n; k++)
                if (create_lane(pg, k) != 0)
                    log_error("store %s: connection %d of %d: out of memory", pg->url, k + 1,
                              pg->n);
        }
        /* Notifications are lost while lane 0 is away, and a new lane may serve waiters whose
         * lane was down: they look again. */
        rtasks_store_up(pg->s);
        return;
    }
    if (state == PGCONN_REFUSED) {
        log_error("store %s: refused: %s", pg->url, why ? why : "");
    } else if (state == PGCONN_DOWN && why && pg->was_lane_up[a->lane]) {
        /* Lost after being UP (its failed attempts to come back are not logged again). */
        pg->was_lane_up[a->lane] = 0;
        pg->lost[a->lane]++;
        if (strncmp(why, "timeout", 7) == 0 && !pg->stopping)
            probe_others(pg, a->lane);
        up = rpg_up(pg);
        if (up)
            log_warn("store %s: connection %d of %d down: %s; its requests go to the others "
                     "until it is back",
                     pg->url, a->lane + 1, pg->n, why);
    }
    if (up || !why || strcmp(why, pg->logged_why) == 0) {
        pg->was_up = up;
        return;
    }
    pg->was_up = 0;
    snprintf(pg->logged_why, sizeof pg->logged_why, "%s", why);
    log_warn("store %s: down: %s; until it is back decisions %s", pg->url, why,
             pg->fail_open ? "are granted (store_failure: open)"
                           : "answer -STOREDOWN (store_failure: closed)");
}

static void on_notify(void *arg, const char *payload)
{
    rpg_lane_arg *a = arg;

    /* "defs": a node changed the shared limit definitions (005_overrides.sql). */
    if (payload && strcmp(payload, "defs") == 0)
        rdefs_notify(a->pg->s);
    else
        rtasks_notify(a->pg->s);
}

static int create_lane(rpg *pg, int k)
{
    pgconn_options o;

    memset(&o, 0, sizeof(o));
    o.conninfo = pg->conninfo;
    o.timeout_ms = pg->timeout_ms;
    o.migrate = 1; /* on every (re)connect: a newer schema is refused by each lane */
    o.stmts = pg_stmts;
    o.nstmts = sizeof pg_stmts / sizeof pg_stmts[0];
    o.on_state = on_state;
    pg->args[k].pg = pg;
    pg->args[k].lane = k;
    o.arg = &pg->args[k];
    if (k == 0) {
        o.listen = PGT_WAKE_CHANNEL;
        o.on_notify = on_notify;
    }
    return pgconn_new(&pg->s->loop, &o, &pg->lanes[k]);
}

int rpg_new(server *s, const rpg_options *o, rpg **out)
{
    rpg *pg;
    int rc;

    *out = NULL;
    if (!o || !o->conninfo || o->connections < 1 || o->connections > RPG_CONNECTIONS_MAX)
        return SLUICE_EINVAL;
    pg = alloc_calloc(1, sizeof(*pg));
    if (!pg)
        return SLUICE_ENOMEM;
    pg->conninfo = alloc_memdup0(o->conninfo, strlen(o->conninfo));
    if (!pg->conninfo) {
        alloc_free(pg);
        return SLUICE_ENOMEM;
    }
    pg->s = s;
    pg->n = o->connections;
    pg->timeout_ms = o->timeout_ms;
    pg->fail_open = o->fail_open;
    snprintf(pg->url, sizeof pg->url, "%s", o->url ? o->url : "");
    rc = create_lane(pg, 0);
    if (rc != 0) {
        alloc_free(pg->conninfo);
        alloc_free(pg);
        return rc;
    }
    *out = pg;
    return 0;
}

void rpg_free(rpg *pg)
{
    if (!pg)
        return;
    pg->stopping = 1;
    for (int k = 0; k < pg->n; k++) {
        pgconn_free(pg->lanes[k]); /* answers what is in flight ("stopped") */
        pg->lanes[k] = NULL;
    }
    alloc_free(pg->conninfo);
    alloc_free(pg);
}

/* ---- Routing and sending ----------------------------------------------------------------- */

/* The first UP lane from k on (wrapping), or k when none is. */
static int up_from(const rpg *pg, int k)
{
    for (int i = 0; i < pg->n; i++) {
        int j = (k + i) % pg->n;

        if (lane_up(pg, j))
            return j;
    }
    return k;
}

int rpg_lane(rpg *pg, conn *c, int decision)
{
    int k;

    if (!c)
        return up_from(pg, 0);
    if (c->ndeferred > 0 && c->store_lane >= 0 && c->store_lane < pg->n &&
        lane_up(pg, c->store_lane))
        k = c->store_lane; /* its earlier request may still run there: after it */
    else
        k = up_from(pg, decision ? 0 : (int)(c->id % (uint64_t)pg->n));
    c->store_lane = k;
    return k;
}

int rpg_send(rpg *pg, int *lane, pgconn_call *call)
{
    int k = *lane >= 0 && *lane < pg->n ? *lane : 0, rc;

    /* A lane that went down answered every call it had: nothing of the clients of this call
     * still runs there, so another lane may take it. */
    if (!lane_up(pg, k))
        k = up_from(pg, k);
    if (!pg->lanes[k])
        return SLUICE_ESTATE;
    rc = pgconn_send(pg->lanes[k], call);
    if (rc == 0)
        pg->in_flight[k]++;
    *lane = k;
    return rc;
}

static void send_notify(rpg *pg);

static void on_notify_answer(void *arg, const PGresult *result, const char *why)
{
    rpg *pg = arg;

    (void)result;
    (void)why; /* a lost NOTIFY: the waiters' poll finds the work (rtasks.h) */
    pg->notify_busy = 0;
    if (pg->notify_pending)
        send_notify(pg);
}

static void send_notify(rpg *pg)
{
    int k = up_from(pg, pg->notify_lane);

    pg->notify_pending = 0;
    if (pg->stopping || !pg->lanes[k])
        return;
    memset(&pg->notify, 0, sizeof pg->notify);
    pg->notify.stmt = RPG_NOTIFY_STMT;
    pg->notify.nparams = 0;
    pg->notify.values = NULL;
    pg->notify.fn = on_notify_answer;
    pg->notify.arg = pg;
    if (pgconn_send(pg->lanes[k], &pg->notify) == 0) {
        pg->notify_busy = 1;
        pg->notifies_sent++;
    }
}

void rpg_answered(rpg *pg, int lane, const pgconn_call *call, const struct pg_result *result)
{
    if (lane >= 0 && lane < pg->n && pg->in_flight[lane] > 0)
        pg->in_flight[lane]--;
    if (!result || !call->stmt ||
        (strcmp(call->stmt, RTASKS_PG_STMT) != 0 && strcmp(call->stmt, RRECUR_PG_STMT) != 0) ||
        !pgbatch_woke(result))
        return;
    /* On the lane that answered: it is UP, and its own call just committed. */
    pg->notify_lane = lane;
    if (pg->notify_busy)
        pg->notify_pending = 1;
    else
        send_notify(pg);
}

/* ---- Counters ---------------------------------------------------------------------------- */

void rpg_get_stats(const rpg *pg, pgconn_stats *sum, int *up)
{
    memset(sum, 0, sizeof(*sum));
    *up = 0;
    for (int k = 0; k < pg->n; k++) {
        pgconn_stats cs;

        if (!pg->lanes[k])
            continue;
        pgconn_get_stats(pg->lanes[k], &cs);
        sum->connects += cs.connects;
        sum->disconnects += cs.disconnects;
        sum->failed_connects += cs.failed_connects;
        sum->calls += cs.calls;
        sum->timeouts += cs.timeouts;
        sum->notifies += cs.notifies;
        sum->in_flight += cs.in_flight;
        if (k == 0)
            sum->schema_from = cs.schema_from;
        *up += lane_up(pg, k);
    }
}

void rpg_info_append(const rpg *pg, char *buf, size_t len)
{
    pgconn_stats sum;
    int up;
    size_t at = strlen(buf);

    rpg_get_stats(pg, &sum, &up);
    snprintf(buf + at, len - at,
             "store_connections:%d\r\nstore_connections_up:%d\r\nstore_notifies_sent:%" PRIu64
             "\r\nstore_notifies_received:%" PRIu64 "\r\n",
             pg->n, up, pg->notifies_sent, sum.notifies);
    for (int k = 0; k < pg->n; k++) {
        pgconn_stats cs;

        memset(&cs, 0, sizeof cs);
        if (pg->lanes[k])
            pgconn_get_stats(pg->lanes[k], &cs);
        at = strlen(buf);
        snprintf(buf + at, len - at,
                 "store_conn_%d:state=%s,calls=%" PRIu64 ",in_flight=%" PRIu64 ",connects=%" PRIu64
                 ",disconnects=%" PRIu64 ",failed_connects=%" PRIu64 ",timeouts=%" PRIu64
                 ",last_error=%s\r\n",
                 k, pg->lanes[k] ? pgconn_state_name(pgconn_get_state(pg->lanes[k])) : "none",
                 cs.calls, cs.in_flight, cs.connects, cs.disconnects, cs.failed_connects,
                 cs.timeouts, pg->lanes[k] ? pgconn_last_error(pg->lanes[k]) : "");
    }
}
