#!lua flags=allow-cross-slot-keys
-- SPDX-License-Identifier: MIT
--
-- Shared limits on Redis: one batched call decides many requests, in order, each atomically, in
-- the store's clock, with the arithmetic of src/core (gcra.c, window.c, lease.c, quota.c,
-- chain.c, limit.c's settle) ported decision for decision. src/store/redis_limits.c builds the
-- call and reads the reply; tests/redis/limits_diff.c proves both sides equal on random runs.
--
-- Integers are exact. Redis 7 runs Lua 5.1, whose numbers are doubles (exact to 2^53), while
-- nanosecond epochs and the durations of long limits pass 2^53. So every integer below is either
-- a Lua number of magnitude <= 2^52 or a "big": a table of base-10^6 limbs with a sign, and the
-- arithmetic (add, sub, mul, div, cmp) goes through functions that pick the exact path. int64
-- saturation of the C core (sat_add_i64 and friends) is reproduced by clamping the exact result.
-- Every integer is written as a decimal string built from its limbs, never with tostring.
--
-- KEYS, per request in order: its T clock keys "<prefix>:{<tag>}:clock" (one per distinct tag of
-- its links), then (when auditing) its T audit keys "<prefix>:{<tag>}:audit", then one state key
-- per link "<prefix>:{<tag>}:<len>:<limit_id>:<key>".
--
-- ARGV: "2" (protocol), flags ("a": audit grants), now_ns ("" = Redis TIME; tests inject one),
-- the number of requests R, the number of definitions D, then the D definitions, each one string
--   "kind limit period_ns burst start_empty ttl_ns calendar" (followed by " s" for a link in
--   shadow mode: judged and charged like the others, but a denial of it is answered as a pass,
--   never makes the chain deny and charges nothing; chain.c's shadow rule)
--   (kind: 1 rate, 2 window, 3 sliding, 4 concurrency, 5 quota; calendar: 0 none, 1 day,
--   2 month), each distinct definition of the call once, parsed once per call; then the R
--   requests, each one string
--   "op T N a1 a2 a3" followed by " def tag units" per link (def: 1..D; tag: 1..T),
--   op: "D" decide, "P" peek, "N" renew, "R" release, "S" settle, "B" backoff, "K" a key's rate;
--   a1..a3: D/P: ttl_ns for leases ("0": the link's ttl), 0, 0; N: lease id, ttl_ns, 0;
--   R: lease id, 0, 0; S: charged_ns, estimate, actual; B: wait_ns, 0, 0; K: 0, 0, 0.
--   A definition of an adaptive rate ends (before any " s") with " a floor num den step every_ns":
--   its keys each have their own rate ("adaptive rates" below).
-- A link's limit id and key travel only in its state key's name (the audit reads them there).
--
-- Reply: one string per request, fields separated by single spaces: the status ("OK", "STALE",
-- "STATE", "INVAL") and the store time (ns) it was decided at; then
--   D, P: allowed (0/1), denied_by (0-based), chain retry_after_ns, and per link 6 fields:
--         allowed (0, 1, or 2: a shadow link's would-be denial, passed), limit, remaining,
--         retry_after_ns, reset_after_ns, lease id (0 if none);
--   N:    the new expiry (ns);
--   B:    the key's earliest slot for one unit afterwards (ns);
--   K:    the key's rate now (permits per period) and its last decrease (0 at its configured rate);
--   R, S: nothing more.
-- An "INVAL" status is followed by a space and a message (the rest of the string). Every field
-- is a decimal integer.
--
-- Time: TIME is read once per call. A request decides at max(now, the clocks of its tags); a
-- request that is not a peek writes that time back to each of its tags' clocks, so in a tag the
-- store time never goes back. State that carries no information at a request's time (the core's
-- "idle": a passed TAT, an ended window or period, no leases) is read as absent, and every key
-- written gets a PEXPIRE no shorter than the time until it becomes idle (clock keys: no shorter
-- than any state of their tag), so Redis forgets idle state by itself.
--
-- Invariants: a request's writes happen only after all of its links were judged, so a chain
-- charges all of its links or none; a request's error ("INVAL") writes nothing.
--
-- Layout: fast_main (a whole call of plain THROTTLEs, no bignum) comes first; everything else
-- (the exact integers, the core's ports, limits_main, tasks.lua's tasks_main and recur.lua's
-- recur_main) is built inside lib(), which this file opens and recur.lua (appended last) closes,
-- only by a call that needs it.

-- ---- the whole-call fast path -------------------------------------------------------------------

-- Building the library below (some 80 closures over as many shared locals) costs a call more
-- than deciding dozens of THROTTLEs (measured: ~30 us of Redis CPU a call on the bench box), so
-- the library is built only when a call needs it (lib(), at most once a call). A call whose
-- requests are all one-link rate DECIDEs or PEEKs with a whole-ns emission interval, in a
-- time far enough from 2^63 and from the states' TATs that every quantity is a plain number
-- below 2^52, is decided here without it: the same arithmetic as fast_rate and the same clock
-- handling as limits_main and flush_clocks (the differential test compares both with the core).
-- It runs in two phases: it judges every request first, keeping its writes (state values, and
-- clocks) in tables that later requests of the call read; only when all were judged does it
-- write them. If any request (or clock, or definition) falls outside, it returns nil having
-- written nothing, and the library decides the whole call.
local lib -- the library's constructor, defined below; returns {limits_main, tasks_main}

-- ---- calls across slots (Redis Cluster) ---------------------------------------------------------

-- Redis Cluster (docs/redis-store.md, "On Redis Cluster"): a node sends one call per master per
-- loop turn, its requests in several slots of that master. The keys a call declares must all hash
-- to one slot (Redis answers CROSSSLOT before running anything otherwise, whatever the script's
-- flags), so such a call (protocol "2x") declares none: its keys follow the requests in ARGV, in
-- the order KEYS would hold them, and the shebang's allow-cross-slot-keys lets the script touch
-- them. KEYS is a local so that cross_keys can point it at them (a global may not be assigned).
--
-- Redis checks each undeclared key when the script touches it: a key whose slot this master
-- does not serve (moved, importing here, no owner, cluster down), or that is missing in a slot
-- being migrated away, raises an error from that command. Nothing may be written before such an
-- error, or a node that resends the call's requests slot by slot would decide them twice:
-- - fast_main reads (GET, with pcall) every key it will write before it writes anything, and
--   an error there makes it return nil with nothing written;
-- - the library writes as it goes, and deletes keys it may write again later in the call (an
--   idle state, a redefined one), which a migrating slot would refuse after the deletion. So
--   before it, cross_probe touches, for every tag of the call, a key of that tag that never
--   exists ("<prefix>:{<tag>}"): it is served only when this master owns the slot and the slot
--   is not migrating or importing, and then every key of the slot is, for the whole call (a
--   script is atomic and keys do not expire during it). Any refusal answers the whole call
--   with an "XSLOT" error having written nothing; the node then sends each slot's requests as
--   a call of their own (declared keys, so MOVED, ASK and TRYAGAIN apply as usual).
local KEYS = KEYS

local function cross_keys()
  local first, keys = 6 + tonumber(ARGV[5]) + tonumber(ARGV[4]), {}
  for i = first, #ARGV do
    keys[i - first + 1] = ARGV[i]
  end
  KEYS = keys
end

local function cross_probe()
  local seen = {}
  for i = 1, #KEYS do
    local k = KEYS[i]
    local p = k:sub(1, (k:find("}", 1, true) or #k))
    if not seen[p] then
      seen[p] = true
      local r = redis.pcall("EXISTS", p)
      if type(r) == "table" and r.err then
        return redis.error_reply("XSLOT " .. p .. ": " .. tostring(r.err))
      end
    end
  end
  return nil
end

local fsfmt, ffloor, ffmod = string.format, math.floor, math.fmod
local F_MAX = 4503599627370496
local F_NEVER = "9223372036854775807"

-- A canonical decimal in [10^9, 9 * 10^18) as (s, hi, lo): hi the seconds, lo the nanoseconds;
-- nil otherwise. Below 9 * 10^18 plus offsets under 2^52, nothing saturates at 2^63 - 1.
local function ftime(s)
  if type(s) ~= "string" or #s < 10 or #s > 19 or not s:match("^[1-9]%d*$") or
    #s == 19 and s:byte(1) == 57 then
    return nil
  end
  return s, tonumber(s:sub(1, -10)), tonumber(s:sub(-9))
end

-- A definition as fast_rate needs it (parse_def's f_ fields), or false.
local function fdef(text)
  if type(text) ~= "string" then
    return false
  end
  local shadow = text:sub(-2) == " s" -- a link in shadow mode (see the header)
  if shadow then
    text = text:sub(1, -3)
  end
  local k, l, p, b = text:match("^(%d+) (%-?%d+) (%-?%d+) (%-?%d+) [01] %-?%d+ %-?%d+$")
  if k ~= "1" then
    return false
  end
  local limit, burst = tonumber(l), tonumber(b)
  if limit < 1 or #p > 15 or not p:match("^[1-9]") then
    return false
  end
  if burst == 0 then
    burst = limit
  end
  local period = tonumber(p)
  if burst < 0 or period % limit ~= 0 or burst * (period / limit) >= F_MAX then
    return false
  end
  local t = period / limit
  return {t = t, bt = burst * t, burst = burst, burst_s = fsfmt("%d", burst),
          start_empty = text:match("^%d+ %-?%d+ %-?%d+ %-?%d+ 1 ") ~= nil, shadow = shadow}
end

-- A denial's reply (retry, remaining, reset as numbers, retry may be the string F_NEVER); a
-- shadow link's is a pass (per-link allowed 2, the chain allowed) that charged nothing.
local function fdenied(shadow, now_s, retry, burst_s, rem, reset)
  if shadow then
    return fsfmt("OK %s 1 0 0 2 %s %d %s %d 0", now_s, burst_s, rem, retry, reset)
  end
  return fsfmt("OK %s 0 0 %s 0 %s %d %s %d 0", now_s, retry, burst_s, rem, retry, reset)
end

-- C division of plain numbers (divt on numbers): quotient truncated toward zero.
local function fdivt(a, b)
  local q = ffloor((a < 0 and -a or a) / b)
  local x = a < 0 and -a or a
  local r = x - q * b
  if r < 0 then
    q = q - 1
  elseif r >= b then
    q = q + 1
  end
  return a < 0 and -q or q
end

-- The GCRA's base for both fast paths: the stored TAT of a plain rate state (v: GET's answer,
-- nil or false when there is none) relative to now (nhi seconds and nlo ns of the store time),
-- at least 0; on a fresh key (no TAT ahead of now) of a start_empty limit, the burst spent but
-- the units asked. nil (for the general path) for another kind's state (the general path drops
-- it), a fraction, or a TAT too far from now for plain numbers.
local function fbase(D, v, nhi, nlo, units, burst, t)
  local rel = 0
  if type(v) == "string" then
    local ts, rs = v:match("^r (%d+) (%d+)$")
    if not ts or rs ~= "0" or #ts < 10 or #ts > 19 then
      return nil
    end
    local dh = tonumber(ts:sub(1, -10)) - nhi
    if dh > 4000000 or dh < -4000000 then
      return nil
    end
    rel = dh * 1000000000 + (tonumber(ts:sub(-9)) - nlo)
    if rel > 0 then
      return rel
    end
    rel = 0
  elseif v and type(v) ~= "boolean" then
    return nil
  end
  if D.start_empty then
    return (burst - (units < burst and units or burst)) * t
  end
  return rel
end

-- ---- whole-limit resets (LIMIT.RESET name, no key) --------------------------------------------

-- A whole reset cannot delete every key of a limit (its states are spread over the keyspace), so
-- it raises the limit's generation instead, kept per hash tag in the hash
-- "<prefix>:{<tag>}:resets" (limit id -> generation; defs.lua's "W" writes it), and a state of a
-- limit at generation g > 0 lives in "<prefix>:{<tag>}:R<g>:<len>:<limit_id>:<key>". Nodes send
-- the generation-0 name; reset_key maps it to the current one, reading the generations itself
-- (once per tag and call), so after a reset no request of any node reaches a state of an older
-- generation: every key of the limit reads as fresh at once, and the old states expire by their
-- TTLs. A tag no reset ever named costs one HGETALL of a missing key per call.
local rgens = {} -- this call's generations: marker key -> {limit id -> "g"}, or false (none)

-- The generations of the tag whose keys start with `head` ("<prefix>:{<tag>}"): a table, or
-- false when no reset named the tag.
local function tag_gens(head)
  local mk = head .. ":resets"
  local g = rgens[mk]
  if g == nil then
    local h = redis.call("HGETALL", mk)
    g = false
    if #h > 0 then
      g = {}
      for i = 1, #h, 2 do
        g[h[i]] = h[i + 1]
      end
    end
    rgens[mk] = g
  end
  return g
end

local function reset_key(skey)
  local p = skey:find("}:", 1, true)
  if not p then
    return skey
  end
  local g = tag_gens(skey:sub(1, p))
  if not g then
    return skey
  end
  local len, at = skey:match("^(%d+):()", p + 2)
  local gen = len and g[skey:sub(at, at + tonumber(len) - 1)]
  if not gen then
    return skey
  end
  return skey:sub(1, p + 1) .. "R" .. gen .. ":" .. skey:sub(p + 2)
end

local function fast_main()
  if ARGV[2] ~= "" then
    return nil -- auditing: the library
  end
  local real_s, rhi, rlo, slack, real_ms
  local t = redis.call("TIME")
  real_ms = tonumber(t[1]) * 1000 + ffloor(tonumber(t[2]) / 1000)
  if ARGV[3] ~= "" then
    real_s, rhi, rlo = ftime(ARGV[3])
    slack = 3600000
  else
    real_s, rhi, rlo = ftime(t[1] .. fsfmt("%06d", tonumber(t[2])) .. "000")
    slack = 0
  end
  if not real_s then
    return nil
  end
  local nreq, ndefs = tonumber(ARGV[4]), tonumber(ARGV[5])
  local defs = {}
  for i = 1, ndefs do
    defs[i] = fdef(ARGV[5 + i])
  end
  local tags, order, vals, pxs, keys = {}, {}, {}, {}, {}
  local replies, ki = {}, 1
  -- Most requests of a call are the same string (THROTTLE of one limit, one unit): each
  -- distinct one is parsed once (seen[text] = {op, def, units}).
  local seen = {}
  for r = 1, nreq do
    local rs = ARGV[5 + ndefs + r]
    local pr = seen[rs]
    if type(rs) ~= "string" then
      return nil -- malformed: the library answers it
    elseif not pr then
      local op, di, us = rs:match("^([DP]) 1 1 %-?%d+ 0 0 (%d+) 1 (%d+)$")
      local D = op and defs[tonumber(di)]
      if not D then
        return nil
      end
      pr = {op, D, tonumber(us)}
      seen[rs] = pr
    end
    local op, D, units = pr[1], pr[2], pr[3]
    local ck, skey = KEYS[ki], KEYS[ki + 1]
    ki = ki + 2
    local tg = tags[ck]
    if not tg then
      local v = redis.pcall("GET", ck)
      -- gens: whether a whole reset named the tag ("<prefix>:{<tag>}:clock" less ":clock"), so
      -- that a request of a tag no reset named maps no name (reset_key)
      tg = {s = real_s, hi = rhi, lo = rlo, ls = "0", gens = tag_gens(ck:sub(1, -7))}
      if v then
        local ts, ls, ds
        if type(v) == "string" then
          ts, ls, ds = v:match("^(%-?%d+) (%d+) (%-?%d+)$")
        end
        if not ts or not (ls == "0" or ls:match("^[1-9]%d*$")) then
          return nil
        end
        local s, hi, lo = ftime(ts)
        ds = tonumber(ds)
        if not s or ds > F_MAX then
          return nil
        end
        tg.ls, tg.deadline = ls, ds
        if #s > #real_s or #s == #real_s and s > real_s then
          tg.s, tg.hi, tg.lo = s, hi, lo
        end
      end
      tags[ck] = tg
      order[#order + 1] = ck
    end
    if tg.gens then
      skey = reset_key(skey)
    end
    -- the request's time: max(call time, clock), as the clock only moves forward
    local now_s, nhi, nlo = tg.s, tg.hi, tg.lo
    local dh = nhi - rhi
    if dh > 4000000 or dh < -4000000 then
      return nil
    end
    local nr = dh * 1000000000 + (nlo - rlo)
    local tt, bt, burst = D.t, D.bt, D.burst
    if units < 1 or units > burst and units * tt >= F_MAX then
      return nil
    end
    local v = vals[skey]
    if v == nil then
      v = redis.pcall("GET", skey)
    end
    local base = fbase(D, v, nhi, nlo, units, burst, tt)
    if not base then
      return nil
    end
    local out
    if units > burst then
      out = fdenied(D.shadow, now_s, F_NEVER, D.burst_s, fdivt(bt - base, tt), base)
    else
      local need = base + units * tt
      if need > bt then
        out = fdenied(D.shadow, now_s, fsfmt("%d", need - bt), D.burst_s, fdivt(bt - base, tt),
                      base)
      else
        if op == "D" then
          local lo = nlo + need
          local rm = ffmod(lo, 1000000000)
          if rm < 0 then
            rm = rm + 1000000000
          end
          local d = need + nr
          if d < 0 then
            d = 0
          end
          local ms = ffloor(d / 1000000) + 2 + slack
          if vals[skey] == nil then
            keys[#keys + 1] = skey
          end
          vals[skey] = fsfmt("r %d%09d 0", nhi + (lo - rm) / 1000000000, rm)
          pxs[skey] = ms
          if not tg.until_ms or tg.until_ms < ms then
            tg.until_ms = ms
          end
        end
        out = fsfmt("OK %s 1 0 0 1 %s %d 0 %d 0", now_s, D.burst_s, fdivt(bt - need, tt), need)
      end
    end
    if op == "D" then
      tg.dirty = true
    end
    replies[r] = out
  end
  for i = 1, #keys do
    local k = keys[i]
    redis.call("SET", k, vals[k], "PX", pxs[k])
  end
  for i = 1, #order do
    local ck = order[i]
    local tg = tags[ck]
    if tg.dirty then
      local v = tg.s .. " " .. tg.ls
      if tg.deadline == -1 then
        redis.call("SET", ck, v .. " -1")
      else
        local deadline = real_ms + (tg.until_ms or 2 + slack)
        if tg.deadline and deadline < tg.deadline then
          deadline = tg.deadline
        end
        local px = deadline - real_ms
        if px < 1 then
          px = 1
        end
        redis.call("SET", ck, v .. " " .. fsfmt("%d", deadline), "PX", fsfmt("%d", px))
      end
    end
  end
  return replies
end

function lib()

local B = 1000000
local TWO52 = 4503599627370496
local floor, fmod = math.floor, math.fmod
local sfmt = string.format

-- ---- exact integers ------------------------------------------------------------------------

local function strip(m)
  local n = #m
  while n > 0 and m[n] == 0 do
    m[n] = nil
    n = n - 1
  end
  return m
end

local function tomag(x) -- x: a number (integer); returns sign, magnitude
  local s = 1
  if x < 0 then
    s, x = -1, -x
  end
  local m, i = {}, 0
  while x > 0 do
    local r = fmod(x, B)
    i = i + 1
    m[i] = r
    x = (x - r) / B
  end
  return s, m
end

local function parts(x)
  if type(x) == "number" then
    return tomag(x)
  end
  return x.s, x
end

-- A magnitude and a sign as a value: a number when it fits 2^52.
local function norm(s, m)
  local n = #m
  if n == 0 then
    return 0
  end
  if n <= 2 then
    return s * ((m[2] or 0) * B + m[1])
  end
  if n == 3 then
    local v = (m[3] * B + m[2]) * B + m[1]
    if v <= TWO52 then
      return s * v
    end
  end
  local t = {s = s}
  for i = 1, n do
    t[i] = m[i]
  end
  return t
end

local function mcmp(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then
      return a[i] < b[i] and -1 or 1
    end
  end
  return 0
end

local function madd(a, b)
  local r, c = {}, 0
  local n = #a > #b and #a or #b
  for i = 1, n do
    local v = (a[i] or 0) + (b[i] or 0) + c
    if v >= B then
      r[i], c = v - B, 1
    else
      r[i], c = v, 0
    end
  end
  if c > 0 then
    r[n + 1] = c
  end
  return r
end

local function msub(a, b) -- a >= b
  local r, c = {}, 0
  for i = 1, #a do
    local v = a[i] - (b[i] or 0) - c
    if v < 0 then
      r[i], c = v + B, 1
    else
      r[i], c = v, 0
    end
  end
  return strip(r)
end

local function mmul(a, b)
  local r = {}
  for k = 1, #a + #b do
    r[k] = 0
  end
  for i = 1, #a do
    local c, ai = 0, a[i]
    for j = 1, #b do
      local v = r[i + j - 1] + ai * b[j] + c
      c = floor(v / B)
      r[i + j - 1] = v - c * B
    end
    local k = i + #b
    while c > 0 do
      local v = r[k] + c
      c = floor(v / B)
      r[k] = v - c * B
      k = k + 1
    end
  end
  return strip(r)
end

local function approx(m)
  local v = 0
  for i = #m, 1, -1 do
    v = v * B + m[i]
  end
  return v
end

-- Magnitudes: quotient and remainder (schoolbook, one base-10^6 digit a step, each digit
-- estimated in doubles and corrected exactly).
local function mdivmod(a, b)
  local q, r = {}, {}
  for i = #a, 1, -1 do
    table.insert(r, 1, a[i])
    strip(r)
    local qd = 0
    if mcmp(r, b) >= 0 then
      qd = floor(approx(r) / approx(b))
      if qd >= B then
        qd = B - 1
      end
      local p = mmul(b, {qd})
      while mcmp(p, r) > 0 do
        qd = qd - 1
        p = msub(p, b)
      end
      r = msub(r, p)
      while mcmp(r, b) >= 0 do
        qd = qd + 1
        r = msub(r, b)
      end
    end
    q[i] = qd
  end
  for i = 1, #a do
    q[i] = q[i] or 0
  end
  return strip(q), r
end

-- sa * |a| + sb * |b| for magnitudes ma, mb.
local function addm(sa, ma, sb, mb)
  if sa == sb then
    return norm(sa, madd(ma, mb))
  end
  local c = mcmp(ma, mb)
  if c == 0 then
    return 0
  elseif c > 0 then
    return norm(sa, msub(ma, mb))
  end
  return norm(sb, msub(mb, ma))
end

local function add(a, b)
  if type(a) == "number" and type(b) == "number" then
    local r = a + b
    if r <= TWO52 and r >= -TWO52 then
      return r
    end
  end
  local sa, ma = parts(a)
  local sb, mb = parts(b)
  return addm(sa, ma, sb, mb)
end

local function neg(a)
  if type(a) == "number" then
    return -a
  end
  return norm(-a.s, a)
end

local function sub(a, b)
  if type(a) == "number" and type(b) == "number" then
    local r = a - b
    if r <= TWO52 and r >= -TWO52 then
      return r
    end
  end
  local sa, ma = parts(a)
  local sb, mb = parts(b)
  return addm(sa, ma, -sb, mb)
end

local function mul(a, b)
  if type(a) == "number" and type(b) == "number" then
    local r = a * b
    if r <= TWO52 and r >= -TWO52 then
      return r
    end
  end
  local sa, ma = parts(a)
  local sb, mb = parts(b)
  return norm(sa * sb, mmul(ma, mb))
end

local function sign(a)
  if type(a) == "number" then
    return a < 0 and -1 or (a > 0 and 1 or 0)
  end
  return a.s
end

-- Without allocating: a big is always larger in magnitude than any number.
local function cmp(a, b)
  local ta, tb = type(a) == "number", type(b) == "number"
  if ta and tb then
    return a < b and -1 or (a > b and 1 or 0)
  elseif ta then
    return b.s > 0 and -1 or 1
  elseif tb then
    return a.s > 0 and 1 or -1
  elseif a.s ~= b.s then
    return a.s < b.s and -1 or 1
  end
  return a.s * mcmp(a, b)
end

-- C division: the quotient truncated toward zero, the remainder with the dividend's sign.
local function divt(a, b)
  local sa, sb = sign(a), sign(b)
  if type(a) == "number" and type(b) == "number" then
    local x, y = a * sa, b * sb
    local q = floor(x / y)
    local r = x - q * y
    if r < 0 then
      q, r = q - 1, r + y
    elseif r >= y then
      q, r = q + 1, r - y
    end
    return sa * sb * q, sa * r
  end
  local _, ma = parts(a)
  local _, mb = parts(b)
  local q, r = mdivmod(ma, mb)
  return norm(sa * sb, q), norm(sa, r)
end

local function lt(a, b)
  return cmp(a, b) < 0
end
local function le(a, b)
  return cmp(a, b) <= 0
end
local function eq(a, b)
  return cmp(a, b) == 0
end
local function max(a, b)
  return cmp(a, b) >= 0 and a or b
end
local function min(a, b)
  return cmp(a, b) <= 0 and a or b
end

local function str(x)
  if x == 0 then
    return "0"
  end
  if type(x) == "number" then
    return sfmt("%d", x) -- an integer below 2^52: exact, and no floating-point formatting
  end
  local out = {x.s < 0 and "-" or "", sfmt("%d", x[#x])}
  for i = #x - 1, 1, -1 do
    out[#out + 1] = sfmt("%06d", x[i])
  end
  return table.concat(out)
end

local function num(s)
  if type(s) ~= "string" or not s:match("^%-?%d+$") then
    error("not an integer: " .. tostring(s))
  end
  local sg, d = 1, s
  if s:sub(1, 1) == "-" then
    sg, d = -1, s:sub(2)
  end
  if #d <= 15 then
    return sg * tonumber(d)
  end
  local m, i, e = {}, 0, #d
  while e > 0 do
    local b0 = e - 5 > 1 and e - 5 or 1
    i = i + 1
    m[i] = tonumber(d:sub(b0, e))
    e = b0 - 1
  end
  return norm(sg, strip(m))
end

local I64MAX = num("9223372036854775807")
local I64MIN = num("-9223372036854775808")
local NEVER = I64MAX

local function sat(x)
  if type(x) == "number" then
    return x
  end
  if cmp(x, I64MAX) > 0 then
    return I64MAX
  elseif cmp(x, I64MIN) < 0 then
    return I64MIN
  end
  return x
end
local function sat_add(a, b)
  return sat(add(a, b))
end
local function sat_sub(a, b)
  return sat(sub(a, b))
end
local function fits(x)
  if type(x) == "number" then
    return true
  end
  return cmp(x, I64MAX) <= 0 and cmp(x, I64MIN) >= 0
end

-- ---- GCRA (gcra.c) ----------------------------------------------------------------------------

local RAT_SAT = {ns = I64MAX, rem = 0}

local function rat(ns, rem)
  return {ns = ns, rem = rem}
end

local function rat_add(a, b, p)
  local r = rat(sat_add(a.ns, b.ns), a.rem + b.rem)
  if r.rem >= p then
    r.rem = r.rem - p
    r.ns = sat_add(r.ns, 1)
  end
  if eq(r.ns, I64MAX) then
    return RAT_SAT
  end
  return r
end

local function rat_sub(a, b, p)
  local r = rat(sat_sub(a.ns, b.ns), a.rem - b.rem)
  if r.rem < 0 then
    r.rem = r.rem + p
    r.ns = sat_sub(r.ns, 1)
  end
  return r
end

local function rat_cmp(a, b)
  local c = cmp(a.ns, b.ns)
  if c ~= 0 then
    return c
  end
  return a.rem < b.rem and -1 or (a.rem > b.rem and 1 or 0)
end

local function rat_ceil(r)
  return sat_add(r.ns, r.rem > 0 and 1 or 0)
end

local function times_t(g, units)
  local frac, whole = mul(units, g.t_r), mul(units, g.t_q)
  if not fits(frac) or not fits(whole) then
    return RAT_SAT
  end
  local q, r = divt(frac, g.permits)
  local ns = sat_add(whole, q)
  if eq(ns, I64MAX) then
    return RAT_SAT
  end
  return rat(ns, r)
end

local function div_t_floor(g, x)
  if g.t_r == 0 then
    return (divt(x.ns, g.t_q))
  end
  local q = divt(add(mul(x.ns, g.permits), x.rem), g.period)
  if cmp(q, I64MIN) < 0 then
    q = I64MIN
  end
  return q
end

local function gcra_new(limit, period, burst, start_empty)
  local g = {permits = limit, period = period, burst = burst, start_empty = start_empty}
  g.t_q, g.t_r = divt(period, limit)
  local bt = times_t(g, burst)
  g.bt_q, g.bt_r = bt.ns, bt.rem
  return g
end

local function is_zero_state(s)
  return s.fresh or (eq(s.tat, 0) and s.rem == 0)
end

local function decide_whole(g, s, units, now, peek, d)
  local t, bt = g.t_q, g.bt_q
  local base
  if g.start_empty and is_zero_state(s) then
    base = sat_add(now, mul(g.burst - min(units, g.burst), t))
  else
    base = max(s.tat, now)
  end
  local ahead = sat_sub(base, now)
  d.limit = g.burst
  if units > g.burst then
    d.allowed = 0
    d.remaining = (divt(sub(bt, ahead), t))
    d.retry = NEVER
    d.reset = ahead
    return
  end
  local need = sat_add(ahead, mul(units, t))
  if le(need, bt) then
    d.allowed = 1
    d.remaining = (divt(sub(bt, need), t))
    d.retry = 0
    d.reset = need
    if not peek then
      s.tat = sat_add(base, mul(units, t))
      s.dirty = true
    end
    return
  end
  d.allowed = 0
  d.remaining = (divt(sub(bt, ahead), t))
  d.retry = sub(need, bt)
  d.reset = ahead
end

local function base_tat(g, s, units, now)
  if g.start_empty and is_zero_state(s) then
    local first = min(units, g.burst)
    return rat_add(rat(now, 0), times_t(g, g.burst - first), g.permits)
  end
  local tat = rat(s.tat, s.rem)
  local n = rat(now, 0)
  return rat_cmp(tat, n) >= 0 and tat or n
end

local function decide_exact(g, s, units, now, peek, d)
  local p = g.permits
  local n = rat(now, 0)
  local bt = rat(g.bt_q, g.bt_r)
  local base = base_tat(g, s, units, now)
  local ahead = rat_sub(base, n, p)
  d.limit = g.burst
  if units > g.burst then
    d.allowed = 0
    d.remaining = div_t_floor(g, rat_sub(bt, ahead, p))
    d.retry = NEVER
    d.reset = rat_ceil(ahead)
    return
  end
  local nxt = rat_add(base, times_t(g, units), p)
  local need = rat_sub(nxt, n, p)
  if rat_cmp(need, bt) <= 0 then
    d.allowed = 1
    d.remaining = div_t_floor(g, rat_sub(bt, need, p))
    d.retry = 0
    d.reset = rat_ceil(need)
    if not peek then
      s.tat, s.rem, s.dirty = nxt.ns, nxt.rem, true
    end
    return
  end
  d.allowed = 0
  d.remaining = div_t_floor(g, rat_sub(bt, ahead, p))
  d.retry = rat_ceil(rat_sub(need, bt, p))
  d.reset = rat_ceil(ahead)
end

local function gcra_adjust(g, s, diff, now)
  local n = rat(now, 0)
  local tat = rat(s.tat, s.rem)
  if diff > 0 then
    if rat_cmp(tat, n) < 0 then
      tat = n
    end
    tat = rat_add(tat, times_t(g, diff), g.permits)
  elseif diff < 0 then
    tat = rat_sub(tat, times_t(g, -diff), g.permits)
    if rat_cmp(tat, n) < 0 then
      tat = n
    end
  end
  s.tat, s.rem, s.fresh, s.dirty = tat.ns, tat.rem, false, true
end

-- ---- adaptive rates (adapt.c) -----------------------------------------------------------------

-- An adaptive (AIMD) rate gives each key its own effective rate: s.eff permits per period at
-- s.since (0: the configured rate), lowered by a backoff and regained step by step with time, a
-- pure function of the time of the last decrease (adapt.h has the model). A = parse_def's D.aimd:
-- permits (the configured rate), floor, num, den, step and every (the recovery interval), derived
-- by the node from the limit's definition with adapt_init, so both sides use the same numbers.
-- eff, floor, num, den and step are plain numbers (<= 10^9, num and den <= 10^6); since and every
-- may be bigs.

local function aimd_current(A, s)
  local e = s.eff
  return (e > 0 and e < A.permits) and e or A.permits
end

local function aimd_rate_at(A, s, now)
  local eff = aimd_current(A, s)
  if eff == A.permits or le(now, s.since) then
    return eff
  end
  local k = divt(sub(now, s.since), A.every)
  if cmp(k, floor((A.permits - eff + A.step - 1) / A.step)) >= 0 then
    return A.permits -- k may be huge after a long idle time
  end
  return eff + A.step * k
end

-- The key's rate becomes eff; its TAT stays where it is, its fraction (in 1/old rate) rounded up.
local function aimd_set(A, s, eff)
  if eff == aimd_current(A, s) then
    return
  end
  if s.rem > 0 then
    s.tat, s.rem = sat_add(s.tat, 1), 0
  end
  s.eff = eff == A.permits and 0 or eff
end

-- Brings s to now; since moves by whole intervals only, so that later rates do not depend on
-- when a key was refreshed (and a refresh that is not written back changes nothing).
local function aimd_refresh(A, s, now)
  local eff = aimd_rate_at(A, s, now)
  if eff == A.permits then
    aimd_set(A, s, eff)
    s.since = 0
    return
  end
  local cur = aimd_current(A, s)
  if eff ~= cur then
    s.since = add(s.since, mul(floor((eff - cur) / A.step), A.every))
  end
  aimd_set(A, s, eff)
end

-- The 429: the rate times num / den (exact: eff * num < 2^52), never below the floor.
local function aimd_decrease(A, s, now)
  aimd_refresh(A, s, now)
  local cur = aimd_current(A, s)
  local eff = floor(cur * A.num / A.den)
  if eff < A.floor then
    eff = A.floor
  end
  if eff > cur then
    eff = cur
  end
  aimd_set(A, s, eff)
  s.since = now
end

-- When a lowered key is back at its configured rate (nil: it is not lowered).
local function aimd_recovered_at(A, s)
  local cur = aimd_current(A, s)
  if cur == A.permits then
    return nil
  end
  return sat_add(s.since, mul(floor((A.permits - cur + A.step - 1) / A.step), A.every))
end

-- The GCRA parameters of a rate link's key: its limit's, or those of the key's effective rate
-- (one gcra_new per rate and call).
local function key_g(L, s)
  local A = L.aimd
  if not A then
    return L.g
  end
  local eff = aimd_current(A, s)
  if eff == A.permits then
    return L.g
  end
  local g = A.g[eff]
  if not g then
    g = gcra_new(eff, L.period, L.burst, L.start_empty)
    A.g[eff] = g
  end
  return g
end

-- ---- windows (window.c) -----------------------------------------------------------------------

local function fixed_decide(limit, w, s, units, now, peek, d)
  if sign(now) < 0 then
    now = 0
  end
  local _, r = divt(now, w)
  local start = sub(now, r)
  if sign(s.count) > 0 and lt(start, s.start) then
    now, start = s.start, s.start
  end
  local used = eq(s.start, start) and s.count or 0
  local left = sub(w, sub(now, start))
  d.limit = limit
  if units <= limit and le(used, limit - units) then
    d.allowed = 1
    d.remaining = sub(sub(limit, used), units)
    d.retry = 0
    d.reset = left
    if not peek then
      s.start, s.count, s.dirty = start, add(used, units), true
    end
    return
  end
  d.allowed = 0
  d.remaining = lt(used, limit) and sub(limit, used) or 0
  d.retry = units > limit and NEVER or left
  d.reset = sign(used) > 0 and left or 0
end

local function sliding_decide(limit, w, s, units, now, peek, d)
  if sign(now) < 0 then
    now = 0
  end
  local ev = s.ev
  if #ev > 0 and lt(now, ev[#ev][1]) then
    now = ev[#ev][1]
  end
  local first, total = 1, s.total
  while first <= #ev do
    if lt(sub(now, ev[first][1]), w) then
      break
    end
    total = sub(total, ev[first][2])
    first = first + 1
  end
  d.limit = limit
  local function drain()
    if first > #ev then
      return 0
    end
    return sub(w, sub(now, ev[#ev][1]))
  end
  if units > limit or cmp(total, limit - units) > 0 then
    d.allowed = 0
    d.remaining = lt(total, limit) and sub(limit, total) or 0
    if units > limit then
      d.retry = NEVER
    else
      local excess, freed, i = sub(sat_add(total, units), limit), 0, first
      while true do
        freed = sat_add(freed, ev[i][2])
        if le(excess, freed) or i + 1 > #ev then
          break
        end
        i = i + 1
      end
      d.retry = sub(w, sub(now, ev[i][1]))
    end
    d.reset = drain()
    return
  end
  d.allowed = 1
  d.remaining = sub(sub(limit, total), units)
  d.retry = 0
  d.reset = w
  if peek then
    return
  end
  local kept = {}
  for i = first, #ev do
    kept[#kept + 1] = ev[i]
  end
  if #kept == 0 or not eq(kept[#kept][1], now) then
    kept[#kept + 1] = {now, 0}
  end
  kept[#kept][2] = add(kept[#kept][2], units)
  s.ev, s.total, s.dirty = kept, add(total, units), true
end

local function sliding_adjust(s, diff, now)
  if sign(now) < 0 then
    now = 0
  end
  local ev = s.ev
  if diff > 0 then
    if #ev > 0 and lt(now, ev[#ev][1]) then
      now = ev[#ev][1]
    end
    if #ev == 0 or not eq(ev[#ev][1], now) then
      ev[#ev + 1] = {now, 0}
    end
    ev[#ev][2] = sat_add(ev[#ev][2], diff)
    s.total = sat_add(s.total, diff)
  else
    while diff < 0 and #ev > 0 do
      local e = ev[#ev]
      local take = lt(-diff, e[2]) and -diff or e[2]
      e[2] = sub(e[2], take)
      s.total = sub(s.total, take)
      diff = add(diff, take)
      if eq(e[2], 0) then
        ev[#ev] = nil
      end
    end
  end
  s.fresh, s.dirty = false, true
end

-- ---- quotas (quota.c) ---------------------------------------------------------------------------

local NS_PER_DAY = 86400000000000
local DAYS_1601_TO_1970 = 134774

local function is_leap(y)
  return (y % 4 == 0 and y % 100 ~= 0) or y % 400 == 0
end

local BEFORE = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334}
local function days_before_month(y, m)
  return BEFORE[m] + ((m > 2 and is_leap(y)) and 1 or 0)
end

local function civil_from_days(days)
  local d = days + DAYS_1601_TO_1970
  local c400 = floor(d / 146097)
  d = d - c400 * 146097
  local c100 = floor(d / 36524)
  if c100 == 4 then
    c100 = 3
  end
  d = d - c100 * 36524
  local c4 = floor(d / 1461)
  d = d - c4 * 1461
  local y1 = floor(d / 365)
  if y1 == 4 then
    y1 = 3
  end
  d = d - y1 * 365
  local year = 1601 + 400 * c400 + 100 * c100 + 4 * c4 + y1
  local m = 12
  while m > 1 and days_before_month(year, m) > d do
    m = m - 1
  end
  return year, m
end

local function days_from_civil(year, month)
  local y = year - 1601
  return y * 365 + floor(y / 4) - floor(y / 100) + floor(y / 400) +
           days_before_month(year, month) - DAYS_1601_TO_1970
end

local function day_to_ns(days)
  if days > 106751 then -- INT64_MAX / NS_PER_DAY
    return NEVER
  end
  return mul(days, NS_PER_DAY)
end

local function period_start(cal, t)
  if sign(t) < 0 then
    t = 0
  end
  local day = (divt(t, NS_PER_DAY))
  if cal == 1 then
    return mul(day, NS_PER_DAY), day_to_ns(day + 1)
  elseif cal == 2 then
    local year, month = civil_from_days(day)
    local e
    if month == 12 then
      e = days_from_civil(year + 1, 1)
    else
      e = days_from_civil(year, month + 1)
    end
    return mul(days_from_civil(year, month), NS_PER_DAY), day_to_ns(e)
  end
  return 0, NEVER
end

local function quota_current(cal, s, now)
  if s.fresh or (not eq(s.pend, NEVER) and le(s.pend, now)) then
    local st, en = period_start(cal, now)
    return {pstart = st, pend = en, spent = 0}
  end
  return {pstart = s.pstart, pend = s.pend, spent = s.spent}
end

local function quota_left(cur, now)
  if eq(cur.pend, NEVER) then
    return NEVER
  end
  return sub(cur.pend, now)
end

local function quota_decide(budget, cal, s, units, now, peek, d)
  if sign(now) < 0 then
    now = 0
  end
  if not s.fresh and lt(now, s.pstart) then
    now = s.pstart
  end
  local cur = quota_current(cal, s, now)
  d.limit = budget
  if units <= budget and le(cur.spent, budget - units) then
    cur.spent = add(cur.spent, units)
    d.allowed = 1
    d.remaining = sub(budget, cur.spent)
    d.retry = 0
    d.reset = quota_left(cur, now)
    if not peek then
      s.pstart, s.pend, s.spent, s.fresh, s.dirty = cur.pstart, cur.pend, cur.spent, false, true
    end
    return
  end
  d.allowed = 0
  d.remaining = lt(cur.spent, budget) and sub(budget, cur.spent) or 0
  d.retry = units > budget and NEVER or quota_left(cur, now)
  d.reset = sign(cur.spent) > 0 and quota_left(cur, now) or 0
end

-- Returns a status: "OK", or "STATE" when the charge lies outside the period counted now.
local function quota_settle(cal, s, charged, estimate, actual, now)
  if sign(now) < 0 then
    now = 0
  end
  if sign(charged) < 0 then
    charged = 0
  end
  if not s.fresh and lt(now, s.pstart) then
    now = s.pstart
  end
  local cur = quota_current(cal, s, now)
  if lt(charged, cur.pstart) or (not eq(cur.pend, NEVER) and le(cur.pend, charged)) then
    return "STATE"
  end
  local spent = add(cur.spent, sub(actual, estimate))
  if cmp(spent, I64MAX) > 0 then
    spent = I64MAX
  elseif sign(spent) < 0 then
    spent = 0
  end
  s.pstart, s.pend, s.spent, s.fresh, s.dirty = cur.pstart, cur.pend, spent, false, true
  return "OK"
end

-- ---- concurrency (lease.c) ----------------------------------------------------------------------

-- Leases of a key, sorted by expiry: the walk of expiry_freeing (lease.c) only needs the order
-- of expiries, not of ids among equal expiries.
local function live_sorted(s)
  local l = {}
  for id, v in pairs(s.leases) do
    if v[2] > 0 then
      l[#l + 1] = v
    end
  end
  table.sort(l, function(a, b)
    return lt(a[1], b[1])
  end)
  return l
end

local function wait_until(t, now)
  if le(t, now) then
    return 0
  end
  return sat_sub(t, now)
end

local function lease_decide(limit, s, units, ttl, now, peek, d)
  local held = s.held
  d.limit = limit
  d.lease = "0"
  local l = live_sorted(s)
  local tail = l[#l]
  if units > limit or units > limit - held then
    d.allowed = 0
    d.remaining = limit > held and limit - held or 0
    if units > limit then
      d.retry = NEVER
    else
      local h, i = held, 1
      while i < #l and units > limit - (h - l[i][2]) do
        h = h - l[i][2]
        i = i + 1
      end
      d.retry = wait_until(l[i][1], now)
    end
    d.reset = tail and wait_until(tail[1], now) or 0
    return
  end
  d.allowed = 1
  if peek then
    d.remaining = limit - held
    d.reset = tail and wait_until(tail[1], now) or 0
    d.retry = 0
    return
  end
  local exp = sat_add(now, ttl)
  s.new = {exp, units}
  s.held = held + units
  s.dirty = true
  d.remaining = limit - s.held
  d.reset = wait_until(max(exp, tail and tail[1] or exp), now)
  d.retry = 0
end

-- ---- state in Redis -----------------------------------------------------------------------------

local function split(v)
  local t = {}
  for w in v:gmatch("%S+") do
    t[#t + 1] = w
  end
  return t
end

-- String states start with their kind's mark, so that a limit redefined as another kind under
-- the same name reads the old state as absent (the core refuses to import such a blob).
local KIND_MARK = {"r ", "w ", "s ", "c ", "q "}

-- Reads a link's state, as absent when it carries no information at now (as the core forgets
-- it). s.fresh marks an absent state.
local function load(L, now)
  local s = {fresh = true}
  local k = L.kind
  if k == 4 then
    local h = redis.pcall("HGETALL", L.skey)
    s.leases, s.held, s.drop = {}, 0, {}
    if h.err then -- the state of another kind: dropped, as the core refuses to import it
      h, s.foreign = {}, true
    end
    for i = 1, #h, 2 do
      local f = split(h[i + 1])
      local exp, u = num(f[1]), tonumber(f[2])
      if le(exp, now) then
        s.drop[#s.drop + 1] = h[i]
      else
        s.leases[h[i]] = {exp, u}
        s.held = s.held + u
        s.fresh = false
      end
    end
    return s
  end
  local v = redis.pcall("GET", L.skey)
  if type(v) ~= "string" or v:sub(1, 2) ~= KIND_MARK[k] then
    v = nil -- absent, or the state of another kind (dropped)
  else
    v = v:sub(3)
  end
  if k == 1 then
    -- "tat rem", or "tat rem eff since" for a key of an adaptive rate below its configured
    -- rate at since: kept (not idle) until it has recovered, as the core keeps it.
    s.tat, s.rem, s.eff, s.since = 0, 0, 0, 0
    if v then
      local f = split(v)
      local tat, rem = num(f[1]), tonumber(f[2])
      local slowed = false
      if L.aimd and f[3] then
        s.eff, s.since = tonumber(f[3]), num(f[4])
        slowed = aimd_rate_at(L.aimd, s, now) < L.aimd.permits
      end
      if slowed or lt(now, tat) or (eq(now, tat) and rem > 0) then
        s.tat, s.rem, s.fresh = tat, rem, false
      else
        s.eff, s.since = 0, 0
      end
    end
  elseif k == 2 then
    s.start, s.count = 0, 0
    if v then
      local f = split(v)
      local st, c = num(f[1]), num(f[2])
      local _, r = divt(max(now, 0), L.period)
      if sign(c) > 0 and not lt(st, sub(max(now, 0), r)) then
        s.start, s.count, s.fresh = st, c, false
      end
    end
  elseif k == 3 then
    s.ev, s.total = {}, 0
    if v then
      local f = split(v)
      for i = 1, #f, 2 do
        s.ev[#s.ev + 1] = {num(f[i]), num(f[i + 1])}
        s.total = add(s.total, s.ev[#s.ev][2])
      end
      local newest = s.ev[#s.ev]
      if newest and lt(sub(max(now, 0), newest[1]), L.period) then
        s.fresh = false
      else
        s.ev, s.total = {}, 0
      end
    end
  else
    s.pstart, s.pend, s.spent = 0, 0, 0
    if v then
      local f = split(v)
      local st, en, sp = num(f[1]), num(f[2]), num(f[3])
      if sign(sp) > 0 and (eq(en, NEVER) or lt(now, en)) then
        s.pstart, s.pend, s.spent, s.fresh = st, en, sp, false
      end
    end
  end
  return s
end

-- Milliseconds for PEXPIRE so that a state idle at store time `until_ns` outlives it in Redis's
-- own expiry clock (which runs on the real time, `real`, not the ratcheted `now`).
local CTX = {}
local function ttl_ms(until_ns)
  local d = sub(until_ns, CTX.real)
  if sign(d) <= 0 then
    d = 0
  end
  local ms = (divt(d, 1000000))
  ms = add(ms, 2 + CTX.slack_ms)
  return ms
end

local function keep_clock(tag, until_ns)
  local ms = ttl_ms(until_ns)
  if not tag.until_ms or lt(tag.until_ms, ms) then
    tag.until_ms = ms
  end
end

-- Writes a changed state (s.dirty) back, with an expiry no earlier than its idleness.
local function store(L, s, now, tag)
  if not s.dirty then
    return
  end
  local k = L.kind
  if k == 1 then
    local back = L.aimd and aimd_recovered_at(L.aimd, s)
    if not lt(now, s.tat) and not (eq(now, s.tat) and s.rem > 0) and not (back and lt(now, back)) then
      redis.call("DEL", L.skey)
      return
    end
    local until_ns = s.rem > 0 and add(s.tat, 1) or s.tat
    local v = "r " .. str(s.tat) .. " " .. str(s.rem)
    if back then
      v = v .. " " .. str(s.eff) .. " " .. str(s.since)
      until_ns = max(until_ns, back)
    end
    redis.call("SET", L.skey, v, "PX", str(ttl_ms(until_ns)))
    keep_clock(tag, until_ns)
  elseif k == 2 then
    if sign(s.count) <= 0 then
      redis.call("DEL", L.skey)
      return
    end
    local until_ns = add(s.start, L.period)
    redis.call("SET", L.skey, "w " .. str(s.start) .. " " .. str(s.count), "PX",
               str(ttl_ms(until_ns)))
    keep_clock(tag, until_ns)
  elseif k == 3 then
    if #s.ev == 0 then
      redis.call("DEL", L.skey)
      return
    end
    local out = {}
    for i = 1, #s.ev do
      out[#out + 1] = str(s.ev[i][1])
      out[#out + 1] = str(s.ev[i][2])
    end
    local until_ns = add(s.ev[#s.ev][1], L.period)
    redis.call("SET", L.skey, "s " .. table.concat(out, " "), "PX", str(ttl_ms(until_ns)))
    keep_clock(tag, until_ns)
  elseif k == 4 then
    if s.foreign then
      redis.call("DEL", L.skey)
      for id, v in pairs(s.leases) do
        redis.call("HSET", L.skey, id, str(v[1]) .. " " .. str(v[2]))
      end
    end
    if #s.drop > 0 then
      redis.call("HDEL", L.skey, unpack(s.drop))
    end
    local last = nil
    for _, v in pairs(s.leases) do
      if not last or lt(last, v[1]) then
        last = v[1]
      end
    end
    if not last then
      redis.call("DEL", L.skey)
      return
    end
    redis.call("PEXPIRE", L.skey, str(ttl_ms(last)))
    keep_clock(tag, last)
  else
    if sign(s.spent) <= 0 then
      redis.call("DEL", L.skey)
      return
    end
    local v = "q " .. str(s.pstart) .. " " .. str(s.pend) .. " " .. str(s.spent)
    if eq(s.pend, NEVER) then
      redis.call("SET", L.skey, v)
      tag.forever = true
    else
      redis.call("SET", L.skey, v, "PX", str(ttl_ms(s.pend)))
      keep_clock(tag, s.pend)
    end
  end
end

-- ---- requests -------------------------------------------------------------------------------

local function decide_link(L, s, units, ttl, now, peek, d)
  local k = L.kind
  if k == 1 then
    if L.aimd then
      aimd_refresh(L.aimd, s, now) -- pure in time: written back only with a charge
    end
    local g = key_g(L, s)
    if g.t_r == 0 then
      decide_whole(g, s, units, now, peek, d)
    else
      decide_exact(g, s, units, now, peek, d)
    end
  elseif k == 2 then
    fixed_decide(L.limit, L.period, s, units, now, peek, d)
  elseif k == 3 then
    sliding_decide(L.limit, L.period, s, units, now, peek, d)
  elseif k == 4 then
    lease_decide(L.limit, s, units, ttl, now, peek, d)
  else
    quota_decide(L.limit, L.calendar, s, units, now, peek, d)
  end
  d.lease = d.lease or "0"
end

-- A new lease id for a tag: above every id the tag issued, and at least the store time in ns,
-- so that ids stay unique across nodes and across the tag's clock key expiring.
local function next_lease(tag, now)
  local id = add(tag.last_lease, 1)
  if lt(id, now) then
    id = now
  end
  tag.last_lease = id
  return str(id)
end

-- An audit entry "limit_id key units now" from a state key's name
-- "<prefix>:{<tag>}:<len>:<limit_id>:<key>": neither the prefix nor the tag holds a brace, so the
-- first "}:" ends the tag, and <len> delimits the limit id (which may hold ':'); a generation
-- ("R<g>:", reset_key) is skipped.
local function audit_entry(skey, units, now_s)
  local p = skey:find("}:", 1, true)
  p = skey:match("^R%d+:()", p + 2) or p + 2
  local len, at = skey:match("^(%d+):()", p)
  len = tonumber(len)
  return skey:sub(at, at + len - 1) .. " " .. skey:sub(at + len + 1) .. " " .. str(units) .. " " ..
           now_s
end

-- Judges a chain (R.links, R.a1 the lease ttl) all-or-nothing and, unless peek, writes all of
-- it. Returns whether it was granted, the decisions ds (indexed by lead) and lead (each link's
-- first link of the same state key: such links are judged once, with their units summed).
local function decide_chain(R, now, peek)
  local links, n = R.links, #R.links
  local ttl = R.a1
  local st, lead = {}, {}
  for i = 1, n do
    local L = links[i]
    lead[i] = i
    for j = 1, i - 1 do
      if lead[j] == j and links[j].skey == L.skey then
        lead[i] = j
        st[j].units = st[j].units + L.units
        break
      end
    end
    if lead[i] == i then
      st[i] = {s = load(L, now), units = L.units}
    end
  end
  local all, ds = true, {}
  for i = 1, n do
    if lead[i] == i then
      local L = links[i]
      local d = {}
      decide_link(L, st[i].s, st[i].units, sign(ttl) > 0 and ttl or L.ttl, now, true, d)
      if d.allowed == 0 and L.shadow then
        d.allowed, d.shadow = 1, true -- never the chain's no, and never charged
      end
      ds[i] = d
      all = all and d.allowed == 1
    end
  end
  if all and not peek then
    for i = 1, n do
      if lead[i] == i and not ds[i].shadow then
        local L = links[i]
        local d = {}
        decide_link(L, st[i].s, st[i].units, sign(ttl) > 0 and ttl or L.ttl, now, false, d)
        if L.kind == 4 then
          if st[i].s.foreign then
            redis.call("DEL", L.skey)
            st[i].s.foreign = false
          end
          d.lease = next_lease(L.tag, now)
          st[i].s.leases[d.lease] = st[i].s.new
          redis.call("HSET", L.skey, d.lease, str(st[i].s.new[1]) .. " " .. str(st[i].s.new[2]))
        end
        ds[i] = d
        store(L, st[i].s, now, L.tag)
      end
    end
    if CTX.audit then
      for i = 1, n do
        local L = links[i]
        if not ds[lead[i]].shadow then -- a shadow pass charged nothing
          redis.call("RPUSH", L.tag.audit, audit_entry(L.skey, L.units, str(now)))
        end
      end
    end
  end
  return all, ds, lead
end

-- The chain's denying link whose slot is latest (0-based) and that slot's retry (0 when all).
local function chain_denial(n, all, ds, lead)
  local retry, denied_by = 0, 0
  for i = 1, n do
    local d = ds[lead[i]]
    if not all and d.allowed == 0 and lt(retry, d.retry) then
      retry, denied_by = d.retry, i - 1
    end
  end
  return retry, denied_by
end

local function run_decide(R, now, peek, reply)
  local n = #R.links
  local all, ds, lead = decide_chain(R, now, peek)
  local retry, denied_by = chain_denial(n, all, ds, lead)
  local out = {}
  for i = 1, n do
    local d = ds[lead[i]]
    out[#out + 1] = d.shadow and 2 or d.allowed
    out[#out + 1] = str(d.limit)
    out[#out + 1] = str(d.remaining)
    out[#out + 1] = str(d.retry)
    out[#out + 1] = str(d.reset)
    out[#out + 1] = lead[i] == i and d.lease or "0"
  end
  reply[#reply + 1] = all and 1 or 0
  reply[#reply + 1] = denied_by
  reply[#reply + 1] = str(retry)
  for i = 1, #out do
    reply[#reply + 1] = out[i]
  end
  return "OK"
end

local function run_lease(R, now, reply)
  local L = R.links[1]
  if L.kind ~= 4 then
    return "INVAL", "not a concurrency limit"
  end
  local s = load(L, now)
  local v = s.leases[R.a1s]
  if R.op == "N" then
    local ttl = sign(R.a2) > 0 and R.a2 or L.ttl
    if not v or v[2] == 0 then
      reply[#reply + 1] = "0"
      return "STALE"
    end
    v[1] = sat_add(now, ttl)
    redis.call("HSET", L.skey, R.a1s, str(v[1]) .. " " .. str(v[2]))
    s.dirty = true
    store(L, s, now, L.tag)
    reply[#reply + 1] = str(v[1])
    return "OK"
  end
  if not v then
    return "STALE"
  end
  if v[2] > 0 then
    v[2] = 0
    redis.call("HSET", L.skey, R.a1s, str(v[1]) .. " 0")
    s.dirty = true
    store(L, s, now, L.tag)
  end
  return "OK"
end

-- LIMIT.BACKOFF (limit.c's sluice_limit_backoff, gcra.c's gcra_backoff and gcra_slot): the
-- rate key's TAT becomes at least now + wait + (burst - 1) * T (a later one is kept: a backoff
-- never gives budget back); the reply is the key's earliest slot for one unit afterwards.
-- Holds a rate key back until untl (gcra.c's gcra_backoff): its TAT moves, never back, to where
-- a full burst has drained by then. s is the key's loaded state, left dirty; returns the TAT.
-- LIMIT.BACKOFF (below) and a task's RETRY_AFTER (tasks.lua) both hold keys back through it.
local function hold_rate(L, s, untl)
  local g = key_g(L, s)
  local held = rat_add(rat(untl, 0), times_t(g, g.burst - 1), g.permits)
  local tat = rat(s.tat, s.rem)
  if rat_cmp(tat, held) < 0 then
    tat = held
  end
  s.tat, s.rem, s.fresh, s.dirty = tat.ns, tat.rem, false, true
  return tat
end

local function run_backoff(R, now, reply)
  local L = R.links[1]
  if L.kind ~= 1 or sign(R.a1) < 0 then
    return "INVAL", "backoff applies to rate limits, with a wait >= 0"
  end
  local s = load(L, now)
  if L.aimd then -- the 429 also lowers the key's rate (limit.c: before the hold, at the new rate)
    aimd_decrease(L.aimd, s, now)
  end
  local g = key_g(L, s)
  local p = g.permits
  local tat = hold_rate(L, s, sat_add(now, R.a1))
  store(L, s, now, L.tag)
  local n = rat(now, 0)
  local nxt = rat_add(rat_cmp(tat, n) >= 0 and tat or n, times_t(g, 1), p)
  local slot = NEVER
  if not eq(nxt.ns, I64MAX) then
    slot = rat_ceil(rat_sub(nxt, rat(g.bt_q, g.bt_r), p))
  end
  reply[#reply + 1] = str(lt(slot, now) and now or slot)
  return "OK"
end

-- LIMIT.RATE (limit.c's sluice_limit_key_rate): a rate key's rate now, and since when it is lowered.
-- A read: the state is brought to now in memory only.
local function run_rate(R, now, reply)
  local L = R.links[1]
  if L.kind ~= 1 then
    return "INVAL", "only a rate limit has a rate"
  end
  local eff, since = L.limit, 0
  if L.aimd then
    local s = load(L, now)
    aimd_refresh(L.aimd, s, now)
    eff = aimd_current(L.aimd, s)
    if eff < L.limit then
      since = s.since
    end
  end
  reply[#reply + 1] = str(eff)
  reply[#reply + 1] = str(since)
  return "OK"
end

local MAX_ADJUST = 8000000000

local function run_settle(R, now)
  local L = R.links[1]
  local charged, est, act = R.a1, R.a2, R.a3
  local k = L.kind
  if k == 4 or sign(est) < 0 or sign(act) < 0 or cmp(est, MAX_ADJUST) > 0 or
    cmp(act, MAX_ADJUST) > 0 then
    return "INVAL", "settle applies to rate, window, sliding and quota limits"
  end
  local s = load(L, now)
  if k == 5 then
    if s.fresh then
      return "STATE"
    end
    local rc = quota_settle(L.calendar, s, charged, est, act, now)
    if rc == "OK" then
      store(L, s, now, L.tag)
    end
    return rc
  end
  if k == 2 then
    local _, r = divt(now, L.period)
    if lt(charged, sub(now, r)) then
      return "STATE"
    end
  elseif k == 3 and not lt(sub(now, charged), L.period) then
    return "STATE"
  end
  local diff = sub(act, est)
  if sign(diff) == 0 then
    return "OK"
  end
  if sign(diff) < 0 and s.fresh then
    return "OK"
  end
  if k == 1 then
    if L.aimd then
      aimd_refresh(L.aimd, s, now)
    end
    gcra_adjust(key_g(L, s), s, diff, now)
  elseif k == 2 then
    local _, r = divt(now, L.period)
    local start = sub(now, r)
    if s.fresh or not eq(s.start, start) then
      s.start, s.count = start, 0
    end
    local c = sat_add(s.count, diff)
    s.count = sign(c) > 0 and c or 0
    s.fresh, s.dirty = false, true
  else
    sliding_adjust(s, diff, now)
  end
  store(L, s, now, L.tag)
  return "OK"
end

-- ---- the fast path ----------------------------------------------------------------------------

-- THROTTLE's common case, a one-link rate DECIDE or PEEK whose emission interval is a whole
-- number of ns, decided in plain doubles relative to now, with no bignum and few tables (table
-- allocation dominates a Lua script's cost). It applies only when every quantity stays below
-- 2^52 (times within ~52 days of now, burst * T < 2^52 ns) and the state's fraction is 0; then
-- it is decide_whole exactly (no saturation can occur that close to now). Otherwise it returns
-- nil before touching anything, and the general path decides. What depends on the limit alone
-- (T, burst * T, the burst's text) is computed once per call per definition (def_fast). A
-- shadow link's denial is answered as its pass (fdenied), charging nothing. Returns the request's
-- reply string and whether it charged the key (nil: the general path decides).
local FAST_MAX = 4503599627370496
local NEVER_S = "9223372036854775807"

local function fast_rate(D, op, units, skey, tag, now_s, nr)
  local t, bt, burst = D.f_t, D.f_bt, D.f_burst
  if units < 1 or units > burst and units * t >= FAST_MAX or #now_s < 10 or type(nr) ~= "number" then
    return nil
  end
  local nhi, nlo = tonumber(now_s:sub(1, -10)), tonumber(now_s:sub(-9))
  local base = fbase(D, redis.pcall("GET", skey), nhi, nlo, units, burst, t)
  if not base then
    return nil
  end
  if units > burst then
    return fdenied(D.shadow, now_s, NEVER_S, D.f_burst_s, (divt(bt - base, t)), base)
  end
  local need = base + units * t
  if need > bt then
    return fdenied(D.shadow, now_s, sfmt("%d", need - bt), D.f_burst_s, (divt(bt - base, t)),
                   base)
  end
  if op == "D" then
    local tat = need -- relative to now: base + units * T
    local lo = nlo + tat
    local r = fmod(lo, 1000000000)
    if r < 0 then
      r = r + 1000000000
    end
    local hi = nhi + (lo - r) / 1000000000
    local d = tat + nr
    if d < 0 then
      d = 0
    end
    local ms = floor(d / 1000000) + 2 + CTX.slack_ms
    redis.call("SET", skey, sfmt("r %d%09d 0", hi, r), "PX", ms)
    if not tag.until_ms or lt(tag.until_ms, ms) then
      tag.until_ms = ms
    end
  end
  return sfmt("OK %s 1 0 0 1 %s %d 0 %d 0", now_s, D.f_burst_s, (divt(bt - need, t)), need), true
end

-- ---- the call -------------------------------------------------------------------------------

-- Shared by every op of the script (limits here, tasks in tasks.lua and recurring series in
-- recur.lua, appended to this file at build time; the dispatch on ARGV[1] ends defs.lua, the
-- shared limit definitions, appended last).

-- Reads Redis TIME once per call into CTX and returns the call's base time: now_arg (injected,
-- non-empty) or TIME.
local function call_clock(now_arg)
  local t = redis.call("TIME")
  CTX.real = num(t[1] .. sfmt("%06d", tonumber(t[2])) .. "000")
  CTX.real_ms = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000) -- Redis's expiry clock
  CTX.slack_ms = 0
  if now_arg ~= "" then
    -- Injected (virtual) time has nothing to do with Redis's expiry clock: keep state an hour
    -- past its idleness in virtual time, measured from the real time, so that it never expires
    -- under a test that runs for a while.
    CTX.real = num(now_arg)
    CTX.slack_ms = 3600000
  end
  return CTX.real
end

-- A definition "kind limit period_ns burst start_empty ttl_ns calendar"; a malformed one gives
-- {err = ...}, which makes every request that names it INVAL. A rate whose emission interval is
-- a whole number of ns and whose burst * T stays below 2^52 also gets what the fast path needs
-- (f_t, f_bt, f_burst, f_burst_s).
local function parse_def(text)
  local D = {}
  local ok, err = pcall(function()
    local body = text:match("^(.*) s$")
    if body then -- a link in shadow mode (never the fast path's)
      text, D.shadow = body, true
    end
    local plain, af, an, ad, as, ae = text:match("^(.*) a (%d+) (%d+) (%d+) (%d+) (%d+)$")
    if plain then -- an adaptive rate (never the fast path's: each key has its own rate)
      text = plain
      D.aimd = {floor = tonumber(af), num = tonumber(an), den = tonumber(ad), step = tonumber(as),
                every = num(ae), g = {}}
    end
    local k, l, p, b, se, ttl, cal = text:match(
      "^(%d+) (%-?%d+) (%-?%d+) (%-?%d+) ([01]) (%-?%d+) (%-?%d+)$")
    D.kind, D.limit, D.period, D.burst = tonumber(k), tonumber(l), num(p), tonumber(b)
    D.start_empty, D.ttl, D.calendar = se == "1", num(ttl), tonumber(cal)
    if not D.kind or D.kind < 1 or D.kind > 5 or D.limit < 1 or not D.burst or not D.calendar then
      error("bad link")
    end
    if D.kind == 1 then
      if D.burst == 0 then
        D.burst = D.limit
      end
      if sign(D.period) <= 0 then
        error("bad period")
      end
      D.g = gcra_new(D.limit, D.period, D.burst, D.start_empty)
      if D.aimd then
        local A = D.aimd
        A.permits = D.limit
        if A.floor < 1 or A.floor > D.limit or A.num < 1 or A.num >= A.den or A.den > 1000000 or
          A.step < 1 or sign(A.every) <= 0 then
          error("bad adaptive rate")
        end
      elseif #p <= 15 and D.burst >= 0 and D.period % D.limit == 0 then
        local ft = D.period / D.limit
        if D.burst * ft < FAST_MAX then
          D.f_t, D.f_bt, D.f_burst, D.f_burst_s = ft, D.burst * ft, D.burst, sfmt("%d", D.burst)
        end
      end
    elseif (D.kind == 2 or D.kind == 3) and sign(D.period) <= 0 then
      error("bad period")
    end
  end)
  if not ok then
    D = {err = err}
  end
  return D
end

local tags_seen = {}

local function tag_of(ck)
  local tg = tags_seen[ck]
  if not tg then
    -- "<time ns> <last lease id> <deadline>": the deadline (Redis ms, -1: none) is kept in
    -- the value so that one SET ... PX renews the clock without reading its TTL.
    local v = redis.pcall("GET", ck)
    local ts, ls, ds
    if type(v) == "string" then
      ts, ls, ds = v:match("^(%-?%d+) (%d+) (%-?%d+)$")
    end
    tg = {clock = ck, t = ts and num(ts) or 0, last_lease = ls and num(ls) or 0,
          deadline = ds and tonumber(ds) or nil}
    tags_seen[ck] = tg
  end
  return tg
end

-- Clocks: the ratchet and the lease counter, kept at least as long as any state of their tag.
-- A clock without an expiry stays so: it counts a quota that never ends.
local function flush_clocks()
  for ck, tg in pairs(tags_seen) do
    if tg.dirty then
      local v = str(tg.t) .. " " .. str(tg.last_lease)
      if tg.forever or tg.deadline == -1 then
        redis.call("SET", ck, v .. " -1")
      else
        local ms = tg.until_ms or add(2, CTX.slack_ms)
        local deadline = add(CTX.real_ms, ms)
        if tg.deadline and lt(deadline, tg.deadline) then
          deadline = tg.deadline
        end
        local px = sub(deadline, CTX.real_ms)
        if cmp(px, 1) < 0 then
          px = 1
        end
        redis.call("SET", ck, v .. " " .. str(deadline), "PX", str(px))
      end
    end
  end
end

-- The definitions of the call being run (limits_main).
local defs = {}
local base

-- The decimal text of a request's time and its distance from the real time, computed once for
-- the requests that share it (most of a call's).
local last_now, last_now_s, last_nr
local function now_text(now)
  if now ~= last_now then
    last_now, last_now_s, last_nr = now, str(now), sub(now, CTX.real)
  end
  return last_now_s, last_nr
end

-- A request the fast path does not take: split its string, judge it, write it.
local function general(rs, ki)
  local tok, nt = {}, 0
  for w in rs:gmatch("%S+") do
    nt = nt + 1
    tok[nt] = w
  end
  local R = {op = tok[1]}
  local ntags, nlinks = tonumber(tok[2] or "") or 0, tonumber(tok[3] or "") or 0
  R.a1s = tok[4]
  local ok, err = pcall(function()
    R.a1, R.a2, R.a3 = num(tok[4]), num(tok[5]), num(tok[6])
  end)
  local tags = {}
  for i = 1, ntags do
    tags[i] = tag_of(KEYS[ki])
    ki = ki + 1
  end
  if CTX.audit then
    for i = 1, ntags do
      tags[i].audit = KEYS[ki]
      ki = ki + 1
    end
  end
  R.links = {}
  for i = 1, nlinks do
    local at = 7 + 3 * (i - 1)
    local D = defs[tonumber(tok[at] or "") or 0]
    local L = {skey = reset_key(KEYS[ki]), units = tonumber(tok[at + 2] or ""),
               tag = tags[tonumber(tok[at + 1] or "") or 0]}
    ki = ki + 1
    if not D then
      ok, err = false, "bad link"
    elseif D.err then
      ok, err = false, D.err
    elseif not L.units or L.units < 1 or not L.tag then
      ok, err = false, "bad link"
    else
      L.kind, L.limit, L.period, L.burst = D.kind, D.limit, D.period, D.burst
      L.start_empty, L.ttl, L.calendar, L.g = D.start_empty, D.ttl, D.calendar, D.g
      L.shadow, L.aimd = D.shadow, D.aimd
    end
    R.links[i] = L
  end
  -- The request's time: the call's, ratcheted by every clock of its tags.
  local now = base
  for i = 1, ntags do
    if lt(now, tags[i].t) then
      now = tags[i].t
    end
  end
  local reply = {}
  local status, msg
  if not ok or nlinks < 1 then
    status, msg = "INVAL", tostring(err or "no links")
  else
    if R.op ~= "P" and R.op ~= "K" then -- reads leave the clocks alone
      for i = 1, ntags do
        tags[i].t = now
        tags[i].dirty = true
      end
    end
    -- A request that fails (a malformed stored value: a bug) answers INVAL and leaves the
    -- others alone; every request reads everything before it writes anything.
    local okr, e1, e2 = pcall(function()
      if R.op == "D" or R.op == "P" then
        return run_decide(R, now, R.op == "P", reply)
      elseif R.op == "N" or R.op == "R" then
        return run_lease(R, now, reply)
      elseif R.op == "S" then
        return run_settle(R, now)
      elseif R.op == "B" then
        return run_backoff(R, now, reply)
      elseif R.op == "K" then
        return run_rate(R, now, reply)
      end
      return "INVAL", "unknown op " .. tostring(R.op)
    end)
    if okr then
      status, msg = e1, e2
    else
      status, msg = "INVAL", tostring(e1)
    end
  end
  if status == "INVAL" then
    return status .. " " .. str(now) .. " " .. (msg or ""), ki
  end
  return status .. " " .. str(now) .. (#reply > 0 and " " .. table.concat(reply, " ") or ""), ki
end

-- The limits op (protocol "2"): the batch described at the top of this file.
local function limits_main()
  base = call_clock(ARGV[3])
  CTX.audit = ARGV[2]:find("a", 1, true) ~= nil
  local nreq, ndefs = tonumber(ARGV[4]), tonumber(ARGV[5])
  local replies = {}
  for i = 1, ndefs do
    defs[i] = parse_def(ARGV[5 + i])
  end
  local ki = 1
  local audit = CTX.audit
  for r = 1, nreq do
    local rs = ARGV[5 + ndefs + r]
    local out
    local op, di, units = rs:match("^([DP]) 1 1 %-?%d+ 0 0 (%d+) 1 (%d+)$")
    if op then
      local D = defs[tonumber(di)]
      if D and D.f_t then
        local tg = tag_of(KEYS[ki])
        local now = base
        if lt(now, tg.t) then
          now = tg.t
        end
        local now_s, nr = now_text(now)
        local skey = reset_key(KEYS[ki + (audit and 2 or 1)])
        units = tonumber(units)
        local charged
        out, charged = fast_rate(D, op, units, skey, tg, now_s, nr)
        if out then
          if op == "D" then
            tg.t = now
            tg.dirty = true
            if audit and charged then -- granted (a shadow link's pass charged nothing)
              redis.call("RPUSH", KEYS[ki + 1], audit_entry(skey, units, now_s))
            end
          end
          ki = ki + (audit and 3 or 2)
        end
      end
    end
    if not out then
      out, ki = general(rs, ki)
    end
    replies[r] = out
  end
  flush_clocks()
  return replies
end
