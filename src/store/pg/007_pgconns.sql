-- SPDX-License-Identifier: MIT
--
-- Schema version 7 of sluice's PostgreSQL store: the wake-up NOTIFY leaves the task and series
-- calls' transactions. A transaction that runs pg_notify takes, at its commit, one lock for the
-- whole database (PostgreSQL's PreCommit_Notify: notifications must enter the queue in commit
-- order) and keeps it until its commit is flushed to the WAL. So every call that made work
-- ready waited for the previous one's flush: with several connections per node (docs/cluster.md,
-- "connections"), calls that would have shared one flush (group commit) took one flush each,
-- one after the other (pgbench, 16 clients, fsync on: 3,300 INSERT transactions a second, 400
-- with a pg_notify in each).
--
-- Now a request that makes work ready only notes it (sluice.twake, transaction-local), the call
-- statements the node sends (PGT_CALL_SQL, PGR_CALL_SQL) add one row (request number 0) when it
-- is set, and the node sends `SELECT pg_notify('sluice_wake', '1')` as a transaction of its own
-- once the call has answered: it writes no WAL, so its commit does not wait for a flush and
-- holds that lock for microseconds. The notification still arrives after the work is committed.
-- 002's and 006's calls test sluice.twoke at their end, which nothing sets any more: they no
-- longer notify by themselves. 005's 'defs' notification (a LIMIT.SET, rare) stays.
--
-- Applied by src/store/pg_schema.c on top of version 6; never edited once released.

CREATE OR REPLACE FUNCTION sluice_task_woke() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('sluice.twake', '1', true);
END $$;
