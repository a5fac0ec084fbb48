-- Monotonic write of a member record.
-- KEYS[1] member record key
-- ARGV[1] version, ARGV[2] generation, ARGV[3] encoded record, ARGV[4] ttl in ms (0 = none)
-- Returns 1 when written, 0 when the stored record's version is as high or higher,
-- whatever generation it was written under: versions come from Postgres and only go
-- up, so a lower one is an older record (a rebuild that read its record before a
-- settlement committed must not replace the settlement's record written meanwhile under
-- the old generation). A rebuild replaces newer-looking records by moving Postgres's
-- versions past them first (controlplane/mirrorsync). A stored version that is not a
-- number is replaced.
local cur = tonumber(redis.call('HGET', KEYS[1], 'v'))
if cur and cur >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'g', ARGV[2], 'r', ARGV[3])
if tonumber(ARGV[4]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
else
  redis.call('PERSIST', KEYS[1])
end
return 1
