-- SPDX-License-Identifier: MIT
--
-- Recurring series shared by every node: the recur ops of the store script. This file is
-- appended after src/store/redis/tasks.lua at build time (cmake/embed_text.cmake) and closes the
-- library that limits.lua opens, so an occurrence is added by tasks.lua's own ADD op (op_add:
-- same record, same chain, same wake) inside the same call. src/store/redis_recur.c builds the
-- call and reads the reply; src/server/rrecur.c is the node's side.
--
-- The script keeps no calendar: the nodes compute every schedule point with the engine's own C
-- code (cron.c, recurring.c) and the script only compares and sets. A series' stored `next` is
-- either a schedule point or, right after RECUR.ADD, the time from which the first point is to be
-- found (max(start, the store time of the ADD)); a node that sees it due computes the first point
-- at or after it and either fires it or moves `next` there.
--
-- KEYS: first tasks.lua's ten fixed keys (KEYS 1..10, "<p>:{all}:clock" ... "<p>:{all}:msg": the
-- ADD of an occurrence uses them), then
--  11 "<p>:{all}:recur"  hash series name -> its record (see rec_put)
--  12 "<p>:{all}:rdue"   zset series name, score = ceil(next in ms): live series
--  13 "<p>:{all}:rseq"   the version counter (INCR: every RECUR.ADD gets a new version)
-- then per request its own: FIRE with an occurrence takes tasks.lua's ADD keys (the type's ready
-- and delayed keys, then per link its state key and its tag's clock key).
--
-- ARGV: "R1" (protocol), now_ns ("" = Redis TIME; tests inject one), the request count R, then
-- the R requests, each a head "<op> <nargs>" followed by nargs arguments:
--   S (SET):  name, type, payload, key (RECUR.ADD's KEY: the occurrences' rate-limit key, which
--             the node resolves into their chain), has key (0/1), interval_ns (0: cron), cron
--             text, start_ns (0: now), end_ns (0: never), max_runs (0: unlimited)
--   D (DEL):  name
--   I (INFO): name
--   L (LIST): the most series to return (1..64)
--   F (FIRE): name, version, expected next_ns, fire (0/1), new next_ns (NEVER: over), missed
--             (schedule points skipped), then with fire 1 the arguments of tasks.lua's ADD
-- Reply: an array per request whose first element is "STATUS now [fields]":
--   S: "OK now version next_ns" | "INVAL now message"
--   D: "OK now deleted(0/1)"
--   I: "OK now" then one series (below) | "NOTASK now"
--   L: "OK now n earliest_ns more(0/1)" then n series, the due ones (next <= now), earliest first;
--      earliest_ns: the smallest next of any live series, to the ms above (0: none)
--   F: "OK now fired id runs skipped next_ns" (fired 1: occurrence task `id` was added; 0: none,
--      id 0) | "STALE now" (the series is not at that version and next: another node did it)
--      | "NOTASK now"
--   a series is six elements: "version has_key interval_ns start_ns end_ns max_runs runs skipped
--   next_ns", then name, type, payload, key, cron text.
--
-- Invariants: a live series (next < NEVER) is in rdue, a finished one is not (its record stays for
-- RECUR.INFO until RECUR.DEL); `next` only moves by a FIRE naming its current version and value,
-- so of many nodes firing one due point exactly one succeeds, and each point adds at most one
-- task; `runs` counts the occurrences added, never more than max_runs.

local function recur_main(api)
  local K_RECUR, K_DUE, K_SEQ = api.NFIXED + 1, api.NFIXED + 2, api.NFIXED + 3
  local NFIXED = api.NFIXED + 3
  local LIST_MAX, OCC_KEEP = 64, 32
  local dec, ms_ceil = api.dec, api.ms_ceil

  -- The record: version, type, payload, key, has key, interval_ns, cron, start_ns,
  -- end_ns, max_runs, runs, skipped, next_ns, and the ids of its occurrences that may not have
  -- started (space-separated; see remember): RECUR.DEL and a replacement cancel those.
  local REC = {"ver", "type", "payload", "key", "has_key", "interval", "cron", "start",
               "end_", "max", "runs", "skipped", "next", "occ"}
  local REC_BIG = {interval = true, start = true, end_ = true, max = true, runs = true,
                   skipped = true, next = true}
  local REC_NUM = {} -- no field is a small Lua number

  local function get(name)
    local v = redis.call("HGET", KEYS[K_RECUR], name)
    if not v then
      return nil
    end
    return api.rec_decode(REC, REC_NUM, REC_BIG, v, {name = name})
  end

  local function put(R)
    redis.call("HSET", KEYS[K_RECUR], R.name, api.rec_encode(REC, REC_BIG, R))
    if eq(R.next, NEVER) then
      redis.call("ZREM", KEYS[K_DUE], R.name)
    else
      redis.call("ZADD", KEYS[K_DUE], str(ms_ceil(R.next)), R.name)
    end
  end

  local function series(R, out)
    out[#out + 1] = table.concat({R.ver, R.has_key, str(R.interval), str(R.start), str(R.end_),
                                  str(R.max), str(R.runs), str(R.skipped), str(R.next)}, " ")
    out[#out + 1] = R.name
    out[#out + 1] = R.type
    out[#out + 1] = R.payload
    out[#out + 1] = R.key
    out[#out + 1] = R.cron
  end

  -- 1 when task id has not started yet (QUEUED or PARKED: the first field of tasks.lua's record).
  local function pending(id)
    local v = redis.call("HGET", KEYS[3], id)
    local st = v and tonumber(dec(v)[1])
    return st == 1 or st == 2
  end

  -- The occurrence list occ with id added. Whenever its length reaches a multiple of OCC_KEEP it
  -- is rebuilt with only the occurrences that have not started (so a rebuild's reads, one per
  -- entry, are spread over OCC_KEEP additions): it holds every occurrence that could still be
  -- cancelled, and stays short while workers take them.
  local function remember(occ, id)
    local list = {}
    for o in occ:gmatch("%d+") do
      list[#list + 1] = o
    end
    list[#list + 1] = id
    if #list % OCC_KEEP == 0 then
      local kept = {}
      for i = 1, #list do
        if pending(list[i]) then
          kept[#kept + 1] = list[i]
        end
      end
      list = kept
    end
    return table.concat(list, " ")
  end

  -- Cancels the occurrences of R that did not start (the single node's recurring_del).
  local function cancel_pending(R, now)
    for id in R.occ:gmatch("%d+") do
      api.cancel(id, now)
    end
  end

  local function op_set(a, now)
    local start = num(a[8])
    if sign(start) <= 0 then
      start = now
    end
    local end_ = num(a[9])
    if sign(end_) > 0 and lt(end_, start) then
      return "INVAL " .. str(now) .. " the series ends before it starts"
    end
    local old = get(a[1])
    if old then
      cancel_pending(old, now)
    end
    local R = {name = a[1], ver = sfmt("%d", redis.call("INCR", KEYS[K_SEQ])), type = a[2],
               payload = a[3], key = a[4], has_key = a[5], interval = num(a[6]), cron = a[7],
               start = start, end_ = end_, max = num(a[10]), runs = 0, skipped = 0,
               next = max(start, now), occ = ""}
    put(R)
    return "OK " .. str(now) .. " " .. R.ver .. " " .. str(R.next)
  end

  local function op_del(a, now)
    local R = get(a[1])
    if not R then
      return "OK " .. str(now) .. " 0"
    end
    cancel_pending(R, now)
    redis.call("HDEL", KEYS[K_RECUR], R.name)
    redis.call("ZREM", KEYS[K_DUE], R.name)
    return "OK " .. str(now) .. " 1"
  end

  local function op_info(a, now, reply)
    local R = get(a[1])
    if not R then
      return "NOTASK " .. str(now)
    end
    reply[1] = "OK " .. str(now)
    series(R, reply)
    return nil
  end

  local function op_list(a, now, reply)
    local n = tonumber(a[1]) or 1
    if n < 1 or n > LIST_MAX then
      n = LIST_MAX
    end
    -- Scores are rounded up: a series listed here is due to the ms; its exact next is checked.
    local names = redis.call("ZRANGEBYSCORE", KEYS[K_DUE], "-inf", str(divt(now, 1000000)),
                             "LIMIT", 0, n)
    local out = {}
    for i = 1, #names do
      local R = get(names[i])
      if not R then
        redis.call("ZREM", KEYS[K_DUE], names[i]) -- a stale entry (only a bug leaves one)
      elseif le(R.next, now) then
        series(R, out)
      end
    end
    local first = redis.call("ZRANGE", KEYS[K_DUE], 0, 0, "WITHSCORES")
    local earliest = first[2] and mul(num(first[2]), 1000000) or 0
    reply[1] = "OK " .. str(now) .. " " .. (#out / 6) .. " " .. str(earliest) .. " " ..
                 (#names == n and 1 or 0)
    for i = 1, #out do
      reply[#reply + 1] = out[i]
    end
    return nil
  end

  local function op_fire(a, ki, now)
    local R = get(a[1])
    if not R then
      return "NOTASK " .. str(now)
    end
    if R.ver ~= a[2] or not eq(R.next, num(a[3])) then
      return "STALE " .. str(now)
    end
    local new_next, missed, id = num(a[5]), num(a[6]), "0"
    local complete = sign(R.max) > 0 and not lt(R.runs, R.max)
    if a[4] == "1" and not complete then
      if sign(R.end_) > 0 and lt(R.end_, now) then
        -- Due before the end but fired after it (every node was down): skipped, as the single
        -- node skips an occurrence that cannot start before the end.
        R.skipped = add(R.skipped, 1)
      else
        local t = {}
        for i = 7, #a do
          t[#t + 1] = a[i]
        end
        local res = api.add(t, ki, now, {})
        local got = res:match("^OK %S+ (%d+) ")
        if got then
          id = got
          R.runs = add(R.runs, 1)
          R.occ = remember(R.occ, got)
        else
          R.skipped = add(R.skipped, 1) -- the task key is running, or the template went bad
        end
      end
    end
    if sign(missed) > 0 then
      R.skipped = add(R.skipped, missed)
    end
    if sign(R.max) > 0 and not lt(R.runs, R.max) then
      new_next = NEVER
    end
    R.next = new_next
    put(R)
    return "OK " .. str(now) .. " " .. (id ~= "0" and 1 or 0) .. " " .. id .. " " .. str(R.runs) ..
             " " .. str(R.skipped) .. " " .. str(R.next)
  end

  local function recur_keys(op, a)
    if op == "F" and a[4] == "1" then
      return 2 + 2 * tonumber(a[6 + 16])
    end
    return 0
  end

  local function recur_op(op, a, ki, now, reply)
    if op == "S" then
      return op_set(a, now)
    elseif op == "D" then
      return op_del(a, now)
    elseif op == "I" then
      return op_info(a, now, reply)
    elseif op == "L" then
      return op_list(a, now, reply)
    elseif op == "F" then
      return op_fire(a, ki, now)
    end
    return "INVAL " .. str(now) .. " unknown recur op " .. tostring(op)
  end

  return api.serve(NFIXED, recur_keys, recur_op)
end

-- The end of lib(), opened in limits.lua before the library: the three files are one script.
return {limits_main = limits_main, tasks_main = tasks_main,
        recur_main = function()
          return tasks_main(recur_main)
        end}
end

-- The dispatch on ARGV[1] ends defs.lua, appended after this file.
