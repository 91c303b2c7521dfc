-- SPDX-License-Identifier: MIT
--
-- Schema version 3 of sluice's PostgreSQL store: recurring series shared by every node. One
-- function call, sluice_recur_call, runs a batch of series requests in order, each atomically,
-- with the semantics of the Redis store's recur ops (src/store/redis/recur.lua, specified in
-- src/store/redis_recur.h) request for request, and answers with the same elements. An
-- occurrence is added by 002's own ADD (sluice_task_add) inside the same transaction as the
-- series' update, and cancelled by 002's own CANCEL (sluice_task_done 'X'): the occurrence is an
-- ordinary task of the shared queue, and a point is never lost nor added twice (the FIRE that
-- moves `next` and the ADD commit together or not at all). src/store/pg_recur.c builds the call
-- and reads its result; src/server/rrecur.c is the node's side.
--
-- Applied by src/store/pg_schema.c on top of version 2; never edited once released.
--
-- The function keeps no calendar, as the script: the nodes compute every schedule point with the
-- engine's C code and a FIRE compares and sets the series' (version, next) under its row lock, so
-- of many nodes firing one point exactly one adds its task (the others are told STALE).
--
-- Locking (no deadlock with other series calls nor with 002's task calls). A call takes every
-- lock it may WAIT for at its start, in one global order:
--   0. the series rows its SET, DEL and FIRE name, in name order (bytewise), creating the absent
--      ones as placeholders (ver 0, read as absent, deleted at the end of the call) with 001's
--      INSERT ... ON CONFLICT DO UPDATE ... WHERE false, so that two calls adding one new name
--      never race; no task call takes a series row;
--   1. the unstarted occurrences of the series its SET and DEL replace or remove (FOR UPDATE, in
--      id order: 002's order for named tasks);
--   2. every limit row and tag clock of those tasks' links, in 001's (tag, lim, key) order (the
--      cancel of a parked task disarms its wait queue, which only the holder of that row may do).
-- Only then is the time read (clock_timestamp(), ratcheted by the queue's clock as 002's calls
-- are). After that the call never waits: an ADD inserts a row no one else can hold, a cancel
-- touches rows already held, and 002's functions take anything further with SKIP LOCKED.
-- INFO and LIST read without locks (READ COMMITTED: each statement sees the latest commits).
--
-- Integers are exact (bigint stored, numeric computed, counters clamped to int64).

-- ---- tables ----------------------------------------------------------------------------------

-- Every RECUR.ADD gets a new version (a rolled-back call may leave a gap: versions only need to
-- differ).
CREATE SEQUENCE sluice_recur_ver_seq;

-- One row per series, finished ones included until RECUR.DEL (the script's record in
-- "<p>:{all}:recur"). ver 0: a row created only to be locked (read as absent). next_ns: a
-- schedule point, or right after SET the time from which the first point is to be found;
-- 9223372036854775807 (SLUICE_NEVER): over. due_ms: ceil(next_ns in ms) while live, NULL when
-- over (the script's "rdue" zset). occ: the ids of its occurrences that may not have started, in
-- the order they were added (RECUR.DEL and a replacement cancel them).
CREATE TABLE sluice_recur (
    name bytea PRIMARY KEY,
    ver bigint NOT NULL DEFAULT 0,
    type bytea NOT NULL DEFAULT '\x',
    payload bytea NOT NULL DEFAULT '\x',
    key bytea,                             -- RECUR.ADD's KEY; NULL: none
    interval_ns bigint NOT NULL DEFAULT 0, -- 0: a cron series
    cron bytea NOT NULL DEFAULT '\x',
    start_ns bigint NOT NULL DEFAULT 0,
    end_ns bigint NOT NULL DEFAULT 0,      -- 0: never
    max_runs bigint NOT NULL DEFAULT 0,    -- 0: unlimited
    runs bigint NOT NULL DEFAULT 0,
    skipped bigint NOT NULL DEFAULT 0,
    next_ns bigint NOT NULL DEFAULT 9223372036854775807,
    due_ms bigint,
    occ bigint[] NOT NULL DEFAULT '{}'
);
CREATE INDEX sluice_recur_due ON sluice_recur (due_ms, name) WHERE due_ms IS NOT NULL;

-- ---- helpers ---------------------------------------------------------------------------------

-- The series named p_name, or a row of NULLs (name NULL) when there is none.
CREATE FUNCTION sluice_recur_get(p_name bytea) RETURNS sluice_recur
LANGUAGE sql VOLATILE AS $$
    SELECT * FROM sluice_recur WHERE name = p_name AND ver > 0
$$;

-- Writes series r back (its row is held), with due_ms following next_ns.
CREATE FUNCTION sluice_recur_put(r sluice_recur) RETURNS void
LANGUAGE sql AS $$
    UPDATE sluice_recur
       SET ver = r.ver, type = r.type, payload = r.payload, key = r.key,
           interval_ns = r.interval_ns, cron = r.cron, start_ns = r.start_ns,
           end_ns = r.end_ns, max_runs = r.max_runs, runs = r.runs, skipped = r.skipped,
           next_ns = r.next_ns,
           due_ms = CASE WHEN r.next_ns = 9223372036854775807 THEN NULL
                         ELSE sluice_i64(sluice_ms_ceil(r.next_ns)) END,
           occ = r.occ
     WHERE name = r.name
$$;

-- The six answer elements of series r (the script's `series`): "version has_key interval_ns
-- start_ns end_ns max_runs runs skipped next_ns", then name, type, payload, key, cron.
CREATE FUNCTION sluice_recur_elems(r sluice_recur) RETURNS bytea[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY[convert_to(concat_ws(' ', r.ver, CASE WHEN r.key IS NULL THEN 0 ELSE 1 END,
                                      r.interval_ns, r.start_ns, r.end_ns, r.max_runs, r.runs,
                                      r.skipped, r.next_ns), 'UTF8'),
                 r.name, r.type, r.payload, coalesce(r.key, '\x'::bytea), r.cron]
$$;

-- Cancels the occurrences in occ that have not started (the script's cancel_pending: 002's
-- CANCEL of each; a running or finished one is left alone). Their rows are held.
CREATE FUNCTION sluice_recur_cancel(occ bigint[], now numeric) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    x bigint;
BEGIN
    FOREACH x IN ARRAY occ LOOP
        PERFORM sluice_task_done('X', ARRAY['X', x::text, '0', '-1', '0', '-1', '', '0'], now);
    END LOOP;
END $$;

-- occ with id added. Whenever its length reaches a multiple of 32 (RRECUR_OCC_PRUNE, the
-- script's OCC_KEEP) it keeps only the occurrences that have not started (queued or parked), in
-- order, so that it holds every occurrence that could still be cancelled and stays short while
-- workers take them.
CREATE FUNCTION sluice_recur_remember(occ bigint[], id bigint) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    list bigint[] := occ || id;
BEGIN
    IF cardinality(list) % 32 = 0 THEN
        list := ARRAY(SELECT u.o FROM unnest(list) WITH ORDINALITY AS u(o, n)
                       WHERE EXISTS (SELECT 1 FROM sluice_task t
                                      WHERE t.id = u.o AND t.state IN (1, 2))
                       ORDER BY u.n);
    END IF;
    RETURN list;
END $$;

-- ---- the ops (recur.lua's, one for one) ------------------------------------------------------

-- SET: f = S name type payload key has_key interval_ns cron start_ns end_ns max_runs.
CREATE FUNCTION sluice_recur_set(f text[], now numeric) RETURNS bytea[]
LANGUAGE plpgsql AS $$
DECLARE
    n text := now::text;
    r sluice_recur;
    old sluice_recur;
    start numeric := f[9]::numeric;
    end_ numeric := f[10]::numeric;
BEGIN
    IF start <= 0 THEN start := now; END IF;
    IF end_ > 0 AND end_ < start THEN
        RETURN ARRAY[convert_to('INVAL ' || n || ' the series ends before it starts', 'UTF8')];
    END IF;
    old := sluice_recur_get(decode(f[2], 'hex'));
    IF old.name IS NOT NULL THEN
        PERFORM sluice_recur_cancel(old.occ, now);
    END IF;
    r.name := decode(f[2], 'hex');
    r.ver := nextval('sluice_recur_ver_seq');
    r.type := decode(f[3], 'hex');
    r.payload := decode(f[4], 'hex');
    r.key := CASE WHEN f[6] = '1' THEN decode(f[5], 'hex') END;
    r.interval_ns := f[7]::bigint;
    r.cron := decode(f[8], 'hex');
    r.start_ns := start;
    r.end_ns := end_;
    r.max_runs := f[11]::bigint;
    r.runs := 0;
    r.skipped := 0;
    r.next_ns := greatest(start, now);
    r.occ := '{}';
    PERFORM sluice_recur_put(r);
    RETURN ARRAY[convert_to('OK ' || n || ' ' || r.ver || ' ' || r.next_ns, 'UTF8')];
END $$;

-- DEL: f = D name. The row goes back to a placeholder (deleted at the end of the call), so that
-- a SET of the same name later in the batch finds its row held.
CREATE FUNCTION sluice_recur_del(f text[], now numeric) RETURNS bytea[]
LANGUAGE plpgsql AS $$
DECLARE
    r sluice_recur := sluice_recur_get(decode(f[2], 'hex'));
BEGIN
    IF r.name IS NULL THEN
        RETURN ARRAY[convert_to('OK ' || now::text || ' 0', 'UTF8')];
    END IF;
    PERFORM sluice_recur_cancel(r.occ, now);
    UPDATE sluice_recur SET ver = 0, due_ms = NULL, occ = '{}' WHERE name = r.name;
    RETURN ARRAY[convert_to('OK ' || now::text || ' 1', 'UTF8')];
END $$;

-- INFO: f = I name.
CREATE FUNCTION sluice_recur_info(f text[], now numeric) RETURNS bytea[]
LANGUAGE plpgsql AS $$
DECLARE
    r sluice_recur := sluice_recur_get(decode(f[2], 'hex'));
BEGIN
    IF r.name IS NULL THEN
        RETURN ARRAY[convert_to('NOTASK ' || now::text, 'UTF8')];
    END IF;
    RETURN convert_to('OK ' || now::text, 'UTF8') || sluice_recur_elems(r);
END $$;

-- LIST: f = L max. Up to max (1..64) series due by the ms (due_ms, then name: the order of the
-- script's zset), those whose exact next has come answered; the earliest next of any live series
-- (to the ms above, 0: none); more when the bound stopped it.
CREATE FUNCTION sluice_recur_list(f text[], now numeric) RETURNS bytea[]
LANGUAGE plpgsql AS $$
DECLARE
    n int := CASE WHEN f[2] ~ '^\d{1,4}$' THEN f[2]::int ELSE 0 END;
    names bytea[];
    x bytea;
    r sluice_recur;
    outv bytea[] := '{}';
    cnt int := 0;
    earliest numeric;
BEGIN
    IF n < 1 OR n > 64 THEN n := 64; END IF;
    names := ARRAY(SELECT name FROM sluice_recur
                    WHERE due_ms IS NOT NULL AND due_ms <= sluice_i64(sluice_ms_floor(now))
                    ORDER BY due_ms, name LIMIT n);
    FOREACH x IN ARRAY names LOOP
        r := sluice_recur_get(x);
        IF r.name IS NOT NULL AND r.next_ns <= now THEN
            outv := outv || sluice_recur_elems(r);
            cnt := cnt + 1;
        END IF;
    END LOOP;
    SELECT min(due_ms) * 1000000 INTO earliest FROM sluice_recur WHERE due_ms IS NOT NULL;
    RETURN convert_to('OK ' || now::text || ' ' || cnt || ' ' || coalesce(earliest, 0) || ' '
                      || CASE WHEN cardinality(names) = n THEN '1' ELSE '0' END, 'UTF8')
           || outv;
END $$;

-- FIRE: f = F name version expected_next fire(0/1) new_next missed, then with fire 1 the
-- occurrence's ADD request (002's fields, from its "A"). Applies only when the series is still at
-- that version and next: of many nodes firing one point, one wins, the others are told STALE.
CREATE FUNCTION sluice_recur_fire(f text[], now numeric) RETURNS bytea[]
LANGUAGE plpgsql AS $$
DECLARE
    mx CONSTANT numeric := 9223372036854775807;
    r sluice_recur := sluice_recur_get(decode(f[2], 'hex'));
    new_next numeric := f[6]::numeric;
    missed numeric := f[7]::numeric;
    id bigint := 0;
    got text;
BEGIN
    IF r.name IS NULL THEN
        RETURN ARRAY[convert_to('NOTASK ' || now::text, 'UTF8')];
    END IF;
    IF r.ver::numeric <> f[3]::numeric OR r.next_ns::numeric <> f[4]::numeric THEN
        RETURN ARRAY[convert_to('STALE ' || now::text, 'UTF8')];
    END IF;
    IF f[5] = '1' AND NOT (r.max_runs > 0 AND r.runs >= r.max_runs) THEN
        IF r.end_ns > 0 AND r.end_ns < now THEN
            -- Due before the end but fired after it (every node was down): skipped, as the
            -- single node skips an occurrence that cannot start before the end.
            r.skipped := sluice_i64(r.skipped::numeric + 1);
        ELSE
            got := substring(convert_from(sluice_task_add(f[8 : cardinality(f)], now), 'UTF8')
                             FROM '^OK \S+ (\d+) ');
            IF got IS NOT NULL THEN
                id := got::bigint;
                r.runs := sluice_i64(r.runs::numeric + 1);
                r.occ := sluice_recur_remember(r.occ, id);
            ELSE
                -- The template went bad (002 refused the ADD): the point is skipped.
                r.skipped := sluice_i64(r.skipped::numeric + 1);
            END IF;
        END IF;
    END IF;
    IF missed > 0 THEN
        r.skipped := sluice_i64(r.skipped::numeric + missed);
    END IF;
    IF r.max_runs > 0 AND r.runs >= r.max_runs THEN
        new_next := mx;
    END IF;
    r.next_ns := new_next;
    PERFORM sluice_recur_put(r);
    RETURN ARRAY[convert_to(concat_ws(' ', 'OK', now::text, CASE WHEN id <> 0 THEN 1 ELSE 0 END,
                                      id, r.runs, r.skipped, r.next_ns), 'UTF8')];
END $$;

-- ---- the call --------------------------------------------------------------------------------

-- Locks the limit rows (tag, lim, key) and the clock row of each tag, in 001's order, creating
-- the missing ones (a conflict that updates nothing still locks): every task call takes these
-- before it reads the time, so nodes never wait on each other in opposite orders.
CREATE FUNCTION sluice_lock_limit_rows(k_tag bytea[], k_lim text[], k_key bytea[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
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
END;
$$;

-- The end of a task call: 002's sluice_tasks_call's last statements but its notification (002
-- keeps them inline: it is released). Finished tasks past RTASK_KEEP_FINISHED are forgotten, the
-- oldest first (those finished 10000 numbers or more before the last this call finished; a number
-- lost to a rolled-back call keeps one fewer; one held by another call, an INFO, is left to a
-- later pass); limit rows created only to be locked, or emptied, are not kept (001's rule); the
-- queue's clock is raised without waiting (see sluice_task_clock). qclock is the clock the caller
-- read once every lock was held; k_tag, k_lim and k_key the limit rows it locked. Called last by
-- sluice_recur_call and by 006's sluice_tasks_call, each then notifying 'sluice_wake' itself, so
-- the locks it takes come after theirs, in 002's order.
CREATE FUNCTION sluice_task_end(p_now bigint, qclock numeric, k_tag bytea[], k_lim text[],
                                k_key bytea[])
RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    fin numeric;
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
END $$;

-- Runs a batch of series requests. p_now: the time to decide at (tests inject one; NULL:
-- clock_timestamp(), read after the call's locks), ratcheted by the queue's clock
-- (sluice_task_clock) as 002's calls are, so that series and tasks share one time. p_reqs: one
-- string per request, fields separated by one space, bytes as hex (src/store/pg_recur.c writes
-- them):
--   S name type payload key has_key(0/1) interval_ns(0: cron) cron start_ns(0: now)
--     end_ns(0: never) max_runs(0: unlimited)
--   D name | I name | L max
--   F name version expected_next_ns fire(0/1) new_next_ns missed, then with fire 1 the
--     occurrence's 002 ADD request ("A type payload ...", exactly as a TASK.ADD sends it)
-- Returns rows (req, val) in order: request req's answer elements, as the Redis script's reply
-- to the same request (recur.lua's header). When an occurrence was added (work made ready), the
-- call notifies 'sluice_wake' (delivered at commit), as 002's calls do.
CREATE FUNCTION sluice_recur_call(p_now bigint, p_reqs text[])
RETURNS TABLE (req int, val bytea)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    nr int := coalesce(cardinality(p_reqs), 0);
    f text[]; op text;
    locked bytea[] := '{}'; gone bytea[] := '{}'; named bigint[] := '{}';
    k_tag bytea[] := '{}'; k_lim text[] := '{}'; k_key bytea[] := '{}';
    base numeric; now numeric; qclock numeric; res bytea[]; e bytea;
BEGIN
    PERFORM set_config('sluice.twoke', '', true);
    PERFORM set_config('sluice.tfin', '', true);
    -- What the batch names.
    FOR ri IN 1 .. nr LOOP
        f := string_to_array(p_reqs[ri], ' ');
        IF f[1] IN ('S', 'D', 'F') THEN
            locked := locked || decode(f[2], 'hex');
            IF f[1] <> 'F' THEN gone := gone || decode(f[2], 'hex'); END IF;
        END IF;
    END LOOP;
    -- 0. The series rows, in name order, absent ones created as placeholders.
    IF cardinality(locked) > 0 THEN
        INSERT INTO sluice_recur AS s (name)
        SELECT DISTINCT x FROM unnest(locked) AS x ORDER BY x
        ON CONFLICT (name) DO UPDATE SET ver = s.ver WHERE false;
    END IF;
    -- 1. The occurrences that a SET or DEL may cancel, in id order.
    IF cardinality(gone) > 0 THEN
        named := ARRAY(SELECT DISTINCT o FROM sluice_recur s, unnest(s.occ) AS o
                        WHERE s.name = ANY (gone) AND s.ver > 0);
    END IF;
    IF cardinality(named) > 0 THEN
        PERFORM 1 FROM sluice_task WHERE id = ANY (named) ORDER BY id FOR UPDATE;
        -- 2. Their limit rows and tag clocks, in 001's order (creating the missing ones).
        SELECT coalesce(array_agg(l.tag), '{}'), coalesce(array_agg(l.lim), '{}'),
               coalesce(array_agg(l.key), '{}')
          INTO k_tag, k_lim, k_key
          FROM sluice_task n, unnest(n.l_tag, n.l_lim, n.l_key) AS l(tag, lim, key)
         WHERE n.id = ANY (named) AND n.state < 4;
    END IF;
    PERFORM sluice_lock_limit_rows(k_tag, k_lim, k_key);
    -- The time, once every lock is held.
    base := coalesce(p_now::numeric, trunc(extract(epoch FROM clock_timestamp()) * 1000000) * 1000);
    SELECT now_ns INTO qclock FROM sluice_task_clock;
    PERFORM set_config('sluice.tq', coalesce(qclock, 0)::text, true);

    FOR ri IN 1 .. nr LOOP
        f := string_to_array(p_reqs[ri], ' ');
        op := f[1];
        now := sluice_task_ratchet(base, '{}');
        IF op = 'S' THEN
            res := sluice_recur_set(f, now);
        ELSIF op = 'D' THEN
            res := sluice_recur_del(f, now);
        ELSIF op = 'I' THEN
            res := sluice_recur_info(f, now);
        ELSIF op = 'L' THEN
            res := sluice_recur_list(f, now);
        ELSIF op = 'F' THEN
            res := sluice_recur_fire(f, now);
        ELSE
            res := ARRAY[convert_to('INVAL ' || now::text || ' unknown recur op', 'UTF8')];
        END IF;
        FOREACH e IN ARRAY res LOOP
            req := ri; val := e;
            RETURN NEXT;
        END LOOP;
    END LOOP;

    -- Placeholders left (created only to be locked, or a deleted series) are not kept.
    IF cardinality(locked) > 0 THEN
        DELETE FROM sluice_recur WHERE name = ANY (locked) AND ver = 0;
    END IF;
    -- What 002's calls do at their end, for what this call did through 002's functions (a
    -- cancel finishes a task, a FIRE adds one).
    PERFORM sluice_task_end(p_now, qclock, k_tag, k_lim, k_key);
    IF current_setting('sluice.twoke', true) = '1' THEN
        PERFORM pg_notify('sluice_wake', '1');
    END IF;
END $$;
