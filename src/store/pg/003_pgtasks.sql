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
    qclock numeric; fin numeric; e bytea;
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

    -- Finished tasks past RTASK_KEEP_FINISHED are forgotten, the oldest first (002).
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
