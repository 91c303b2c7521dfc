-- SPDX-License-Identifier: MIT
--
-- Schema version 11 of sluice's PostgreSQL store: shadow links in the task queue's chains, as
-- the Redis script's (src/store/redis/tasks.lua) and the single node's gate (gate.c). A link
-- whose definition ends in " s" (its limit in shadow mode, or every limit under
-- `enabled: false`, when the task was added) is judged like any other, but its denial is a pass
-- (per-link allowed 2): it never makes the chain deny, never parks or fails the task, and charges
-- nothing (no lease, nothing to settle); with room it is charged as any link when the chain is
-- granted. 008 did the same for the limits call.
--
-- Four functions are replaced, each otherwise as it was: 002's sluice_task_def (a definition
-- may end in " s") and sluice_task_chain (the pass), 009's sluice_task_would_park (a shadow
-- link's peek never makes a new task wait, for max_parked) and sluice_task_gate (a shadow pass
-- is not marked charged). And 009's sluice_task_add is wrapped: a link of an ADD carries flag 4
-- in shadow mode (its definition's seven fields are counted), stored as a definition ending in
-- " s", as the script stores it.

CREATE OR REPLACE FUNCTION sluice_task_def(p_text text, OUT ok boolean, OUT kind int, OUT lim numeric,
                                OUT per numeric, OUT burst numeric, OUT se boolean,
                                OUT ttl numeric, OUT cal int)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    f text[];
BEGIN
    ok := false;
    IF right(p_text, 2) = ' s' THEN
        p_text := left(p_text, -2); -- a link in shadow mode: the same definition
    END IF;
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

CREATE OR REPLACE FUNCTION sluice_task_chain(p_defs text[], p_tags bytea[], p_lims text[], p_keys bytea[],
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
                IF dec.allowed = 0 AND right(p_defs[i], 2) = ' s' THEN
                    allowed[i] := 2; -- a shadow link's would-be denial: a pass
                END IF;
                granted := granted AND allowed[i] <> 0;
                CONTINUE;
            END IF;
            CONTINUE WHEN allowed[i] = 2; -- a shadow pass charges nothing
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

CREATE OR REPLACE FUNCTION sluice_task_would_park(p_def text[], p_units bigint[], p_tag bytea[],
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
        -- A shadow link's peek answers its denial as a pass: it never makes a task wait.
        CONTINUE WHEN NOT d.ok OR right(p_def[i], 2) = ' s';
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
            -- A shadow link's would-be denial, let through uncharged: no lease, nothing to settle.
            CONTINUE WHEN ch.allowed[ch.lead[k]] = 2;
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

-- An ADD: 009's sluice_task_add, renamed, behind a function of its name that turns each link's
-- flag 4 into the " s" its stored definition ends in (appended to the definition's last field)
-- and drops the flag. Every caller (the call's dispatch, 003's series) calls it by name.
ALTER FUNCTION sluice_task_add(text[], numeric) RENAME TO sluice_task_add_v10;

CREATE FUNCTION sluice_task_add(f text[], now numeric) RETURNS bytea
LANGUAGE plpgsql AS $$
DECLARE
    at int;
BEGIN
    IF f[16] ~ '^\d{1,4}$' THEN
        FOR i IN 1 .. f[16]::int LOOP
            at := 17 + 13 * (i - 1);
            IF f[at + 8] ~ '^\d{1,9}$' AND f[at + 8]::int & 4 <> 0 THEN
                f[at + 6] := f[at + 6] || ' s';
                f[at + 8] := (f[at + 8]::int & 3)::text;
            END IF;
        END LOOP;
    END IF;
    RETURN sluice_task_add_v10(f, now);
END $$;
