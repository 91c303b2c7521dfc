-- SPDX-License-Identifier: MIT
-- (stub) the task ops; the dispatch of the script.
if ARGV[1] == "2" then
  return limits_main()
end
return redis.error_reply("ERR sluice store script: protocol " .. tostring(ARGV[1]) ..
                           " not understood (expected 2)")
