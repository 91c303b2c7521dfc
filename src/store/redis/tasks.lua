-- SPDX-License-Identifier: MIT
--
-- The shared task queue: the task ops of the store script. This file is appended to
-- src/store/redis/limits.lua at build time (cmake/embed_text.cmake), so a task's chain is judged
-- by limits.lua's own functions (decide_chain, load, store, run_lease, run_settle): one script,
-- one copy of the arithmetic. src/store/redis_tasks.c builds the call and reads the reply; the
-- semantics are the single-node engine's (src/engine/dispatch.c, gate.c, park.c).
-- src/store/redis/recur.lua is appended after this file and closes the library: its recurring
-- series add their occurrences through this file's ADD (tasks_main(ext) below).
--
-- KEYS: first the queue's fixed keys, all under the hash tag {all}:
--   1 "<p>:{all}:clock"  the queue's clock (as limits.lua's tag clocks: "<ns> <lease> -1")
--   2 "<p>:{all}:seq"    the id counter (INCR; ids are never reused)
--   3 "<p>:{all}:task"   hash id -> the task's record (see rec_put)
--   4 "<p>:{all}:body"   hash id -> payload
--   5 "<p>:{all}:links"  hash id -> the task's links (see links_put)
--   6 "<p>:{all}:run"    zset id, score = ceil(lease end in ms): running tasks
--   7 "<p>:{all}:wakes"  zset wait-queue key, score = ceil(wake time in ms): armed wait queues
--   8 "<p>:{all}:tkey"   hash task key -> id of the unfinished task holding it
--   9 "<p>:{all}:done"   zset id, score = finish time in ms: finished tasks, the oldest
--                        forgotten past KEEP
--  10 "<p>:{all}:msg"    hash id -> a failed task's message
-- then per request its own: ADD: "<p>:{all}:ready:<type>", "<p>:{all}:delayed:<type>", then per
-- link its state key and its tag's clock key (limits.lua's names); CLAIM: per type its ready and
-- delayed keys. Keys derived in the script from what earlier calls passed as KEYS: the ready and
-- delayed keys of a stored task's type, "<p>:{all}:wq:<state key>" (the wait queue of a limit
-- key: a zset of parked tasks, lexicographic), and a stored link's state and clock keys. All the
-- queue's keys share the tag {all} (one slot); a chain's state keys have their own tags (a
-- standalone Redis takes them; Redis Cluster is a later slice).
--
-- Ready and wait queues are lexicographic zsets (every score 0) of members "<code><id>": code is
-- 16 hex digits that sort higher priorities first (redis_tasks.c computes it exactly from the
-- int64 priority), id is 20 decimal digits, so ZRANGE 0 0 is the most urgent task. Delayed tasks
-- are a zset by ceil(due in ms) per type; times themselves are kept exactly in the record (ns).
--
-- ARGV: "T2" (protocol), now_ns ("" = Redis TIME; tests inject one), the request count R, the
-- caps max_tasks and max_parked (0: none; "T1" is the same without them), then the R requests,
-- each a head "<op> <nargs>" followed by nargs arguments:
--   A (ADD):    type, payload, task key, has task key (0/1), priority code, priority, delay_ns,
--               lease_ns, max_attempts, backoff (0 fixed, 1 exponential), base_ns, max_ns,
--               throttle_retries (0/1), charge_redelivery (0/1), units, nlinks, then per link:
--               definition (limits.lua's text), units, flags (1 reject, 2 settle), horizon_ns;
--               then, for a task of a group slot (TASK.ADD ... LEASE) only: the group link
--               (1-based: a concurrency link) and the lease id that stands in for it
--   C (CLAIM):  count, ntypes, the type names
--   K (ACK), F (FAIL), T (TOUCH), X (CANCEL), I (INFO): id, attempt (0: any), cost (-1: none),
--               mode (0 retry, 1 dead), retry_after_ns (-1: none), message, has message (0/1)
-- Reply: an array per request whose first element is "STATUS now [fields]":
--   A: "OK now id replaced" | "EXISTS now running_id" | "BUSY now tasks|parked" (a cap) |
--      "NOLEASE now" (the group's lease is not live) | "INVAL now message"
--   C: "OK now delivered failed next_wake_ns more", then per delivered task three elements:
--      "id attempt lease_until_ns", type, payload
--   K, F: "OK now state attempt"; T: "OK now state attempt lease_until_ns";
--   X: "OK now state attempt cancelled(0/1)"; I: "OK now id state attempt lease_until_ns
--      fail_reason priority submitted_ns not_before_ns has_task_key has_message units park_link
--      position queue_length wake_ms [flow_ready flows]" (from park_link: where_parked; the
--      last two only for a due task of a fair flow: its tenant's ready tasks, the flows with
--      tasks), then type, payload, task key, message
--   refusals: "NOTASK now" | "NOLEASE now state attempt" | "INUSE now state attempt"
-- States and fail reasons are the numbers of sluice_task_state and sluice_fail_reason.
--
-- Bounds of one CLAIM (redis_tasks.h): SCAN ready entries gated, WAKES wait queues woken (each
-- at most SCAN tasks), LAPSES lapsed leases taken back, SCAN delayed tasks promoted per type.
--
-- Counts: "<p>:{all}:count" (derived from the clock key's prefix, under {all}) is a hash, u the
-- unfinished tasks (queued, delayed, parked, running), p the parked ones, changed in the same
-- call as every task it counts is added, finished, parked or woken; rebuilt once from the queue
-- when absent (a queue stored before it existed). The caps of the call are checked against it
-- with the single node's rules (engine.c's submit, dispatch.c's poll_one).
--
-- Group slots (limits.md): a task added with its producer's lease names the link the lease
-- stands in for (glink, glease in its record). While that lease lives on the link's key (the
-- state hash has it, unexpired and not released), the gate does not ask that link; once it is
-- gone, the task leaves the group for good and asks its own unit (gate.c's gate_group_check).
--
-- Invariants: a task is in exactly one place for its state (QUEUED: its type's ready or delayed
-- zset; PARKED: one wait queue; RUNNING: run; finished: done); a wait queue with tasks is in
-- wakes (armed), and an empty one is not; every write of a request follows its checks, and a
-- chain is charged all-or-nothing by decide_chain.

-- Everything below is defined inside tasks_main, so that a limits call (protocol "2") does not
-- pay for building the task ops' closures.
-- With `ext` (recur.lua's recur_main), the call is recur.lua's: ext gets the ADD op and the
-- request loop (serve: one clock, one wake, the same INVAL on an error), so that an occurrence
-- of a recurring series is added by the very code that adds a task.
local function tasks_main(ext)
  local SCAN, WAKES, LAPSES, KEEP = 64, 16, 64, 10000
  local QUEUED, PARKED, RUNNING, DONE, FAILED, CANCELLED = 1, 2, 3, 4, 5, 6
  local F_RATELIMITED, F_HORIZON, F_NEVER, F_ATTEMPTS, F_DEAD = 1, 2, 3, 4, 5
  local HOLDS, FREE = 1, 2 -- record flags: holds a grant (lost lease); a free retry
  local L_REJECT, L_SETTLE = 1, 2
  local K_CLOCK, K_SEQ, K_TASK, K_BODY, K_LINKS, K_RUN, K_WAKES, K_TKEY, K_DONE, K_MSG =
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10
  local NFIXED = 10
  local PFX -- "<p>:{all}:"
  local woke -- a request made work ready: publish once at the end of the call
  local caps = {tasks = 0, parked = 0} -- the call's max_tasks and max_parked (0: none)
  local cnt -- the counts {u, p, dirty}, read by begin()
  local defcache = {}

  -- ---- encodings ----------------------------------------------------------------------------

  -- A list of strings as "<len>:<bytes>" each: any bytes survive.
  local function enc(list)
    local out = {}
    for i = 1, #list do
      local v = tostring(list[i])
      out[#out + 1] = #v .. ":" .. v
    end
    return table.concat(out)
  end

  local function dec(s)
    local list, p = {}, 1
    while p <= #s do
      local len, at = s:match("^(%d+):()", p)
      len = tonumber(len)
      list[#list + 1] = s:sub(at, at + len - 1)
      p = at + len
    end
    return list
  end

  local function bit(x, b)
    return x % (2 * b) >= b
  end

  local function member(t)
    return t.code .. sfmt("%020d", t.id)
  end

  local function ms_floor(ns)
    return (divt(ns, 1000000))
  end

  local function ms_ceil(ns)
    local q, r = divt(ns, 1000000)
    if sign(r) > 0 then
      q = add(q, 1)
    end
    return q
  end

  -- The record: every field a string but the numbers noted.
  local REC = {"state", "attempt", "max_attempts", "flags", "lease_ns", "due", "not_before",
               "submitted", "fail_reason", "backoff", "base_ns", "max_ns", "throttle",
               "charge_redelivery", "park_link", "prio", "code", "type", "tkey", "has_tkey",
               "units", "glink", "glease", "fair", "tenant", "funits"}
  local REC_NUM = {state = true, attempt = true, max_attempts = true, flags = true,
                   fail_reason = true, backoff = true, throttle = true, charge_redelivery = true,
                   park_link = true, has_tkey = true, glink = true, fair = true}
  local REC_BIG = {lease_ns = true, due = true, not_before = true, submitted = true,
                   base_ns = true, max_ns = true}

  -- A record of a hash (a task here, a series in recur.lua) from its stored text v, into t: the
  -- fields named by rec, in order; those in nums as Lua numbers, those in bigs as limits.lua's
  -- big numbers (num), the others as strings.
  local function rec_decode(rec, nums, bigs, v, t)
    local f = dec(v)
    for i = 1, #rec do
      local k = rec[i]
      if nums[k] then
        t[k] = tonumber(f[i])
      elseif bigs[k] then
        t[k] = num(f[i])
      else
        t[k] = f[i]
      end
    end
    return t
  end

  -- The stored text of record t (rec_decode's inverse).
  local function rec_encode(rec, bigs, t)
    local f = {}
    for i = 1, #rec do
      local v = t[rec[i]]
      f[i] = bigs[rec[i]] and str(v) or v
    end
    return enc(f)
  end

  local function rec_get(id)
    local v = redis.call("HGET", KEYS[K_TASK], id)
    if not v then
      return nil
    end
    local t = rec_decode(REC, REC_NUM, REC_BIG, v, {id = tonumber(id), ids = tostring(id)})
    t.glink, t.glease = t.glink or 0, t.glease or "0" -- a record stored before group slots
    t.fair = t.fair or 0 -- before fair flows: FIFO
    return t
  end

  local function rec_put(t)
    redis.call("HSET", KEYS[K_TASK], t.ids, rec_encode(REC, REC_BIG, t))
  end

  -- Links: per link 8 fields: definition, units, flags, horizon_ns, state key, clock key,
  -- lease id ("0": none), charged_ns ("0": not charged).
  local function links_get(id)
    local v = redis.call("HGET", KEYS[K_LINKS], id)
    local f, out = dec(v or ""), {}
    for i = 1, #f, 8 do
      out[#out + 1] = {def = f[i], units = tonumber(f[i + 1]), flags = tonumber(f[i + 2]),
                       horizon = num(f[i + 3]), skey = f[i + 4], ckey = f[i + 5],
                       lease = f[i + 6], charged = f[i + 7]}
    end
    return out
  end

  local function links_put(id, links)
    local f = {}
    for i = 1, #links do
      local l = links[i]
      f[#f + 1] = l.def
      f[#f + 1] = l.units
      f[#f + 1] = l.flags
      f[#f + 1] = str(l.horizon)
      f[#f + 1] = l.skey
      f[#f + 1] = l.ckey
      f[#f + 1] = l.lease
      f[#f + 1] = l.charged
    end
    redis.call("HSET", KEYS[K_LINKS], id, enc(f))
  end

  local function def_of(text)
    local D = defcache[text]
    if not D then
      D = parse_def(text)
      defcache[text] = D
    end
    return D
  end

  -- A stored link as limits.lua's functions take it (nil for a definition that does not parse).
  local function mklink(l)
    local D = def_of(l.def)
    if D.err then
      return nil
    end
    return {skey = reset_key(l.skey), units = l.units, tag = tag_of(l.ckey), kind = D.kind, limit = D.limit,
            period = D.period, burst = D.burst, start_empty = D.start_empty, ttl = D.ttl,
            calendar = D.calendar, g = D.g, shadow = D.shadow, aimd = D.aimd}
  end

  -- ---- time -------------------------------------------------------------------------------

  local clock -- the {all} tag's clock (tag_of)

  -- The request's time: the call's, ratcheted by the queue's clock (and by Ls' tags' clocks).
  local function ratchet(now, Ls)
    if lt(now, clock.t) then
      now = clock.t
    end
    for i = 1, Ls and #Ls or 0 do
      if lt(now, Ls[i].tag.t) then
        now = Ls[i].tag.t
      end
    end
    clock.t, clock.dirty, clock.forever = now, true, true
    for i = 1, Ls and #Ls or 0 do
      Ls[i].tag.t, Ls[i].tag.dirty = now, true
    end
    return now
  end

  -- ---- places -----------------------------------------------------------------------------

  local function ready_key(t)
    return PFX .. "ready:" .. t.type
  end

  local function delayed_key(t)
    return PFX .. "delayed:" .. t.type
  end

  local function wq_key(l)
    return PFX .. "wq:" .. l.skey
  end

  -- Reads the counts, or rebuilds them from the queue when absent: every task record that is
  -- not in done is unfinished, and every parked task is in an armed wait queue.
  local function counts_read()
    local v = redis.call("HMGET", PFX .. "count", "u", "p")
    if v[1] then
      cnt = {u = tonumber(v[1]), p = tonumber(v[2]) or 0}
      return
    end
    local p, qs = 0, redis.call("ZRANGE", KEYS[K_WAKES], 0, -1)
    for i = 1, #qs do
      p = p + redis.call("ZCARD", qs[i])
    end
    cnt = {u = redis.call("HLEN", KEYS[K_TASK]) - redis.call("ZCARD", KEYS[K_DONE]), p = p,
           dirty = true}
  end

  local function count(du, dp)
    cnt.u, cnt.p, cnt.dirty = cnt.u + du, cnt.p + dp, true
  end

  local function parked_full()
    return caps.parked > 0 and cnt.p >= caps.parked
  end

  -- ---- fair flows (fairness: keys; ready.c's fair queue) ------------------------------------
  --
  -- A fair task (record field fair 1) waits in its tenant's flow, "<p>:{all}:fq:<len>:<type>:
  -- <tenant>", a lexicographic zset of "<code><id>" as a ready queue. The flows with tasks are in
  -- the type's active set "<p>:{all}:fa:<type>", each as one member "<head code><tag, 20 digits>
  -- <head id><tenant>", so that ZRANGE 0 0 is ready.c's flow_less order: the more urgent head,
  -- then the smaller tag (the tenant served least), then the older head. "<p>:{all}:ft:<type>"
  -- maps a tenant to its member there, "<p>:{all}:fv:<type>" holds the type's virtual time (the
  -- largest tag a delivery moved a flow to). A delivery adds its units on the fair limit to its
  -- flow's tag; a flow that was empty joins at the virtual time (behind every flow served). An
  -- empty flow keeps nothing: its tag is at or below the virtual time, where it would join.
  -- FIFO tasks of the same type stay in its ready zset; a claim takes the more urgent of the two
  -- heads (both exist only while nodes or the configuration change a type's fairness).

  local function fq_key(ty, tenant)
    return PFX .. "fq:" .. #ty .. ":" .. ty .. ":" .. tenant
  end

  local function fa_key(ty)
    return PFX .. "fa:" .. ty
  end

  local function ft_key(ty)
    return PFX .. "ft:" .. ty
  end

  local function fv_key(ty)
    return PFX .. "fv:" .. ty
  end

  local function vtime_of(ty)
    return num(redis.call("GET", fv_key(ty)) or "0")
  end

  -- The tag in an active member (its digits 17..36).
  local function tag_in(m)
    return num(m:sub(17, 36))
  end

  -- Files tenant's flow of type ty in the active set again after its head or its tag changed:
  -- with tag (nil: the flow's own, or the virtual time for a flow that joins).
  local function fair_refile(ty, tenant, tag)
    local ft = ft_key(ty)
    local old = redis.call("HGET", ft, tenant)
    local head = redis.call("ZRANGE", fq_key(ty, tenant), 0, 0)[1]
    local new
    if head then
      if not tag then
        tag = old and tag_in(old) or vtime_of(ty)
      end
      local ts = str(tag)
      new = head:sub(1, 16) .. string.rep("0", 20 - #ts) .. ts .. head:sub(17) .. tenant
    end
    if old == new then
      return
    end
    if old then
      redis.call("ZREM", fa_key(ty), old)
    end
    if new then
      redis.call("ZADD", fa_key(ty), 0, new)
      redis.call("HSET", ft, tenant, new)
    else
      redis.call("HDEL", ft, tenant)
    end
  end

  -- A delivery of t from the flow whose tag was `tag`: ready.c's ready_served.
  local function fair_served(t, tag)
    tag = sat_add(tag, num(t.funits))
    local v = vtime_of(t.type)
    if lt(v, tag) then
      redis.call("SET", fv_key(t.type), str(tag))
    end
    return tag
  end

  -- Takes t (QUEUED, ready) out of its ready zset or its flow.
  local function unready(t)
    if t.fair == 1 then
      redis.call("ZREM", fq_key(t.type, t.tenant), member(t))
      fair_refile(t.type, t.tenant, nil)
    else
      redis.call("ZREM", ready_key(t), member(t))
    end
  end

  local function to_ready(t)
    t.state = QUEUED
    if t.fair == 1 then
      redis.call("ZADD", fq_key(t.type, t.tenant), 0, member(t))
      fair_refile(t.type, t.tenant, nil)
    else
      redis.call("ZADD", ready_key(t), 0, member(t))
    end
    woke = true
  end

  -- The most urgent ready task of claimed type ty: its member "<code><id>", and when it heads a
  -- fair flow, the flow's tenant and active member.
  local function type_head(ty)
    local m = redis.call("ZRANGE", ty.ready, 0, 0)[1]
    local f = redis.call("ZRANGE", fa_key(ty.name), 0, 0)[1]
    if f then
      local fm = f:sub(1, 16) .. f:sub(37, 56)
      if not m or fm < m then
        return fm, f:sub(57), f
      end
    end
    return m
  end

  -- Arms wait queue q to wake by ms at the latest (an earlier armed wake stays).
  local function arm(q, ms)
    redis.call("ZADD", KEYS[K_WAKES], "LT", str(ms), q)
  end

  local function park(t, i, l, wake_ns)
    local q = wq_key(l)
    t.state, t.park_link = PARKED, i
    redis.call("ZADD", q, 0, member(t))
    count(0, 1)
    if wake_ns then
      arm(q, ms_ceil(wake_ns))
    elseif redis.call("ZSCORE", KEYS[K_WAKES], q) == false then
      arm(q, ms_floor(clock.t)) -- never left unarmed
    end
  end

  -- Where parked task t waits, as INFO's last four fields: "link position length wake_ms" (its
  -- link, 1-based; the tasks ahead of it in that link key's wait queue, which is ordered as
  -- claims take it; the queue's length; when the queue is armed to wake, -1 for never), and
  -- "0 0 0 -1" for a task that is not parked.
  local function where_parked(t)
    local l = t.state == PARKED and t.park_link > 0 and links_get(t.ids)[t.park_link]
    if not l then
      if t.state == QUEUED and t.fair == 1 and sign(t.due) == 0 then -- a fair flow's: its turn
        return "0 0 0 -1 " .. redis.call("ZCARD", fq_key(t.type, t.tenant)) .. " " ..
                 redis.call("ZCARD", fa_key(t.type))
      end
      return "0 0 0 -1"
    end
    local q = wq_key(l)
    local wake = redis.call("ZSCORE", KEYS[K_WAKES], q)
    return table.concat({t.park_link, redis.call("ZRANK", q, member(t)) or 0,
                         redis.call("ZCARD", q), wake and sfmt("%d", tonumber(wake)) or "-1"}, " ")
  end

  -- Finishes t (in no queue any more) at now.
  local function finish(t, state, reason)
    t.state, t.fail_reason, t.due = state, reason or 0, 0
    count(-1, 0)
    redis.call("ZREM", KEYS[K_RUN], t.ids)
    if t.has_tkey == 1 and redis.call("HGET", KEYS[K_TKEY], t.tkey) == t.ids then
      redis.call("HDEL", KEYS[K_TKEY], t.tkey)
    end
    rec_put(t)
    redis.call("ZADD", KEYS[K_DONE], str(ms_floor(clock.t)), t.ids) -- the oldest go first
    local n = redis.call("ZCARD", KEYS[K_DONE])
    if n > KEEP then
      local old = redis.call("ZPOPMIN", KEYS[K_DONE], n - KEEP)
      for i = 1, #old, 2 do
        redis.call("HDEL", KEYS[K_TASK], old[i])
        redis.call("HDEL", KEYS[K_BODY], old[i])
        redis.call("HDEL", KEYS[K_LINKS], old[i])
        redis.call("HDEL", KEYS[K_MSG], old[i])
      end
    end
  end

  local wake_queue -- below

  -- Releases t's concurrency leases at now; their keys' wait queues wake at once (park.c's
  -- park_wake_key, called by gate_release).
  local function release(t, links, now)
    for i = 1, #links do
      local l = links[i]
      if l.lease ~= "0" then
        local L = mklink(l)
        if L then
          run_lease({op = "R", links = {L}, a1s = l.lease}, ratchet(now, {L}), {})
        end
        l.lease = "0"
        woke = true -- a blocked claimer looks again (the queue's wake may have moved)
        if redis.call("EXISTS", wq_key(l)) == 1 then
          wake_queue(wq_key(l), now)
        end
      end
    end
  end

  local function clear_charges(links)
    for i = 1, #links do
      links[i].charged = "0"
    end
  end

  -- ---- the gate ---------------------------------------------------------------------------

  -- Whether lease `lease` lives on stored link l's key at now: held (units > 0) and unexpired,
  -- as load() reads a concurrency state.
  local function lease_live(l, lease, now)
    local v = redis.pcall("HGET", l.skey, lease)
    if type(v) ~= "string" then
      return false
    end
    local e, u = v:match("^(%-?%d+) (%d+)$")
    return e ~= nil and tonumber(u) > 0 and lt(now, num(e))
  end

  -- Gates t (QUEUED, in no queue) at now. Returns "D" delivered (t updated), "P" parked, "F"
  -- failed, and the time it was decided at.
  local function gate(t, now)
    local links = links_get(t.ids)
    local full = t.flags % 4 == 0
    local act, Ls = {}, {}
    if t.glink > 0 and not (links[t.glink] and lease_live(links[t.glink], t.glease, now)) then
      t.glink, t.glease = 0, "0" -- the group ended: from now on the task asks its own unit
    end
    for i = 1, #links do
      local L = mklink(links[i])
      if not L then
        finish(t, FAILED, 0)
        return "F", now
      end
      if i ~= t.glink and (full or L.kind == 4) then
        act[#act + 1] = i
        Ls[#Ls + 1] = L
      end
    end
    local me = member(t)
    -- Strict priority: never overtake a more urgent task parked on a key this chain touches.
    for k = 1, #act do
      local l = links[act[k]]
      local head = redis.call("ZRANGE", wq_key(l), 0, 0)[1]
      if head and head < me then
        if parked_full() then -- it would wait while the parking lot is full (max_parked)
          finish(t, FAILED, F_RATELIMITED)
          return "F", now
        end
        park(t, act[k], l, nil)
        rec_put(t)
        return "P", now
      end
    end
    now = ratchet(now, Ls)
    if #act > 0 then
      local all, ds, lead = decide_chain({links = Ls, a1 = t.lease_ns}, now, false)
      if not all then
        local reject, never, horizon
        for k = 1, #act do
          local d, l = ds[lead[k]], links[act[k]]
          if d.allowed == 0 then
            if not reject and bit(l.flags, L_REJECT) then
              reject = k
            end
            if not never and eq(d.retry, NEVER) then
              never = k
            end
            local hz = sign(l.horizon) > 0 and l.horizon or I64MAX
            if not horizon and Ls[k].kind ~= 4 and lt(hz, d.retry) then
              horizon = k
            end
          end
        end
        if reject or never or horizon then
          finish(t, FAILED, reject and F_RATELIMITED or (never and F_NEVER or F_HORIZON))
          return "F", now
        end
        if parked_full() then
          finish(t, FAILED, F_RATELIMITED)
          return "F", now
        end
        local retry, denied_by = chain_denial(#act, all, ds, lead)
        park(t, act[denied_by + 1], links[act[denied_by + 1]], sat_add(now, retry))
        rec_put(t)
        return "P", now
      end
      for k = 1, #act do
        local l = links[act[k]]
        if ds[lead[k]].shadow then
          -- A shadow link's would-be denial, let through uncharged: no lease, nothing to settle
          -- (gate.c's LINK_SHADOW).
        elseif lead[k] == k and Ls[k].kind == 4 then
          l.lease = ds[k].lease
        elseif Ls[k].kind ~= 4 then
          l.charged = str(now)
        end
      end
      links_put(t.ids, links)
    end
    t.flags = t.flags - (bit(t.flags, FREE) and FREE or 0)
    t.attempt = t.attempt + 1
    t.state = RUNNING
    t.due = sat_add(now, t.lease_ns)
    redis.call("ZADD", KEYS[K_RUN], str(ms_ceil(t.due)), t.ids)
    rec_put(t)
    return "D", now
  end

  -- A running task whose lease lapsed: back to ready with its grant (charge_redelivery: without).
  local function lapse(t, now)
    local links = links_get(t.ids)
    release(t, links, now)
    if t.charge_redelivery == 1 then
      clear_charges(links)
      t.flags = 0
    elseif not bit(t.flags, HOLDS) then
      t.flags = t.flags + HOLDS
    end
    links_put(t.ids, links)
    redis.call("ZREM", KEYS[K_RUN], t.ids)
    t.due = 0
    to_ready(t)
    rec_put(t)
  end

  -- Wakes wait queue q at now as park.c's park_wake does: the most urgent prefix whose units
  -- fit the limit now (a head that can never fit too, for the gate to fail it) goes back to
  -- ready; the queue is armed again for the rest: when the next task fits behind the prefix (a
  -- concurrency limit, or a limit that cannot say: within PARK_RECHECK_NS, 1 s), or, when
  -- nothing moved, at the head's own slot. A peek: nothing is charged (the tasks are charged
  -- when a claim gates them). Returns true when the bound cut it short (the queue stays due).
  local RECHECK = 1000000000

  -- When `units` could start on L's key (state s) at the earliest: sluice_limit_estimate (a
  -- rate's slot, even past its burst; a window's units filling the following windows; else the
  -- peek's wait). A read.
  local function estimate(L, s, units, now)
    if L.kind == 1 then
      if L.aimd then -- at the key's rate now, brought to now in a copy (a read)
        s = {tat = s.tat, rem = s.rem, eff = s.eff, since = s.since, fresh = s.fresh}
        aimd_refresh(L.aimd, s, now)
      end
      local g = key_g(L, s)
      local nxt = rat_add(base_tat(g, s, units, now), times_t(g, units), g.permits)
      if eq(nxt.ns, I64MAX) then
        return NEVER
      end
      local slot = rat_ceil(rat_sub(nxt, rat(g.bt_q, g.bt_r), g.permits))
      return lt(now, slot) and slot or now
    elseif L.kind == 2 then
      local _, r = divt(now, L.period)
      local start = sub(now, r)
      local count = (not s.fresh and eq(s.start, start)) and s.count or 0
      local k = divt(sat_add(count, units - 1), L.limit)
      if sign(k) == 0 then
        return now
      end
      return sat_add(start, mul(k, L.period))
    end
    local d = {}
    decide_link(L, s, units, L.ttl, now, true, d)
    if d.allowed == 1 then
      return now
    elseif not eq(d.retry, NEVER) then
      return sat_add(now, d.retry)
    elseif L.kind == 3 then
      return sat_add(add(now, d.reset), mul(divt(units - 1, L.limit), L.period))
    end
    return NEVER
  end

  wake_queue = function(q, now)
    local ms = redis.call("ZRANGE", q, 0, SCAN - 1)
    local cum, L, s, moved, d, kind, u_next = 0, nil, nil, 0, nil, nil, nil
    local stopped = false
    for i = 1, #ms do
      local t = rec_get(ms[i]:sub(17):match("^0*(%d+)$"))
      if not t or t.state ~= PARKED then
        redis.call("ZREM", q, ms[i]) -- a stale entry (only a bug leaves one): dropped
      else
        local l = links_get(t.ids)[t.park_link]
        if l and not L then -- every task of q waits on the same state key
          L = mklink(l)
          if L then
            now = ratchet(now, {L})
            s = load(L, now)
            kind = L.kind
          end
        end
        if l and L then
          d = {}
          decide_link(L, s, cum + l.units, L.ttl, now, true, d)
          if d.allowed ~= 1 and not (moved == 0 and eq(d.retry, NEVER)) then
            stopped, u_next = true, l.units
            break
          end
        end
        redis.call("ZREM", q, ms[i])
        count(0, -1)
        t.park_link = 0
        to_ready(t)
        rec_put(t)
        moved = moved + 1
        if l and L and d.allowed == 1 then
          cum = cum + l.units
        end
      end
    end
    if redis.call("EXISTS", q) == 0 then
      redis.call("ZREM", KEYS[K_WAKES], q)
      return false
    end
    local wake
    if not stopped then
      wake = now -- the bound stopped it: the rest is looked at again at once
    elseif moved == 0 then
      wake = sat_add(now, sign(d.retry) > 0 and d.retry or 1)
    else
      local recheck = sat_add(now, RECHECK)
      local start = estimate(L, s, cum + u_next, now)
      wake = recheck
      if lt(now, start) and not eq(start, NEVER) then
        wake = start
      end
      if kind == 4 and lt(recheck, wake) then
        wake = recheck
      end
    end
    redis.call("ZADD", KEYS[K_WAKES], str(stopped and ms_ceil(wake) or ms_floor(wake)), q)
    return not stopped
  end

  -- ---- ops --------------------------------------------------------------------------------

  -- Whether a new task with these links would wait if gated now (engine.c's would_park): a key
  -- of its chain has tasks parked, or a link's peek at its tag's time denies its units. Writes
  -- nothing, not even a clock.
  local function would_park(links, glink, now)
    for i = 1, #links do
      local l = links[i]
      if i == glink then -- the group's lease stands in for that link
        l = nil
      elseif redis.call("EXISTS", wq_key(l)) == 1 then
        return true
      end
      if l then
        local L = mklink(l)
        if L and not L.shadow then -- a shadow link's peek answers its denial as a pass
          local at = lt(now, L.tag.t) and L.tag.t or now
          local d = {}
          decide_link(L, load(L, at), l.units, L.ttl, at, true, d)
          if d.allowed ~= 1 then
            return true
          end
        end
      end
    end
    return false
  end

  local function op_add(a, ki, now, reply)
    local ty, payload, tk, has_tk = a[1], a[2], a[3], a[4] == "1"
    if has_tk then
      local hid = redis.call("HGET", KEYS[K_TKEY], tk)
      local h = hid and rec_get(hid)
      if h and (h.state == QUEUED or h.state == PARKED) then
        redis.call("HSET", KEYS[K_BODY], h.ids, payload)
        return "OK " .. str(now) .. " " .. h.ids .. " 1"
      elseif h and h.state == RUNNING then
        return "EXISTS " .. str(now) .. " " .. h.ids
      end
    end
    if caps.tasks > 0 and cnt.u >= caps.tasks then
      return "BUSY " .. str(now) .. " tasks"
    end
    local nl = tonumber(a[16])
    local links = {}
    for i = 1, nl do
      local at = 16 + 4 * (i - 1)
      local D = def_of(a[at + 1])
      local u = tonumber(a[at + 2])
      if D.err or not u or u < 1 then
        return "INVAL " .. str(now) .. " bad link " .. i
      end
      links[i] = {def = a[at + 1], units = u, flags = tonumber(a[at + 3]), horizon = num(a[at + 4]),
                  skey = KEYS[ki + 2 + 2 * (i - 1)], ckey = KEYS[ki + 3 + 2 * (i - 1)],
                  lease = "0", charged = "0"}
    end
    local glink, glease = tonumber(a[17 + 4 * nl] or "0"), a[18 + 4 * nl] or "0"
    if glink > 0 and not (links[glink] and lease_live(links[glink], glease, now)) then
      return "NOLEASE " .. str(now)
    end
    local delay = num(a[7])
    if parked_full() and sign(delay) <= 0 and would_park(links, glink, now) then
      return "BUSY " .. str(now) .. " parked"
    end
    local id = redis.call("INCR", KEYS[K_SEQ])
    local ids = sfmt("%d", id)
    count(1, 0)
    local t = {id = id, ids = ids, state = QUEUED, attempt = 0, max_attempts = tonumber(a[9]), flags = 0,
               lease_ns = num(a[8]), due = 0, not_before = 0, submitted = now, fail_reason = 0,
               backoff = tonumber(a[10]), base_ns = num(a[11]), max_ns = num(a[12]),
               throttle = tonumber(a[13]), charge_redelivery = tonumber(a[14]), park_link = 0,
               prio = a[6], code = a[5], type = ty, tkey = has_tk and tk or "",
               has_tkey = has_tk and 1 or 0, units = a[15], glink = glink, glease = glease,
               fair = a[19 + 4 * nl] == "1" and 1 or 0, tenant = a[20 + 4 * nl] or "",
               funits = a[21 + 4 * nl] or "1"}
    if t.fair == 1 and not (t.funits:match("^%d+$") and sign(num(t.funits)) > 0) then
      return "INVAL " .. str(now) .. " bad fair units"
    end
    redis.call("HSET", KEYS[K_BODY], ids, payload)
    links_put(ids, links)
    if sign(delay) > 0 then
      t.due = sat_add(now, delay)
      t.not_before = t.due
      redis.call("ZADD", KEYS[ki + 1], str(ms_ceil(t.due)), ids)
      woke = true -- a blocked claimer re-arms its timer for it
    elseif t.fair == 1 then
      to_ready(t)
    else
      redis.call("ZADD", KEYS[ki], 0, member(t))
      woke = true
    end
    if has_tk then
      redis.call("HSET", KEYS[K_TKEY], tk, ids)
    end
    rec_put(t)
    return "OK " .. str(now) .. " " .. ids .. " 0"
  end

  local function op_claim(a, ki, now, reply)
    local count, nt = tonumber(a[1]), tonumber(a[2])
    local types = {}
    for i = 1, nt do
      types[i] = {name = a[2 + i], ready = KEYS[ki + 2 * (i - 1)],
                  delayed = KEYS[ki + 1 + 2 * (i - 1)]}
    end
    local more = false
    -- Lapsed leases.
    local lap = redis.call("ZRANGEBYSCORE", KEYS[K_RUN], "-inf", str(ms_ceil(now)), "LIMIT", 0,
                           LAPSES)
    for i = 1, #lap do
      local t = rec_get(lap[i])
      if not t or t.state ~= RUNNING then
        redis.call("ZREM", KEYS[K_RUN], lap[i])
      elseif le(t.due, now) then
        lapse(t, now)
      end
    end
    if #lap == LAPSES then
      more = true
    end
    -- Delayed tasks that came due.
    for i = 1, nt do
      local due = redis.call("ZRANGEBYSCORE", types[i].delayed, "-inf", str(ms_ceil(now)),
                             "LIMIT", 0, SCAN)
      for j = 1, #due do
        local t = rec_get(due[j])
        if not t or t.state ~= QUEUED then
          redis.call("ZREM", types[i].delayed, due[j])
        elseif le(t.due, now) then
          redis.call("ZREM", types[i].delayed, due[j])
          t.due = 0
          to_ready(t)
          rec_put(t)
        end
      end
      if #due == SCAN then
        more = true
      end
    end
    -- Wait queues whose time came (scores are rounded up: never woken early).
    local qs = redis.call("ZRANGEBYSCORE", KEYS[K_WAKES], "-inf", str(ms_floor(now)), "LIMIT", 0,
                          WAKES)
    for i = 1, #qs do
      if wake_queue(qs[i], now) then
        more = true
      end
    end
    if #qs == WAKES then
      more = true
    end
    -- The most urgent ready tasks, gated one by one.
    local heads, tenants, flows = {}, {}, {}
    for i = 1, nt do
      heads[i], tenants[i], flows[i] = type_head(types[i])
    end
    local out, nd, nf, seen = {}, 0, 0, 0
    while nd < count do
      local best
      for i = 1, nt do
        if heads[i] and (not best or heads[i] < heads[best]) then
          best = i
        end
      end
      if not best then
        break
      end
      if seen >= SCAN then
        more = true
        break
      end
      seen = seen + 1
      local m, tenant = heads[best], tenants[best]
      local ty, tag = types[best].name, nil
      if tenant then
        redis.call("ZREM", fq_key(ty, tenant), m)
        tag = tag_in(flows[best])
      else
        redis.call("ZREM", types[best].ready, m)
      end
      local t = rec_get(m:sub(17):match("^0*(%d+)$"))
      local v
      if t and t.state == QUEUED then
        local at
        v, at = gate(t, now)
        if lt(now, at) then
          now = at
        end
      end
      if tenant then
        -- Only a delivery costs the tenant its turn (ready.c: a task taken and parked does not).
        fair_refile(ty, tenant, v == "D" and fair_served(t, tag) or tag)
      end
      if v then
        if v == "D" then
          nd = nd + 1
          out[#out + 1] = t.ids .. " " .. t.attempt .. " " .. str(t.due)
          out[#out + 1] = t.type
          out[#out + 1] = redis.call("HGET", KEYS[K_BODY], t.ids) or "{}"
        elseif v == "F" then
          nf = nf + 1
        end
      end
      heads[best], tenants[best], flows[best] = type_head(types[best])
    end
    local wake = "0"
    if more then
      wake = str(now)
    elseif nd == 0 then
      local w
      local function earliest(key)
        local r = redis.call("ZRANGE", key, 0, 0, "WITHSCORES")
        if r[2] then
          local v = tonumber(r[2])
          if not w or v < w then
            w = v
          end
        end
      end
      for i = 1, nt do
        earliest(types[i].delayed)
      end
      earliest(KEYS[K_WAKES])
      earliest(KEYS[K_RUN])
      if w then
        wake = str(max(mul(w, 1000000), now))
      end
    end
    reply[#reply + 1] = "OK " .. str(now) .. " " .. nd .. " " .. nf .. " " .. wake .. " " ..
                          (more and 1 or 0)
    for i = 1, #out do
      reply[#reply + 1] = out[i]
    end
    return nil
  end

  -- The backoff before retry number `attempt` (dispatch.c's backoff).
  local function backoff(t, attempt)
    local d = sign(t.base_ns) > 0 and t.base_ns or 0
    if t.backoff == 1 then
      local i = 1
      while i < attempt and lt(d, t.max_ns) do
        d = sat_add(d, d)
        i = i + 1
      end
      if sign(t.max_ns) > 0 and lt(t.max_ns, d) then
        d = t.max_ns
      end
    end
    return d
  end

  -- RETRY_AFTER: every rate link's key is held back until `untl` (gcra.c's gcra_backoff).
  local function backoff_links(links, untl, now)
    for i = 1, #links do
      local L = mklink(links[i])
      if L and L.kind == 1 then
        now = ratchet(now, {L})
        local s = load(L, now)
        if L.aimd then -- the 429 lowers the key's rate too (dispatch.c: sluice_limit_backoff)
          aimd_decrease(L.aimd, s, now)
        end
        hold_rate(L, s, untl)
        store(L, s, now, L.tag)
      end
    end
  end

  local function op_done(op, a, now, reply)
    local id = a[1]
    local t = rec_get(id)
    local n = str(now)
    if not t then
      return "NOTASK " .. n
    end
    local attempt = tonumber(a[2])
    if t.state == RUNNING and le(t.due, now) then
      lapse(t, now) -- its lease is over, whether or not a claim noticed it yet
    end
    if op == "I" then
      reply[1] = table.concat({"OK", n, t.ids, t.state, t.attempt,
                               t.state == RUNNING and str(t.due) or "0", t.fail_reason, t.prio,
                               str(t.submitted), str(t.not_before), t.has_tkey,
                               redis.call("HEXISTS", KEYS[K_MSG], t.ids), t.units,
                               where_parked(t)}, " ")
      reply[2] = t.type
      reply[3] = redis.call("HGET", KEYS[K_BODY], t.ids) or "{}"
      reply[4] = t.tkey
      reply[5] = redis.call("HGET", KEYS[K_MSG], t.ids) or ""
      return nil
    end
    if op == "X" then
      if t.state == RUNNING then
        return "INUSE " .. n .. " " .. t.state .. " " .. t.attempt
      end
      if t.state >= DONE then
        return "OK " .. n .. " " .. t.state .. " " .. t.attempt .. " 0"
      end
      if t.state == PARKED then
        local l = links_get(t.ids)[t.park_link]
        if l then
          local q = wq_key(l)
          redis.call("ZREM", q, member(t))
          count(0, -1)
          if redis.call("EXISTS", q) == 0 then
            redis.call("ZREM", KEYS[K_WAKES], q)
          end
        end
      else
        unready(t)
        redis.call("ZREM", delayed_key(t), t.ids)
      end
      finish(t, CANCELLED, 0)
      return "OK " .. n .. " " .. t.state .. " " .. t.attempt .. " 1"
    end
    if t.state ~= RUNNING or (attempt > 0 and attempt ~= t.attempt) then
      return "NOLEASE " .. n .. " " .. t.state .. " " .. t.attempt
    end
    local links = links_get(t.ids)
    if op == "T" then
      t.due = sat_add(now, t.lease_ns)
      for i = 1, #links do
        local l = links[i]
        if l.lease ~= "0" then
          local L = mklink(l)
          if L then
            run_lease({op = "N", links = {L}, a1s = l.lease, a2 = t.lease_ns}, ratchet(now, {L}),
                      {})
          end
        end
      end
      redis.call("ZADD", KEYS[K_RUN], str(ms_ceil(t.due)), t.ids)
      rec_put(t)
      return "OK " .. n .. " " .. t.state .. " " .. t.attempt .. " " .. str(t.due)
    end
    if op == "K" then
      local cost = num(a[3])
      release(t, links, now)
      if sign(cost) >= 0 then
        for i = 1, #links do
          local l = links[i]
          if bit(l.flags, L_SETTLE) and l.charged ~= "0" then
            local L = mklink(l)
            if L then
              run_settle({links = {L}, a1 = num(l.charged), a2 = l.units, a3 = cost},
                         ratchet(now, {L}))
            end
          end
        end
      end
      links_put(t.ids, links)
      finish(t, DONE, 0)
      return "OK " .. n .. " " .. t.state .. " " .. t.attempt
    end
    -- FAIL
    local dead, ra = a[4] == "1", num(a[5])
    if sign(ra) >= 0 then
      backoff_links(links, sat_add(now, ra), now)
    end
    if a[7] == "1" then
      redis.call("HSET", KEYS[K_MSG], t.ids, a[6])
    end
    release(t, links, now)
    clear_charges(links)
    links_put(t.ids, links)
    if bit(t.flags, HOLDS) then
      t.flags = t.flags - HOLDS
    end
    redis.call("ZREM", KEYS[K_RUN], t.ids)
    if dead then
      finish(t, FAILED, F_DEAD)
    elseif sign(ra) < 0 and t.attempt >= t.max_attempts then
      finish(t, FAILED, F_ATTEMPTS)
    else
      t.state = QUEUED
      if t.throttle == 0 and not bit(t.flags, FREE) then
        t.flags = t.flags + FREE
      end
      t.due = sat_add(now, backoff(t, t.attempt))
      if sign(ra) >= 0 and lt(t.due, sat_add(now, ra)) then
        t.due = sat_add(now, ra)
      end
      if lt(t.not_before, t.due) then
        t.not_before = t.due
      end
      redis.call("ZADD", delayed_key(t), str(ms_ceil(t.due)), t.ids)
      woke = true
      rec_put(t)
    end
    return "OK " .. n .. " " .. t.state .. " " .. t.attempt
  end

  -- The set-up of a call: its base time (TIME, or ARGV[2] injected by tests).
  local function begin()
    local base_now = call_clock(ARGV[2])
    PFX = KEYS[K_CLOCK]:sub(1, -6)
    clock = tag_of(KEYS[K_CLOCK])
    woke = false
    counts_read()
    return base_now
  end

  -- The end of a call: the clocks written, one wake published when work became ready.
  local function finish_call()
    flush_clocks()
    if cnt.dirty then
      redis.call("HSET", PFX .. "count", "u", sfmt("%d", cnt.u), "p", sfmt("%d", cnt.p))
    end
    if woke then
      redis.call("PUBLISH", PFX .. "wake", "1")
    end
  end

  -- The request loop of a call (tasks.lua's and recur.lua's): each request is "<op> <nargs>"
  -- then its arguments; nkeys_of(op, a) says how many request keys it takes (from ki on), and
  -- dispatch(op, a, ki, now, reply) answers it at its own ratcheted now, returning the reply's
  -- one string or nil when it filled reply. An error answers that request only (INVAL).
  local function serve(nfixed, nkeys_of, dispatch)
    local base_now = begin()
    local nreq = tonumber(ARGV[3])
    local replies = {}
    local ai, ki = 4, nfixed + 1
    if ARGV[1] == "T2" then
      caps.tasks, caps.parked, ai = tonumber(ARGV[4]), tonumber(ARGV[5]), 6
    end
    for r = 1, nreq do
      local op, nargs = ARGV[ai]:match("^(%a) (%d+)$")
      nargs = tonumber(nargs)
      local a = {}
      for i = 1, nargs do
        a[i] = ARGV[ai + i]
      end
      ai = ai + 1 + nargs
      local nkeys = nkeys_of(op, a)
      local now = ratchet(base_now, nil)
      local reply = {}
      local ok, res = pcall(dispatch, op, a, ki, now, reply)
      if not ok then
        res = "INVAL " .. str(now) .. " " .. tostring(res)
      end
      if res then
        reply = {res}
      end
      replies[r] = reply
      ki = ki + nkeys
    end
    finish_call()
    return replies
  end

  local function task_keys(op, a)
    if op == "A" then
      return 2 + 2 * tonumber(a[16])
    elseif op == "C" then
      return 2 * tonumber(a[2])
    end
    return 0
  end

  local function task_op(op, a, ki, now, reply)
    if op == "A" then
      return op_add(a, ki, now, reply)
    elseif op == "C" then
      return op_claim(a, ki, now, reply)
    end
    return op_done(op, a, now, reply)
  end

  if ext then
    return ext({serve = serve, add = op_add, dec = dec, ms_ceil = ms_ceil,
                rec_decode = rec_decode, rec_encode = rec_encode,
                cancel = function(id, now)
                  return op_done("X", {id, "0", "-1", "0", "-1", "", "0"}, now, {})
                end, NFIXED = NFIXED})
  end
  return serve(NFIXED, task_keys, task_op)
end

-- lib() goes on in recur.lua, appended next, which closes it.
