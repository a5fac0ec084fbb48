-- Charges one request's use of one container (package containersession).
-- KEYS[1]: the container's charged time (Unix ms up to which its minutes are charged).
-- KEYS[2]: what this request was charged of it, so that asking again answers the same.
-- ARGV: the request's start and end (Unix ms), the container's idle window, its minimum,
-- and how long to keep the keys past the new charged time (all ms).
-- Returns the milliseconds charged.
local done = redis.call('GET', KEYS[2])
if done then
  return tonumber(done)
end
local from, ends = tonumber(ARGV[1]), tonumber(ARGV[2])
local idle, minimum, keep = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local to = ends + idle
local charged = tonumber(redis.call('GET', KEYS[1]) or '-1')
local ms
if charged < from then
  -- A container not seen before, or whose charged time ended before this request
  -- began (it had expired: this is another session): from the request's start, at
  -- least the minimum.
  to = math.max(to, from + minimum)
  ms = to - from
elseif to > charged then
  ms = to - charged
else
  ms = 0
  to = charged
end
redis.call('SET', KEYS[1], to, 'PX', to - ends + keep)
redis.call('SET', KEYS[2], ms, 'PX', keep)
return ms
