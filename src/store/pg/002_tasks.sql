-- SPDX-License-Identifier: MIT
--
-- Schema version 2 of sluice's PostgreSQL store: the shared task queue. One function call,
-- sluice_tasks_call, runs a batch of task requests (every task op of a node's loop turn) in
-- order, each atomically, with the semantics of the Redis store's task ops
-- (src/store/redis/tasks.lua, specified in src/store/redis_tasks.h) request for request. A
-- task's chain is judged by the limit functions of 001_limits.sql (sluice_limit_load,
-- sluice_limit_decide, sluice_limit_settle) on the very rows sluice_limits_call uses, so tasks and
-- THROTTLE share one budget. src/store/pg_tasks.c builds the call and reads its result;
-- tests/tools/tasks_diff.c runs the same random operations through this function and through the
-- Redis script and compares every answer.
--
-- Applied by src/store/pg_schema.c on top of version 1; never edited once released.
--
-- Locking (no deadlock between nodes, and claimers that do not wait on each other). A call
-- takes every lock it may WAIT for at its start, in one global order:
--   0. the task keys its ADDs name (transaction advisory locks, in key-hash order), so two adds
--      of one key never race;
--   1. the task rows its ACK/FAIL/TOUCH/CANCEL/INFO name, and the holders of its ADDs' task keys
--      (FOR UPDATE, in id order);
--   2. its claims' candidate tasks (lapsed leases, due delayed tasks, the most urgent ready
--      tasks) with FOR UPDATE SKIP LOCKED, which never waits: two nodes claiming at once take
--      different tasks;
--   3. every limit row (state and tag clock) those tasks' links and the due wait queues name, in
--      001's fixed (tag, lim, key) order, with 001's INSERT ... ON CONFLICT DO UPDATE ... WHERE
--      false.
-- Only then is the time read (clock_timestamp(), ratcheted). After that the call never waits: a
-- task row it needs is taken with SKIP LOCKED and a limit row with SKIP LOCKED, and one held by
-- another transaction is left for a later call (the claim answers `more`); the queue's clock row
-- too (see sluice_task_clock).
--
-- Integers are exact (bigint stored, numeric computed, clamped like the core's sat_add).

-- ---- tables ----------------------------------------------------------------------------------

-- Ids are never reused (a sequence: a rolled-back call may leave a gap). Finished tasks are
-- numbered in the order they finish, so that the oldest are forgotten first.
CREATE SEQUENCE sluice_task_id_seq;
CREATE SEQUENCE sluice_task_fin_seq;

-- One row per task, finished tasks included until RTASK_KEEP_FINISHED newer ones finished.
-- state: sluice_task_state (1 queued, 2 parked, 3 running, 4 done, 5 failed, 6 cancelled).
-- due: queued: 0 ready, else delayed until due; running: the lease's end; else 0. The links are
-- parallel arrays, one entry per link as ADD sent it: its definition (001's text), units, flags
-- (1 reject, 2 settle), horizon_ns, the limit row it charges (tag, lim, key), the concurrency
-- lease it holds (0: none) and when it was charged (0: not charged). A parked task waits in the
-- wait queue of its link park_link (1-based), named by that link's limit row (wq_*).
CREATE TABLE sluice_task (
    id bigint PRIMARY KEY,
    type bytea NOT NULL,
    state smallint NOT NULL,
    prio bigint NOT NULL,
    due bigint NOT NULL DEFAULT 0,
    attempt int NOT NULL DEFAULT 0,
    max_attempts int NOT NULL,
    flags int NOT NULL DEFAULT 0,          -- 1 holds a grant (lost lease), 2 a free retry
    lease_ns bigint NOT NULL,
    not_before bigint NOT NULL DEFAULT 0,
    submitted bigint NOT NULL,
    fail_reason int NOT NULL DEFAULT 0,
    backoff int NOT NULL,                  -- 0 fixed, 1 exponential
    base_ns bigint NOT NULL,
    max_ns bigint NOT NULL,
    throttle int NOT NULL,                 -- throttle_retries
    charge_redelivery int NOT NULL,
    units text NOT NULL,                   -- UNITS as TASK.INFO shows it
    park_link int NOT NULL DEFAULT 0,
    wq_tag bytea,
    wq_lim text COLLATE "C",
    wq_key bytea,
    tkey bytea,
    payload bytea NOT NULL,
    message bytea,
    fin_seq bigint,                        -- finished: its number in finishing order
    l_def text[] NOT NULL,
    l_units bigint[] NOT NULL,
    l_flags int[] NOT NULL,
    l_hz bigint[] NOT NULL,
    l_tag bytea[] NOT NULL,
    l_lim text[] NOT NULL,
    l_key bytea[] NOT NULL,
    l_lease bigint[] NOT NULL,
    l_charged bigint[] NOT NULL
);
CREATE INDEX sluice_task_ready ON sluice_task (type, prio DESC, id) WHERE state = 1 AND due = 0;
CREATE INDEX sluice_task_delayed ON sluice_task (type, due) WHERE state = 1 AND due > 0;
CREATE INDEX sluice_task_running ON sluice_task (due) WHERE state = 3;
CREATE INDEX sluice_task_parked ON sluice_task (wq_tag, wq_lim, wq_key, prio DESC, id)
    WHERE state = 2;
CREATE INDEX sluice_task_finished ON sluice_task (fin_seq) WHERE state >= 4;
-- A task key names at most one unfinished task.
CREATE UNIQUE INDEX sluice_task_tkey ON sluice_task (tkey) WHERE state < 4 AND tkey IS NOT NULL;

-- Armed wait queues: a queue (a limit row with parked tasks) is looked at by the first claim
-- after wake_ms (the store time in ms). Written only by a call that holds the queue's limit row.
CREATE TABLE sluice_task_wake (
    tag bytea NOT NULL,
    lim text COLLATE "C" NOT NULL,
    key bytea NOT NULL,
    wake_ms bigint NOT NULL,
    PRIMARY KEY (tag, lim, key)
);
CREATE INDEX sluice_task_wake_ms ON sluice_task_wake (wake_ms);

-- The queue's clock (the Redis store's "{all}" clock): the latest time a call decided at, so
-- the queue's time never goes back. Read without a lock at a call's start and raised at its end,
-- without waiting: with the database's clock, only when it lags by a millisecond or more, and
-- not when another call is raising it (SKIP LOCKED), so that it is never a row every call waits
-- on in turn (each would then wait for the previous one's commit). Overlapping calls may thus see
-- times out of order by up to 1 ms, or by the length of their overlap. With an injected time and
-- one connection (tests) it is exact.
CREATE TABLE sluice_task_clock (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    now_ns bigint NOT NULL
);
INSERT INTO sluice_task_clock VALUES (true, 0);

-- ---- helpers ---------------------------------------------------------------------------------

-- The queue's time so far in this transaction (a transaction-local setting: PL/pgSQL has no
-- globals), and its update.
CREATE FUNCTION sluice_tq() RETURNS numeric
LANGUAGE sql VOLATILE AS $$
    SELECT coalesce(nullif(current_setting('sluice.tq', true), ''), '0')::numeric
$$;

-- Notes that a request made work ready: the call notifies once, at its end.
CREATE FUNCTION sluice_task_woke() RETURNS void
LANGUAGE sql AS $$
    SELECT set_config('sluice.twoke', '1', true)
$$;

-- x as a bigint, clamped: a bound compared with a bigint column must be a bigint, or the
-- column is cast to numeric and its index cannot serve.
CREATE FUNCTION sluice_i64(x numeric) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT least(greatest(x, -9223372036854775808), 9223372036854775807)::bigint
$$;

CREATE FUNCTION sluice_ms_floor(ns numeric) RETURNS numeric
LANGUAGE sql IMMUTABLE AS $$ SELECT floor(ns / 1000000) $$;

CREATE FUNCTION sluice_ms_ceil(ns numeric) RETURNS numeric
LANGUAGE sql IMMUTABLE AS $$ SELECT ceil(ns / 1000000) $$;

-- A definition "kind limit period_ns burst start_empty ttl_ns calendar" (001's text); ok false
-- for one that does not parse (the Redis script's parse_def).
CREATE FUNCTION sluice_task_def(p_text text, OUT ok boolean, OUT kind int, OUT lim numeric,
                                OUT per numeric, OUT burst numeric, OUT se boolean,
                                OUT ttl numeric, OUT cal int)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    f text[];
BEGIN
    ok := false;
    IF p_text IS NULL OR p_text !~ '^\d{1,9} -?\d{1,19} -?\d{1,19} -?\d{1,19} [01] -?\d{1,19} -?\d{1,9}$' THEN
        RETURN;
    END IF;
    f := string_to_array(p_text, ' ');
    kind := f[1]::int; lim := f[2]::numeric; per := f[3]::numeric; burst := f[4]::numeric;
    se := f[5] = '1'; ttl := f[6]::numeric; cal := f[7]::int;
    IF kind < 1 OR kind > 5 OR lim < 1 THEN RETURN; END IF;
    IF kind IN (1, 2, 3) AND per <= 0 THEN RETURN; END IF;
    IF kind = 1 AND burst = 0 THEN burst := lim; END IF;
    ok := true;
END $$;

-- Takes the limit row (tag, lim, key) and its tag's clock row without waiting. Returns true
-- when this transaction holds both (already held counts), false when another transaction holds
-- one. A row that does not exist is created; creating it waits at most 10 ms (lock_timeout) for
-- another transaction creating the same row, and gives up after: no wait a cycle could form on.
CREATE FUNCTION sluice_task_trylock(p_tag bytea, p_lim text, p_key bytea) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    n int;
    have int;
    old text;
BEGIN
    PERFORM 1 FROM sluice_limit_state
     WHERE tag = p_tag AND ((lim = p_lim AND key = p_key) OR (lim = '' AND key = '\x'::bytea))
       FOR UPDATE SKIP LOCKED;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n = 2 THEN RETURN true; END IF;
    SELECT count(*) INTO have FROM sluice_limit_state
     WHERE tag = p_tag AND ((lim = p_lim AND key = p_key) OR (lim = '' AND key = '\x'::bytea));
    IF have > n THEN RETURN false; END IF; -- held by another transaction
    old := current_setting('lock_timeout');
    PERFORM set_config('lock_timeout', '10ms', true);
    BEGIN
        INSERT INTO sluice_limit_state (tag, lim, key)
        VALUES (p_tag, '', '\x'::bytea), (p_tag, p_lim, p_key)
        ON CONFLICT (tag, lim, key) DO NOTHING;
    EXCEPTION WHEN lock_not_available THEN
        PERFORM set_config('lock_timeout', old, true);
        RETURN false;
    END;
    PERFORM set_config('lock_timeout', old, true);
    PERFORM 1 FROM sluice_limit_state
     WHERE tag = p_tag AND ((lim = p_lim AND key = p_key) OR (lim = '' AND key = '\x'::bytea))
       FOR UPDATE SKIP LOCKED;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n = 2;
END $$;

-- Takes, without waiting, the limit rows of t's concurrency leases (what releasing them
-- touches). Returns false when another transaction holds one: t is left alone for now.
CREATE FUNCTION sluice_task_hold_leases(t sluice_task) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. cardinality(t.l_def) LOOP
        CONTINUE WHEN t.l_lease[i] = 0;
        IF NOT sluice_task_trylock(t.l_tag[i], t.l_lim[i], t.l_key[i]) THEN
            RETURN false;
        END IF;
    END LOOP;
    RETURN true;
END $$;

-- The request's time ratcheted by the queue's clock and by the clocks of tags, all of which
-- are moved to it (the Redis script's ratchet). The tags' clock rows must be held.
CREATE FUNCTION sluice_task_ratchet(p_now numeric, p_tags bytea[]) RETURNS numeric
LANGUAGE plpgsql AS $$
DECLARE
    now numeric := greatest(p_now, sluice_tq());
    c record;
BEGIN
    IF coalesce(cardinality(p_tags), 0) > 0 THEN
        FOR c IN SELECT kind, st FROM sluice_limit_state
                  WHERE tag = ANY (p_tags) AND lim = '' AND key = '\x'::bytea LOOP
            IF c.kind = -1 AND c.st[1] > now THEN now := c.st[1]; END IF;
        END LOOP;
        UPDATE sluice_limit_state
           SET st = ARRAY[now, CASE WHEN kind = -1 THEN st[2] ELSE 0 END]::bigint[], kind = -1
         WHERE tag = ANY (p_tags) AND lim = '' AND key = '\x'::bytea
           AND (kind <> -1 OR st[1] <> now);
    END IF;
    PERFORM set_config('sluice.tq', now::text, true);
    RETURN now;
END $$;

-- Writes a task row back.
CREATE FUNCTION sluice_task_put(t sluice_task) RETURNS void
LANGUAGE sql AS $$
    UPDATE sluice_task SET state = t.state, due = t.due, attempt = t.attempt, flags = t.flags,
           not_before = t.not_before, fail_reason = t.fail_reason, park_link = t.park_link,
           wq_tag = t.wq_tag, wq_lim = t.wq_lim, wq_key = t.wq_key, payload = t.payload,
           message = t.message, fin_seq = t.fin_seq, l_lease = t.l_lease, l_charged = t.l_charged
     WHERE id = t.id
$$;

-- ---- the chain (the Redis script's decide_chain, on 001's rows) ---------------------------

-- Judges links all-or-nothing at now and, when all grant, writes them all. Links naming one
-- limit row are judged once with their units summed (lead: each link's first such link).
-- Returns per link (by lead) whether it grants, its retry, and the lease a granted concurrency
-- lead took (0 otherwise). Every row must be held, and now ratcheted by their tags.
CREATE FUNCTION sluice_task_chain(p_defs text[], p_tags bytea[], p_lims text[], p_keys bytea[],
                                  p_units bigint[], p_ttl numeric, now numeric,
                                  OUT granted boolean, OUT allowed int[], OUT retry numeric[],
                                  OUT lease bigint[], OUT lead int[])
LANGUAGE plpgsql AS $$
DECLARE
    n int := coalesce(cardinality(p_defs), 0);
    m_units numeric[] := '{}';
    cur bigint[][];
    cs bigint[];
    d record;
    dec record;
    rk int; rst bigint[]; st2 bigint[]; last numeric; lid numeric;
BEGIN
    granted := true; allowed := '{}'; retry := '{}'; lease := '{}'; lead := '{}';
    FOR i IN 1 .. n LOOP
        lead[i] := i;
        FOR j IN 1 .. i - 1 LOOP
            IF lead[j] = j AND p_tags[j] = p_tags[i] AND p_lims[j] = p_lims[i]
               AND p_keys[j] = p_keys[i] THEN
                lead[i] := j; m_units[j] := m_units[j] + p_units[i];
                EXIT;
            END IF;
        END LOOP;
        IF lead[i] = i THEN m_units[i] := p_units[i]; END IF;
        lease[i] := 0; allowed[i] := 1; retry[i] := 0;
    END LOOP;
    FOR pass IN 1 .. 2 LOOP
        EXIT WHEN pass = 2 AND NOT granted;
        FOR i IN 1 .. n LOOP
            CONTINUE WHEN lead[i] <> i;
            d := sluice_task_def(p_defs[i]);
            SELECT s.kind, s.st INTO rk, rst FROM sluice_limit_state s
             WHERE s.tag = p_tags[i] AND s.lim = p_lims[i] AND s.key = p_keys[i];
            cs := sluice_limit_load(d.kind, d.per, rk, rst, now);
            dec := sluice_limit_decide(d.kind, d.lim, d.per, d.burst, d.se, d.cal, cs, m_units[i],
                                       CASE WHEN p_ttl > 0 THEN p_ttl ELSE d.ttl END, now, pass = 1);
            IF pass = 1 THEN
                allowed[i] := dec.allowed; retry[i] := dec.retry;
                granted := granted AND dec.allowed = 1;
                CONTINUE;
            END IF;
            st2 := dec.nst;
            IF dec.lease_exp IS NOT NULL THEN
                -- A new lease id: above every id the tag issued, and at least now (001's rule).
                SELECT s.st[2] INTO last FROM sluice_limit_state s
                 WHERE s.tag = p_tags[i] AND s.lim = '' AND s.key = '\x'::bytea;
                lid := greatest(coalesce(last, 0) + 1, now);
                UPDATE sluice_limit_state s SET st[2] = lid
                 WHERE s.tag = p_tags[i] AND s.lim = '' AND s.key = '\x'::bytea;
                lease[i] := lid;
                st2 := st2 || ARRAY[lid, dec.lease_exp, m_units[i]]::bigint[];
            END IF;
            IF st2 IS NOT NULL THEN
                UPDATE sluice_limit_state s
                   SET kind = CASE WHEN cardinality(st2) > 0 THEN d.kind ELSE 0 END, st = st2
                 WHERE s.tag = p_tags[i] AND s.lim = p_lims[i] AND s.key = p_keys[i];
            END IF;
        END LOOP;
    END LOOP;
END $$;

-- Releases (ttl NULL) or renews lease p_lease of a concurrency row. A release is 001's R: the
-- lease is remembered with 0 units until it would have expired. A renewal is 001's N: the lease
-- lasts until now + ttl (the limit's own ttl where ttl is not positive). A released or unknown
-- lease is left alone either way. One function, so that both find the lease the same way.
CREATE FUNCTION sluice_task_lease_touch(p_def text, p_tag bytea, p_lim text, p_key bytea,
                                        p_lease bigint, ttl numeric, now numeric) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    d record := sluice_task_def(p_def);
    rk int; rst bigint[]; cur bigint[];
BEGIN
    IF NOT d.ok OR d.kind <> 4 THEN RETURN; END IF;
    SELECT s.kind, s.st INTO rk, rst FROM sluice_limit_state s
     WHERE s.tag = p_tag AND s.lim = p_lim AND s.key = p_key;
    cur := sluice_limit_load(4, d.per, rk, rst, now);
    FOR i IN 1 .. coalesce(array_length(cur, 1), 0) / 3 LOOP
        IF cur[3 * i - 2] = p_lease THEN
            IF cur[3 * i] > 0 THEN
                IF ttl IS NULL THEN
                    cur[3 * i] := 0;
                ELSE
                    cur[3 * i - 1] := sluice_sat(now + CASE WHEN ttl > 0 THEN ttl ELSE d.ttl END);
                END IF;
                UPDATE sluice_limit_state s SET kind = 4, st = cur
                 WHERE s.tag = p_tag AND s.lim = p_lim AND s.key = p_key;
            END IF;
            RETURN;
        END IF;
    END LOOP;
END $$;

-- When `units` could start on a row (its loaded state cur) at the earliest: the Redis script's
-- estimate (sluice_limit_estimate: a rate's slot, even past its burst; a window's units filling
-- the following windows; else the peek's wait). A read.
CREATE FUNCTION sluice_task_estimate(p_def text, cur bigint[], units numeric, now numeric)
RETURNS numeric
LANGUAGE plpgsql AS $$
DECLARE
    mx CONSTANT numeric := 9223372036854775807;
    d record := sluice_task_def(p_def);
    t_q numeric; t_r numeric; bt record; tt record;
    b_ns numeric; b_rem numeric; nx numeric; nx_rem numeric; s_ns numeric; s_rem numeric;
    slot numeric; start numeric; cnt numeric; k numeric; dec record;
BEGIN
    IF d.kind = 1 THEN
        t_q := div(d.per, d.lim); t_r := mod(d.per, d.lim);
        bt := sluice_gcra_times(t_q, t_r, d.lim, d.burst);
        IF d.se AND (cur IS NULL OR (cur[1] = 0 AND cur[2] = 0)) THEN
            tt := sluice_gcra_times(t_q, t_r, d.lim, d.burst - least(units, d.burst));
            b_ns := sluice_sat(now + tt.ns); b_rem := tt.rem;
            IF b_rem >= d.lim THEN b_rem := b_rem - d.lim; b_ns := sluice_sat(b_ns + 1); END IF;
            IF b_ns = mx THEN b_rem := 0; END IF;
        ELSIF cur IS NOT NULL AND (cur[1] > now OR (cur[1] = now AND cur[2] >= 0)) THEN
            b_ns := cur[1]; b_rem := cur[2];
        ELSE
            b_ns := now; b_rem := 0;
        END IF;
        tt := sluice_gcra_times(t_q, t_r, d.lim, units);
        nx := sluice_sat(b_ns + tt.ns); nx_rem := b_rem + tt.rem;
        IF nx_rem >= d.lim THEN nx_rem := nx_rem - d.lim; nx := sluice_sat(nx + 1); END IF;
        IF nx = mx THEN RETURN mx; END IF;
        s_ns := sluice_sat(nx - bt.ns); s_rem := nx_rem - bt.rem;
        IF s_rem < 0 THEN s_rem := s_rem + d.lim; s_ns := sluice_sat(s_ns - 1); END IF;
        slot := sluice_sat(s_ns + CASE WHEN s_rem > 0 THEN 1 ELSE 0 END);
        RETURN greatest(slot, now);
    ELSIF d.kind = 2 THEN
        start := now - mod(now, d.per);
        cnt := CASE WHEN cur IS NOT NULL AND cur[1] = start THEN cur[2] ELSE 0 END;
        k := div(sluice_sat(cnt + units - 1), d.lim);
        IF k = 0 THEN RETURN now; END IF;
        RETURN sluice_sat(start + k * d.per);
    END IF;
    dec := sluice_limit_decide(d.kind, d.lim, d.per, d.burst, d.se, d.cal, cur, units, d.ttl, now,
                               true);
    IF dec.allowed = 1 THEN
        RETURN now;
    ELSIF dec.retry <> mx THEN
        RETURN sluice_sat(now + dec.retry);
    ELSIF d.kind = 3 THEN
        RETURN sluice_sat(sluice_sat(now + dec.reset) + div(units - 1, d.lim) * d.per);
    END IF;
    RETURN mx;
END $$;

-- ---- places ----------------------------------------------------------------------------------

-- Arms wait queue (tag, lim, key) to wake by ms at the latest (an earlier armed wake stays).
CREATE FUNCTION sluice_task_arm(p_tag bytea, p_lim text, p_key bytea, ms numeric) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO sluice_task_wake AS w (tag, lim, key, wake_ms) VALUES (p_tag, p_lim, p_key, ms)
    ON CONFLICT (tag, lim, key) DO UPDATE SET wake_ms = excluded.wake_ms
     WHERE w.wake_ms > excluded.wake_ms
$$;

-- Parks t on its link i (wake_ns NULL: behind a more urgent task; the queue is armed at the
-- clock's ms unless already armed). Returns t, updated (not written).
CREATE FUNCTION sluice_task_park(t sluice_task, i int, wake_ns numeric) RETURNS sluice_task
LANGUAGE plpgsql AS $$
BEGIN
    t.state := 2; t.park_link := i;
    t.wq_tag := t.l_tag[i]; t.wq_lim := t.l_lim[i]; t.wq_key := t.l_key[i];
    IF wake_ns IS NOT NULL THEN
        PERFORM sluice_task_arm(t.wq_tag, t.wq_lim, t.wq_key, sluice_ms_ceil(wake_ns));
    ELSE
        INSERT INTO sluice_task_wake (tag, lim, key, wake_ms)
        VALUES (t.wq_tag, t.wq_lim, t.wq_key, sluice_ms_floor(sluice_tq()))
        ON CONFLICT (tag, lim, key) DO NOTHING;
    END IF;
    RETURN t;
END $$;

-- Finishes t (in no queue any more) at the queue's time, and writes it.
CREATE FUNCTION sluice_task_finish(t sluice_task, p_state int, reason int) RETURNS sluice_task
LANGUAGE plpgsql AS $$
BEGIN
    t.state := p_state; t.fail_reason := coalesce(reason, 0); t.due := 0;
    t.wq_tag := NULL; t.wq_lim := NULL; t.wq_key := NULL;
    t.fin_seq := nextval('sluice_task_fin_seq');
    PERFORM sluice_task_put(t);
    PERFORM set_config('sluice.tfin', t.fin_seq::text, true);
    RETURN t;
END $$;

-- Drops a parked task from its wait queue's bookkeeping: an emptied queue is disarmed.
CREATE FUNCTION sluice_task_unqueue(p_tag bytea, p_lim text, p_key bytea) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM sluice_task_wake w
     WHERE w.tag = p_tag AND w.lim = p_lim AND w.key = p_key
       AND NOT EXISTS (SELECT 1 FROM sluice_task t WHERE t.state = 2 AND t.wq_tag = p_tag
                          AND t.wq_lim = p_lim AND t.wq_key = p_key)
$$;

-- Wakes wait queue (tag, lim, key) at now as park.c's park_wake does (the Redis script's
-- wake_queue): the most urgent prefix whose units fit the limit now (a head that can never fit
-- too, for the gate to fail it) goes back to ready; the queue is armed again for the rest.
-- A peek: nothing is charged. Returns true when a bound (or a task row held by another
-- transaction) cut it short: the queue stays due.
CREATE FUNCTION sluice_task_wake_queue(p_tag bytea, p_lim text, p_key bytea, p_now numeric)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    mx CONSTANT numeric := 9223372036854775807;
    recheck_ns CONSTANT numeric := 1000000000;
    now numeric := p_now;
    cum numeric := 0; moved int := 0; stopped boolean := false; have_l boolean := false;
    u_next numeric; d record; dec record; kind int; ldef text; cur bigint[];
    rk int; rst bigint[]; wake numeric; recheck numeric; start numeric;
    t sluice_task; i int; got boolean; fits boolean;
BEGIN
    FOR t IN SELECT * FROM sluice_task
              WHERE state = 2 AND wq_tag = p_tag AND wq_lim = p_lim AND wq_key = p_key
              ORDER BY prio DESC, id LIMIT 64 LOOP
        -- Taken without waiting; one another transaction holds ends the wake here.
        PERFORM 1 FROM sluice_task WHERE id = t.id AND state = 2 FOR UPDATE SKIP LOCKED;
        GET DIAGNOSTICS i = ROW_COUNT;
        IF i = 0 THEN
            stopped := true; moved := moved + 1; u_next := NULL;
            EXIT;
        END IF;
        i := t.park_link;
        got := i >= 1 AND i <= cardinality(t.l_def);
        fits := false;
        IF got AND NOT have_l THEN
            d := sluice_task_def(t.l_def[i]);
            IF d.ok THEN
                have_l := true; ldef := t.l_def[i]; kind := d.kind;
                now := sluice_task_ratchet(now, ARRAY[p_tag]);
                SELECT s.kind, s.st INTO rk, rst FROM sluice_limit_state s
                 WHERE s.tag = p_tag AND s.lim = p_lim AND s.key = p_key;
                cur := sluice_limit_load(d.kind, d.per, rk, rst, now);
            END IF;
        END IF;
        IF got AND have_l THEN
            dec := sluice_limit_decide(d.kind, d.lim, d.per, d.burst, d.se, d.cal, cur,
                                       cum + t.l_units[i], d.ttl, now, true);
            fits := dec.allowed = 1;
            IF dec.allowed <> 1 AND NOT (moved = 0 AND dec.retry = mx) THEN
                stopped := true; u_next := t.l_units[i];
                EXIT;
            END IF;
        END IF;
        t.park_link := 0; t.state := 1;
        t.wq_tag := NULL; t.wq_lim := NULL; t.wq_key := NULL;
        PERFORM sluice_task_put(t);
        PERFORM sluice_task_woke();
        moved := moved + 1;
        IF fits THEN cum := cum + t.l_units[i]; END IF;
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM sluice_task WHERE state = 2 AND wq_tag = p_tag
                      AND wq_lim = p_lim AND wq_key = p_key) THEN
        DELETE FROM sluice_task_wake WHERE tag = p_tag AND lim = p_lim AND key = p_key;
        RETURN false;
    END IF;
    IF NOT stopped OR u_next IS NULL THEN
        wake := now; -- a bound stopped it: the rest is looked at again at once
    ELSIF moved = 0 THEN
        wake := sluice_sat(now + CASE WHEN dec.retry > 0 THEN dec.retry ELSE 1 END);
    ELSE
        recheck := sluice_sat(now + recheck_ns);
        start := sluice_task_estimate(ldef, cur, cum + u_next, now);
        wake := recheck;
        IF now < start AND start <> mx THEN wake := start; END IF;
        IF kind = 4 AND recheck < wake THEN wake := recheck; END IF;
    END IF;
    INSERT INTO sluice_task_wake AS w (tag, lim, key, wake_ms)
    VALUES (p_tag, p_lim, p_key,
            CASE WHEN stopped AND u_next IS NOT NULL THEN sluice_ms_ceil(wake)
                 ELSE sluice_ms_floor(wake) END)
    ON CONFLICT (tag, lim, key) DO UPDATE SET wake_ms = excluded.wake_ms;
    RETURN NOT stopped OR u_next IS NULL;
END $$;

-- Releases t's concurrency leases at now; their keys' wait queues wake at once. Returns t with
-- its leases cleared (not written).
CREATE FUNCTION sluice_task_release(t sluice_task, now numeric) RETURNS sluice_task
LANGUAGE plpgsql AS $$
DECLARE
    d record;
BEGIN
    FOR i IN 1 .. cardinality(t.l_def) LOOP
        CONTINUE WHEN t.l_lease[i] = 0;
        d := sluice_task_def(t.l_def[i]);
        IF d.ok THEN
            PERFORM sluice_task_lease_touch(t.l_def[i], t.l_tag[i], t.l_lim[i], t.l_key[i],
                t.l_lease[i], NULL, sluice_task_ratchet(now, ARRAY[t.l_tag[i]]));
        END IF;
        t.l_lease[i] := 0;
        PERFORM sluice_task_put(t);
        PERFORM sluice_task_woke();
        IF EXISTS (SELECT 1 FROM sluice_task WHERE state = 2 AND wq_tag = t.l_tag[i]
                      AND wq_lim = t.l_lim[i] AND wq_key = t.l_key[i]) THEN
            PERFORM sluice_task_wake_queue(t.l_tag[i], t.l_lim[i], t.l_key[i], now);
        END IF;
    END LOOP;
    RETURN t;
END $$;

-- A running task whose lease lapsed: back to ready with its grant (charge_redelivery: without).
CREATE FUNCTION sluice_task_lapse(t sluice_task, now numeric) RETURNS sluice_task
LANGUAGE plpgsql AS $$
BEGIN
    t := sluice_task_release(t, now);
    IF t.charge_redelivery = 1 THEN
        t.l_charged := array_fill(0::bigint, ARRAY[cardinality(t.l_def)]);
        t.flags := 0;
    ELSIF t.flags & 1 = 0 THEN
        t.flags := t.flags + 1;
    END IF;
    t.due := 0; t.state := 1;
    PERFORM sluice_task_put(t);
    PERFORM sluice_task_woke();
    RETURN t;
END $$;

-- ---- the gate --------------------------------------------------------------------------------

-- Gates t (queued, held) at now: 'D' delivered, 'P' parked, 'F' failed, 'S' skipped (a limit
-- row it needs is held by another transaction: t stays ready for a later claim). Writes t.
CREATE FUNCTION sluice_task_gate(INOUT t sluice_task, INOUT now numeric, OUT verdict text)
LANGUAGE plpgsql AS $$
DECLARE
    mx CONSTANT numeric := 9223372036854775807;
    n int := cardinality(t.l_def);
    fullc boolean := t.flags & 3 = 0;
    act int[] := '{}'; kinds int[] := '{}'; d record; ch record;
    a_def text[] := '{}'; a_tag bytea[] := '{}'; a_lim text[] := '{}'; a_key bytea[] := '{}';
    a_units bigint[] := '{}'; tags bytea[] := '{}';
    h record; li int; reject int; never int; horizon int; hz numeric; r numeric; denied int;
    dd int; k int;
BEGIN
    FOR i IN 1 .. n LOOP
        d := sluice_task_def(t.l_def[i]);
        IF NOT d.ok THEN
            t := sluice_task_finish(t, 5, 0);
            verdict := 'F';
            RETURN;
        END IF;
        IF fullc OR d.kind = 4 THEN
            act := act || i; kinds := kinds || d.kind;
            a_def := a_def || t.l_def[i]; a_tag := a_tag || t.l_tag[i];
            a_lim := a_lim || t.l_lim[i]; a_key := a_key || t.l_key[i];
            a_units := a_units || t.l_units[i];
            IF NOT t.l_tag[i] = ANY (tags) THEN tags := tags || t.l_tag[i]; END IF;
        END IF;
    END LOOP;
    -- Every row the chain touches, without waiting.
    FOR k IN 1 .. cardinality(act) LOOP
        IF NOT sluice_task_trylock(a_tag[k], a_lim[k], a_key[k]) THEN
            verdict := 'S';
            RETURN;
        END IF;
    END LOOP;
    -- Strict priority: never overtake a more urgent task parked on a key this chain touches.
    FOR k IN 1 .. cardinality(act) LOOP
        SELECT p.prio, p.id INTO h FROM sluice_task p
         WHERE p.state = 2 AND p.wq_tag = a_tag[k] AND p.wq_lim = a_lim[k] AND p.wq_key = a_key[k]
         ORDER BY p.prio DESC, p.id LIMIT 1;
        IF FOUND AND (h.prio > t.prio OR (h.prio = t.prio AND h.id < t.id)) THEN
            t := sluice_task_park(t, act[k], NULL);
            PERFORM sluice_task_put(t);
            verdict := 'P';
            RETURN;
        END IF;
    END LOOP;
    now := sluice_task_ratchet(now, tags);
    IF cardinality(act) > 0 THEN
        ch := sluice_task_chain(a_def, a_tag, a_lim, a_key, a_units, t.lease_ns, now);
        IF NOT ch.granted THEN
            FOR k IN 1 .. cardinality(act) LOOP
                dd := ch.lead[k];
                CONTINUE WHEN ch.allowed[dd] <> 0;
                li := act[k];
                IF reject IS NULL AND t.l_flags[li] & 1 <> 0 THEN reject := k; END IF;
                IF never IS NULL AND ch.retry[dd] = mx THEN never := k; END IF;
                hz := CASE WHEN t.l_hz[li] > 0 THEN t.l_hz[li] ELSE mx END;
                IF horizon IS NULL AND kinds[k] <> 4 AND hz < ch.retry[dd] THEN horizon := k; END IF;
            END LOOP;
            IF reject IS NOT NULL OR never IS NOT NULL OR horizon IS NOT NULL THEN
                t := sluice_task_finish(t, 5, CASE WHEN reject IS NOT NULL THEN 1
                                                   WHEN never IS NOT NULL THEN 3 ELSE 2 END);
                verdict := 'F';
                RETURN;
            END IF;
            -- chain_denial: the denying link whose slot is latest.
            r := 0; denied := 1;
            FOR k IN 1 .. cardinality(act) LOOP
                dd := ch.lead[k];
                IF ch.allowed[dd] = 0 AND r < ch.retry[dd] THEN r := ch.retry[dd]; denied := k; END IF;
            END LOOP;
            t := sluice_task_park(t, act[denied], sluice_sat(now + r));
            PERFORM sluice_task_put(t);
            verdict := 'P';
            RETURN;
        END IF;
        FOR k IN 1 .. cardinality(act) LOOP
            li := act[k];
            IF ch.lead[k] = k AND kinds[k] = 4 THEN
                t.l_lease[li] := ch.lease[k];
            ELSIF kinds[k] <> 4 THEN
                t.l_charged[li] := now;
            END IF;
        END LOOP;
    END IF;
    t.flags := t.flags & ~2;
    t.attempt := t.attempt + 1;
    t.state := 3;
    t.due := sluice_sat(now + t.lease_ns);
    PERFORM sluice_task_put(t);
    verdict := 'D';
END $$;

-- The backoff before retry number `attempt` (dispatch.c's backoff).
CREATE FUNCTION sluice_task_backoff(t sluice_task, attempt int) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    d numeric := greatest(t.base_ns, 0);
    i int := 1;
BEGIN
    IF t.backoff = 1 THEN
        WHILE i < attempt AND d < t.max_ns LOOP
            d := sluice_sat(d + d); i := i + 1;
        END LOOP;
        IF t.max_ns > 0 AND t.max_ns < d THEN d := t.max_ns; END IF;
    END IF;
    RETURN d;
END $$;

-- RETRY_AFTER: every rate link's key is held back until `untl` (gcra.c's gcra_backoff).
CREATE FUNCTION sluice_task_backoff_links(t sluice_task, untl numeric, p_now numeric)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    now numeric := p_now;
    d record; tt record; rk int; rst bigint[]; cur bigint[];
    h_ns numeric; h_rem numeric; tat numeric; trem numeric;
BEGIN
    FOR i IN 1 .. cardinality(t.l_def) LOOP
        d := sluice_task_def(t.l_def[i]);
        CONTINUE WHEN NOT d.ok OR d.kind <> 1;
        now := sluice_task_ratchet(now, ARRAY[t.l_tag[i]]);
        SELECT s.kind, s.st INTO rk, rst FROM sluice_limit_state s
         WHERE s.tag = t.l_tag[i] AND s.lim = t.l_lim[i] AND s.key = t.l_key[i];
        cur := sluice_limit_load(1, d.per, rk, rst, now);
        tt := sluice_gcra_times(div(d.per, d.lim), mod(d.per, d.lim), d.lim, d.burst - 1);
        h_ns := sluice_sat(untl + tt.ns); h_rem := tt.rem;
        IF h_ns = 9223372036854775807 THEN h_rem := 0; END IF;
        tat := coalesce(cur[1], 0); trem := coalesce(cur[2], 0);
        IF tat < h_ns OR (tat = h_ns AND trem < h_rem) THEN
            tat := h_ns; trem := h_rem;
        END IF;
        UPDATE sluice_limit_state s SET kind = 1, st = ARRAY[tat, trem]::bigint[]
         WHERE s.tag = t.l_tag[i] AND s.lim = t.l_lim[i] AND s.key = t.l_key[i];
    END LOOP;
END $$;

-- The n most urgent ready tasks of p_types (priority, then id) but `skipped`, taken FOR UPDATE
-- SKIP LOCKED (another transaction's are passed over), in urgency order. One type at a time, so
-- that each is read in its index's order: `type = ANY (...)` would sort every ready task of the
-- types at each call. With several types, up to n of each are taken.
CREATE FUNCTION sluice_task_ready(p_types bytea[], n int, skipped bigint[]) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    out bigint[] := '{}';
BEGIN
    IF n <= 0 THEN RETURN out; END IF;
    IF cardinality(p_types) = 1 THEN
        RETURN ARRAY(SELECT id FROM sluice_task
                      WHERE state = 1 AND due = 0 AND type = p_types[1]
                        AND NOT (id = ANY (skipped))
                      ORDER BY prio DESC, id LIMIT n FOR UPDATE SKIP LOCKED);
    END IF;
    FOR i IN 1 .. cardinality(p_types) LOOP
        out := out || ARRAY(SELECT id FROM sluice_task
                             WHERE state = 1 AND due = 0 AND type = p_types[i]
                               AND NOT (id = ANY (skipped)) AND NOT (id = ANY (out))
                             ORDER BY prio DESC, id LIMIT n FOR UPDATE SKIP LOCKED);
    END LOOP;
    RETURN ARRAY(SELECT t.id FROM sluice_task t WHERE t.id = ANY (out)
                  ORDER BY t.prio DESC, t.id LIMIT n);
END $$;

-- ---- the ops ---------------------------------------------------------------------------------

-- CLAIM (the Redis script's op_claim): takes back lapsed leases, promotes due delayed tasks,
-- wakes due wait queues, then gates the most urgent ready tasks of p_types one by one. Returns
-- the answer's elements: "OK now delivered failed next_wake_ns more", then per delivered task
-- "id attempt lease_until_ns", its type and its payload.
CREATE FUNCTION sluice_task_claim(p_types bytea[], p_count int, p_now numeric) RETURNS bytea[]
LANGUAGE plpgsql AS $$
DECLARE
    scan CONSTANT int := 64;
    now numeric := p_now;
    more boolean := false;
    ids bigint[]; x bigint; t sluice_task; q record; nq int := 0;
    nd int := 0; nf int := 0; seen int := 0; skipped bigint[] := '{}';
    g record; outv bytea[] := '{}'; w numeric; w2 numeric; wake numeric := 0;
BEGIN
    -- Lapsed leases (scored by ms like the Redis script, so the bound cuts at the same task).
    SELECT array_agg(c.id ORDER BY c.ms, c.id::text COLLATE "C") INTO ids
      FROM (SELECT id, sluice_ms_ceil(due) AS ms FROM sluice_task
             WHERE state = 3 AND due <= sluice_i64(sluice_ms_ceil(now) * 1000000)
             ORDER BY sluice_ms_ceil(due), id::text COLLATE "C" LIMIT 64
               FOR UPDATE SKIP LOCKED) c;
    FOREACH x IN ARRAY coalesce(ids, '{}') LOOP
        SELECT * INTO t FROM sluice_task WHERE id = x;
        IF t.state = 3 AND t.due <= now THEN
            IF sluice_task_hold_leases(t) THEN
                t := sluice_task_lapse(t, now);
            ELSE
                more := true; -- its limit rows are another call's: a later claim takes it back
            END IF;
        END IF;
    END LOOP;
    IF coalesce(cardinality(ids), 0) = 64 THEN more := true; END IF;
    -- Delayed tasks that came due.
    FOR i IN 1 .. cardinality(p_types) LOOP
        SELECT array_agg(c.id ORDER BY c.ms, c.id::text COLLATE "C") INTO ids
          FROM (SELECT id, sluice_ms_ceil(due) AS ms FROM sluice_task
                 WHERE state = 1 AND due > 0 AND type = p_types[i]
                   AND due <= sluice_i64(sluice_ms_ceil(now) * 1000000)
                 ORDER BY sluice_ms_ceil(due), id::text COLLATE "C" LIMIT scan
                   FOR UPDATE SKIP LOCKED) c;
        FOREACH x IN ARRAY coalesce(ids, '{}') LOOP
            SELECT * INTO t FROM sluice_task WHERE id = x;
            IF t.state = 1 AND t.due > 0 AND t.due <= now THEN
                t.due := 0;
                PERFORM sluice_task_put(t);
                PERFORM sluice_task_woke();
            END IF;
        END LOOP;
        IF coalesce(cardinality(ids), 0) = scan THEN more := true; END IF;
    END LOOP;
    -- Wait queues whose time came (armed times are rounded up: never woken early). A queue
    -- whose limit row another transaction holds is left for a later claim.
    FOR q IN SELECT tag, lim, key FROM sluice_task_wake
              WHERE wake_ms <= sluice_i64(sluice_ms_floor(now))
              ORDER BY wake_ms, tag, lim, key LIMIT 16 LOOP
        nq := nq + 1;
        IF NOT sluice_task_trylock(q.tag, q.lim, q.key) THEN
            more := true;
        ELSIF sluice_task_wake_queue(q.tag, q.lim, q.key, now) THEN
            more := true;
        END IF;
    END LOOP;
    IF nq = 16 THEN more := true; END IF;
    -- The most urgent ready tasks, gated one by one, taken (SKIP LOCKED: another claimer's
    -- are left to it) as many at a time as could still be delivered: gating one never makes
    -- another ready, so a chunk in urgency order is the order the Redis script gates in.
    LOOP
        EXIT WHEN nd >= p_count;
        IF seen >= scan THEN
            FOR i IN 1 .. cardinality(p_types) LOOP
                IF EXISTS (SELECT 1 FROM sluice_task WHERE state = 1 AND due = 0
                              AND type = p_types[i] AND NOT (id = ANY (skipped))) THEN
                    more := true;
                END IF;
            END LOOP;
            EXIT;
        END IF;
        ids := sluice_task_ready(p_types, least(p_count - nd, scan - seen), skipped);
        EXIT WHEN cardinality(ids) = 0;
        FOREACH x IN ARRAY ids LOOP
            SELECT * INTO t FROM sluice_task WHERE id = x;
            seen := seen + 1;
            g := sluice_task_gate(t, now);
            t := g.t;
            IF now < g.now THEN now := g.now; END IF;
            IF g.verdict = 'D' THEN
                nd := nd + 1;
                outv := outv || convert_to(t.id::text || ' ' || t.attempt::text || ' '
                                           || t.due::text, 'UTF8')
                             || t.type || t.payload;
            ELSIF g.verdict = 'F' THEN
                nf := nf + 1;
            ELSIF g.verdict = 'S' THEN
                skipped := skipped || t.id; more := true;
            END IF;
        END LOOP;
    END LOOP;
    IF more THEN
        wake := now;
    ELSIF nd = 0 THEN
        SELECT sluice_ms_ceil(min(x.due)) INTO w
          FROM unnest(p_types) AS ty(type),
               LATERAL (SELECT d.due FROM sluice_task d
                         WHERE d.state = 1 AND d.due > 0 AND d.type = ty.type
                         ORDER BY d.due LIMIT 1) x;
        SELECT min(wake_ms) INTO w2 FROM sluice_task_wake;
        w := least(w, w2);
        SELECT sluice_ms_ceil(min(due)) INTO w2 FROM sluice_task WHERE state = 3;
        w := least(w, w2);
        IF w IS NOT NULL THEN wake := greatest(w * 1000000, now); END IF;
    END IF;
    RETURN convert_to('OK ' || now::text || ' ' || nd::text || ' ' || nf::text || ' '
                      || wake::text || ' ' || CASE WHEN more THEN '1' ELSE '0' END, 'UTF8')
           || outv;
END $$;

-- ACK, FAIL, TOUCH, CANCEL, INFO of task p_id (held) at now (the Redis script's op_done); f is
-- the request's fields. Returns the answer's elements.
CREATE FUNCTION sluice_task_done(op text, f text[], now numeric) RETURNS bytea[]
LANGUAGE plpgsql AS $$
DECLARE
    n text := now::text;
    t sluice_task;
    attempt int := f[3]::int;
    cost numeric; ra numeric; dead boolean; d record; sr record; rk int; rst bigint[];
    cur bigint[]; lnow numeric; old_tag bytea; old_lim text; old_key bytea;
BEGIN
    SELECT * INTO t FROM sluice_task WHERE id = f[2]::bigint;
    IF NOT FOUND THEN
        RETURN ARRAY[convert_to('NOTASK ' || n, 'UTF8')];
    END IF;
    IF t.state = 3 AND t.due <= now THEN
        t := sluice_task_lapse(t, now); -- its lease is over, whether or not a claim noticed it
    END IF;
    IF op = 'I' THEN
        RETURN ARRAY[convert_to(concat_ws(' ', 'OK', n, t.id, t.state, t.attempt,
                                          CASE WHEN t.state = 3 THEN t.due ELSE 0 END,
                                          t.fail_reason, t.prio, t.submitted, t.not_before,
                                          CASE WHEN t.tkey IS NULL THEN 0 ELSE 1 END,
                                          CASE WHEN t.message IS NULL THEN 0 ELSE 1 END,
                                          t.units), 'UTF8'),
                     t.type, t.payload, coalesce(t.tkey, '\x'::bytea),
                     coalesce(t.message, '\x'::bytea)];
    END IF;
    IF op = 'X' THEN
        IF t.state = 3 THEN
            RETURN ARRAY[convert_to('INUSE ' || n || ' 3 ' || t.attempt, 'UTF8')];
        END IF;
        IF t.state >= 4 THEN
            RETURN ARRAY[convert_to('OK ' || n || ' ' || t.state || ' ' || t.attempt || ' 0',
                                    'UTF8')];
        END IF;
        old_tag := t.wq_tag; old_lim := t.wq_lim; old_key := t.wq_key;
        t := sluice_task_finish(t, 6, 0);
        IF old_tag IS NOT NULL THEN
            PERFORM sluice_task_unqueue(old_tag, old_lim, old_key);
        END IF;
        RETURN ARRAY[convert_to('OK ' || n || ' 6 ' || t.attempt || ' 1', 'UTF8')];
    END IF;
    IF t.state <> 3 OR (attempt > 0 AND attempt <> t.attempt) THEN
        RETURN ARRAY[convert_to('NOLEASE ' || n || ' ' || t.state || ' ' || t.attempt, 'UTF8')];
    END IF;
    IF op = 'T' THEN
        t.due := sluice_sat(now + t.lease_ns);
        FOR i IN 1 .. cardinality(t.l_def) LOOP
            CONTINUE WHEN t.l_lease[i] = 0 OR NOT (sluice_task_def(t.l_def[i])).ok;
            PERFORM sluice_task_lease_touch(t.l_def[i], t.l_tag[i], t.l_lim[i], t.l_key[i],
                t.l_lease[i], t.lease_ns, sluice_task_ratchet(now, ARRAY[t.l_tag[i]]));
        END LOOP;
        PERFORM sluice_task_put(t);
        RETURN ARRAY[convert_to('OK ' || n || ' 3 ' || t.attempt || ' ' || t.due, 'UTF8')];
    END IF;
    IF op = 'K' THEN
        cost := f[4]::numeric;
        t := sluice_task_release(t, now);
        IF cost >= 0 THEN
            FOR i IN 1 .. cardinality(t.l_def) LOOP
                CONTINUE WHEN t.l_flags[i] & 2 = 0 OR t.l_charged[i] = 0;
                d := sluice_task_def(t.l_def[i]);
                CONTINUE WHEN NOT d.ok;
                lnow := sluice_task_ratchet(now, ARRAY[t.l_tag[i]]);
                SELECT s.kind, s.st INTO rk, rst FROM sluice_limit_state s
                 WHERE s.tag = t.l_tag[i] AND s.lim = t.l_lim[i] AND s.key = t.l_key[i];
                cur := sluice_limit_load(d.kind, d.per, rk, rst, lnow);
                sr := sluice_limit_settle(d.kind, d.lim, d.per, d.cal, cur, t.l_charged[i],
                                          t.l_units[i], cost, lnow);
                IF sr.status = 'OK' AND sr.nst IS NOT NULL THEN
                    UPDATE sluice_limit_state s
                       SET kind = CASE WHEN cardinality(sr.nst) > 0 THEN d.kind ELSE 0 END,
                           st = sr.nst
                     WHERE s.tag = t.l_tag[i] AND s.lim = t.l_lim[i] AND s.key = t.l_key[i];
                END IF;
            END LOOP;
        END IF;
        t := sluice_task_finish(t, 4, 0);
        RETURN ARRAY[convert_to('OK ' || n || ' 4 ' || t.attempt, 'UTF8')];
    END IF;
    -- FAIL
    dead := f[5] = '1';
    ra := f[6]::numeric;
    IF ra >= 0 THEN
        PERFORM sluice_task_backoff_links(t, sluice_sat(now + ra), now);
    END IF;
    IF f[8] = '1' THEN
        t.message := decode(f[7], 'hex');
    END IF;
    t := sluice_task_release(t, now);
    t.l_charged := array_fill(0::bigint, ARRAY[cardinality(t.l_def)]);
    t.flags := t.flags & ~1;
    IF dead THEN
        t := sluice_task_finish(t, 5, 5);
    ELSIF ra < 0 AND t.attempt >= t.max_attempts THEN
        t := sluice_task_finish(t, 5, 4);
    ELSE
        t.state := 1;
        IF t.throttle = 0 THEN t.flags := t.flags | 2; END IF;
        t.due := sluice_sat(now + sluice_task_backoff(t, t.attempt));
        IF ra >= 0 AND t.due < sluice_sat(now + ra) THEN t.due := sluice_sat(now + ra); END IF;
        IF t.not_before < t.due THEN t.not_before := t.due; END IF;
        PERFORM sluice_task_put(t);
        PERFORM sluice_task_woke();
    END IF;
    RETURN ARRAY[convert_to('OK ' || n || ' ' || t.state || ' ' || t.attempt, 'UTF8')];
END $$;

-- ADD (the Redis script's op_add); f is the request's fields. Returns the answer.
CREATE FUNCTION sluice_task_add(f text[], now numeric) RETURNS bytea
LANGUAGE plpgsql AS $$
DECLARE
    n text := now::text;
    has_tk boolean := f[5] = '1';
    tk bytea := CASE WHEN f[5] = '1' THEN decode(f[4], 'hex') END;
    nl int := f[16]::int;
    h sluice_task; at int; def text; u bigint; id bigint; delay numeric := f[7]::numeric;
    l_def text[] := '{}'; l_units bigint[] := '{}'; l_flags int[] := '{}'; l_hz bigint[] := '{}';
    l_tag bytea[] := '{}'; l_lim text[] := '{}'; l_key bytea[] := '{}';
BEGIN
    IF has_tk THEN
        SELECT * INTO h FROM sluice_task WHERE tkey = tk AND state < 4;
        IF FOUND AND h.state IN (1, 2) THEN
            UPDATE sluice_task SET payload = decode(f[3], 'hex') WHERE sluice_task.id = h.id;
            RETURN convert_to('OK ' || n || ' ' || h.id || ' 1', 'UTF8');
        ELSIF FOUND AND h.state = 3 THEN
            RETURN convert_to('EXISTS ' || n || ' ' || h.id, 'UTF8');
        END IF;
    END IF;
    FOR i IN 1 .. nl LOOP
        at := 17 + 13 * (i - 1);
        def := array_to_string(f[at : at + 6], ' ');
        u := CASE WHEN f[at + 7] ~ '^\d{1,18}$' THEN f[at + 7]::bigint END;
        IF NOT (sluice_task_def(def)).ok OR u IS NULL OR u < 1 THEN
            RETURN convert_to('INVAL ' || n || ' bad link ' || i, 'UTF8');
        END IF;
        l_def := l_def || def; l_units := l_units || u; l_flags := l_flags || f[at + 8]::int;
        l_hz := l_hz || f[at + 9]::bigint; l_tag := l_tag || decode(f[at + 10], 'hex');
        l_lim := l_lim || convert_from(decode(f[at + 11], 'hex'), 'UTF8');
        l_key := l_key || decode(f[at + 12], 'hex');
    END LOOP;
    id := nextval('sluice_task_id_seq');
    INSERT INTO sluice_task (id, type, state, prio, due, max_attempts, lease_ns, not_before,
                             submitted, backoff, base_ns, max_ns, throttle, charge_redelivery,
                             units, tkey, payload, l_def, l_units, l_flags, l_hz, l_tag, l_lim,
                             l_key, l_lease, l_charged)
    VALUES (id, decode(f[2], 'hex'), 1, f[6]::bigint,
            CASE WHEN delay > 0 THEN sluice_sat(now + delay) ELSE 0 END, f[9]::int,
            f[8]::bigint, CASE WHEN delay > 0 THEN sluice_sat(now + delay) ELSE 0 END, now,
            f[10]::int, f[11]::bigint, f[12]::bigint, f[13]::int, f[14]::int, f[15], tk,
            decode(f[3], 'hex'), l_def, l_units, l_flags, l_hz, l_tag, l_lim, l_key,
            array_fill(0::bigint, ARRAY[nl]), array_fill(0::bigint, ARRAY[nl]));
    PERFORM sluice_task_woke();
    RETURN convert_to('OK ' || n || ' ' || id || ' 0', 'UTF8');
END $$;

-- ---- the call --------------------------------------------------------------------------------

-- Runs a batch of task requests. p_now: the time to decide at (tests inject one; NULL:
-- clock_timestamp(), read after the call's locks). p_reqs: one string per request, fields
-- separated by one space, bytes as hex (src/store/pg_tasks.c writes them):
--   A type payload task_key has_task_key(0/1) priority delay_ns lease_ns max_attempts
--     backoff(0 fixed, 1 exponential) base_ns max_ns throttle_retries(0/1)
--     charge_redelivery(0/1) units nlinks, then per link: its definition (7 fields, 001's
--     text), units, flags (1 reject, 2 settle), horizon_ns, tag, limit id, key
--   C count ntypes type...
--   K|F|T|X|I id attempt(0: any) cost(-1: none) mode(0 retry, 1 dead) retry_after_ns(-1: none)
--     message has_message(0/1)
-- Returns rows (req, val) in order: request req's answer elements, as the Redis script's reply
-- to the same request (tasks.lua's header): the first "STATUS now [fields]", then for a CLAIM
-- per delivered task "id attempt lease_until_ns", its type and payload, and for INFO the type,
-- payload, task key and message. A request that makes work ready has the call notify
-- 'sluice_wake' (delivered at commit).
CREATE FUNCTION sluice_tasks_call(p_now bigint, p_reqs text[])
RETURNS TABLE (req int, val bytea)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    nr int := coalesce(cardinality(p_reqs), 0);
    f text[]; op text; nl int; at int;
    tkeys bytea[] := '{}'; named bigint[] := '{}'; ctypes bytea[] := '{}'; ccount int := 0;
    k_tag bytea[] := '{}'; k_lim text[] := '{}'; k_key bytea[] := '{}';
    hk bigint; t_sel numeric; base numeric; now numeric; types bytea[]; res bytea[];
    qclock numeric; fin numeric; e bytea;
BEGIN
    PERFORM set_config('sluice.twoke', '', true);
    PERFORM set_config('sluice.tfin', '', true);
    -- What the batch names.
    FOR ri IN 1 .. nr LOOP
        f := string_to_array(p_reqs[ri], ' ');
        op := f[1];
        IF op = 'A' THEN
            IF f[5] = '1' THEN tkeys := tkeys || decode(f[4], 'hex'); END IF;
            nl := f[16]::int;
            FOR i IN 1 .. nl LOOP
                at := 17 + 13 * (i - 1);
                k_tag := k_tag || decode(f[at + 10], 'hex');
                k_lim := k_lim || convert_from(decode(f[at + 11], 'hex'), 'UTF8');
                k_key := k_key || decode(f[at + 12], 'hex');
            END LOOP;
        ELSIF op = 'C' THEN
            ccount := ccount + f[2]::int;
            FOR i IN 1 .. f[3]::int LOOP
                ctypes := ctypes || decode(f[3 + i], 'hex');
            END LOOP;
        ELSE
            named := named || f[2]::bigint;
        END IF;
    END LOOP;
    -- 0. Task keys, in hash order.
    IF cardinality(tkeys) > 0 THEN
        FOR hk IN SELECT DISTINCT hashtextextended(encode(k, 'hex'), 0) FROM unnest(tkeys) k
                   ORDER BY 1 LOOP
            PERFORM pg_advisory_xact_lock(hk);
        END LOOP;
    END IF;
    -- 1. Named tasks and task-key holders, in id order.
    IF cardinality(tkeys) > 0 THEN
        named := named || ARRAY(SELECT id FROM sluice_task WHERE state < 4 AND tkey = ANY (tkeys));
    END IF;
    IF cardinality(named) > 0 THEN
        PERFORM 1 FROM sluice_task WHERE id = ANY (named) ORDER BY id FOR UPDATE;
    END IF;
    -- 2. Claim candidates, without waiting: lapsed leases, due delayed tasks, as many ready
    -- tasks as the claims ask. The limit rows of these tasks are locked below, with those of
    -- the parked tasks in the wait queues that may wake (due ones, and those of the keys the
    -- named and lapsed tasks hold). Not those of the ready tasks after them, which other
    -- claimers may be taking: a claim that gates further takes their rows without waiting.
    t_sel := coalesce(p_now::numeric, trunc(extract(epoch FROM clock_timestamp()) * 1000000) * 1000);
    IF cardinality(ctypes) > 0 THEN
        named := named || ARRAY(SELECT id FROM sluice_task WHERE state = 3
                                   AND due <= sluice_i64(sluice_ms_ceil(t_sel) * 1000000)
                                 ORDER BY due LIMIT 64 FOR UPDATE SKIP LOCKED);
        FOR i IN 1 .. cardinality(ctypes) LOOP
            named := named || ARRAY(SELECT id FROM sluice_task WHERE state = 1 AND due > 0
                                       AND due <= sluice_i64(sluice_ms_ceil(t_sel) * 1000000)
                                       AND type = ctypes[i]
                                     ORDER BY due LIMIT 64 FOR UPDATE SKIP LOCKED);
        END LOOP;
        named := named || sluice_task_ready(ctypes, least(ccount, 64), '{}');
        -- Parked tasks of the due queues and of the queues on the named tasks' keys.
        named := named || ARRAY(
            SELECT p.id FROM ((SELECT w.tag, w.lim, w.key FROM sluice_task_wake w
                               WHERE w.wake_ms <= sluice_i64(sluice_ms_floor(t_sel))
                               ORDER BY w.wake_ms LIMIT 16)
                              UNION
                              SELECT l.tag, l.lim, l.key FROM sluice_task n,
                                     unnest(n.l_tag, n.l_lim, n.l_key) AS l(tag, lim, key)
                               WHERE n.id = ANY (named)) q,
                   LATERAL (SELECT id FROM sluice_task s WHERE s.state = 2 AND s.wq_tag = q.tag
                               AND s.wq_lim = q.lim AND s.wq_key = q.key
                             ORDER BY s.prio DESC, s.id LIMIT 64) p);
        SELECT k_tag || array_agg(w.tag), k_lim || array_agg(w.lim::text), k_key || array_agg(w.key)
          INTO k_tag, k_lim, k_key
          FROM (SELECT tag, lim, key FROM sluice_task_wake
                 WHERE wake_ms <= sluice_i64(sluice_ms_floor(t_sel))
                 ORDER BY wake_ms LIMIT 16) w;
    END IF;
    IF cardinality(named) > 0 THEN
        SELECT k_tag || coalesce(array_agg(l.tag), '{}'), k_lim || coalesce(array_agg(l.lim), '{}'),
               k_key || coalesce(array_agg(l.key), '{}')
          INTO k_tag, k_lim, k_key
          FROM sluice_task n, unnest(n.l_tag, n.l_lim, n.l_key) AS l(tag, lim, key)
         WHERE n.id = ANY (named);
    END IF;
    -- 3. Every limit row and tag clock, in 001's order (creating the missing ones).
    IF cardinality(k_tag) > 0 THEN
        INSERT INTO sluice_limit_state AS s (tag, lim, key)
        SELECT u.tag, u.lim, u.key FROM (
            SELECT x.t AS tag, x.l COLLATE "C" AS lim, x.k AS key
              FROM unnest(k_tag, k_lim, k_key) AS x(t, l, k)
            UNION
            SELECT y.t, '' COLLATE "C", '\x'::bytea FROM unnest(k_tag) AS y(t)
        ) u
        ORDER BY u.tag, u.lim COLLATE "C", u.key
        ON CONFLICT (tag, lim, key) DO UPDATE SET kind = s.kind WHERE false;
    END IF;
    -- The time, once every lock is held.
    base := coalesce(p_now::numeric, trunc(extract(epoch FROM clock_timestamp()) * 1000000) * 1000);
    SELECT now_ns INTO qclock FROM sluice_task_clock;
    PERFORM set_config('sluice.tq', coalesce(qclock, 0)::text, true);

    FOR ri IN 1 .. nr LOOP
        f := string_to_array(p_reqs[ri], ' ');
        op := f[1];
        now := sluice_task_ratchet(base, '{}');
        IF op = 'A' THEN
            res := ARRAY[sluice_task_add(f, now)];
        ELSIF op = 'C' THEN
            types := '{}';
            FOR i IN 1 .. f[3]::int LOOP
                types := types || decode(f[3 + i], 'hex');
            END LOOP;
            res := sluice_task_claim(types, f[2]::int, now);
        ELSIF op IN ('K', 'F', 'T', 'X', 'I') THEN
            res := sluice_task_done(op, f, now);
        ELSE
            res := ARRAY[convert_to('INVAL ' || now::text || ' unknown op', 'UTF8')];
        END IF;
        FOREACH e IN ARRAY res LOOP
            req := ri; val := e;
            RETURN NEXT;
        END LOOP;
    END LOOP;

    -- Finished tasks past RTASK_KEEP_FINISHED are forgotten, the oldest first: those finished
    -- 10000 numbers or more before the last this call finished (a number lost to a rolled-back
    -- call keeps one fewer). One held by another call (an INFO) is left to a later pass.
    IF coalesce(current_setting('sluice.tfin', true), '') <> '' THEN
        DELETE FROM sluice_task WHERE id IN (
            SELECT id FROM sluice_task
             WHERE state >= 4 AND fin_seq <= current_setting('sluice.tfin')::bigint - 10000
               FOR UPDATE SKIP LOCKED);
    END IF;
    -- Rows created only to be locked, or emptied, are not kept (001's rule).
    IF cardinality(k_tag) > 0 THEN
        DELETE FROM sluice_limit_state s USING unnest(k_tag, k_lim, k_key) AS u(tag, lim, key)
         WHERE s.kind = 0 AND s.tag = u.tag AND (s.lim = u.lim AND s.key = u.key
                                                 OR s.lim = '' AND s.key = '\x'::bytea);
    END IF;
    -- The queue's clock, without waiting (see sluice_task_clock).
    fin := sluice_tq();
    IF fin > coalesce(qclock, 0) THEN
        UPDATE sluice_task_clock c SET now_ns = greatest(c.now_ns, fin)
         WHERE c.one IN (SELECT k.one FROM sluice_task_clock k
                          WHERE k.now_ns < fin - CASE WHEN p_now IS NULL THEN 1000000 ELSE 0 END
                            FOR UPDATE SKIP LOCKED);
    END IF;
    IF current_setting('sluice.twoke', true) = '1' THEN
        PERFORM pg_notify('sluice_wake', '1');
    END IF;
END $$;
