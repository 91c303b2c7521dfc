-- SPDX-License-Identifier: MIT
--
-- Schema version 1 of sluice's PostgreSQL store: shared limits. One function call decides a
-- whole batch of requests (every decision of a node's loop turn), in order, each atomically, in
-- the database's clock, with the arithmetic of src/core (gcra.c, window.c, lease.c, quota.c,
-- chain.c, limit.c's settle) ported decision for decision, as src/store/redis/limits.lua ports it
-- to Lua. src/store/pg_limits.c builds the call and reads its result; tests/tools/pg_limits_diff.c
-- proves both sides equal on random runs against a real PostgreSQL.
--
-- Applied by src/store/pg_schema.c inside one transaction that also records the version in
-- sluice_schema; a later version is a new numbered file, never an edit of this one.
--
-- Integers are exact: states are stored as bigint, computed as numeric (arbitrary precision) and
-- clamped to int64 where the core saturates (sat_add_i64), so nothing ever wraps or rounds.
--
-- Locking (no deadlocks between nodes): the call first creates-or-locks every row the batch
-- touches -- each tag's clock row and each link's state row -- in ONE statement, in the fixed
-- order (tag, limit id, key) with bytewise comparison, through INSERT ... ON CONFLICT DO UPDATE
-- ... WHERE false (which locks a conflicting row without changing it). Every call locks in that
-- same global order and takes no row lock afterwards that it does not already hold, so two calls
-- never wait on each other in a cycle. Only then is the time read, with clock_timestamp(): now()
-- is frozen at the transaction's start and would hand out credit after a lock wait.

-- ---- tables ----------------------------------------------------------------------------------

-- One row per (tag, limit, key) state, and one clock row per tag (lim = '' and key = '': limit
-- ids are never empty). kind: 0 absent (a row created only to be locked; removed at the end of
-- the call), 1 rate, 2 fixed window, 3 sliding window, 4 concurrency, 5 quota, -1 a tag's clock.
-- st, by kind: rate {tat_ns, tat_rem}; window {start_ns, count}; sliding {at_ns, units, ...}
-- oldest first; concurrency {lease_id, expires_ns, units, ...} (units 0: a released lease,
-- remembered until it would have expired); quota {start_ns, end_ns, spent}; clock {now_ns,
-- last_lease_id}.
CREATE TABLE sluice_limit_state (
    tag bytea NOT NULL,
    lim text COLLATE "C" NOT NULL,
    key bytea NOT NULL,
    kind smallint NOT NULL DEFAULT 0,
    st bigint[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (tag, lim, key)
);

-- With auditing on (a debugging option), one row per granted link of a DECIDE.
CREATE TABLE sluice_limit_audit (
    id bigserial PRIMARY KEY,
    tag bytea NOT NULL,
    lim text NOT NULL,
    key bytea NOT NULL,
    units bigint NOT NULL,
    now_ns bigint NOT NULL
);

-- ---- exact integers --------------------------------------------------------------------------

-- x clamped to int64, as the core's saturating arithmetic (base/sat.h).
CREATE FUNCTION sluice_sat(x numeric) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN x > 9223372036854775807 THEN 9223372036854775807
                WHEN x < -9223372036854775808 THEN -9223372036854775808
                ELSE x END
$$;

-- ---- GCRA (gcra.c) ---------------------------------------------------------------------------

-- units * T as a rational (ns, rem / permits), saturated as gcra.c's times_t.
CREATE FUNCTION sluice_gcra_times(t_q numeric, t_r numeric, permits numeric, units numeric,
                                  OUT ns numeric, OUT rem numeric)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    frac numeric := units * t_r;
    whole numeric := units * t_q;
BEGIN
    IF sluice_sat(frac) <> frac OR sluice_sat(whole) <> whole THEN
        ns := 9223372036854775807; rem := 0; RETURN;
    END IF;
    ns := sluice_sat(whole + div(frac, permits));
    rem := mod(frac, permits);
    IF ns = 9223372036854775807 THEN rem := 0; END IF;
END $$;

-- One rate link (gcra_decide: decide_whole when T is whole, decide_exact otherwise). fresh: the
-- key holds no state. Returns the decision and, when granted and not a peek, the new state.
CREATE FUNCTION sluice_gcra_decide(permits numeric, period numeric, burst numeric, start_empty boolean,
                                   fresh boolean, tat numeric, trem numeric, units numeric,
                                   now numeric, peek boolean,
                                   OUT allowed int, OUT remaining numeric, OUT retry numeric,
                                   OUT reset numeric, OUT n_tat numeric, OUT n_rem numeric)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    mx CONSTANT numeric := 9223372036854775807;
    t_q numeric := div(period, permits);
    t_r numeric := mod(period, permits);
    bt_q numeric; bt_r numeric;
    zero boolean := fresh OR (tat = 0 AND trem = 0);
    b_ns numeric; b_rem numeric; a_ns numeric; a_rem numeric;
    x_ns numeric; x_rem numeric; nx_ns numeric; nx_rem numeric; nd_ns numeric; nd_rem numeric;
    need numeric; ahead numeric; first numeric;
    tt record;
BEGIN
    tt := sluice_gcra_times(t_q, t_r, permits, burst); bt_q := tt.ns; bt_r := tt.rem;
    n_tat := NULL; n_rem := NULL;
    IF t_r = 0 THEN
        -- decide_whole: plain int64 with one division.
        IF start_empty AND zero THEN
            b_ns := sluice_sat(now + (burst - least(units, burst)) * t_q);
        ELSE
            b_ns := greatest(tat, now);
        END IF;
        ahead := sluice_sat(b_ns - now);
        IF units > burst THEN
            allowed := 0; remaining := div(bt_q - ahead, t_q); retry := mx; reset := ahead;
            RETURN;
        END IF;
        need := sluice_sat(ahead + units * t_q);
        IF need <= bt_q THEN
            allowed := 1; remaining := div(bt_q - need, t_q); retry := 0; reset := need;
            IF NOT peek THEN
                n_tat := sluice_sat(b_ns + units * t_q);
                n_rem := CASE WHEN fresh THEN 0 ELSE trem END;
            END IF;
            RETURN;
        END IF;
        allowed := 0; remaining := div(bt_q - ahead, t_q); retry := need - bt_q; reset := ahead;
        RETURN;
    END IF;
    -- decide_exact: every time is a rational ns + rem / permits.
    IF start_empty AND zero THEN
        first := least(units, burst);
        tt := sluice_gcra_times(t_q, t_r, permits, burst - first); x_ns := tt.ns; x_rem := tt.rem;
        b_ns := sluice_sat(now + x_ns); b_rem := x_rem;  -- rat_add(now, x)
        IF b_rem >= permits THEN b_rem := b_rem - permits; b_ns := sluice_sat(b_ns + 1); END IF;
        IF b_ns = mx THEN b_rem := 0; END IF;
    ELSIF tat > now OR (tat = now AND trem >= 0) THEN
        b_ns := tat; b_rem := trem;
    ELSE
        b_ns := now; b_rem := 0;
    END IF;
    -- ahead = base - now
    a_ns := sluice_sat(b_ns - now); a_rem := b_rem;
    IF units > burst THEN
        allowed := 0;
        -- div_t_floor(bt - ahead)
        x_ns := sluice_sat(bt_q - a_ns); x_rem := bt_r - a_rem;
        IF x_rem < 0 THEN x_rem := x_rem + permits; x_ns := sluice_sat(x_ns - 1); END IF;
        remaining := greatest(div(x_ns * permits + x_rem, period), -9223372036854775808);
        retry := mx;
        reset := sluice_sat(a_ns + CASE WHEN a_rem > 0 THEN 1 ELSE 0 END);
        RETURN;
    END IF;
    -- next = base + units * T; need = next - now
    tt := sluice_gcra_times(t_q, t_r, permits, units); x_ns := tt.ns; x_rem := tt.rem;
    nx_ns := sluice_sat(b_ns + x_ns); nx_rem := b_rem + x_rem;
    IF nx_rem >= permits THEN nx_rem := nx_rem - permits; nx_ns := sluice_sat(nx_ns + 1); END IF;
    IF nx_ns = mx THEN nx_rem := 0; END IF;
    nd_ns := sluice_sat(nx_ns - now); nd_rem := nx_rem;
    IF nd_ns < bt_q OR (nd_ns = bt_q AND nd_rem <= bt_r) THEN
        allowed := 1;
        x_ns := sluice_sat(bt_q - nd_ns); x_rem := bt_r - nd_rem;
        IF x_rem < 0 THEN x_rem := x_rem + permits; x_ns := sluice_sat(x_ns - 1); END IF;
        remaining := greatest(div(x_ns * permits + x_rem, period), -9223372036854775808);
        retry := 0;
        reset := sluice_sat(nd_ns + CASE WHEN nd_rem > 0 THEN 1 ELSE 0 END);
        IF NOT peek THEN n_tat := nx_ns; n_rem := nx_rem; END IF;
        RETURN;
    END IF;
    allowed := 0;
    x_ns := sluice_sat(bt_q - a_ns); x_rem := bt_r - a_rem;
    IF x_rem < 0 THEN x_rem := x_rem + permits; x_ns := sluice_sat(x_ns - 1); END IF;
    remaining := greatest(div(x_ns * permits + x_rem, period), -9223372036854775808);
    x_ns := sluice_sat(nd_ns - bt_q); x_rem := nd_rem - bt_r;
    IF x_rem < 0 THEN x_rem := x_rem + permits; x_ns := sluice_sat(x_ns - 1); END IF;
    retry := sluice_sat(x_ns + CASE WHEN x_rem > 0 THEN 1 ELSE 0 END);
    reset := sluice_sat(a_ns + CASE WHEN a_rem > 0 THEN 1 ELSE 0 END);
END $$;

-- gcra_adjust: a settlement's correction of diff units on a rate key's TAT.
CREATE FUNCTION sluice_gcra_adjust(permits numeric, period numeric, tat numeric, trem numeric,
                                   diff numeric, now numeric, OUT n_tat numeric, OUT n_rem numeric)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    t_q numeric := div(period, permits);
    t_r numeric := mod(period, permits);
    x_ns numeric; x_rem numeric;
    tt record;
BEGIN
    n_tat := tat; n_rem := trem;
    IF diff > 0 THEN
        IF tat < now OR (tat = now AND trem < 0) THEN n_tat := now; n_rem := 0; END IF;
        tt := sluice_gcra_times(t_q, t_r, permits, diff); x_ns := tt.ns; x_rem := tt.rem;
        n_tat := sluice_sat(n_tat + x_ns); n_rem := n_rem + x_rem;
        IF n_rem >= permits THEN n_rem := n_rem - permits; n_tat := sluice_sat(n_tat + 1); END IF;
        IF n_tat = 9223372036854775807 THEN n_rem := 0; END IF;
    ELSIF diff < 0 THEN
        tt := sluice_gcra_times(t_q, t_r, permits, -diff); x_ns := tt.ns; x_rem := tt.rem;
        n_tat := sluice_sat(n_tat - x_ns); n_rem := n_rem - x_rem;
        IF n_rem < 0 THEN n_rem := n_rem + permits; n_tat := sluice_sat(n_tat - 1); END IF;
        IF n_tat < now THEN n_tat := now; n_rem := 0; END IF;
    END IF;
END $$;

-- ---- quotas (quota.c) ------------------------------------------------------------------------

-- The UTC calendar period holding t: cal 0 none [0, NEVER), 1 a day, 2 a month.
CREATE FUNCTION sluice_quota_period(cal int, t numeric, OUT p_start numeric, OUT p_end numeric)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    nsd CONSTANT numeric := 86400000000000;
    day numeric;
    d numeric; c400 numeric; c100 numeric; c4 numeric; y1 numeric;
    yr numeric; m int; e numeric; s numeric;
    before int[] := '{0,31,59,90,120,151,181,212,243,273,304,334}';
    leap boolean;
BEGIN
    IF t < 0 THEN t := 0; END IF;
    day := div(t, nsd);
    IF cal = 1 THEN
        p_start := day * nsd;
        p_end := CASE WHEN day + 1 > 106751 THEN 9223372036854775807 ELSE (day + 1) * nsd END;
        RETURN;
    ELSIF cal <> 2 THEN
        p_start := 0; p_end := 9223372036854775807; RETURN;
    END IF;
    -- civil_from_days: days since 1601-01-01 in 400/100/4/1-year cycles.
    d := day + 134774;
    c400 := floor(d / 146097); d := d - c400 * 146097;
    c100 := floor(d / 36524); IF c100 = 4 THEN c100 := 3; END IF; d := d - c100 * 36524;
    c4 := floor(d / 1461); d := d - c4 * 1461;
    y1 := floor(d / 365); IF y1 = 4 THEN y1 := 3; END IF; d := d - y1 * 365;
    yr := 1601 + 400 * c400 + 100 * c100 + 4 * c4 + y1;
    leap := (mod(yr, 4) = 0 AND mod(yr, 100) <> 0) OR mod(yr, 400) = 0;
    m := 12;
    WHILE m > 1 AND before[m] + CASE WHEN m > 2 AND leap THEN 1 ELSE 0 END > d LOOP
        m := m - 1;
    END LOOP;
    s := sluice_days_from_civil(yr, m);
    e := CASE WHEN m = 12 THEN sluice_days_from_civil(yr + 1, 1) ELSE sluice_days_from_civil(yr, m + 1) END;
    p_start := s * nsd;
    p_end := CASE WHEN e > 106751 THEN 9223372036854775807 ELSE e * nsd END;
END $$;

-- Days from 1970-01-01 to the first day of (year, month).
CREATE FUNCTION sluice_days_from_civil(yr numeric, m int) RETURNS numeric
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    before int[] := '{0,31,59,90,120,151,181,212,243,273,304,334}';
    y numeric := yr - 1601;
    leap boolean := (mod(yr, 4) = 0 AND mod(yr, 100) <> 0) OR mod(yr, 400) = 0;
BEGIN
    RETURN y * 365 + floor(y / 4) - floor(y / 100) + floor(y / 400)
           + before[m] + CASE WHEN m > 2 AND leap THEN 1 ELSE 0 END - 134774;
END $$;

-- ---- one link ------------------------------------------------------------------------------

-- A stored state as the core would hold it at now: NULL when it carries no information then (a
-- passed TAT, an ended window or period, no live lease) or when it is of another kind (a limit
-- redefined under the same name: the core refuses to import such state).
CREATE FUNCTION sluice_limit_load(kind int, period numeric, row_kind int, st bigint[], now numeric)
RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    n int := coalesce(array_length(st, 1), 0);
    t numeric := greatest(now, 0);
    kept bigint[] := '{}';
BEGIN
    IF row_kind IS DISTINCT FROM kind OR n = 0 THEN RETURN NULL; END IF;
    IF kind = 1 THEN
        IF now < st[1] OR (now = st[1] AND st[2] > 0) THEN RETURN st; END IF;
    ELSIF kind = 2 THEN
        IF st[2] > 0 AND st[1] >= t - mod(t, period) THEN RETURN st; END IF;
    ELSIF kind = 3 THEN
        IF t - st[n - 1] < period THEN RETURN st; END IF;
    ELSIF kind = 4 THEN
        FOR i IN 1 .. n / 3 LOOP
            IF st[3 * i - 1] > now THEN
                kept := kept || st[3 * i - 2 : 3 * i];
            END IF;
        END LOOP;
        IF array_length(kept, 1) > 0 THEN RETURN kept; END IF;
    ELSIF kind = 5 THEN
        IF st[3] > 0 AND (st[2] = 9223372036854775807 OR now < st[2]) THEN RETURN st; END IF;
    END IF;
    RETURN NULL;
END $$;

-- Decides one link on its loaded state s (NULL: absent) at now. Returns the decision, and in
-- nst the state to write (NULL: nothing to write; '{}': the key becomes absent). A granted
-- concurrency link that is not a peek returns in lease_exp the new lease's expiry; the caller
-- names the lease and appends it to nst.
CREATE FUNCTION sluice_limit_decide(kind int, lim numeric, period numeric, burst numeric,
                                    start_empty boolean, cal int, s bigint[], units numeric,
                                    ttl numeric, now numeric, peek boolean,
                                    OUT allowed int, OUT dlimit numeric, OUT remaining numeric,
                                    OUT retry numeric, OUT reset numeric, OUT nst bigint[],
                                    OUT lease_exp numeric)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    mx CONSTANT numeric := 9223372036854775807;
    fresh boolean := s IS NULL;
    n int := coalesce(array_length(s, 1), 0);
    t numeric; start numeric; used numeric; left_ns numeric; total numeric;
    first int; i int; freed numeric; excess numeric; held numeric; h numeric;
    g record; p record; tail numeric; exps numeric[]; us numeric[];
    spent numeric; ps numeric; pe numeric;
BEGIN
    nst := NULL; lease_exp := NULL; dlimit := lim;
    IF kind = 1 THEN
        g := sluice_gcra_decide(lim, period, burst, start_empty, fresh,
            CASE WHEN fresh THEN 0 ELSE s[1] END, CASE WHEN fresh THEN 0 ELSE s[2] END,
            units, now, peek);
        allowed := g.allowed; dlimit := burst; remaining := g.remaining; retry := g.retry;
        reset := g.reset;
        IF g.n_tat IS NOT NULL THEN
            IF now < g.n_tat OR (now = g.n_tat AND g.n_rem > 0) THEN
                nst := ARRAY[g.n_tat, g.n_rem]::bigint[];
            ELSE
                nst := '{}';
            END IF;
        END IF;
        RETURN;
    ELSIF kind = 2 THEN
        -- fixed_decide
        t := greatest(now, 0);
        start := t - mod(t, period);
        IF NOT fresh AND s[2] > 0 AND start < s[1] THEN t := s[1]; start := s[1]; END IF;
        used := CASE WHEN NOT fresh AND s[1] = start THEN s[2] ELSE 0 END;
        left_ns := period - (t - start);
        IF units <= lim AND used <= lim - units THEN
            allowed := 1; remaining := lim - used - units; retry := 0; reset := left_ns;
            IF NOT peek THEN
                nst := CASE WHEN used + units > 0 THEN ARRAY[start, used + units]::bigint[] ELSE '{}' END;
            END IF;
            RETURN;
        END IF;
        allowed := 0;
        remaining := CASE WHEN used < lim THEN lim - used ELSE 0 END;
        retry := CASE WHEN units > lim THEN mx ELSE left_ns END;
        reset := CASE WHEN used > 0 THEN left_ns ELSE 0 END;
        RETURN;
    ELSIF kind = 3 THEN
        -- sliding_decide: s = {at, units, ...} oldest first
        t := greatest(now, 0);
        IF n > 0 AND t < s[n - 1] THEN t := s[n - 1]; END IF;
        total := 0;
        FOR k IN 1 .. n / 2 LOOP total := total + s[2 * k]; END LOOP;
        first := 1;
        WHILE first <= n / 2 LOOP
            EXIT WHEN t - s[2 * first - 1] < period;
            total := total - s[2 * first];
            first := first + 1;
        END LOOP;
        IF units > lim OR total > lim - units THEN
            allowed := 0;
            remaining := CASE WHEN total < lim THEN lim - total ELSE 0 END;
            IF units > lim THEN
                retry := mx;
            ELSE
                excess := sluice_sat(total + units) - lim; freed := 0; i := first;
                LOOP
                    freed := sluice_sat(freed + s[2 * i]);
                    EXIT WHEN excess <= freed OR i + 1 > n / 2;
                    i := i + 1;
                END LOOP;
                retry := period - (t - s[2 * i - 1]);
            END IF;
            reset := CASE WHEN first > n / 2 THEN 0 ELSE period - (t - s[n - 1]) END;
            RETURN;
        END IF;
        allowed := 1; remaining := lim - total - units; retry := 0; reset := period;
        IF NOT peek THEN
            nst := coalesce(s[2 * first - 1 : n], '{}');
            IF coalesce(array_length(nst, 1), 0) = 0 OR nst[array_length(nst, 1) - 1] <> t THEN
                nst := nst || ARRAY[t, units]::bigint[];
            ELSE
                nst[array_length(nst, 1)] := nst[array_length(nst, 1)] + units;
            END IF;
        END IF;
        RETURN;
    ELSIF kind = 4 THEN
        -- lease_decide: s = {id, expires, units, ...} (live leases only, as loaded)
        held := 0; exps := '{}'; us := '{}';
        FOR p IN SELECT s[3 * gs.k - 1] AS e, s[3 * gs.k] AS u FROM generate_series(1, n / 3) gs(k)
                 WHERE s[3 * gs.k] > 0 ORDER BY 1 LOOP
            held := held + p.u; exps := exps || p.e; us := us || p.u;
        END LOOP;
        tail := exps[array_length(exps, 1)];
        IF units > lim OR units > lim - held THEN
            allowed := 0;
            remaining := CASE WHEN lim > held THEN lim - held ELSE 0 END;
            IF units > lim THEN
                retry := mx;
            ELSE
                h := held; i := 1;
                WHILE i < array_length(exps, 1) AND units > lim - (h - us[i]) LOOP
                    h := h - us[i]; i := i + 1;
                END LOOP;
                retry := CASE WHEN exps[i] <= now THEN 0 ELSE sluice_sat(exps[i] - now) END;
            END IF;
            reset := CASE WHEN tail IS NULL OR tail <= now THEN 0 ELSE sluice_sat(tail - now) END;
            RETURN;
        END IF;
        allowed := 1; retry := 0;
        IF peek THEN
            remaining := lim - held;
            reset := CASE WHEN tail IS NULL OR tail <= now THEN 0 ELSE sluice_sat(tail - now) END;
            RETURN;
        END IF;
        lease_exp := sluice_sat(now + ttl);
        remaining := lim - held - units;
        tail := greatest(lease_exp, coalesce(tail, lease_exp));
        reset := CASE WHEN tail <= now THEN 0 ELSE sluice_sat(tail - now) END;
        nst := coalesce(s, '{}');
        RETURN;
    END IF;
    -- quota_decide: s = {start, end, spent}
    t := greatest(now, 0);
    IF NOT fresh AND t < s[1] THEN t := s[1]; END IF;
    IF fresh OR (s[2] <> mx AND s[2] <= t) THEN
        p := sluice_quota_period(cal, t);
        ps := p.p_start; pe := p.p_end; spent := 0;
    ELSE
        ps := s[1]; pe := s[2]; spent := s[3];
    END IF;
    IF units <= lim AND spent <= lim - units THEN
        spent := spent + units;
        allowed := 1; remaining := lim - spent; retry := 0;
        reset := CASE WHEN pe = mx THEN mx ELSE pe - t END;
        IF NOT peek THEN
            nst := CASE WHEN spent > 0 THEN ARRAY[ps, pe, spent]::bigint[] ELSE '{}' END;
        END IF;
        RETURN;
    END IF;
    allowed := 0;
    remaining := CASE WHEN spent < lim THEN lim - spent ELSE 0 END;
    retry := CASE WHEN units > lim THEN mx WHEN pe = mx THEN mx ELSE pe - t END;
    reset := CASE WHEN spent > 0 THEN (CASE WHEN pe = mx THEN mx ELSE pe - t END) ELSE 0 END;
END $$;

-- A settlement (sluice_limit_settle): corrects a grant of `estimate` units made at charged to
-- `actual` units. status: OK, STATE (its window or period is over), INVAL (not applicable).
-- nst as sluice_limit_decide's.
CREATE FUNCTION sluice_limit_settle(kind int, lim numeric, period numeric, cal int, s bigint[],
                                    charged numeric, estimate numeric, actual numeric,
                                    now numeric, OUT status text, OUT nst bigint[])
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    mx CONSTANT numeric := 9223372036854775807;
    fresh boolean := s IS NULL;
    diff numeric := actual - estimate;
    t numeric; start numeric; c numeric; take numeric; n int;
    g record; p record; ps numeric; pe numeric; spent numeric;
BEGIN
    nst := NULL; status := 'OK';
    IF kind = 4 OR estimate < 0 OR actual < 0 OR estimate > 8000000000 OR actual > 8000000000 THEN
        status := 'INVAL'; RETURN;
    END IF;
    IF kind = 5 THEN
        IF fresh THEN status := 'STATE'; RETURN; END IF;
        t := greatest(now, 0);
        IF charged < 0 THEN charged := 0; END IF;
        IF t < s[1] THEN t := s[1]; END IF;
        IF s[2] <> mx AND s[2] <= t THEN
            p := sluice_quota_period(cal, t);
            ps := p.p_start; pe := p.p_end; spent := 0;
        ELSE
            ps := s[1]; pe := s[2]; spent := s[3];
        END IF;
        IF charged < ps OR (pe <> mx AND pe <= charged) THEN status := 'STATE'; RETURN; END IF;
        spent := least(greatest(spent + diff, 0), mx);
        nst := CASE WHEN spent > 0 THEN ARRAY[ps, pe, spent]::bigint[] ELSE '{}' END;
        RETURN;
    END IF;
    IF kind = 2 THEN
        IF charged < now - mod(now, period) THEN status := 'STATE'; RETURN; END IF;
    ELSIF kind = 3 AND NOT (now - charged < period) THEN
        status := 'STATE'; RETURN;
    END IF;
    IF diff = 0 OR (diff < 0 AND fresh) THEN RETURN; END IF;
    IF kind = 1 THEN
        g := sluice_gcra_adjust(lim, period, CASE WHEN fresh THEN 0 ELSE s[1] END,
                                                CASE WHEN fresh THEN 0 ELSE s[2] END, diff, now);
        IF now < g.n_tat OR (now = g.n_tat AND g.n_rem > 0) THEN
            nst := ARRAY[g.n_tat, g.n_rem]::bigint[];
        ELSE
            nst := '{}';
        END IF;
    ELSIF kind = 2 THEN
        start := now - mod(now, period);
        IF fresh OR s[1] <> start THEN c := 0; ELSE c := s[2]; END IF;
        c := sluice_sat(c + diff);
        nst := CASE WHEN c > 0 THEN ARRAY[start, c]::bigint[] ELSE '{}' END;
    ELSE
        -- sliding_adjust
        t := greatest(now, 0);
        nst := coalesce(s, '{}');
        n := coalesce(array_length(nst, 1), 0);
        IF diff > 0 THEN
            IF n > 0 AND t < nst[n - 1] THEN t := nst[n - 1]; END IF;
            IF n = 0 OR nst[n - 1] <> t THEN
                nst := nst || ARRAY[t, 0]::bigint[]; n := n + 2;
            END IF;
            nst[n] := sluice_sat(nst[n] + diff);
        ELSE
            WHILE diff < 0 AND n > 0 LOOP
                take := least(-diff, nst[n]);
                nst[n] := nst[n] - take;
                diff := diff + take;
                IF nst[n] = 0 THEN
                    nst := nst[1 : n - 2]; n := n - 2;
                END IF;
            END LOOP;
            nst := coalesce(nst, '{}');
        END IF;
    END IF;
END $$;

-- ---- the call --------------------------------------------------------------------------------

-- Decides a batch. p_now: the time to decide at (tests inject one; NULL: clock_timestamp(), read
-- after every row of the batch is locked). p_flags: 'a' to audit grants. p_defs: the batch's
-- distinct limit definitions, each "kind limit period_ns burst start_empty ttl_ns calendar".
-- p_tags, p_lims, p_keys: one entry per link of the batch, in request order (tags and keys as
-- hex, limit ids as text). p_reqs: one string per request, "op N a1 a2 a3" then "def units" per
-- link (def: 1-based in p_defs); op D decide, P peek, N renew, R release, S settle; a1..a3: D/P:
-- ttl_ns for leases (0: the def's), 0, 0; N: lease id, ttl_ns, 0; R: lease id, 0, 0; S:
-- charged_ns, estimate, actual.
--
-- Returns one string per request, as the Redis script's reply: "STATUS now_ns" (STATUS OK,
-- STALE, STATE or INVAL, INVAL followed by a message), then for D/P: allowed denied_by
-- retry_after and per link "allowed limit remaining retry_after reset_after lease_id"; for N the
-- new expiry. Each request is atomic (a chain writes all of its links or none); a request's time
-- is the call's ratcheted by its tags' clocks, and a request that is not a peek moves those
-- clocks to it, so within a tag the time never goes back.
--
-- The batch's rows are read into arrays once, after the locks, and written back once at the end:
-- a hot key decided many times in one call costs one row version, not one per request (PostgreSQL
-- would otherwise walk every version this transaction made at each lookup).
CREATE FUNCTION sluice_limits_call(p_now bigint, p_flags text, p_defs text[], p_tags text[],
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
    UPDATE sluice_limit_state c SET kind = u.kind, st = u.st::bigint[]
      FROM unnest(s_tag, s_lim, s_key, s_kind, s_st, s_dirty) AS u(tag, lim, key, kind, st, dirty)
     WHERE u.dirty AND c.tag = u.tag AND c.lim = u.lim AND c.key = u.key;
    UPDATE sluice_limit_state c SET kind = -1, st = ARRAY[u.now, u.lease]::bigint[]
      FROM unnest(c_tag, c_now, c_lease, c_dirty) AS u(tag, now, lease, dirty)
     WHERE u.dirty AND c.tag = u.tag AND c.lim = '' AND c.key = '\x'::bytea;
    DELETE FROM sluice_limit_state c
      USING unnest(s_tag, s_lim, s_key, s_kind) AS u(tag, lim, key, kind)
     WHERE u.kind = 0 AND c.tag = u.tag AND c.lim = u.lim AND c.key = u.key;
    DELETE FROM sluice_limit_state c
      USING unnest(c_tag, c_kind) AS u(tag, kind)
     WHERE u.kind = 0 AND c.tag = u.tag AND c.lim = '' AND c.key = '\x'::bytea;
    IF cardinality(a_state) > 0 THEN
        INSERT INTO sluice_limit_audit (tag, lim, key, units, now_ns)
        SELECT s_tag[u.s], s_lim[u.s], s_key[u.s], u.units, u.now
          FROM unnest(a_state, a_units, a_now) WITH ORDINALITY AS u(s, units, now, o)
         ORDER BY u.o;
    END IF;
    RETURN res;
END $$;
