-- Replace the generation only if it is still the one the caller saw.
-- KEYS[1] generation key
-- ARGV[1] the generation the caller saw, ARGV[2] the new one
-- Returns the generation in force afterwards (ARGV[2] when replaced).
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return ARGV[2]
end
return cur
