-- SPDX-License-Identifier: MIT
--
-- Schema version 8 of sluice's PostgreSQL store: shadow links and backoffs in the limits call.
-- sluice_limits_call (006) is replaced by the same function with one rule more, the C core's
-- (core/chain.c) and the Redis script's (src/store/redis/limits.lua): a definition whose text
-- ends in " s" is a link in shadow mode (its limit's `mode: shadow`, or every limit under
-- `enabled: false`). Such a link is judged and charged as the others, but its would-be denial is
-- answered as a pass (per-link allowed 2), never makes the chain deny, is not charged and not
-- audited; a denied chain charges nothing, shadow links included. Shadow links never take the
-- lean path of one whole-T rate (006), so requests without them are decided exactly as before.
--
-- And one op more, B (LIMIT.BACKOFF: a1 the wait in ns), as the Redis script's: a rate key held
-- back so that nothing is granted on it before now + wait (limit.c's sluice_limit_backoff);
-- answered "OK now_ns slot_ns", the key's earliest slot for one unit afterwards.
--
-- Applied by src/store/pg_schema.c on top of version 6; never edited once released.

-- ---- limits: shadow links -------------------------------------------------------------------

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
    -- per definition: a link in shadow mode (its text ends in " s")
    d_sh boolean[] := '{}'; dtext text;
    -- a backoff (op B): the rationals (ns, rem / permits) of gcra.c
    b_p numeric; b_t record; b_h record; b_bt record; b_ns numeric; b_rem numeric;
    b_xns numeric; b_xrem numeric;
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
        dtext := p_defs[i];
        d_sh[i] := right(dtext, 2) = ' s';
        IF d_sh[i] THEN dtext := left(dtext, -2); END IF;
        f := string_to_array(dtext, ' ');
        d_whole[i] := false;
        IF dtext ~ '^\d{1,9} \d{1,19} \d{1,19} \d{1,19} [01] -?\d{1,19} -?\d{1,9}$' THEN
            -- Canonical (what pg_limits.c writes): every cast below succeeds, so no
            -- subtransaction is needed to catch a failing one.
            d_kind[i] := f[1]::int; d_lim[i] := f[2]::numeric; d_per[i] := f[3]::numeric;
            d_burst[i] := f[4]::numeric; d_se[i] := f[5] = '1'; d_ttl[i] := f[6]::numeric;
            d_cal[i] := f[7]::int;
            d_ok[i] := d_kind[i] BETWEEN 1 AND 5 AND d_lim[i] >= 1
                       AND (d_kind[i] NOT IN (1, 2, 3) OR d_per[i] > 0);
            IF d_kind[i] = 1 AND d_burst[i] = 0 THEN d_burst[i] := d_lim[i]; END IF;
            IF d_ok[i] AND NOT d_sh[i] AND d_kind[i] = 1 AND mod(d_per[i], d_lim[i]) = 0 THEN
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
            -- needs no trial pass: a denial writes nothing anyway; but a shadow link's does,
            -- to be told from a grant.) A shadow link's would-be denial (d_allowed 2) passes:
            -- it never makes the chain deny and is not charged (core/chain.c).
            allowed_all := true;
            d_allowed := '{}'; d_limit := '{}'; d_rem := '{}'; d_retry := '{}'; d_reset := '{}';
            d_lease := '{}';
            FOR pass IN CASE WHEN nl = 1 AND op = 'D' AND NOT d_sh[l_def[1]] THEN 2 ELSE 1 END .. 2 LOOP
                EXIT WHEN pass = 2 AND (NOT allowed_all OR op = 'P');
                FOR i IN 1 .. nl LOOP
                    CONTINUE WHEN lead[i] <> i OR coalesce(d_allowed[i] = 2, false);
                    k := l_def[i]; si := l_state[i];
                    cur := sluice_limit_load(d_kind[k], d_per[k], s_kind[si], s_st[si]::bigint[], now);
                    ttl := CASE WHEN a1 > 0 THEN a1 ELSE d_ttl[k] END;
                    dec := sluice_limit_decide(d_kind[k], d_lim[k], d_per[k],
                        d_burst[k], d_se[k], d_cal[k], cur, m_units[i], ttl, now, pass = 1);
                    d_allowed[i] := dec.allowed; d_limit[i] := dec.dlimit;
                    d_rem[i] := dec.remaining; d_retry[i] := dec.retry; d_reset[i] := dec.reset;
                    d_lease[i] := 0;
                    IF dec.allowed = 0 AND d_sh[k] THEN d_allowed[i] := 2; END IF;
                    allowed_all := allowed_all AND d_allowed[i] <> 0;
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
                    CONTINUE WHEN d_allowed[lead[i]] = 2; -- a shadow pass charged nothing
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
        IF op = 'B' THEN
            -- LIMIT.BACKOFF (limit.c's sluice_limit_backoff): the rate key's TAT becomes at
            -- least now + wait + (burst - 1) * T, a later one kept; the reply is its earliest
            -- slot for one unit afterwards (gcra_slot).
            IF d_kind[k] <> 1 OR a1 < 0 THEN
                res[ri] := ('INVAL ' || now::text
                            || ' backoff applies to rate limits, with a wait >= 0');
                CONTINUE;
            END IF;
            b_p := d_lim[k];
            b_h := sluice_gcra_times(div(d_per[k], b_p), mod(d_per[k], b_p), b_p, d_burst[k] - 1);
            b_ns := sluice_sat(sluice_sat(now + a1) + b_h.ns); b_rem := b_h.rem;
            IF b_ns = 9223372036854775807 THEN b_rem := 0; END IF;
            IF cur IS NOT NULL AND (cur[1] > b_ns OR (cur[1] = b_ns AND cur[2] > b_rem)) THEN
                b_ns := cur[1]; b_rem := cur[2];
            END IF;
            IF now < b_ns OR (now = b_ns AND b_rem > 0) THEN
                s_kind[si] := 1; s_st[si] := ARRAY[b_ns, b_rem]::bigint[]::text;
            ELSE
                s_kind[si] := 0; s_st[si] := '{}';
            END IF;
            s_dirty[si] := true;
            -- the next slot: max(tat, now) + T - burst * T, rounded up, at least now
            IF b_ns < now THEN b_ns := now; b_rem := 0; END IF;
            b_t := sluice_gcra_times(div(d_per[k], b_p), mod(d_per[k], b_p), b_p, 1);
            b_xns := sluice_sat(b_ns + b_t.ns); b_xrem := b_rem + b_t.rem;
            IF b_xrem >= b_p THEN b_xrem := b_xrem - b_p; b_xns := sluice_sat(b_xns + 1); END IF;
            IF b_xns = 9223372036854775807 THEN
                b_xns := 9223372036854775807;
            ELSE
                b_bt := sluice_gcra_times(div(d_per[k], b_p), mod(d_per[k], b_p), b_p, d_burst[k]);
                b_xns := sluice_sat(b_xns - b_bt.ns); b_xrem := b_xrem - b_bt.rem;
                IF b_xrem < 0 THEN b_xrem := b_xrem + b_p; b_xns := sluice_sat(b_xns - 1); END IF;
                b_xns := sluice_sat(b_xns + CASE WHEN b_xrem > 0 THEN 1 ELSE 0 END);
            END IF;
            res[ri] := 'OK ' || now::text || ' ' || greatest(b_xns, now)::text;
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
