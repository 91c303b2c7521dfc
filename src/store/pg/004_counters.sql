-- SPDX-License-Identifier: MIT
-- Schema version 3: the counters every node shows for the whole cluster (src/server/rcounters.c,
-- docs/cluster.md, "Counters"). Each node counts locally and, once a second and at shutdown,
-- adds what it counted since its last flush with one call of sluice_counters_call, which answers
-- the totals of every node in the same transaction.
--
-- Invariant: a node's flush is applied at most once. Its sequence number is recorded in
-- sluice_counter_nodes in the same transaction as the increments, and a flush whose number is
-- not above the recorded one (a resent flush whose answer was lost) adds nothing. A node's row
-- is forgotten 7 days after its last flush (the bound on how late a resent flush may come).

CREATE TABLE sluice_counters (
    name text PRIMARY KEY,    -- "CODE:NAME" (rcounters.h lists the codes)
    n    bigint NOT NULL      -- the total over every node
);

CREATE TABLE sluice_counter_nodes (
    node text PRIMARY KEY,    -- a node's id, random at each start
    seq  bigint NOT NULL,     -- the last flush applied
    at   timestamptz NOT NULL -- when it last flushed
);

-- p_names and p_deltas: the flush's counters (each name once) and their positive deltas.
-- Returns every counter's total. Rows are locked in name order (one fixed order for every
-- node: no deadlock between nodes flushing at once).
CREATE FUNCTION sluice_counters_call(p_node text, p_seq bigint, p_names text[], p_deltas bigint[])
RETURNS TABLE (c_name text, c_n bigint)
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM sluice_counter_nodes WHERE at < clock_timestamp() - interval '7 days';
    INSERT INTO sluice_counter_nodes AS c (node, seq, at)
    VALUES (p_node, p_seq, clock_timestamp())
    ON CONFLICT (node) DO UPDATE SET seq = excluded.seq, at = excluded.at
        WHERE c.seq < excluded.seq;
    IF FOUND THEN
        INSERT INTO sluice_counters AS t (name, n)
        SELECT u.name, u.d FROM unnest(p_names, p_deltas) AS u(name, d)
        ORDER BY u.name COLLATE "C"
        ON CONFLICT (name) DO UPDATE SET n = t.n + excluded.n;
    ELSE
        UPDATE sluice_counter_nodes SET at = clock_timestamp() WHERE node = p_node;
    END IF;
    RETURN QUERY SELECT s.name, s.n FROM sluice_counters s;
END
$$;
