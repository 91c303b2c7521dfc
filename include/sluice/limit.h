/* SPDX-License-Identifier: MIT */
/*
 * Limits: the pure limiter core of sluice.
 *
 * A limit is one policy (a rate, a window, a concurrency cap or a quota) applied separately to each
 * key it is asked about. A sluice_limit owns the state of every key it tracks. Nothing here does
 * I/O or reads a clock: every call takes `now_ns`, nanoseconds since the Unix epoch (UTC) on the
 * caller's clock, and all decisions are integer arithmetic.
 *
 * Invariants:
 * - A key whose state carries no information (a rate key whose theoretical arrival time has
 *   passed, an empty window, no leases, an untouched quota period) is indistinguishable from a key
 *   never seen, so it may be forgotten at any time; memory is bounded by the active keys.
 * - Time never runs backwards inside a limit: a `now_ns` older than the newest one seen is clamped
 *   to it, so a clock step back neither locks a key out nor releases anything early.
 * - A denied request charges nothing.
 * - A read (SLUICE_PEEK, sluice_limit_estimate, sluice_limit_quota_spent, stats) changes nothing,
 *   not even the newest time seen.
 *
 * Time: pass a `now_ns` that never goes backwards. This is the one place in sluice where a
 * backwards `now` is corrected (the engine and the server pass time on as given): every call that
 * acts on a limit reads it as max(now_ns, the newest now_ns an acting call passed before), and
 * remembers that; a read computes the same max and remembers nothing. So a step back is read as
 * "no time passed": no key is locked out and nothing is released early, but budget is not
 * refilled either until the caller's clock passes the newest time again. A limit shared by the
 * engine and direct callers (THROTTLE) has one clock, the newest either of them passed.
 *
 * Workload: millions of decisions per second from one thread on up to millions of keys. A
 * sluice_limit is not thread-safe; callers serialise access (the server owns it from one loop).
 */
#ifndef SLUICE_LIMIT_H
#define SLUICE_LIMIT_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/export.h"

#ifdef __cplusplus
extern "C" {
#endif
SLUICE_API_BEGIN

#define SLUICE_NS_PER_MS  INT64_C(1000000)
#define SLUICE_NS_PER_SEC INT64_C(1000000000)

/* retry_after_ns of a denial that no amount of waiting can turn into a grant (more units than the
 * limit can ever hold, or a quota without a calendar period that is spent). */
#define SLUICE_NEVER INT64_MAX

/* Bounds checked by sluice_limit_def_validate(). */
#define SLUICE_MAX_PERMITS       INT64_C(1000000000) /* 10^9 units per period */
#define SLUICE_MAX_PERIOD_NS     (INT64_C(366) * 86400 * SLUICE_NS_PER_SEC) /* a (leap) year */
#define SLUICE_MAX_SLIDING_LIMIT INT64_C(100000) /* sliding windows keep one record per grant */

typedef enum sluice_limit_kind {
    SLUICE_RATE = 1,    /* GCRA: `limit` units per `period_ns`, `burst` back-to-back */
    SLUICE_WINDOW,      /* fixed window: `limit` units per aligned window of `period_ns` */
    SLUICE_SLIDING,     /* sliding window: `limit` units in any interval of `period_ns` */
    SLUICE_CONCURRENCY, /* `limit` units held at once by leases that expire after a TTL */
    SLUICE_QUOTA,       /* `limit` units of cost per calendar period, settled after the fact */
} sluice_limit_kind;

/* The calendar period of a quota, in UTC. */
typedef enum sluice_calendar {
    SLUICE_CAL_NONE = 0, /* no period: a total cap that never refills */
    SLUICE_CAL_DAY,
    SLUICE_CAL_MONTH,
} sluice_calendar;

/* What a limit does with a new key once it tracks max_keys keys. Never silent: both count. */
typedef enum sluice_key_overflow {
    SLUICE_KEYS_REFUSE = 0, /* the decision fails with SLUICE_EBUSY (backpressure) */
    SLUICE_KEYS_ALLOW,      /* the request is allowed untracked and counted in the stats */
} sluice_key_overflow;

/* A limit's definition. Fill it with sluice_limit_def_init(), then set the fields of its kind. */
typedef struct sluice_limit_def {
    sluice_limit_kind kind;
    int64_t limit;     /* units per period, per window, held at once, or budget per period */
    int64_t period_ns; /* rate: the period; window/sliding: the window length */
    int64_t burst;     /* rate: units spendable back-to-back; 0 means `limit` */
    int start_empty;   /* rate: a new key starts with nothing saved (first request still passes) */
    int64_t ttl_ns;    /* concurrency: lease time-to-live when the caller gives none */
    sluice_calendar calendar;         /* quota: the budget's period */
    int64_t horizon_ns;               /* reservations whose slot is farther away are refused */
    size_t max_keys;                  /* cap on tracked keys */
    sluice_key_overflow key_overflow; /* behaviour past max_keys */
    size_t max_key_len;               /* keys longer than this are replaced by their SHA-256 */
    /* rate, adaptive (AIMD) when decrease_den > 0: each sluice_limit_backoff multiplies the
     * key's effective rate by decrease_num / decrease_den (0 < num < den, den a power of ten
     * from 10 to 10^6: a decimal such as 0.5 = 5 / 10), never below
     * floor_permits per floor_period_ns; the rate then regains recover_pct percent of `limit`
     * (rounded up to whole permits) every recover_ns, never above `limit`. All 0: not adaptive. */
    int64_t decrease_num, decrease_den;
    int64_t recover_pct;     /* 1..100 */
    int64_t recover_ns;      /* >= 1 ms */
    int64_t floor_permits;   /* >= 1 */
    int64_t floor_period_ns; /* >= 1; the floor is at most the configured rate */
} sluice_limit_def;

/* Defaults set by sluice_limit_def_init(). */
#define SLUICE_DEFAULT_TTL_NS      (30 * SLUICE_NS_PER_SEC)
#define SLUICE_DEFAULT_HORIZON_NS  (3600 * SLUICE_NS_PER_SEC)
#define SLUICE_DEFAULT_MAX_KEYS    ((size_t)1000000)
#define SLUICE_DEFAULT_MAX_KEY_LEN ((size_t)256)

/* Sets every field to its default for `kind` (limit and period_ns to 0, which do not validate). */
void sluice_limit_def_init(sluice_limit_def *def, sluice_limit_kind kind);

/* Checks a definition. Returns 0, or SLUICE_EINVAL / SLUICE_ERANGE with a one-line explanation
 * ("burst must be at least 1, got 0") written to msg (always NUL-terminated when msglen > 0). */
int sluice_limit_def_validate(const sluice_limit_def *def, char *msg, size_t msglen);

/* Returns "rate", "window", "sliding", "concurrency" or "quota" ("?" for anything else). */
const char *sluice_limit_kind_name(sluice_limit_kind kind);

/* The answer to one request, in the shape every interface reports it. */
typedef struct sluice_decision {
    int allowed;            /* 1 when the request was (or, for a peek, would be) granted */
    int untracked;          /* 1 when allowed only because the key table was full (KEYS_ALLOW) */
    int64_t limit;          /* the key's capacity in units: burst for a rate, `limit` otherwise */
    int64_t remaining;      /* units still grantable at now_ns after this decision */
    int64_t retry_after_ns; /* 0 when allowed; else the wait after which the same request is
                             * granted if nothing else changes (rounded up), or SLUICE_NEVER */
    int64_t reset_after_ns; /* wait until the key is back to its full capacity */
    uint64_t lease_id;      /* concurrency: the lease taken by a granted, non-peek request */
    int shadow_denied;      /* 1 when a shadow limit (sluice_limit_set_shadow) would have denied:
                             * allowed is then 1 but nothing was charged (no lease taken), and
                             * retry_after_ns holds the wait the denial would have named */
} sluice_decision;

typedef struct sluice_limit sluice_limit;

/* Creates a limit from a definition, which is validated first (msg as in validate).
 * On success *out owns the limit (free with sluice_limit_free) and 0 is returned; on failure
 * *out is NULL and SLUICE_EINVAL, SLUICE_ERANGE or SLUICE_ENOMEM is returned. */
int sluice_limit_new(const sluice_limit_def *def, sluice_limit **out, char *msg, size_t msglen);

/* Frees the limit and every key's state. Accepts NULL. */
void sluice_limit_free(sluice_limit *lim);

/* Returns the limit's definition, valid as long as the limit. */
const sluice_limit_def *sluice_limit_get_def(const sluice_limit *lim);

/* Shadow (dry-run) mode. A shadow limit is evaluated and charged exactly as if it were enforced,
 * but it never denies: a request it would deny is answered allowed, with shadow_denied set,
 * charges nothing (as the denial would have) and is counted in stats.shadow_denied instead of
 * stats.denied. So its key state, its grants and its would-be denials are those of the enforced
 * limit under the same requests. Peeks and estimates answer as the limit decides: allowed, and
 * a start of now. Switching a live limit (on != 0: shadow) keeps every key's state; the mode is
 * not part of the definition and is not persisted with key state. */
void sluice_limit_set_shadow(sluice_limit *lim, int on);

/* Returns 1 when the limit is in shadow mode, else 0. */
int sluice_limit_shadow(const sluice_limit *lim);

/* Flags of sluice_limit_decide(). */
#define SLUICE_PEEK 1u /* decide without charging, creating or moving the clock: a read */
/* sluice_chain_decide() only (sluice_limit_decide always does it): a key a link does not track
 * yet is weighed against the process's memory budget (`sluice serve --maxmemory`) as against
 * max_keys: idle keys are forgotten first, then the chain fails with SLUICE_ENOMEM, or the link
 * goes untracked when its overflow policy is ALLOW. For requests from clients; the engine's own
 * grants, for tasks already admitted, do not pass it. */
#define SLUICE_BUDGET 2u

/* Asks for `units` units for `key` at now_ns and charges them when granted (unless SLUICE_PEEK).
 * For a concurrency limit a grant takes a lease with the definition's TTL (see
 * sluice_lease_acquire for another TTL); for a quota it charges `units` as an estimate that
 * sluice_quota_settle() may correct later.
 * Returns 0 with *out filled (allowed or not); SLUICE_EINVAL when units < 1 or the key is NULL
 * with keylen > 0; SLUICE_EBUSY when the key is new, the table is full and the overflow policy
 * is REFUSE; SLUICE_ENOMEM, also when the key is new, the process is past its memory budget
 * (`sluice serve --maxmemory`) even after forgetting idle keys, and the overflow policy is REFUSE
 * (ALLOW answers untracked, as past max_keys). On error *out is zeroed and nothing was charged. */
int sluice_limit_decide(sluice_limit *lim, const char *key, size_t keylen, int64_t units,
                        int64_t now_ns, unsigned flags, sluice_decision *out);

/* Starts fetching the memory that a decision about `key` will touch, without waiting. A caller
 * holding several requests (a pipeline, a batch) prefetches a few keys ahead of the one it
 * decides, so that their cache misses overlap instead of queueing. Changes nothing. */
void sluice_limit_prefetch(const sluice_limit *lim, const char *key, size_t keylen);

/* Rate limits only: reserves the earliest slot at which `units` may start and charges it now, so
 * that later callers queue behind it (slots handed out for one key never decrease).
 * `id` names the reservation: asking again with the same id returns the same slot and charges
 * nothing. On success returns 0 and sets *slot_ns (>= now_ns). When the slot lies more than the
 * horizon after now_ns, returns SLUICE_EHORIZON with *slot_ns set to that slot and charges
 * nothing. SLUICE_EINVAL for other kinds or units > burst; SLUICE_EBUSY, SLUICE_ENOMEM as decide.
 */
int sluice_limit_reserve(sluice_limit *lim, const char *key, size_t keylen, uint64_t id,
                         int64_t units, int64_t now_ns, int64_t *slot_ns);

/* Forgets reservation `id` once its slot was used (its charge stays). Returns 0 or
 * SLUICE_ENOTFOUND. Reservations whose slot is more than one horizon old are forgotten by
 * sluice_limit_sweep() on their own. */
int sluice_limit_redeem(sluice_limit *lim, uint64_t id);

/* Concurrency limits only: like decide, with an explicit TTL (> 0). */
int sluice_lease_acquire(sluice_limit *lim, const char *key, size_t keylen, int64_t units,
                         int64_t ttl_ns, int64_t now_ns, sluice_decision *out);

/* Concurrency limits only: like sluice_lease_acquire, for a lease kept across restarts (a direct
 * holder's, such as a LEASE.ACQUIRE client's; a task's leases are not kept: a task restored
 * running takes its leases again). `tag` (non-zero) is the holder's own word for the lease, kept
 * with it and read back by sluice_lease_tag: a server puts in it what its handle says besides the
 * id, so that a handle from another life of the limit never names this lease. While the limit
 * tracks changes (sluice_limit_track_changes), taking, renewing or releasing a kept lease records
 * its key, whose state (its kept leases, with ids, tags, units and expiry) sluice_limit_drain
 * yields and sluice_limit_import brings back. Returns as sluice_lease_acquire, and SLUICE_EINVAL
 * for tag 0. */
int sluice_lease_acquire_kept(sluice_limit *lim, const char *key, size_t keylen, int64_t units,
                              int64_t ttl_ns, uint64_t tag, int64_t now_ns, sluice_decision *out);

/* A read: the tag of lease lease_id (0 for a lease not kept) while it is remembered at now_ns
 * (live, or released and not yet past its expiry). Returns 0 and *tag, SLUICE_ESTALE (expired,
 * never issued; *tag 0), or SLUICE_EINVAL when lim is not a concurrency limit. */
int sluice_lease_tag(const sluice_limit *lim, uint64_t lease_id, int64_t now_ns, uint64_t *tag);

/* Extends a live lease to expire ttl_ns after now_ns; *expires_ns (may be NULL) gets the new
 * expiry. Returns 0, SLUICE_ESTALE when the lease expired, was released or never existed. */
int sluice_lease_renew(sluice_limit *lim, uint64_t lease_id, int64_t ttl_ns, int64_t now_ns,
                       int64_t *expires_ns);

/* Releases a lease. Releasing a lease twice returns 0 (idempotent) for as long as it would have
 * lived; releasing one that expired (its units may already be held by someone else) or that was
 * never issued returns SLUICE_ESTALE and changes nothing. */
int sluice_lease_release(sluice_limit *lim, uint64_t lease_id, int64_t now_ns);

/* A read: returns 0 when lease lease_id is live at now_ns and holds units of `key` (key NULL:
 * of any key), *expires_ns (may be NULL) then getting when it expires; SLUICE_ESTALE when it
 * expired, was released or was never issued; SLUICE_ENOTFOUND when it is live but on another
 * key; SLUICE_EINVAL when lim is not a concurrency limit. Changes no state (it sees the clamp,
 * see Time, without moving it). Used to let a task run under a lease its producer holds. */
int sluice_lease_check(const sluice_limit *lim, uint64_t lease_id, const char *key, size_t keylen,
                       int64_t now_ns, int64_t *expires_ns);

/* Calls fn for every lease that expired by now_ns and forgets it (its units are free again).
 * fn may be NULL. Returns how many leases expired. */
size_t sluice_lease_expire(sluice_limit *lim, int64_t now_ns,
                           void (*fn)(uint64_t lease_id, void *arg), void *arg);

/* Quotas only: corrects an earlier charge of `estimate` units made at charged_ns to the `actual`
 * cost (a refund when smaller, an extra charge when larger; spending may then exceed the budget,
 * which denies later charges). A charge from a calendar period that has ended is not carried
 * into the current one: returns SLUICE_ESTATE and changes nothing. */
int sluice_quota_settle(sluice_limit *lim, const char *key, size_t keylen, int64_t charged_ns,
                        int64_t estimate, int64_t actual, int64_t now_ns);

/* Corrects an earlier grant of `estimate` units for `key` to the `actual` cost, once it is known
 * (an LLM call's tokens). Rate: the key's TAT moves by (actual - estimate) * T (a refund never
 * moves it before now_ns). Fixed window: the count of the current window is adjusted when
 * charged_ns lies in it. Sliding: an extra charge is recorded at now_ns, a refund taken from the
 * newest records. Quota: as sluice_quota_settle(). Concurrency: SLUICE_EINVAL. Returns 0,
 * SLUICE_ESTATE when the grant's window or period is over (nothing to correct), or
 * SLUICE_ENOMEM. */
int sluice_limit_settle(sluice_limit *lim, const char *key, size_t keylen, int64_t charged_ns,
                        int64_t estimate, int64_t actual, int64_t now_ns);

/* Estimates when `units` (any amount, also above the burst) could start on `key` if they asked
 * at now_ns after everything charged so far: rate: exact (the key's TAT plus units * T minus
 * the burst); fixed window: the first window with room, assuming each later window is filled to
 * the limit in turn; sliding: the time enough recorded grants leave the window; quota: the next
 * period when spending leaves no room (SLUICE_NEVER without one); concurrency: now when units fit,
 * else the earliest lease expiry. A read: changes nothing, not even the clock (see Time). Returns
 * 0 and *start_ns. */
int sluice_limit_estimate(sluice_limit *lim, const char *key, size_t keylen, int64_t units,
                          int64_t now_ns, int64_t *start_ns);

/* Rate limits only: holds `key` back for wait_ns from now_ns, because the service the limit
 * protects answered 429 with Retry-After. Afterwards nothing is granted on the key before
 * now_ns + wait_ns, one unit is at that time, and the key refills at its steady pace from there
 * (its TAT becomes at least now + wait + (burst - 1) * T; a key already held longer keeps its
 * own TAT, so a backoff never gives budget back). The change is key state like a charge:
 * recorded for sluice_limit_drain and restored by sluice_limit_import with its full lead. A
 * shadow limit is held back too (it still never denies). *slot_ns (may be NULL) gets the key's
 * earliest slot for one unit afterwards (now_ns for a key untracked past the cap). Returns 0;
 * SLUICE_EINVAL for another kind (a window, sliding window, quota or concurrency limit cannot
 * say "not before t": see docs/limits.md) or wait_ns < 0; SLUICE_ERANGE for wait_ns over 30
 * days; SLUICE_EBUSY (new key, full table, overflow REFUSE) or SLUICE_ENOMEM, changing
 * nothing. */
int sluice_limit_backoff(sluice_limit *lim, const char *key, size_t keylen, int64_t wait_ns,
                         int64_t now_ns, int64_t *slot_ns);

/* An adaptive rate limit's effective rate for `key` at now_ns, in permits per the limit's
 * period (its configured `limit` for a key never backed off or fully recovered, and for every
 * key of a limit that is not adaptive), and the start of the key's current recovery interval
 * (its last decrease, or the last interval it regained a step at; 0 when it is at its configured
 * rate). A read: changes nothing. Returns 0, or SLUICE_EINVAL for another kind. */
int sluice_limit_key_rate(const sluice_limit *lim, const char *key, size_t keylen, int64_t now_ns,
                          int64_t *permits, int64_t *since_ns);

/* Forgets one key's state (key != NULL) or every key's (key == NULL): it then behaves as new.
 * Leases of forgotten keys become stale. Returns 0 or SLUICE_ENOTFOUND for an untracked key. */
int sluice_limit_reset(sluice_limit *lim, const char *key, size_t keylen);

/* Forgets up to `budget` keys whose state carries no information at now_ns, continuing where the
 * previous sweep stopped (call it from a timer; budget bounds the pause). Also drops stale
 * reservations. Returns how many keys were forgotten. */
size_t sluice_limit_sweep(sluice_limit *lim, int64_t now_ns, size_t budget);

/* ---- Persistence of key state ------------------------------------------------------------ */

/* Largest state blob of any kind but sliding (whose blob grows with its records: 16 bytes a
 * record after a 16-byte header). */
#define SLUICE_KEY_STATE_MAX 64

/* Starts (on != 0) or stops recording which keys are charged, settled, reset or forgotten (by
 * sluice_limit_sweep too), for sluice_limit_drain. Costs one extra hash lookup per charging
 * decision while on. */
void sluice_limit_track_changes(sluice_limit *lim, int on);

/* Returns 1 when keys changed since the last sluice_limit_drain are recorded (a drain would report
 * something), else 0 (also when changes are not tracked). O(1): a feed that drains many limits
 * skips the quiet ones without visiting them. */
int sluice_limit_has_changes(const sluice_limit *lim);

/* Calls fn(arg) each time a key change is recorded while none was (the first change since the
 * last sluice_limit_drain, or since tracking started), on the thread making the change, from
 * inside the call that changes the key: fn must not call back into this limit. fn NULL: no
 * call. A drain cut short leaves changes recorded, so no call comes for the next ones: whoever
 * drains keeps such a limit on its list (sluice_limit_has_changes). Lets an owner of many limits
 * drain only those that told it. Returns 0, or SLUICE_ESTATE when changes are not tracked
 * (sluice_limit_track_changes off, or out of memory when it was called): then nothing is
 * recorded, so nothing is told. */
int sluice_limit_on_changes(sluice_limit *lim, void (*fn)(void *arg), void *arg);

/* Calls fn once for every key charged (or forgotten, reset, settled) since the previous drain,
 * with its current state as an opaque blob (state == NULL, len 0: the key holds no information
 * any more; delete it), then clears the record. Keys are the limit's own (long keys already
 * replaced by their digest); pass them back unchanged to sluice_limit_import. A concurrency
 * limit records only the keys of its kept leases (sluice_lease_acquire_kept); a task's leases are
 * re-taken by the task when it is restored. A non-zero return of
 * fn stops the drain and is returned, and every key stays recorded (the ones already reported
 * come again next time; a store's put replaces). Returns 0, fn's error, or SLUICE_ENOMEM when
 * the blob of a sliding key cannot be built. */
int sluice_limit_drain(sluice_limit *lim,
                       int (*fn)(const char *key, size_t keylen, const void *state, size_t len,
                                 void *arg),
                       void *arg);

/* Restores one key's state from a blob made by sluice_limit_drain, possibly by an earlier
 * process with a different definition of the limit. Judged at now_ns: a state that carries no
 * information any more (an ended window or period, a TAT passed, a lease expired) is dropped;
 * a concurrency key's kept leases come back with their ids and tags, counted even where they
 * exceed the limit (they were granted), and leases issued later get larger ids; a rate key is
 * never left further ahead than burst*T (a clock that went back while the process was down must
 * not lock it out); a blob of another kind or a malformed one is refused with SLUICE_EINVAL.
 * Returns 0, SLUICE_EINVAL, SLUICE_EBUSY (key table full) or SLUICE_ENOMEM. */
int sluice_limit_import(sluice_limit *lim, const char *key, size_t keylen, const void *state,
                        size_t len, int64_t now_ns);

/* Memory and cardinality figures of one limit. */
typedef struct sluice_limit_stats {
    size_t keys;        /* keys tracked now */
    size_t bytes;       /* bytes held by the key table, keys and per-key state */
    uint64_t untracked; /* requests allowed untracked past max_keys (KEYS_ALLOW) */
    uint64_t refused;   /* requests refused with SLUICE_EBUSY past max_keys, or SLUICE_ENOMEM past
                         * the memory budget (KEYS_REFUSE) */
    uint64_t forgotten; /* keys forgotten because they carried no information */
    uint64_t hashed;    /* requests whose key was longer than max_key_len and was hashed */
    uint64_t allowed;   /* charging decisions that granted (peeks are not counted) */
    uint64_t denied;    /* charging decisions that denied */
    uint64_t units;     /* units granted */
    /* Charging decisions a shadow limit would have denied and let through uncharged: what
     * `denied` would have counted had the limit been enforced. */
    uint64_t shadow_denied;
    uint64_t backoffs; /* sluice_limit_backoff calls that held a key back (429s told) */
    /* Adaptive rate limits: keys tracked now whose rate is below the configured one. Kept as a
     * counter, so reading it costs nothing: a key that recovered with time leaves it at its next
     * decision or backoff, or when the periodic sweep (sluice_limit_sweep) next visits it. */
    size_t slowed;
} sluice_limit_stats;

void sluice_limit_get_stats(const sluice_limit *lim, sluice_limit_stats *out);

/* Quotas only: the units spent in the current calendar period (in total for a quota without one),
 * summed over every key, and how many keys spent any. Walks every tracked key, O(keys): for
 * monitoring, not for the decision path. Changes nothing. Returns 0, or SLUICE_EINVAL (and 0s)
 * for another kind. keys may be NULL. */
int sluice_limit_quota_spent(const sluice_limit *lim, int64_t now_ns, int64_t *spent, size_t *keys);

/* One quota key's spending in the current calendar period (seed 004's "a user's daily spend"). */
typedef struct sluice_quota_usage {
    int64_t spent;           /* units charged in the current period (may pass the budget after a
                              * settlement) */
    int64_t budget;          /* the budget per period */
    int64_t remaining;       /* budget - spent, or 0 when spent reached it */
    int64_t period_start_ns; /* when the current period began (0 for a quota without one) */
    int64_t resets_at_ns;    /* when it ends and spending restarts at 0 (SLUICE_NEVER without a
                              * calendar) */
} sluice_quota_usage;

/* Quotas only: fills *out for `key` at now_ns (a key never charged, or forgotten, has spent 0).
 * A read: changes nothing, not even the clock (see Time), and counts nothing. O(1). Returns 0,
 * SLUICE_EINVAL (out zeroed) for another kind or a NULL key with keylen > 0, or SLUICE_ENOMEM
 * (hashing a long key). */
int sluice_limit_quota_usage(const sluice_limit *lim, const char *key, size_t keylen,
                             int64_t now_ns, sluice_quota_usage *out);

/* ---- Chains ------------------------------------------------------------------------------- */

/* One limit of a chain with the key and units it is asked for. */
typedef struct sluice_chain_link {
    sluice_limit *limit;
    const char *key;
    size_t keylen;
    int64_t units;
} sluice_chain_link;

/* The answer of a chain. */
typedef struct sluice_chain_result {
    int allowed;            /* 1 when every link granted (all were charged) */
    size_t denied_by;       /* index of the link whose slot is latest (meaningful when denied) */
    int64_t retry_after_ns; /* latest retry_after of all links (0 when allowed), or NEVER */
} sluice_chain_result;

/* Evaluates n links as one atomic decision at now_ns: granted only when every link has budget,
 * in which case every link is charged; when one says no, none is charged. decisions (may be
 * NULL) receives each link's own decision, n entries.
 * A link whose limit is in shadow mode never makes the chain deny and is never named by
 * denied_by: when it would deny, its decision is allowed with shadow_denied set and it is not
 * charged, while the other links are decided and charged as without it; when it has room it is
 * charged with the others if the chain is granted. When an enforced link denies, nothing is
 * charged, shadow links included, and a shadow link that would also have denied is counted in
 * its shadow_denied (as an enforced one is counted in denied). Links may repeat a limit and key;
 * they are then charged cumulatively. For concurrency links decisions[i].lease_id holds the lease
 * taken. flags: SLUICE_PEEK, SLUICE_BUDGET. Returns 0 with *out filled, or the error of the first
 * link that failed (EINVAL, EBUSY, ENOMEM), in which case nothing was charged. */
int sluice_chain_decide(const sluice_chain_link *links, size_t n, int64_t now_ns, unsigned flags,
                        sluice_decision *decisions, sluice_chain_result *out);

SLUICE_API_END

#ifdef __cplusplus
}
#endif
#endif
