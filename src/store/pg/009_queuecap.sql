-- SPDX-License-Identifier: MIT
--
-- Schema version 9 of sluice's PostgreSQL store: the engine's caps, max_tasks and max_parked,
-- enforced across every node with the single node's rules, as the Redis script does
-- (src/store/redis/tasks.lua, "Counts"; src/store/redis_tasks.h, "Caps"):
--   - an ADD of a new task (not a replacement by task key) is answered "BUSY now tasks" when
--     the unfinished tasks (queued, delayed, parked, running) reach max_tasks, and "BUSY now
--     parked" when the parked ones reach max_parked and the task would wait now (not delayed,
--     and a key of its chain has parked tasks or a link's peek denies its units);
--   - a claim fails a task that must park while the parked tasks are at max_parked
--     (RATELIMITED), in front of a more urgent parked task or denied by its chain.
-- The caps travel with every call: sluice_tasks_call gains two parameters (the 2-parameter
-- form stays, without caps). A cap of 0 is none.
--
-- And group slots (TASK.ADD ... LEASE, docs/limits.md), as the script's: an ADD may name, after
-- its links, the concurrency link its producer's lease stands in for and the lease's id; it is
-- refused ("NOLEASE now") unless that lease lives on the link's row. The task keeps them
-- (glink, glease); while the lease lives the gate does not ask that link, and once it is gone
-- the task leaves the group for good (gate.c's gate_group_check).
--
-- The counts. A row trigger on sluice_task adds each change of a task's state to the call's
-- pending deltas (transaction-local settings sluice.du and sluice.dp); sluice_task_end, which
-- ends every task and series call, adds them to one of 64 stripe rows of sluice_task_count
-- (the backend's pid modulo 64), so that calls that only finish or wake tasks never wait for
-- each other on one row. A check reads the sum of the stripes plus its own pending deltas after
-- taking one transaction-scoped advisory lock, the caps' lock: every call that may raise a
-- count past a cap (an ADD of a new task, a claim about to park a task) takes it, so such calls
-- run one after another across nodes and each sees the last one's commit; a call that only
-- lowers the counts (finishes, wakes) does not take it, and one a check does not see yet only
-- makes the check cautious. Lock order: the caps' lock is taken after the call's row locks and
-- its time (002's order), and a call holding it waits for nothing else but stripe rows at its
-- end, which only committing calls hold: no cycle.
--
-- Cost: calls that add tasks (with caps given) take turns on the caps' lock, each holding it
-- through its commit; ADDs of one node are batched into one call, so the turns are per call.
-- A series' occurrence (003's FIRE) is counted but not refused by the caps, as on Redis.
--
-- Applied by src/store/pg_schema.c on top of version 6; never edited once released.

-- ---- group slots -----------------------------------------------------------------------------

-- The link (1-based; 0: none) whose unit the task's group lease stands in for, and that lease.
ALTER TABLE sluice_task ADD COLUMN glink int NOT NULL DEFAULT 0,
                        ADD COLUMN glease bigint NOT NULL DEFAULT 0;

-- 006's sluice_task_put, writing the group too.
CREATE OR REPLACE FUNCTION sluice_task_put(t sluice_task) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE sluice_task SET state = t.state, due = t.due, attempt = t.attempt, flags = t.flags,
           not_before = t.not_before, fail_reason = t.fail_reason, park_link = t.park_link,
           wq_tag = t.wq_tag, wq_lim = t.wq_lim, wq_key = t.wq_key, payload = t.payload,
           message = t.message, fin_seq = t.fin_seq, l_lease = t.l_lease, l_charged = t.l_charged,
           glink = t.glink, glease = t.glease
     WHERE id = t.id;
END $$;

-- Whether lease p_lease lives on the concurrency row (tag, lim, key) at now: held (units > 0)
-- and unexpired, as 001's sluice_limit_load reads the row. A read: no lock needed.
CREATE FUNCTION sluice_task_lease_live(p_tag bytea, p_lim text, p_key bytea, p_lease bigint,
                                       p_now numeric)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    k int;
    st bigint[];
BEGIN
    SELECT s.kind, s.st INTO k, st FROM sluice_limit_state s
     WHERE s.tag = p_tag AND s.lim = p_lim AND s.key = p_key;
    IF k IS DISTINCT FROM 4 THEN RETURN false; END IF;
    FOR i IN 1 .. coalesce(cardinality(st), 0) / 3 LOOP
        IF st[3 * i - 2] = p_lease THEN
            RETURN st[3 * i] > 0 AND p_now < st[3 * i - 1];
        END IF;
    END LOOP;
    RETURN false;
END $$;

-- ---- the counts ------------------------------------------------------------------------------

-- Committed counts, split over stripes: the counts are the sums over every row.
CREATE TABLE sluice_task_count (
    stripe int PRIMARY KEY,
    u bigint NOT NULL DEFAULT 0, -- unfinished tasks (state 1..3)
    p bigint NOT NULL DEFAULT 0  -- parked tasks (state 2)
);
INSERT INTO sluice_task_count (stripe, u, p)
SELECT 0, count(*) FILTER (WHERE state < 4), count(*) FILTER (WHERE state = 2) FROM sluice_task;

-- A transaction-local integer setting (0 when unset).
CREATE FUNCTION sluice_task_setting(p_name text) RETURNS bigint
LANGUAGE sql STABLE AS $$
    SELECT coalesce(nullif(current_setting(p_name, true), ''), '0')::bigint
$$;

-- Adds a task row's change of state to the transaction's pending deltas.
CREATE FUNCTION sluice_task_count_row() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    du int := 0;
    dp int := 0;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        IF OLD.state < 4 THEN du := du - 1; END IF;
        IF OLD.state = 2 THEN dp := dp - 1; END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF NEW.state < 4 THEN du := du + 1; END IF;
        IF NEW.state = 2 THEN dp := dp + 1; END IF;
    END IF;
    IF du <> 0 THEN
        PERFORM set_config('sluice.du', (sluice_task_setting('sluice.du') + du)::text, true);
    END IF;
    IF dp <> 0 THEN
        PERFORM set_config('sluice.dp', (sluice_task_setting('sluice.dp') + dp)::text, true);
    END IF;
    RETURN NULL;
END $$;

-- Only the rows whose state counts (most updates keep the state; finished rows are deleted).
CREATE TRIGGER sluice_task_count_ins AFTER INSERT ON sluice_task
    FOR EACH ROW EXECUTE FUNCTION sluice_task_count_row();
CREATE TRIGGER sluice_task_count_upd AFTER UPDATE OF state ON sluice_task
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION sluice_task_count_row();
CREATE TRIGGER sluice_task_count_del AFTER DELETE ON sluice_task
    FOR EACH ROW WHEN (OLD.state < 4) EXECUTE FUNCTION sluice_task_count_row();

-- An emptied queue (TRUNCATE, as the tests do) counts nothing.
CREATE FUNCTION sluice_task_count_truncated() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM sluice_task_count;
    PERFORM set_config('sluice.du', '0', true);
    PERFORM set_config('sluice.dp', '0', true);
    RETURN NULL;
END $$;
CREATE TRIGGER sluice_task_count_trunc AFTER TRUNCATE ON sluice_task
    FOR EACH STATEMENT EXECUTE FUNCTION sluice_task_count_truncated();

-- The counts now, for a check: the committed stripes plus this call's pending deltas, read
-- after the caps' lock (see above).
CREATE FUNCTION sluice_task_counts(OUT u bigint, OUT p bigint)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1936483683, 7); -- the caps' lock (the two-int key space)
    SELECT coalesce(sum(c.u), 0), coalesce(sum(c.p), 0) INTO u, p FROM sluice_task_count c;
    u := u + sluice_task_setting('sluice.du');
    p := p + sluice_task_setting('sluice.dp');
END $$;

-- Whether the parking lot is full: max_parked given and reached.
CREATE FUNCTION sluice_task_parked_full() RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    cap bigint := sluice_task_setting('sluice.max_parked');
    n bigint;
BEGIN
    IF cap <= 0 THEN RETURN false; END IF;
    SELECT c.p INTO n FROM sluice_task_counts() c;
    RETURN n >= cap;
END $$;

-- Whether a new task with these links would wait if gated now (engine.c's would_park, the
-- script's would_park): a key of its chain has parked tasks, or a link's peek at its tag's time
-- denies its units; not the group's link. Writes nothing. The rows must be held (an ADD's are, from the call's start).
CREATE FUNCTION sluice_task_would_park(p_def text[], p_units bigint[], p_tag bytea[],
                                       p_lim text[], p_key bytea[], p_glink int, p_now numeric)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    d record; dec record; at numeric; ckind int; ck bigint[]; rk int; rst bigint[];
    cur bigint[];
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_def), 0) LOOP
        CONTINUE WHEN i = p_glink; -- the group's lease stands in for that link
        IF EXISTS (SELECT 1 FROM sluice_task WHERE state = 2 AND wq_tag = p_tag[i]
                      AND wq_lim = p_lim[i] AND wq_key = p_key[i]) THEN
            RETURN true;
        END IF;
        d := sluice_task_def(p_def[i]);
        CONTINUE WHEN NOT d.ok;
        at := p_now;
        SELECT s.kind, s.st INTO ckind, ck FROM sluice_limit_state s
         WHERE s.tag = p_tag[i] AND s.lim = '' AND s.key = '\x'::bytea;
        IF ckind = -1 AND ck[1] > at THEN at := ck[1]; END IF;
        SELECT s.kind, s.st INTO rk, rst FROM sluice_limit_state s
         WHERE s.tag = p_tag[i] AND s.lim = p_lim[i] AND s.key = p_key[i];
        cur := sluice_limit_load(d.kind, d.per, rk, rst, at);
        dec := sluice_limit_decide(d.kind, d.lim, d.per, d.burst, d.se, d.cal, cur, p_units[i],
                                   d.ttl, at, true);
        IF dec.allowed <> 1 THEN RETURN true; END IF;
    END LOOP;
    RETURN false;
END $$;

-- ---- the end of a call -----------------------------------------------------------------------

-- 003's sluice_task_end, then the call's pending deltas added to its stripe (its last lock:
-- another call holds that row only while it commits).
CREATE OR REPLACE FUNCTION sluice_task_end(p_now bigint, qclock numeric, k_tag bytea[],
                                           k_lim text[], k_key bytea[])
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    fin numeric;
    du bigint;
    dp bigint;
BEGIN
    IF coalesce(current_setting('sluice.tfin', true), '') <> '' THEN
        DELETE FROM sluice_task WHERE id IN (
            SELECT id FROM sluice_task
             WHERE state >= 4 AND fin_seq <= current_setting('sluice.tfin')::bigint - 10000
               FOR UPDATE SKIP LOCKED);
    END IF;
    IF cardinality(k_tag) > 0 THEN
        DELETE FROM sluice_limit_state s USING unnest(k_tag, k_lim, k_key) AS u(tag, lim, key)
         WHERE s.kind = 0 AND s.tag = u.tag AND (s.lim = u.lim AND s.key = u.key
                                                 OR s.lim = '' AND s.key = '\x'::bytea);
    END IF;
    fin := sluice_tq();
    IF fin > coalesce(qclock, 0) THEN
        UPDATE sluice_task_clock c SET now_ns = greatest(c.now_ns, fin)
         WHERE c.one IN (SELECT k.one FROM sluice_task_clock k
                          WHERE k.now_ns < fin - CASE WHEN p_now IS NULL THEN 1000000 ELSE 0 END
                            FOR UPDATE SKIP LOCKED);
    END IF;
    du := sluice_task_setting('sluice.du');
    dp := sluice_task_setting('sluice.dp');
    IF du <> 0 OR dp <> 0 THEN
        INSERT INTO sluice_task_count AS c (stripe, u, p) VALUES (pg_backend_pid() % 64, du, dp)
        ON CONFLICT (stripe) DO UPDATE SET u = c.u + excluded.u, p = c.p + excluded.p;
        PERFORM set_config('sluice.du', '0', true);
        PERFORM set_config('sluice.dp', '0', true);
    END IF;
END $$;

-- ---- ADD -------------------------------------------------------------------------------------

-- 002's sluice_task_add, with the caps' checks (the script's op_add).
CREATE OR REPLACE FUNCTION sluice_task_add(f text[], now numeric) RETURNS bytea
LANGUAGE plpgsql AS $$
DECLARE
    n text := now::text;
    has_tk boolean := f[5] = '1';
    tk bytea := CASE WHEN f[5] = '1' THEN decode(f[4], 'hex') END;
    nl int := f[16]::int;
    h sluice_task; at int; def text; u bigint; id bigint; delay numeric := f[7]::numeric;
    l_def text[] := '{}'; l_units bigint[] := '{}'; l_flags int[] := '{}'; l_hz bigint[] := '{}';
    l_tag bytea[] := '{}'; l_lim text[] := '{}'; l_key bytea[] := '{}';
    cap bigint; cu bigint; glink int; glease bigint;
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
    cap := sluice_task_setting('sluice.max_tasks');
    IF cap > 0 THEN
        SELECT c.u INTO cu FROM sluice_task_counts() c;
        IF cu >= cap THEN
            RETURN convert_to('BUSY ' || n || ' tasks', 'UTF8');
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
    glink := coalesce(f[17 + 13 * nl], '0')::int;
    glease := coalesce(f[18 + 13 * nl], '0')::bigint;
    IF glink > 0 AND NOT (glink <= nl AND sluice_task_lease_live(l_tag[glink], l_lim[glink],
                                                                 l_key[glink], glease, now)) THEN
        RETURN convert_to('NOLEASE ' || n, 'UTF8');
    END IF;
    IF delay <= 0 AND sluice_task_parked_full()
       AND sluice_task_would_park(l_def, l_units, l_tag, l_lim, l_key, glink, now) THEN
        RETURN convert_to('BUSY ' || n || ' parked', 'UTF8');
    END IF;
    id := nextval('sluice_task_id_seq');
    INSERT INTO sluice_task (id, type, state, prio, due, max_attempts, lease_ns, not_before,
                             submitted, backoff, base_ns, max_ns, throttle, charge_redelivery,
                             units, tkey, payload, l_def, l_units, l_flags, l_hz, l_tag, l_lim,
                             l_key, l_lease, l_charged, glink, glease)
    VALUES (id, decode(f[2], 'hex'), 1, f[6]::bigint,
            CASE WHEN delay > 0 THEN sluice_sat(now + delay) ELSE 0 END, f[9]::int,
            f[8]::bigint, CASE WHEN delay > 0 THEN sluice_sat(now + delay) ELSE 0 END, now,
            f[10]::int, f[11]::bigint, f[12]::bigint, f[13]::int, f[14]::int, f[15], tk,
            decode(f[3], 'hex'), l_def, l_units, l_flags, l_hz, l_tag, l_lim, l_key,
            array_fill(0::bigint, ARRAY[nl]), array_fill(0::bigint, ARRAY[nl]), glink, glease);
    PERFORM sluice_task_woke();
    RETURN convert_to('OK ' || n || ' ' || id || ' 0', 'UTF8');
END $$;

-- 006's run of ADDs without links or task key, with max_tasks: the first requests up to the
-- cap are added, the rest answered BUSY (a run only adds, so once one is refused every later
-- one is). Tasks without links never park: max_parked does not apply.
CREATE OR REPLACE FUNCTION sluice_task_add_run(p_reqs text[], now numeric) RETURNS bytea[]
LANGUAGE plpgsql AS $$
DECLARE
    m int := cardinality(p_reqs);
    cap bigint := sluice_task_setting('sluice.max_tasks');
    room int := m;
    cu bigint;
    ids bigint[];
BEGIN
    IF cap > 0 THEN
        SELECT c.u INTO cu FROM sluice_task_counts() c;
        room := least(m, greatest(cap - cu, 0))::int;
    END IF;
    -- Ids in request order, as one nextval per request in turn would give them.
    ids := ARRAY(SELECT x FROM (SELECT nextval('sluice_task_id_seq') AS x
                                  FROM generate_series(1, room)) s ORDER BY x);
    IF room > 0 THEN
        INSERT INTO sluice_task (id, type, state, prio, due, max_attempts, lease_ns, not_before,
                                 submitted, backoff, base_ns, max_ns, throttle,
                                 charge_redelivery, units, tkey, payload, l_def, l_units,
                                 l_flags, l_hz, l_tag, l_lim, l_key, l_lease, l_charged)
        SELECT ids[r.o::int], decode(f[2], 'hex'), 1, f[6]::bigint,
               CASE WHEN f[7]::numeric > 0 THEN sluice_sat(now + f[7]::numeric) ELSE 0 END,
               f[9]::int, f[8]::bigint,
               CASE WHEN f[7]::numeric > 0 THEN sluice_sat(now + f[7]::numeric) ELSE 0 END, now,
               f[10]::int, f[11]::bigint, f[12]::bigint, f[13]::int, f[14]::int, f[15], NULL,
               decode(f[3], 'hex'), '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}'
          FROM unnest(p_reqs[1 : room]) WITH ORDINALITY AS r(s, o),
               string_to_array(r.s, ' ') AS a(f);
        PERFORM sluice_task_woke();
    END IF;
    RETURN ARRAY(SELECT convert_to('OK ' || now::text || ' ' || x::text || ' 0', 'UTF8')
                   FROM unnest(ids) AS x)
           || ARRAY(SELECT convert_to('BUSY ' || now::text || ' tasks', 'UTF8')
                      FROM generate_series(1, m - room));
END $$;

-- ---- the gate --------------------------------------------------------------------------------

-- 002's sluice_task_gate, failing as RATELIMITED a task that must park while the parking lot
-- is full (dispatch.c's poll_one; the script's gate), and not asking the link a live group
-- lease stands in for.
CREATE OR REPLACE FUNCTION sluice_task_gate(INOUT t sluice_task, INOUT now numeric,
                                            OUT verdict text)
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
    IF t.glink > 0 AND NOT (t.glink <= n AND sluice_task_lease_live(t.l_tag[t.glink],
            t.l_lim[t.glink], t.l_key[t.glink], t.glease, now)) THEN
        t.glink := 0; t.glease := 0; -- the group ended: from now on it asks its own unit
    END IF;
    FOR i IN 1 .. n LOOP
        d := sluice_task_def(t.l_def[i]);
        IF NOT d.ok THEN
            t := sluice_task_finish(t, 5, 0);
            verdict := 'F';
            RETURN;
        END IF;
        IF i <> t.glink AND (fullc OR d.kind = 4) THEN
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
            IF sluice_task_parked_full() THEN -- it would wait while the lot is full
                t := sluice_task_finish(t, 5, 1);
                verdict := 'F';
                RETURN;
            END IF;
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
            IF sluice_task_parked_full() THEN
                t := sluice_task_finish(t, 5, 1);
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

-- ---- the call --------------------------------------------------------------------------------

-- 006's sluice_tasks_call with the caps: max_tasks and max_parked (0 or NULL: none) for every
-- request of the call (transaction-local settings the checks above read).
CREATE FUNCTION sluice_tasks_call(p_now bigint, p_reqs text[], p_max_tasks bigint,
                                  p_max_parked bigint)
RETURNS TABLE (req int, val bytea)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM set_config('sluice.max_tasks', greatest(coalesce(p_max_tasks, 0), 0)::text, true);
    PERFORM set_config('sluice.max_parked', greatest(coalesce(p_max_parked, 0), 0)::text, true);
    RETURN QUERY SELECT c.req, c.val FROM sluice_tasks_call(p_now, p_reqs) WITH ORDINALITY
                                          AS c(req, val, o) ORDER BY c.o;
    PERFORM set_config('sluice.max_tasks', '0', true);
    PERFORM set_config('sluice.max_parked', '0', true);
END $$;
