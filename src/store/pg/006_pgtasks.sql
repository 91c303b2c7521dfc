-- SPDX-License-Identifier: MIT
--
-- Schema version 3 of sluice's PostgreSQL store: the task queue's common requests set-based.
-- sluice_tasks_call (002) ran every request through PL/pgSQL one row at a time: a claim of one
-- task cost about 0.3 ms of interpreted statements, an ACK 0.17 ms, so three nodes took fewer
-- jobs a second than one plain SKIP LOCKED loop. This version keeps 002's tables, its locking
-- order and its per-request functions, and answers request for request exactly as 002 (and the
-- Redis script) did, but runs the common cases as one statement per run of requests:
--   - consecutive ADDs without links and without a task key: one INSERT ... SELECT FROM
--     unnest, their ids drawn in request order;
--   - consecutive CLAIMs of one and the same type, of at most 64 tasks each, when nothing is
--     due besides ready tasks (no lapsed lease, no delayed task of the type come due, no wait
--     queue due) and none of the ready tasks they take has links: one SELECT ... FOR UPDATE
--     SKIP LOCKED of the run's total, in (priority DESC, id) order, then one UPDATE; the first
--     claim gets the first tasks, the next the next ones, as 002's loop would hand them out;
--   - consecutive ACKs (COST or not) of distinct tasks without links, none of whose leases
--     lapsed: one UPDATE.
-- Anything else (links, task keys, lapsed leases, a due wait queue, FAIL, TOUCH, CANCEL, INFO)
-- goes through 002's functions, one request at a time, as before. Both paths decide at the same
-- time: a request without links never moves the call's time (no tag clock is ratcheted), so a
-- run decided at once sees exactly the time each of its requests would have seen alone.
--
-- The runs keep 002's lock order: they take no lock the call may wait for after the time is
-- read. An ACK run's rows were locked at the call's start (002's step 1); a claim run takes its
-- tasks with SKIP LOCKED (never waits; those the call's start took are its own); an ADD run's
-- new rows conflict with nothing (no task key).
--
-- Limits: sluice_limits_call (001) is replaced too, with a lean path for the most common
-- request, one rate link whose period is a multiple of its limit (see the end of this file).
--
-- Also: 002's small helpers written in SQL (sluice_task_put, sluice_task_woke, sluice_tq) were
-- planned again at every call from PL/pgSQL (a SQL function's plan is not kept across calls);
-- as PL/pgSQL functions their statements' plans are cached per connection. And the claims' type
-- list is made distinct before the ready tasks are selected: 002 selected once per claim of the
-- same type, and locked up to that many times as many ready tasks as asked for.
--
-- Applied by src/store/pg_schema.c on top of version 2; never edited once released.

-- ---- helpers, as PL/pgSQL (cached plans) -------------------------------------------------------

CREATE OR REPLACE FUNCTION sluice_tq() RETURNS numeric
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN coalesce(nullif(current_setting('sluice.tq', true), ''), '0')::numeric;
END $$;

CREATE OR REPLACE FUNCTION sluice_task_woke() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('sluice.twoke', '1', true);
END $$;

CREATE OR REPLACE FUNCTION sluice_task_put(t sluice_task) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE sluice_task SET state = t.state, due = t.due, attempt = t.attempt, flags = t.flags,
           not_before = t.not_before, fail_reason = t.fail_reason, park_link = t.park_link,
           wq_tag = t.wq_tag, wq_lim = t.wq_lim, wq_key = t.wq_key, payload = t.payload,
           message = t.message, fin_seq = t.fin_seq, l_lease = t.l_lease, l_charged = t.l_charged
     WHERE id = t.id;
END $$;

-- 002's, with the types made distinct first (first occurrence order): the same answer, one
-- query per distinct type.
CREATE OR REPLACE FUNCTION sluice_task_ready(p_types bytea[], n int, skipped bigint[])
RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    out bigint[] := '{}';
    types bytea[] := p_types;
BEGIN
    IF n <= 0 THEN RETURN out; END IF;
    IF cardinality(types) > 1 THEN
        types := ARRAY(SELECT u.t FROM unnest(p_types) WITH ORDINALITY AS u(t, o)
                        GROUP BY u.t ORDER BY min(u.o));
    END IF;
    IF cardinality(types) = 1 THEN
        RETURN ARRAY(SELECT id FROM sluice_task
                      WHERE state = 1 AND due = 0 AND type = types[1]
                        AND NOT (id = ANY (skipped))
                      ORDER BY prio DESC, id LIMIT n FOR UPDATE SKIP LOCKED);
    END IF;
    FOR i IN 1 .. cardinality(types) LOOP
        out := out || ARRAY(SELECT id FROM sluice_task
                             WHERE state = 1 AND due = 0 AND type = types[i]
                               AND NOT (id = ANY (skipped)) AND NOT (id = ANY (out))
                             ORDER BY prio DESC, id LIMIT n FOR UPDATE SKIP LOCKED);
    END LOOP;
    RETURN ARRAY(SELECT t.id FROM sluice_task t WHERE t.id = ANY (out)
                  ORDER BY t.prio DESC, t.id LIMIT n);
END $$;

-- ---- the set-based runs ------------------------------------------------------------------------

-- ADDs without links or task key (their request strings), at now: one INSERT. Returns their
-- answers in order, as sluice_task_add's.
CREATE FUNCTION sluice_task_add_run(p_reqs text[], now numeric) RETURNS bytea[]
LANGUAGE plpgsql AS $$
DECLARE
    m int := cardinality(p_reqs);
    ids bigint[];
BEGIN
    -- Ids in request order, as one nextval per request in turn would give them.
    ids := ARRAY(SELECT x FROM (SELECT nextval('sluice_task_id_seq') AS x
                                  FROM generate_series(1, m)) s ORDER BY x);
    INSERT INTO sluice_task (id, type, state, prio, due, max_attempts, lease_ns, not_before,
                             submitted, backoff, base_ns, max_ns, throttle, charge_redelivery,
                             units, tkey, payload, l_def, l_units, l_flags, l_hz, l_tag, l_lim,
                             l_key, l_lease, l_charged)
    SELECT ids[r.o::int], decode(f[2], 'hex'), 1, f[6]::bigint,
           CASE WHEN f[7]::numeric > 0 THEN sluice_sat(now + f[7]::numeric) ELSE 0 END,
           f[9]::int, f[8]::bigint,
           CASE WHEN f[7]::numeric > 0 THEN sluice_sat(now + f[7]::numeric) ELSE 0 END, now,
           f[10]::int, f[11]::bigint, f[12]::bigint, f[13]::int, f[14]::int, f[15], NULL,
           decode(f[3], 'hex'), '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}'
      FROM unnest(p_reqs) WITH ORDINALITY AS r(s, o), string_to_array(r.s, ' ') AS a(f);
    PERFORM sluice_task_woke();
    RETURN ARRAY(SELECT convert_to('OK ' || now::text || ' ' || x::text || ' 0', 'UTF8')
                   FROM unnest(ids) AS x);
END $$;

-- CLAIMs of type p_type, p_counts[i] tasks each (1..64), at now. Returns NULL when the run is
-- not for this path (something besides ready tasks is due, or a task it would take has links):
-- the caller then runs 002's claim for each, and the ready tasks this took stay this
-- transaction's, which 002's claims take as their own. Else the answers in order, each
-- claim's elements followed by a NULL separator.
CREATE FUNCTION sluice_task_claim_run(p_type bytea, p_counts int[], now numeric) RETURNS bytea[]
LANGUAGE plpgsql AS $$
DECLARE
    total int := 0;
    ids bigint[]; linked boolean; heads bytea[]; types bytea[]; pays bytea[];
    outv bytea[] := '{}'; off int := 0; nd int; w numeric; w2 numeric; wake numeric;
BEGIN
    -- What 002's claim does before it gates ready tasks must have nothing to do.
    -- Asked as min() (the first entry of each partial index), not as EXISTS (... due <= x): a
    -- generic plan of the latter scans every running task when none has lapsed.
    IF (SELECT min(due) FROM sluice_task WHERE state = 3) <= sluice_ms_ceil(now) * 1000000
       OR (SELECT min(due) FROM sluice_task WHERE state = 1 AND due > 0 AND type = p_type)
          <= sluice_ms_ceil(now) * 1000000
       OR (SELECT min(wake_ms) FROM sluice_task_wake) <= sluice_ms_floor(now) THEN
        RETURN NULL;
    END IF;
    SELECT sum(c) INTO total FROM unnest(p_counts) AS c;
    SELECT array_agg(c.id ORDER BY c.prio DESC, c.id), coalesce(bool_or(c.nl > 0), false)
      INTO ids, linked
      FROM (SELECT id, prio, cardinality(l_def) AS nl FROM sluice_task
             WHERE state = 1 AND due = 0 AND type = p_type
             ORDER BY prio DESC, id LIMIT total FOR UPDATE SKIP LOCKED) c;
    IF linked THEN RETURN NULL; END IF;
    ids := coalesce(ids, '{}');
    IF cardinality(ids) > 0 THEN
        -- sluice_task_gate of a task without links: delivered, its lease from now.
        WITH u AS (
            UPDATE sluice_task t SET flags = t.flags & ~2, attempt = t.attempt + 1, state = 3,
                   due = sluice_sat(now + t.lease_ns)
             WHERE t.id = ANY (ids)
            RETURNING t.id, t.attempt, t.due, t.type, t.payload)
        SELECT array_agg(convert_to(u.id::text || ' ' || u.attempt::text || ' ' || u.due::text,
                                    'UTF8') ORDER BY x.o),
               array_agg(u.type ORDER BY x.o), array_agg(u.payload ORDER BY x.o)
          INTO heads, types, pays
          FROM u JOIN unnest(ids) WITH ORDINALITY AS x(id, o) ON x.id = u.id;
    END IF;
    FOR i IN 1 .. cardinality(p_counts) LOOP
        nd := least(p_counts[i], cardinality(ids) - off);
        wake := 0;
        IF nd = 0 THEN
            -- 002's next wake: the earliest delayed task, armed queue or lease end.
            SELECT sluice_ms_ceil(min(d.due)) INTO w FROM sluice_task d
             WHERE d.state = 1 AND d.due > 0 AND d.type = p_type;
            SELECT min(wake_ms) INTO w2 FROM sluice_task_wake;
            w := least(w, w2);
            SELECT sluice_ms_ceil(min(due)) INTO w2 FROM sluice_task WHERE state = 3;
            w := least(w, w2);
            IF w IS NOT NULL THEN wake := greatest(w * 1000000, now); END IF;
        END IF;
        outv := outv || convert_to('OK ' || now::text || ' ' || nd::text || ' 0 '
                                   || wake::text || ' 0', 'UTF8');
        FOR k IN off + 1 .. off + nd LOOP
            outv := outv || heads[k] || types[k] || pays[k];
        END LOOP;
        outv := outv || NULL::bytea;
        off := off + nd;
    END LOOP;
    RETURN outv;
END $$;

-- ACKs (ids, attempts: 0 any) at now. Returns NULL when the run is not for this path (an id
-- twice, a task with links, or a lease that lapsed: 002's sluice_task_done handles those), else
-- the answers in order, as sluice_task_done's.
CREATE FUNCTION sluice_task_ack_run(p_ids bigint[], p_atts int[], now numeric) RETURNS bytea[]
LANGUAGE plpgsql AS $$
DECLARE
    n text := now::text;
    sts int[]; atts int[]; ok_ids bigint[] := '{}'; ok_fin bigint[] := '{}';
    outv bytea[] := '{}'; fin bigint;
BEGIN
    IF (SELECT count(DISTINCT x) FROM unnest(p_ids) AS x) <> cardinality(p_ids)
       OR EXISTS (SELECT 1 FROM sluice_task WHERE id = ANY (p_ids)
                     AND (cardinality(l_def) > 0 OR (state = 3 AND due <= now))) THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(t.state ORDER BY x.o), array_agg(t.attempt ORDER BY x.o) INTO sts, atts
      FROM unnest(p_ids) WITH ORDINALITY AS x(id, o) LEFT JOIN sluice_task t ON t.id = x.id;
    FOR i IN 1 .. cardinality(p_ids) LOOP
        IF sts[i] IS NULL THEN
            outv := outv || convert_to('NOTASK ' || n, 'UTF8');
        ELSIF sts[i] <> 3 OR (p_atts[i] > 0 AND p_atts[i] <> atts[i]) THEN
            outv := outv || convert_to('NOLEASE ' || n || ' ' || sts[i] || ' ' || atts[i], 'UTF8');
        ELSE
            fin := nextval('sluice_task_fin_seq');
            ok_ids := ok_ids || p_ids[i]; ok_fin := ok_fin || fin;
            outv := outv || convert_to('OK ' || n || ' 4 ' || atts[i], 'UTF8');
        END IF;
    END LOOP;
    IF cardinality(ok_ids) > 0 THEN
        -- sluice_task_finish of a task without links (nothing to release or settle).
        UPDATE sluice_task t SET state = 4, fail_reason = 0, due = 0, wq_tag = NULL,
               wq_lim = NULL, wq_key = NULL, fin_seq = u.f
          FROM unnest(ok_ids, ok_fin) AS u(id, f)
         WHERE t.id = u.id;
        PERFORM set_config('sluice.tfin', fin::text, true);
    END IF;
    RETURN outv;
END $$;

-- ---- the call ----------------------------------------------------------------------------------

-- 002's sluice_tasks_call (the same parameters, answers and locking order), with the runs above.
CREATE OR REPLACE FUNCTION sluice_tasks_call(p_now bigint, p_reqs text[])
RETURNS TABLE (req int, val bytea)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    nr int := coalesce(cardinality(p_reqs), 0);
    f text[]; op text; nl int; at int;
    tkeys bytea[] := '{}'; named bigint[] := '{}'; ctypes bytea[] := '{}'; ccount int := 0;
    k_tag bytea[] := '{}'; k_lim text[] := '{}'; k_key bytea[] := '{}';
    hk bigint; t_sel numeric; base numeric; now numeric; types bytea[]; res bytea[];
    qclock numeric; e bytea;
    ops text[] := '{}'; fast boolean[] := '{}'; ctype text[] := '{}'; cnt int[] := '{}';
    ids bigint[] := '{}'; atts int[] := '{}';
    ri int; rj int; r2 int; wq_due boolean;
BEGIN
    PERFORM set_config('sluice.twoke', '', true);
    PERFORM set_config('sluice.tfin', '', true);
    -- What the batch names, and which requests may go in a set-based run.
    FOR ri IN 1 .. nr LOOP
        f := string_to_array(p_reqs[ri], ' ');
        op := f[1];
        ops[ri] := op; fast[ri] := false;
        IF op = 'A' THEN
            IF f[5] = '1' THEN tkeys := tkeys || decode(f[4], 'hex'); END IF;
            nl := f[16]::int;
            fast[ri] := f[5] = '0' AND nl = 0;
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
            fast[ri] := f[3] = '1' AND f[2]::int BETWEEN 1 AND 64;
            ctype[ri] := f[4]; cnt[ri] := f[2]::int;
        ELSE
            named := named || f[2]::bigint;
            IF op = 'K' THEN
                fast[ri] := true;
                ids[ri] := f[2]::bigint; atts[ri] := f[3]::int;
            END IF;
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
    -- 2. Claim candidates, without waiting (002's comment).
    t_sel := coalesce(p_now::numeric, trunc(extract(epoch FROM clock_timestamp()) * 1000000) * 1000);
    IF cardinality(ctypes) > 0 THEN
        ctypes := ARRAY(SELECT u.t FROM unnest(ctypes) WITH ORDINALITY AS u(t, o)
                         GROUP BY u.t ORDER BY min(u.o));
        -- Each scan only when its index's first entry is due: a scan bounded by a parameter
        -- is planned again at each call, a min() is not.
        IF (SELECT min(due) FROM sluice_task WHERE state = 3)
           <= sluice_ms_ceil(t_sel) * 1000000 THEN
            named := named || ARRAY(SELECT id FROM sluice_task WHERE state = 3
                                       AND due <= sluice_i64(sluice_ms_ceil(t_sel) * 1000000)
                                     ORDER BY due LIMIT 64 FOR UPDATE SKIP LOCKED);
        END IF;
        FOR i IN 1 .. cardinality(ctypes) LOOP
            CONTINUE WHEN NOT coalesce((SELECT min(due) FROM sluice_task WHERE state = 1
                                           AND due > 0 AND type = ctypes[i])
                                       <= sluice_ms_ceil(t_sel) * 1000000, false);
            named := named || ARRAY(SELECT id FROM sluice_task WHERE state = 1 AND due > 0
                                       AND due <= sluice_i64(sluice_ms_ceil(t_sel) * 1000000)
                                       AND type = ctypes[i]
                                     ORDER BY due LIMIT 64 FOR UPDATE SKIP LOCKED);
        END LOOP;
        named := named || sluice_task_ready(ctypes, least(ccount, 64), '{}');
        -- Parked tasks of the due queues and of the queues on the named tasks' keys: looked
        -- for only when there may be any (this query is planned at each call).
        wq_due := coalesce((SELECT min(wake_ms) FROM sluice_task_wake) <= sluice_ms_floor(t_sel),
                           false);
        IF wq_due OR EXISTS (SELECT 1 FROM sluice_task n WHERE n.id = ANY (named)
                                AND cardinality(n.l_def) > 0) THEN
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
        END IF;
        IF wq_due THEN
            SELECT k_tag || array_agg(w.tag), k_lim || array_agg(w.lim::text), k_key || array_agg(w.key)
              INTO k_tag, k_lim, k_key
              FROM (SELECT tag, lim, key FROM sluice_task_wake
                     WHERE wake_ms <= sluice_i64(sluice_ms_floor(t_sel))
                     ORDER BY wake_ms LIMIT 16) w;
        END IF;
    END IF;
    IF cardinality(named) > 0 THEN
        SELECT k_tag || coalesce(array_agg(l.tag), '{}'), k_lim || coalesce(array_agg(l.lim), '{}'),
               k_key || coalesce(array_agg(l.key), '{}')
          INTO k_tag, k_lim, k_key
          FROM sluice_task n, unnest(n.l_tag, n.l_lim, n.l_key) AS l(tag, lim, key)
         WHERE n.id = ANY (named);
    END IF;
    -- 3. Every limit row and tag clock, in 001's order (creating the missing ones).
    PERFORM sluice_lock_limit_rows(k_tag, k_lim, k_key);
    -- The time, once every lock is held.
    base := coalesce(p_now::numeric, trunc(extract(epoch FROM clock_timestamp()) * 1000000) * 1000);
    SELECT now_ns INTO qclock FROM sluice_task_clock;
    PERFORM set_config('sluice.tq', coalesce(qclock, 0)::text, true);

    ri := 1;
    WHILE ri <= nr LOOP
        op := ops[ri];
        now := sluice_task_ratchet(base, '{}');
        res := NULL;
        rj := ri;
        IF fast[ri] THEN
            -- The run: the requests after ri of the same op that may join it.
            WHILE rj < nr AND ops[rj + 1] = op AND fast[rj + 1]
                  AND (op <> 'C' OR ctype[rj + 1] = ctype[ri]) LOOP
                rj := rj + 1;
            END LOOP;
            IF op = 'A' THEN
                res := sluice_task_add_run(p_reqs[ri : rj], now);
            ELSIF op = 'C' THEN
                res := sluice_task_claim_run(decode(ctype[ri], 'hex'), cnt[ri : rj], now);
            ELSE
                res := sluice_task_ack_run(ids[ri : rj], atts[ri : rj], now);
            END IF;
        END IF;
        IF res IS NOT NULL THEN
            -- One answer per request: ADD and ACK one element each, a claim's ended by NULL.
            r2 := ri;
            FOREACH e IN ARRAY res LOOP
                IF op = 'C' AND e IS NULL THEN
                    r2 := r2 + 1;
                    CONTINUE;
                END IF;
                req := r2; val := e;
                RETURN NEXT;
                IF op <> 'C' THEN r2 := r2 + 1; END IF;
            END LOOP;
            ri := rj + 1;
            CONTINUE;
        END IF;
        -- One request at a time, as 002 (each of a run this path refused, in turn).
        FOR r IN ri .. rj LOOP
            f := string_to_array(p_reqs[r], ' ');
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
                req := r; val := e;
                RETURN NEXT;
            END LOOP;
        END LOOP;
        ri := rj + 1;
    END LOOP;

    -- 002's end of a call, as 003's sluice_task_end, then one notification if work was made ready.
    PERFORM sluice_task_end(p_now, qclock, k_tag, k_lim, k_key);
    IF current_setting('sluice.twoke', true) = '1' THEN
        PERFORM pg_notify('sluice_wake', '1');
    END IF;
END $$;

-- ---- limits: a lean path for one whole-T rate link ---------------------------------------------

-- 001's sluice_limits_call, with two changes that give the same answers: a request of one rate
-- link whose period is a multiple of its limit (gcra.c's decide_whole), decided or peeked, is
-- computed inline instead of through sluice_limit_load, sluice_limit_decide, sluice_gcra_decide
-- and sluice_gcra_times (four nested PL/pgSQL calls, most of a decision's cost); and a
-- definition in the canonical form pg_limits.c writes is read without the subtransaction that
-- catches a cast that fails (one per definition per call); and the changed states are written
-- one UPDATE each (cached plans), the DELETE of emptied rows run only when there is one.
CREATE OR REPLACE FUNCTION sluice_limits_call(p_now bigint, p_flags text, p_defs text[], p_tags text[],
                                   p_lims text[], p_keys text[], p_reqs text[])
RETURNS text[]
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    audit boolean := position('a' in coalesce(p_flags, '')) > 0;
    nd int := coalesce(array_length(p_defs, 1), 0);
    d_kind int[] := '{}'; d_lim numeric[] := '{}'; d_per numeric[] := '{}';
    d_burst numeric[] := '{}'; d_se boolean[] := '{}'; d_ttl numeric[] := '{}';
    d_cal int[] := '{}'; d_ok boolean[] := '{}';
    -- per link of the batch: its state's and its tag's index in the arrays below
    b_state int[]; b_tag int[];
    -- the batch's distinct states (sorted by tag, limit id, key) and tags (sorted)
    s_tag bytea[]; s_lim text[]; s_key bytea[]; s_kind int[]; s_st text[]; s_dirty boolean[];
    c_tag bytea[]; c_kind int[]; c_now numeric[]; c_lease numeric[]; c_dirty boolean[];
    a_state int[] := '{}'; a_units numeric[] := '{}'; a_now numeric[] := '{}';
    f text[]; base numeric; now numeric; li int := 0; res text[] := '{}';
    op text; nl int; a1 numeric; a2 numeric; a3 numeric; ok boolean; msg text;
    l_def int[]; l_units numeric[]; l_state int[]; lead int[];
    m_units numeric[]; tags int[]; lease numeric;
    cur bigint[]; allowed_all boolean; dec record; st2 bigint[]; si int; ti int;
    d_allowed int[]; d_limit numeric[]; d_rem numeric[]; d_retry numeric[]; d_reset numeric[];
    d_lease numeric[]; ttl numeric; retry numeric; denied int; reply text; k int; j int;
    found_lease boolean; n3 int;
    -- per definition, for the lean path of a whole-T rate: T, the burst's span, and whether
    -- T is whole (period a multiple of the limit: gcra.c's decide_whole)
    d_tq numeric[] := '{}'; d_btq numeric[] := '{}'; d_whole boolean[] := '{}';
    g_fresh boolean; g_tat numeric; g_rem numeric; g_b numeric; g_ahead numeric; g_need numeric;
    g_units numeric;
BEGIN
    -- Lock every row of the batch, clocks and states, in one fixed order (see the file header).
    INSERT INTO sluice_limit_state AS s (tag, lim, key)
    SELECT u.tag, u.lim, u.key FROM (
        SELECT decode(x.t, 'hex') AS tag, x.l COLLATE "C" AS lim, decode(x.k, 'hex') AS key
          FROM unnest(p_tags, p_lims, p_keys) AS x(t, l, k)
        UNION
        SELECT decode(y.t, 'hex'), '' COLLATE "C", '\x'::bytea FROM unnest(p_tags) AS y(t)
    ) u
    ORDER BY u.tag, u.lim COLLATE "C", u.key
    ON CONFLICT (tag, lim, key) DO UPDATE SET kind = s.kind WHERE false;
    -- The time, once every lock is held.
    base := coalesce(p_now::numeric,
                     trunc(extract(epoch FROM clock_timestamp()) * 1000000) * 1000);

    -- Read the batch's rows once: each link's state and tag by index.
    SELECT array_agg(z.sr ORDER BY z.o), array_agg(z.tr ORDER BY z.o) INTO b_state, b_tag
      FROM (SELECT x.o,
                   dense_rank() OVER (ORDER BY decode(x.t, 'hex'), x.l COLLATE "C",
                                               decode(x.k, 'hex')) AS sr,
                   dense_rank() OVER (ORDER BY decode(x.t, 'hex')) AS tr
              FROM unnest(p_tags, p_lims, p_keys) WITH ORDINALITY AS x(t, l, k, o)) z;
    SELECT array_agg(u.tag ORDER BY u.tag, u.lim, u.key), array_agg(u.lim ORDER BY u.tag, u.lim, u.key),
           array_agg(u.key ORDER BY u.tag, u.lim, u.key),
           array_agg(c.kind::int ORDER BY u.tag, u.lim, u.key),
           array_agg(c.st::text ORDER BY u.tag, u.lim, u.key)
      INTO s_tag, s_lim, s_key, s_kind, s_st
      FROM (SELECT DISTINCT decode(x.t, 'hex') AS tag, x.l COLLATE "C" AS lim,
                            decode(x.k, 'hex') AS key
              FROM unnest(p_tags, p_lims, p_keys) AS x(t, l, k)) u
      JOIN sluice_limit_state c ON c.tag = u.tag AND c.lim = u.lim AND c.key = u.key;
    SELECT array_agg(u.tag ORDER BY u.tag), array_agg(c.kind::int ORDER BY u.tag),
           array_agg(CASE WHEN c.kind = -1 THEN c.st[1] END ORDER BY u.tag),
           array_agg(CASE WHEN c.kind = -1 THEN c.st[2] ELSE 0 END ORDER BY u.tag)
      INTO c_tag, c_kind, c_now, c_lease
      FROM (SELECT DISTINCT decode(y.t, 'hex') AS tag FROM unnest(p_tags) AS y(t)) u
      JOIN sluice_limit_state c ON c.tag = u.tag AND c.lim = '' AND c.key = '\x'::bytea;
    s_dirty := array_fill(false, ARRAY[coalesce(cardinality(s_tag), 0)]);
    c_dirty := array_fill(false, ARRAY[coalesce(cardinality(c_tag), 0)]);

    FOR i IN 1 .. nd LOOP
        f := string_to_array(p_defs[i], ' ');
        d_whole[i] := false;
        IF p_defs[i] ~ '^\d{1,9} \d{1,19} \d{1,19} \d{1,19} [01] -?\d{1,19} -?\d{1,9}$' THEN
            -- Canonical (what pg_limits.c writes): every cast below succeeds, so no
            -- subtransaction is needed to catch a failing one.
            d_kind[i] := f[1]::int; d_lim[i] := f[2]::numeric; d_per[i] := f[3]::numeric;
            d_burst[i] := f[4]::numeric; d_se[i] := f[5] = '1'; d_ttl[i] := f[6]::numeric;
            d_cal[i] := f[7]::int;
            d_ok[i] := d_kind[i] BETWEEN 1 AND 5 AND d_lim[i] >= 1
                       AND (d_kind[i] NOT IN (1, 2, 3) OR d_per[i] > 0);
            IF d_kind[i] = 1 AND d_burst[i] = 0 THEN d_burst[i] := d_lim[i]; END IF;
            IF d_ok[i] AND d_kind[i] = 1 AND mod(d_per[i], d_lim[i]) = 0 THEN
                d_whole[i] := true;
                d_tq[i] := div(d_per[i], d_lim[i]);
                -- sluice_gcra_times(T, 0, permits, burst): burst * T, or NEVER past int64
                d_btq[i] := CASE WHEN d_burst[i] * d_tq[i] > 9223372036854775807
                                   OR d_burst[i] * d_tq[i] < -9223372036854775808
                                 THEN 9223372036854775807 ELSE d_burst[i] * d_tq[i] END;
            END IF;
            CONTINUE;
        END IF;
        BEGIN
            d_kind[i] := f[1]::int; d_lim[i] := f[2]::numeric; d_per[i] := f[3]::numeric;
            d_burst[i] := f[4]::numeric; d_se[i] := f[5] = '1'; d_ttl[i] := f[6]::numeric;
            d_cal[i] := f[7]::int;
            d_ok[i] := array_length(f, 1) = 7 AND d_kind[i] BETWEEN 1 AND 5 AND d_lim[i] >= 1
                       AND (d_kind[i] NOT IN (1, 2, 3) OR d_per[i] > 0);
            IF d_kind[i] = 1 AND d_burst[i] = 0 THEN d_burst[i] := d_lim[i]; END IF;
        EXCEPTION WHEN others THEN
            d_ok[i] := false;
        END;
    END LOOP;

    FOR ri IN 1 .. coalesce(array_length(p_reqs, 1), 0) LOOP
        f := string_to_array(p_reqs[ri], ' ');
        op := f[1]; nl := f[2]::int;
        a1 := f[3]::numeric; a2 := f[4]::numeric; a3 := f[5]::numeric;
        ok := nl >= 1; msg := CASE WHEN nl >= 1 THEN '' ELSE 'no links' END;
        l_def := '{}'; l_units := '{}'; l_state := '{}'; tags := '{}';
        FOR i IN 1 .. nl LOOP
            li := li + 1;
            l_def[i] := f[4 + 2 * i]::int;
            l_units[i] := f[5 + 2 * i]::numeric;
            l_state[i] := b_state[li];
            IF l_def[i] IS NULL OR l_def[i] < 1 OR l_def[i] > nd OR NOT d_ok[l_def[i]]
               OR l_units[i] IS NULL OR l_units[i] < 1 THEN
                ok := false; msg := 'bad link';
            END IF;
            IF NOT b_tag[li] = ANY (tags) THEN tags := tags || b_tag[li]; END IF;
        END LOOP;
        -- The request's time: the call's, ratcheted by every clock of its tags; a request that
        -- is not a peek moves them to it.
        now := base;
        FOREACH ti IN ARRAY tags LOOP
            IF c_kind[ti] = -1 AND c_now[ti] > now THEN now := c_now[ti]; END IF;
        END LOOP;
        IF NOT ok THEN
            res[ri] := ('INVAL ' || now::text || ' ' || msg);
            CONTINUE;
        END IF;
        IF op <> 'P' THEN
            FOREACH ti IN ARRAY tags LOOP
                IF c_kind[ti] <> -1 THEN c_lease[ti] := 0; END IF;
                c_kind[ti] := -1; c_now[ti] := now; c_dirty[ti] := true;
            END LOOP;
        END IF;

        -- The lean path: one whole-T rate link, decided (D) or peeked (P) inline, as
        -- sluice_limit_load + sluice_limit_decide + sluice_gcra_decide's decide_whole would.
        k := l_def[1];
        IF nl = 1 AND (op = 'D' OR op = 'P') AND d_whole[k] THEN
            si := l_state[1]; g_units := l_units[1];
            g_fresh := true; g_tat := 0; g_rem := 0;
            IF s_kind[si] = 1 THEN
                cur := s_st[si]::bigint[];
                IF coalesce(array_length(cur, 1), 0) > 0
                   AND (now < cur[1] OR (now = cur[1] AND cur[2] > 0)) THEN
                    g_fresh := false; g_tat := cur[1]; g_rem := cur[2];
                END IF;
            END IF;
            IF d_se[k] AND (g_fresh OR (g_tat = 0 AND g_rem = 0)) THEN
                g_b := sluice_sat(now + (d_burst[k] - least(g_units, d_burst[k])) * d_tq[k]);
            ELSE
                g_b := greatest(g_tat, now);
            END IF;
            g_ahead := sluice_sat(g_b - now);
            IF g_units > d_burst[k] THEN
                reply := 'OK ' || now::text || ' 0 0 9223372036854775807 0 ' || d_burst[k]::text
                         || ' ' || div(d_btq[k] - g_ahead, d_tq[k])::text
                         || ' 9223372036854775807 ' || g_ahead::text || ' 0';
            ELSE
                g_need := sluice_sat(g_ahead + g_units * d_tq[k]);
                IF g_need <= d_btq[k] THEN
                    reply := 'OK ' || now::text || ' 1 0 0 1 ' || d_burst[k]::text || ' '
                             || div(d_btq[k] - g_need, d_tq[k])::text || ' 0 '
                             || g_need::text || ' 0';
                    IF op = 'D' THEN
                        g_b := sluice_sat(g_b + g_units * d_tq[k]);
                        IF g_fresh THEN g_rem := 0; END IF;
                        IF now < g_b OR (now = g_b AND g_rem > 0) THEN
                            s_kind[si] := 1; s_st[si] := '{' || g_b::text || ',' || g_rem::text || '}';
                        ELSE
                            s_kind[si] := 0; s_st[si] := '{}';
                        END IF;
                        s_dirty[si] := true;
                        IF audit THEN
                            a_state := a_state || si; a_units := a_units || g_units;
                            a_now := a_now || now;
                        END IF;
                    END IF;
                ELSE
                    reply := 'OK ' || now::text || ' 0 0 ' || (g_need - d_btq[k])::text || ' 0 '
                             || d_burst[k]::text || ' ' || div(d_btq[k] - g_ahead, d_tq[k])::text
                             || ' ' || (g_need - d_btq[k])::text || ' ' || g_ahead::text || ' 0';
                END IF;
            END IF;
            res[ri] := reply;
            CONTINUE;
        END IF;
        IF op = 'D' OR op = 'P' THEN
            -- Links naming one state share it: their units add up on the first (the lead).
            lead := '{}'; m_units := '{}';
            FOR i IN 1 .. nl LOOP
                lead[i] := i;
                FOR j2 IN 1 .. i - 1 LOOP
                    IF lead[j2] = j2 AND l_state[j2] = l_state[i] THEN
                        lead[i] := j2; m_units[j2] := m_units[j2] + l_units[i];
                        EXIT;
                    END IF;
                END LOOP;
                IF lead[i] = i THEN m_units[i] := l_units[i]; END IF;
            END LOOP;
            -- Every link judged before anything is written: all or nothing. (A one-link DECIDE
            -- needs no trial pass: a denial writes nothing anyway.)
            allowed_all := true;
            d_allowed := '{}'; d_limit := '{}'; d_rem := '{}'; d_retry := '{}'; d_reset := '{}';
            d_lease := '{}';
            FOR pass IN CASE WHEN nl = 1 AND op = 'D' THEN 2 ELSE 1 END .. 2 LOOP
                EXIT WHEN pass = 2 AND (NOT allowed_all OR op = 'P');
                FOR i IN 1 .. nl LOOP
                    CONTINUE WHEN lead[i] <> i;
                    k := l_def[i]; si := l_state[i];
                    cur := sluice_limit_load(d_kind[k], d_per[k], s_kind[si], s_st[si]::bigint[], now);
                    ttl := CASE WHEN a1 > 0 THEN a1 ELSE d_ttl[k] END;
                    dec := sluice_limit_decide(d_kind[k], d_lim[k], d_per[k],
                        d_burst[k], d_se[k], d_cal[k], cur, m_units[i], ttl, now, pass = 1);
                    d_allowed[i] := dec.allowed; d_limit[i] := dec.dlimit;
                    d_rem[i] := dec.remaining; d_retry[i] := dec.retry; d_reset[i] := dec.reset;
                    d_lease[i] := 0;
                    allowed_all := allowed_all AND dec.allowed = 1;
                    CONTINUE WHEN pass = 1;
                    st2 := dec.nst;
                    IF dec.lease_exp IS NOT NULL THEN
                        -- A new lease id: above every id the tag issued, and at least now.
                        ti := b_tag[li - nl + i];
                        lease := greatest(c_lease[ti] + 1, now);
                        c_lease[ti] := lease; c_dirty[ti] := true;
                        d_lease[i] := lease;
                        st2 := st2 || ARRAY[lease, dec.lease_exp, m_units[i]]::bigint[];
                    END IF;
                    IF st2 IS NOT NULL THEN
                        s_kind[si] := CASE WHEN cardinality(st2) > 0 THEN d_kind[k] ELSE 0 END;
                        s_st[si] := st2::text; s_dirty[si] := true;
                    END IF;
                END LOOP;
            END LOOP;
            IF allowed_all AND op = 'D' AND audit THEN
                FOR i IN 1 .. nl LOOP
                    a_state := a_state || l_state[i]; a_units := a_units || l_units[i];
                    a_now := a_now || now;
                END LOOP;
            END IF;
            retry := 0; denied := 0;
            FOR i IN 1 .. nl LOOP
                j := lead[i];
                IF NOT allowed_all AND d_allowed[j] = 0 AND retry < d_retry[j] THEN
                    retry := d_retry[j]; denied := i - 1;
                END IF;
            END LOOP;
            reply := 'OK ' || now::text || ' ' || CASE WHEN allowed_all THEN '1' ELSE '0' END
                     || ' ' || denied::text || ' ' || retry::text;
            FOR i IN 1 .. nl LOOP
                j := lead[i];
                reply := reply || ' ' || d_allowed[j]::text || ' ' || d_limit[j]::text || ' '
                         || d_rem[j]::text || ' ' || d_retry[j]::text || ' '
                         || d_reset[j]::text || ' '
                         || CASE WHEN j = i THEN d_lease[j]::text ELSE '0' END;
            END LOOP;
            res[ri] := reply;
            CONTINUE;
        END IF;

        k := l_def[1]; si := l_state[1];
        cur := sluice_limit_load(d_kind[k], d_per[k], s_kind[si], s_st[si]::bigint[], now);
        IF op = 'N' OR op = 'R' THEN
            IF d_kind[k] <> 4 THEN
                res[ri] := ('INVAL ' || now::text || ' not a concurrency limit');
                CONTINUE;
            END IF;
            found_lease := false; n3 := coalesce(array_length(cur, 1), 0) / 3;
            FOR i IN 1 .. n3 LOOP
                IF cur[3 * i - 2] = a1 THEN
                    found_lease := true;
                    IF op = 'N' THEN
                        IF cur[3 * i] = 0 THEN found_lease := false; EXIT; END IF;
                        ttl := CASE WHEN a2 > 0 THEN a2 ELSE d_ttl[k] END;
                        cur[3 * i - 1] := sluice_sat(now + ttl);
                        reply := 'OK ' || now::text || ' ' || cur[3 * i - 1]::text;
                    ELSE
                        cur[3 * i] := 0;
                        reply := 'OK ' || now::text;
                    END IF;
                    EXIT;
                END IF;
            END LOOP;
            IF NOT found_lease THEN
                res[ri] := ('STALE ' || now::text || CASE WHEN op = 'N' THEN ' 0' ELSE '' END);
                CONTINUE;
            END IF;
            s_kind[si] := 4; s_st[si] := cur::text; s_dirty[si] := true;
            res[ri] := reply;
            CONTINUE;
        END IF;
        IF op = 'S' THEN
            dec := sluice_limit_settle(d_kind[k], d_lim[k], d_per[k], d_cal[k], cur,
                                                       a1, a2, a3, now);
            IF dec.status = 'INVAL' THEN
                res[ri] := ('INVAL ' || now::text
                               || ' settle applies to rate, window, sliding and quota limits');
                CONTINUE;
            END IF;
            IF dec.nst IS NOT NULL THEN
                s_kind[si] := CASE WHEN cardinality(dec.nst) > 0 THEN d_kind[k] ELSE 0 END;
                s_st[si] := dec.nst::text; s_dirty[si] := true;
            END IF;
            res[ri] := (dec.status || ' ' || now::text);
            CONTINUE;
        END IF;
        res[ri] := ('INVAL ' || now::text || ' unknown op ' || coalesce(op, ''));
    END LOOP;

    -- Write back what changed, once per row. Rows that hold nothing (created only to be
    -- locked, or emptied) are not kept; clock rows are (kind -1): they carry the tag's ratchet
    -- and lease counter.
    -- One UPDATE per changed state (a batch names few): its plan is cached, where one UPDATE
    -- ... FROM unnest(...) of them all was planned again at every call.
    FOR i IN 1 .. coalesce(cardinality(s_tag), 0) LOOP
        CONTINUE WHEN NOT s_dirty[i];
        UPDATE sluice_limit_state c SET kind = s_kind[i], st = s_st[i]::bigint[]
         WHERE c.tag = s_tag[i] AND c.lim = s_lim[i] AND c.key = s_key[i];
    END LOOP;
    UPDATE sluice_limit_state c SET kind = -1, st = ARRAY[u.now, u.lease]::bigint[]
      FROM unnest(c_tag, c_now, c_lease, c_dirty) AS u(tag, now, lease, dirty)
     WHERE u.dirty AND c.tag = u.tag AND c.lim = '' AND c.key = '\x'::bytea;
    IF 0 = ANY (s_kind) THEN
        DELETE FROM sluice_limit_state c
          USING unnest(s_tag, s_lim, s_key, s_kind) AS u(tag, lim, key, kind)
         WHERE u.kind = 0 AND c.tag = u.tag AND c.lim = u.lim AND c.key = u.key;
    END IF;
    IF 0 = ANY (c_kind) THEN
        DELETE FROM sluice_limit_state c
          USING unnest(c_tag, c_kind) AS u(tag, kind)
         WHERE u.kind = 0 AND c.tag = u.tag AND c.lim = '' AND c.key = '\x'::bytea;
    END IF;
    IF cardinality(a_state) > 0 THEN
        INSERT INTO sluice_limit_audit (tag, lim, key, units, now_ns)
        SELECT s_tag[u.s], s_lim[u.s], s_key[u.s], u.units, u.now
          FROM unnest(a_state, a_units, a_now) WITH ORDINALITY AS u(s, units, now, o)
         ORDER BY u.o;
    END IF;
    RETURN res;
END $$;
