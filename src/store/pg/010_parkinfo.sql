-- SPDX-License-Identifier: MIT
--
-- Schema version 10 of sluice's PostgreSQL store: INFO of a task says where a parked task
-- waits, as the Redis script's INFO does (src/store/redis/tasks.lua, where_parked), so that
-- TASK.EXPLAIN on a shared store gives the single node's position, queue_length and wake_ms.
-- Its first element gains four fields: "park_link position queue_length wake_ms" (the link it
-- parked on, 1-based; the parked tasks ahead of it in that link's wait queue, in the order
-- claims take them: higher priority first, then lower id; the queue's length; the queue's
-- armed wake in ms, -1 for none), and "0 0 0 -1" for a task that is not parked.
--
-- 002's sluice_task_done stays as it is, renamed sluice_task_done_v9; the function of that name
-- now calls it and adds the four fields to an INFO's answer. Every caller (006's and 009's
-- sluice_tasks_call, 003's series) calls it by name, so none needs to change. A read: INFO
-- locks and writes nothing more than before.

ALTER FUNCTION sluice_task_done(text, text[], numeric) RENAME TO sluice_task_done_v9;

CREATE FUNCTION sluice_task_done(op text, f text[], now numeric) RETURNS bytea[]
LANGUAGE plpgsql AS $$
DECLARE
    res bytea[] := sluice_task_done_v9(op, f, now);
    t sluice_task;
    ahead bigint;
    len bigint;
    wake bigint;
BEGIN
    IF op <> 'I' OR substr(res[1], 1, 3) <> '\x4f4b20'::bytea THEN -- not an INFO's "OK "
        RETURN res;
    END IF;
    SELECT * INTO t FROM sluice_task WHERE id = f[2]::bigint;
    IF t.state <> 2 OR t.wq_tag IS NULL THEN
        res[1] := res[1] || convert_to(' 0 0 0 -1', 'UTF8');
        RETURN res;
    END IF;
    SELECT count(*) FILTER (WHERE p.prio > t.prio OR (p.prio = t.prio AND p.id < t.id)), count(*)
      INTO ahead, len
      FROM sluice_task p
     WHERE p.state = 2 AND p.wq_tag = t.wq_tag AND p.wq_lim = t.wq_lim AND p.wq_key = t.wq_key;
    SELECT w.wake_ms INTO wake
      FROM sluice_task_wake w
     WHERE w.tag = t.wq_tag AND w.lim = t.wq_lim AND w.key = t.wq_key;
    res[1] := res[1] || convert_to(concat_ws(' ', '', t.park_link, ahead, len, coalesce(wake, -1)),
                                   'UTF8');
    RETURN res;
END $$;
