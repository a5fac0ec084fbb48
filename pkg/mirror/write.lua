-- Monotonic write of a member record.
-- KEYS[1] member record key
-- ARGV[1] version, ARGV[2] generation, ARGV[3] encoded record, ARGV[4] ttl in ms (0 = none)
-- Returns 1 when written, 0 when the stored record of the same generation is as new or newer.
local cur = redis.call('HMGET', KEYS[1], 'v', 'g')
if cur[1] and cur[2] == ARGV[2] and tonumber(cur[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'g', ARGV[2], 'r', ARGV[3])
if tonumber(ARGV[4]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
else
  redis.call('PERSIST', KEYS[1])
end
return 1
