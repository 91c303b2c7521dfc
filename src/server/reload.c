/* SPDX-License-Identifier: MIT */
/*
 * CONFIG RELOAD off the loop: see reload.h for the three steps and what clients see.
 *
 * Invariants:
 *   - at most one reload is in flight (server.reload_job); the worker of its prepare step reads
 *     only the file, its own plan and server.config, which only a switch writes;
 *   - a plan that fails to prepare changed nothing; a plan is switched in one loop callback, so
 *     no decision sees part of it;
 *   - server.config_version is the engine's limits version right after the configuration in
 *     force was installed: while they are equal, every limit server.config declares is live
 *     exactly as declared there.
 */
#include "server/reload.h"

#include <stdio.h>
#include <string.h>

#include <uv.h>

#include "base/alloc.h"
#include "config/config_store.h"
#include "server/commands.h"
#include "server/durable.h"
#include "server/log.h"
#include "server/rdefs.h"
#include "server/rtag.h"
#include "sluice/error.h"

/* Limits whose LIMIT.SET override a reload replaced, named in its reply (at most). */
#define RELOAD_NAMED 16

/* What a limit of the new file is, against the file loaded last. */
enum {
    KIND_SAME = 0, /* declared there alike: nothing to do while no limit changed since */
    KIND_MODE,     /* declared there with another mode only: a mode switch keeps its state */
    KIND_CHANGED,  /* declared there otherwise: built, to replace the live one */
    KIND_NEW       /* not declared there: built; the live engine may still have it */
};

/* A reload in the making, then its leftovers. Owned by whoever holds it; plan_free frees it on
 * any thread. */
typedef struct reload_plan {
    sluice_config nc;            /* the new file (zeroed once it is in force) */
    unsigned char *kind;         /* n KIND_* */
    size_t n;                    /* entries of kind and builds: nc.nlimits (nc is zeroed once in
                                  * force, these stay) */
    sluice_limit_build **builds; /* n: CHANGED and NEW limits built; after the switch,
                                  * what the engine handed back (replaced cores) or an unused
                                  * build; NULL elsewhere */
    size_t nbuilt;               /* builds made (room the switch reserves) */
    const char **removed;        /* names the previous file declares and nc does not (pointers
                                  * into server.config, valid until the switch replaces it) */
    size_t nremoved;
    sluice_config old; /* after the switch: the previous file, to free */
} reload_plan;

static void plan_free(reload_plan *p)
{
    if (p->builds)
        for (size_t i = 0; i < p->n; i++)
            sluice_limit_build_free(p->builds[i]);
    alloc_free(p->builds);
    alloc_free(p->kind);
    alloc_free(p->removed);
    sluice_config_clear(&p->nc);
    sluice_config_clear(&p->old);
    memset(p, 0, sizeof *p);
}

/* plan_prepare's shared: 0 (embedded store), 1 (a shared store), 2 (a Redis Cluster),
 * 3 (PostgreSQL). */
static int reload_shared(const server *s)
{
    if (!s->opt.store_url)
        return 0;
    if (config_store_is_postgres(s->opt.store_url))
        return 3;
    return config_store_is_cluster(s->opt.store_url) ? 2 : 1;
}

/* The prepare step: everything that reads the file or allocates for it. prev is the file loaded
 * last (NULL: none), only read; shared is 1 when a shared store decides (--store), 2 when it is
 * a Redis Cluster, 3 when it is PostgreSQL. Touches no
 * engine. Returns 0, or an error with msg (then p holds nothing). */
static int plan_prepare(reload_plan *p, const sluice_config *prev, const char *path, int shared,
                        char *msg, size_t msglen)
{
    const char *why;
    char reason[300], cluster_why[512];
    size_t n;
    int rc;

    memset(p, 0, sizeof *p);
    rc = sluice_config_load(path, &p->nc, msg, msglen);
    if (rc != 0)
        return rc;
    /* The shared store's script enforces every limit: a dry run there would be a silent lie. */
    if ((shared || p->nc.store.url) &&
        (why = server_store_unsupported(
             &p->nc, shared ? shared == 3 : config_store_is_postgres(p->nc.store.url))) != NULL) {
        snprintf(msg, msglen, "%s: %s", path, why);
        rc = SLUICE_EINVAL;
        goto fail;
    }
    /* Redis Cluster (shared 2: the running store is one): a limit the types name lives in the
     * queue's slot (rtag.h), and a file that moves one would strand its state. */
    if (shared == 2 && (why = rtag_cluster_moves(prev, &p->nc, cluster_why, sizeof cluster_why))) {
        snprintf(msg, msglen, "%s: %s", path, why);
        rc = SLUICE_EINVAL;
        goto fail;
    }
    n = p->nc.nlimits;
    rc = SLUICE_ENOMEM;
    if (n > 0) {
        p->kind = alloc_calloc(n, sizeof *p->kind);
        p->builds = alloc_calloc(n, sizeof *p->builds);
        if (!p->kind || !p->builds)
            goto fail_nomem;
        p->n = n;
    }
    for (size_t i = 0; i < n; i++) {
        const sluice_limit_policy *np = &p->nc.limits[i];
        const sluice_limit_policy *pp = prev ? sluice_config_find_limit(prev, np->name) : NULL;

        if (pp && server_policy_eq(pp, np)) {
            p->kind[i] = KIND_SAME;
            continue;
        }
        if (pp && server_policy_mode_only(pp, np)) {
            p->kind[i] = KIND_MODE;
            continue;
        }
        p->kind[i] = pp ? KIND_CHANGED : KIND_NEW;
        rc = sluice_limit_build_new(np, &p->builds[i], reason, sizeof reason);
        if (rc != 0) {
            snprintf(msg, msglen, "%s:%d: limit \"%s\": %s", path, np->line, np->name,
                     reason[0] ? reason : sluice_strerror(rc));
            goto fail;
        }
        p->nbuilt++;
    }
    if (prev && prev->nlimits > 0) {
        p->removed = alloc_calloc(prev->nlimits, sizeof *p->removed);
        if (!p->removed)
            goto fail_nomem;
        for (size_t i = 0; i < prev->nlimits; i++)
            if (!sluice_config_find_limit(&p->nc, prev->limits[i].name))
                p->removed[p->nremoved++] = prev->limits[i].name;
    }
    return 0;

fail_nomem:
    snprintf(msg, msglen, "%s: %s", path, sluice_strerror(SLUICE_ENOMEM));
fail:
    plan_free(p);
    return rc;
}

static int str_eq(const char *a, const char *b)
{
    return a && b ? strcmp(a, b) == 0 : a == b;
}

/* Sets the new file's limit i whose live version may be anything (old: the live limit or NULL,
 * pp: the previous file's or NULL), as a reload always did: an equal live limit keeps its state,
 * a mode alone is switched, anything else is replaced (by the build when there is one). Counts
 * in *changed and names LIMIT.SET's changes in overrides. Returns 0 or an engine error. */
static int switch_compared(server *s, reload_plan *p, size_t i, const sluice_limit_policy *old,
                           const sluice_limit_policy *pp, int64_t now, size_t *changed,
                           const char **overrides, size_t *noverrides, char *msg, size_t msglen)
{
    const sluice_limit_policy *np = &p->nc.limits[i];
    int rc;

    if (old && server_policy_eq(old, np))
        return 0;
    /* The live limit is neither the file's old nor its new one: LIMIT.SET changed it. The file
     * wins; the reply names what it replaced. */
    if (old && !(pp && server_policy_eq(old, pp)) && *noverrides < RELOAD_NAMED)
        overrides[(*noverrides)++] = np->name;
    if (old && server_policy_mode_only(old, np)) {
        /* Only the mode changed: the limit keeps its budget (and its lease handles). */
        rc = sluice_engine_set_limit_mode(s->engine, np->name, np->mode, now);
        if (rc != 0)
            return rc;
        (*changed)++;
        return 0;
    }
    if (p->builds[i])
        rc = sluice_engine_install_limit(s->engine, &p->builds[i], now);
    else
        rc = sluice_engine_set_limit(s->engine, np, now, msg, msglen);
    if (rc != 0)
        return rc;
    cmd_limit_bump(s, np->name);
    (*changed)++;
    return 0;
}

/* The switch step, on the loop: makes p's file the configuration in force (see reload.h), and
 * leaves in p what is to be freed. Returns 0 with msg naming the limits whose LIMIT.SET changes
 * the file replaced (or empty), or an error with msg: SLUICE_ENOMEM before anything changed, or
 * (out of memory only) after part of it was applied, which is logged. */
static int plan_switch(server *s, reload_plan *p, const char *path, char *msg, size_t msglen)
{
    sluice_config *nc = &p->nc;
    const sluice_config *prev = s->has_config ? &s->config : NULL;
    size_t changed = 0, removed = 0, noverrides = 0;
    const char *overrides[RELOAD_NAMED];
    int64_t now = server_now(s);
    /* No limit changed since the file in force was installed: its diff with the new file is
     * the whole change. */
    int exact = prev && s->config_version == sluice_engine_limits_version(s->engine);
    int rc;

    msg[0] = '\0';
    /* The only allocation of the limits' switch: room for every new name at once. */
    rc = sluice_engine_reserve_limits(s->engine, p->nbuilt);
    if (rc != 0) {
        snprintf(msg, msglen, "%s: %s", path, sluice_strerror(rc));
        return rc;
    }
    if (prev && memcmp(&nc->engine, &prev->engine, sizeof(nc->engine)) != 0)
        log_warn("config %s: the engine: section changed; it takes effect at the next start", path);
    if (sluice_engine_enabled(s->engine) == nc->disabled)
        log_warn("config %s: limits are %s (enabled: %s)", path,
                 nc->disabled ? "off: every limit lets everything through, still counting" : "on",
                 nc->disabled ? "false" : "true");
    /* The global switch is live: it keeps every limit's state. */
    sluice_engine_set_enabled(s->engine, !nc->disabled, now);
    if (prev &&
        (!str_eq(nc->store.url, prev->store.url) || nc->store.failure != prev->store.failure ||
         nc->store.timeout_ns != prev->store.timeout_ns))
        log_warn("config %s: the store: section changed; it takes effect at the next start", path);

    for (size_t i = 0; i < nc->nlimits; i++) {
        const sluice_limit_policy *np = &nc->limits[i], *pp;

        if (exact && p->kind[i] == KIND_SAME)
            continue;
        if (exact && p->kind[i] == KIND_MODE) {
            rc = sluice_engine_set_limit_mode(s->engine, np->name, np->mode, now);
            if (rc != 0)
                goto partial;
            changed++;
            continue;
        }
        if (exact && p->kind[i] == KIND_CHANGED) {
            rc = sluice_engine_install_limit(s->engine, &p->builds[i], now);
            if (rc != 0)
                goto partial;
            cmd_limit_bump(s, np->name);
            changed++;
            continue;
        }
        /* A name the previous file lacks (KIND_NEW: no need to look) may still be live: added
         * by LIMIT.SET, or left by an earlier removal a type refused. */
        pp = prev && p->kind[i] != KIND_NEW ? sluice_config_find_limit(prev, np->name) : NULL;
        rc = switch_compared(s, p, i, sluice_engine_get_limit(s->engine, np->name, NULL), pp, now,
                             &changed, overrides, &noverrides, msg, msglen);
        if (rc != 0)
            goto partial;
    }
    for (size_t i = 0; i < nc->ntypes; i++) {
        rc = sluice_engine_set_type(s->engine, &nc->types[i], now, msg, msglen);
        if (rc != 0)
            goto partial;
    }
    for (size_t i = 0; i < p->nremoved; i++) {
        const char *name = p->removed[i];

        rc = sluice_engine_del_limit(s->engine, name, now);
        if (rc == 0) {
            cmd_limit_bump(s, name);
            removed++;
        } else if (rc == SLUICE_ESTATE) {
            log_warn("config %s: limit \"%s\" is no longer declared but a type still uses "
                     "it; it stays",
                     path, name);
        }
    }
    /* The previous file goes with the leftovers (removed[] points into it). */
    if (s->has_config)
        p->old = s->config;
    s->config = *nc;
    memset(nc, 0, sizeof *nc);
    s->has_config = 1;
    s->config_version = sluice_engine_limits_version(s->engine);
    server_apply_budget(s);
    /* On a shared store the shared changes are applied again over the file (below): none was
     * replaced. */
    if (rdefs_active(s))
        noverrides = 0;
    for (size_t i = 0, at = 0; i < noverrides && at < msglen; i++) {
        int n = snprintf(msg + at, msglen - at, "%s%s", i ? ", " : "", overrides[i]);

        if (n < 0)
            break;
        at += (size_t)n;
    }
    if (noverrides)
        log_warn("config %s: replaced LIMIT.SET changes of limits it declares: %s", path, msg);
    log_info("config %s loaded: %zu limits (%zu changed, %zu removed), %zu types", path,
             s->config.nlimits, changed, removed, s->config.ntypes);
    /* On a shared store the nodes' shared LIMIT.* changes stay over the file (rdefs.h). */
    rdefs_reapply(s);
    server_engine_changed(s);
    return 0;

partial:
    /* Only running out of memory can fail here: the file was checked and built off the loop. */
    if (msg[0] == '\0')
        snprintf(msg, msglen, "%s", sluice_strerror(rc));
    log_error("config %s: applied in part: %s", path, msg);
    return rc;
}

int server_load_config(server *s, const char *path, char *msg, size_t msglen)
{
    reload_plan p;
    int rc;

    if (reload_running(s)) {
        snprintf(msg, msglen, "a reload is in progress");
        return SLUICE_EBUSY;
    }
    rc = plan_prepare(&p, s->has_config ? &s->config : NULL, path, reload_shared(s), msg, msglen);
    if (rc != 0)
        return rc;
    rc = plan_switch(s, &p, path, msg, msglen);
    plan_free(&p);
    return rc;
}

/* ---- Off the loop ------------------------------------------------------------------------ */

/* One reload in flight, then the freeing of what it left (the same object, queued twice). */
typedef struct reload_job {
    uv_work_t req;
    server *s;
    conn *c;       /* the client waiting for the answer; NULL once it left, or when none */
    char *path;    /* a copy: the work does not read the server's options */
    int shared;    /* a shared store decides (--store): plan_prepare's */
    int freeing;   /* 0: prepare queued; 1: the leftovers' free queued */
    int rc;        /* what prepare returned */
    reload_plan p; /* prepared, then the leftovers */
    char msg[512]; /* prepare's error, then the reply's detail */
} reload_job;

/* The server's job in flight, in server.reload_job. */
int reload_running(const server *s)
{
    return s->reload_job != NULL;
}

static void job_free(reload_job *j)
{
    plan_free(&j->p);
    alloc_free(j->path);
    alloc_free(j);
}

static void work_free(uv_work_t *req)
{
    reload_job *j = req->data;

    plan_free(&j->p);
}

static void after_free(uv_work_t *req, int status)
{
    (void)status;
    job_free(req->data);
}

/* The client that is waiting went away: the reload goes on, and only the log will say. */
static void on_cancel(conn *c, void *arg)
{
    reload_job *j = arg;

    (void)c;
    j->c = NULL;
}

/* The server is stopping while the reload is prepared: it will not be applied. */
static void on_stop(conn *c, void *arg)
{
    reload_job *j = arg;

    resp_error(conn_out(c), "CONFIG", "the server is stopping: the reload was not applied");
    j->c = NULL;
    conn_unblock(c);
}

static const conn_block_ops reload_block_ops = {NULL, on_stop, on_cancel, 0};

static void work_prepare(uv_work_t *req)
{
    reload_job *j = req->data;

    /* server.config is read, never written, while this job is the server's reload_job. */
    j->rc = plan_prepare(&j->p, j->s->has_config ? &j->s->config : NULL, j->path, j->shared, j->msg,
                         sizeof j->msg);
}

/* The reply to CONFIG RELOAD, once the reload is in force (rc 0) or refused. */
static void reply(conn *c, int rc, const char *msg)
{
    if (rc != 0) {
        resp_error(conn_out(c), "CONFIG", "%s", msg[0] ? msg : sluice_strerror(rc));
    } else if (msg[0]) {
        /* The file wins over LIMIT.SET for the limits it declares: say which were replaced. */
        char line[600];

        snprintf(line, sizeof line, "OK the file replaced LIMIT.SET changes of: %s", msg);
        resp_simple(conn_out(c), line);
    } else {
        resp_simple(conn_out(c), "OK");
    }
}

static void after_prepare(uv_work_t *req, int status)
{
    reload_job *j = req->data;
    server *s = j->s;
    conn *c = j->c;
    uint64_t changes = durable_changes(s);
    size_t mark = c ? conn_out(c)->len : 0;
    int rc = j->rc;

    s->reload_job = NULL;
    if (status != 0 && rc == 0) {
        rc = SLUICE_EINVAL;
        snprintf(j->msg, sizeof j->msg, "the reload was cancelled");
    }
    if (rc == 0 && s->stopping) {
        rc = SLUICE_EINVAL;
        snprintf(j->msg, sizeof j->msg, "the server is stopping: the reload was not applied");
    } else if (rc == 0) {
        rc = plan_switch(s, &j->p, j->path, j->msg, sizeof j->msg);
    }
    if (rc != 0)
        log_warn("CONFIG RELOAD refused: %s", j->msg[0] ? j->msg : sluice_strerror(rc));
    if (c) {
        reply(c, rc, j->msg);
        /* A reload that changed limits is answered after the turn's commit, as any change. */
        durable_after_command(c, changes, mark);
        conn_unblock(c);
    }
    server_signal_ready(s);
    /* The previous file and the replaced cores are freed off the loop too. */
    j->freeing = 1;
    if (uv_queue_work(&s->loop, &j->req, work_free, after_free) != 0)
        job_free(j);
}

void reload_start(server *s, conn *c)
{
    reload_job *j;
    int rc;

    if (!s->opt.config_path) {
        resp_error(conn_out(c), "CONFIG",
                   "no configuration file: the server was started without --config");
        return;
    }
    if (reload_running(s)) {
        resp_error(conn_out(c), "BUSY",
                   "a CONFIG RELOAD is in progress: retry once it has been answered");
        return;
    }
    j = alloc_calloc(1, sizeof *j);
    if (j)
        j->path = alloc_memdup0(s->opt.config_path, strlen(s->opt.config_path));
    if (!j || !j->path) {
        alloc_free(j);
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return;
    }
    j->s = s;
    j->c = c;
    j->shared = reload_shared(s);
    j->req.data = j;
    if (conn_block(c, 0, &reload_block_ops, j) != 0) {
        /* Only a client already blocked or closing: it cannot be answered later. */
        job_free(j);
        return;
    }
    rc = uv_queue_work(&s->loop, &j->req, work_prepare, after_prepare);
    if (rc != 0) {
        resp_error(conn_out(c), "CONFIG", "cannot start the reload: %s", uv_strerror(rc));
        conn_unblock(c);
        job_free(j);
        return;
    }
    s->reload_job = j;
}
