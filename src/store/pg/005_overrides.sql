-- SPDX-License-Identifier: MIT
--
-- Schema version 3 of sluice's PostgreSQL store: the live limit definitions every node shares
-- (LIMIT.SET, LIMIT.DEL, LIMIT.KEY, LIMIT.KEYDEL), the counterpart of the Redis store's hash
-- `<prefix>:{defs}:limits` (src/store/redis/defs.lua). src/server/rdefs.c sends the two
-- functions below and reads their rows with src/store/shared_defs.h's rules.
--
-- One row per limit name: its one-line spec as the single node stores it (durable.c's runtime
-- definition: the whole policy with its per-key overrides, or "mode=..." for a tiered limit),
-- or '' for a tombstone (LIMIT.DEL). Rows are never deleted: a removal is a tombstone, so that a
-- node started later still removes a limit its configuration file declares.
--
-- One version for the whole set, raised by every write in the same transaction: a node that
-- holds version v holds exactly the rows of v. Writes serialise on the version row, so versions
-- are consecutive and a reader's single statement sees a set and its version together.
--
-- Applied by src/store/pg_schema.c on top of version 2; never edited once released.

CREATE TABLE sluice_limit_def (
    name text COLLATE "C" PRIMARY KEY,
    spec text NOT NULL
);

CREATE TABLE sluice_limit_def_version (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    ver bigint NOT NULL
);
INSERT INTO sluice_limit_def_version (one, ver) VALUES (true, 0);

-- The set as the node at version p_known needs it: one row (ver, NULL, NULL) when the set is
-- still at p_known; else every row with the current version (one row with NULL name when the set
-- is empty).
CREATE FUNCTION sluice_limit_defs_get(p_known bigint)
RETURNS TABLE (ver bigint, name text, spec text)
LANGUAGE sql STABLE AS $$
    SELECT v.ver, d.name, d.spec
      FROM sluice_limit_def_version v
      LEFT JOIN sluice_limit_def d ON v.ver <> p_known
     ORDER BY d.name;
$$;

-- Stores p_spec for p_name ('' removes it) and raises the version; returns, as
-- sluice_limit_defs_get, the new version alone when the caller held the one just before it
-- (p_known = new - 1: its set plus this write is the new set), else the whole new set.
CREATE FUNCTION sluice_limit_defs_set(p_known bigint, p_name text, p_spec text)
RETURNS TABLE (ver bigint, name text, spec text)
LANGUAGE plpgsql AS $$
DECLARE
    v bigint;
BEGIN
    -- The version row first: writers queue on it, so each sees the previous one's commit.
    UPDATE sluice_limit_def_version SET ver = sluice_limit_def_version.ver + 1
     WHERE one RETURNING sluice_limit_def_version.ver INTO v;
    INSERT INTO sluice_limit_def (name, spec) VALUES (p_name, p_spec)
        ON CONFLICT ON CONSTRAINT sluice_limit_def_pkey DO UPDATE SET spec = EXCLUDED.spec;
    -- Delivered at commit to every node's LISTEN (the task queue's channel): they read the set
    -- at once instead of at their next poll.
    PERFORM pg_notify('sluice_wake', 'defs');
    IF v = p_known + 1 THEN
        RETURN QUERY SELECT v, NULL::text, NULL::text;
    ELSE
        RETURN QUERY SELECT v, d.name, d.spec FROM sluice_limit_def d
            UNION ALL SELECT v, NULL::text, NULL::text
                       WHERE NOT EXISTS (SELECT 1 FROM sluice_limit_def)
            ORDER BY 2;
    END IF;
END $$;
