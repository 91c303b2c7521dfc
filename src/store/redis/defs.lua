-- SPDX-License-Identifier: MIT
--
-- The live limit definitions every node shares (LIMIT.SET, LIMIT.DEL, LIMIT.KEY, LIMIT.KEYDEL),
-- and the end of the store script: appended after recur.lua at build time, so it also holds the
-- dispatch on ARGV[1]. src/store/shared_defs.c builds the call and reads the reply;
-- src/server/rdefs.c applies what it says. PostgreSQL's counterpart is
-- src/store/pg/005_overrides.sql.
--
-- KEYS: the set, a hash "<prefix>:{defs}:limits" (limit name -> its one-line spec as the single
-- node stores it, "" for a tombstone: LIMIT.DEL), and its version "<prefix>:{defs}:version".
-- Both share the hash tag {defs}, so on Redis Cluster they live in one slot.
-- ARGV: "D1" (protocol), then either
--   "G" known          read: the set as the node at version `known` needs it
--   "S" known name spec  store spec for name ("" removes it) and raise the version
--   "X"                LIMIT.RESET of one key: KEYS are then that key's state keys instead
--                      (the limit's, and its override's, as a node names them: reset_key maps
--                      them to their current generation), deleted; the reply is DEL's count
--   "W" ids            LIMIT.RESET of every key of the limits of id list `ids` ("<len>:<id>"
--                      each, shared_defs.h's sdefs_ids_put): KEYS are then the
--                      generation hashes "<prefix>:{<tag>}:resets" of the tags that hold their
--                      states (limits.lua's reset_key); each id's generation is raised in each;
--                      the reply is the number of generations raised
--   "N" known ids      LIMIT.RESET of every key on Redis Cluster of limits no type names
--                      (their states are spread over the masters: no tag holds them all): the
--                      field "#reset:<id>" of the set (no limit name holds a '#') of each id of
--                      id list `ids` is raised by one and the version with it; answered as
--                      S is (the whole set unless the version is known + 1). Nodes name those
--                      states with the
--                      generation themselves (redis_limits.h's gen, server/rdefs.c)
--   "Q"                LIMIT.SPEND: KEYS are then a quota key's state key and its tag's clock
--                      key; the reply is {state or "", clock or "", TIME's seconds, TIME's
--                      microseconds}, read and nothing written (the node computes the figures)
-- Reply: an array whose first element is the version (an integer); then, for G when the
-- version is not `known`, and for S when it is not known + 1, every field and value of the set
-- (name1, spec1, name2, spec2, ...). A shorter reply means: your set is the set (G), or your set
-- plus this write is the set (S).
--
-- Invariant: the set and its version change together (one script, one INCR per write), so a
-- node holding version v holds exactly the set of v. Fields are never removed: a removal is a
-- tombstone, so that a node started later still removes a limit its file declares.

local function defs_main()
  local op, known = ARGV[2], tonumber(ARGV[3])
  if op == "X" then
    -- LIMIT.RESET name key: forget the key's state (KEYS: its state keys, one slot).
    if #KEYS < 1 then
      return redis.error_reply("ERR sluice store script: bad defs reset")
    end
    local ks = {}
    for i = 1, #KEYS do
      ks[i] = reset_key(KEYS[i])
    end
    return redis.call("DEL", unpack(ks))
  elseif op == "W" then
    if #KEYS < 1 or not ARGV[3] then
      return redis.error_reply("ERR sluice store script: bad defs whole reset")
    end
    -- ARGV[3] is an id list (shared_defs.h's sdefs_ids_put): "<len>:<id>" each, any bytes.
    local ids, s, p = {}, ARGV[3], 1
    while p <= #s do
      local len, at = s:match("^(%d+):()", p)
      if not len or at + tonumber(len) - 1 > #s then
        return redis.error_reply("ERR sluice store script: bad defs whole reset ids")
      end
      ids[#ids + 1] = s:sub(at, at + tonumber(len) - 1)
      p = at + tonumber(len)
    end
    local n = 0
    for i = 1, #KEYS do
      for j = 1, #ids do
        redis.call("HINCRBY", KEYS[i], ids[j], 1)
        n = n + 1
      end
    end
    return n
  elseif op == "Q" then
    if #KEYS ~= 2 then
      return redis.error_reply("ERR sluice store script: bad defs spend read")
    end
    local v = redis.pcall("GET", reset_key(KEYS[1]))
    local c = redis.call("GET", KEYS[2])
    local t = redis.call("TIME")
    return {type(v) == "string" and v or "", c or "", t[1], t[2]}
  end
  if not known or #KEYS ~= 2 then
    return redis.error_reply("ERR sluice store script: bad defs call")
  end
  local ver
  if op == "N" then
    local s, p, n = ARGV[4] or "", 1, 0
    while p <= #s do
      local len, at = s:match("^(%d+):()", p)
      if not len or at + tonumber(len) - 1 > #s then
        return redis.error_reply("ERR sluice store script: bad defs generation ids")
      end
      redis.call("HINCRBY", KEYS[1], "#reset:" .. s:sub(at, at + tonumber(len) - 1), 1)
      p, n = at + tonumber(len), n + 1
    end
    if n == 0 then
      return redis.error_reply("ERR sluice store script: bad defs generation ids")
    end
    ver = redis.call("INCR", KEYS[2])
    if ver == known + 1 then
      return {ver} -- the caller's set, each of these generations one higher, is the set
    end
  elseif op == "S" then
    if not ARGV[4] or not ARGV[5] or ARGV[4] == "" then
      return redis.error_reply("ERR sluice store script: bad defs write")
    end
    redis.call("HSET", KEYS[1], ARGV[4], ARGV[5])
    ver = redis.call("INCR", KEYS[2])
    if ver == known + 1 then
      return {ver}
    end
  elseif op == "G" then
    ver = tonumber(redis.call("GET", KEYS[2]) or "0")
    if ver == known then
      return {ver}
    end
  else
    return redis.error_reply("ERR sluice store script: unknown defs op " .. tostring(op))
  end
  local all = redis.call("HGETALL", KEYS[1])
  local out = {ver}
  for i = 1, #all do
    out[i + 1] = all[i]
  end
  return out
end

if ARGV[1] == "2" then
  return fast_main() or lib().limits_main()
elseif ARGV[1] == "2x" then
  cross_keys()
  return fast_main() or cross_probe() or lib().limits_main()
elseif ARGV[1] == "T2" or ARGV[1] == "T1" then
  return lib().tasks_main()
elseif ARGV[1] == "R1" then
  return lib().recur_main()
elseif ARGV[1] == "D1" then
  return defs_main()
end
return redis.error_reply("ERR sluice store script: protocol " .. tostring(ARGV[1]) ..
                           " not understood (expected 2, 2x, T2, T1, R1 or D1)")
