-- Merges the refusals one enforcer learned into those every enforcer shares (package
-- streamoptions, Share), and returns them all.
-- KEYS[1]: the shared refusals, a JSON array of [upstream, model, until in Unix ms].
-- ARGV[1]: now (Unix ms); ARGV[2]: how many are kept at most (those that last longest);
-- ARGV[3..]: the refusals learned, three values each (upstream, model, until).
-- Ended refusals are dropped, and the key ends with the last refusal in it. A value that
-- is not such an array (written by hand, or by another version) is replaced.
local now, most = tonumber(ARGV[1]), tonumber(ARGV[2])
local list, at = {}, {}
local function add(upstream, model, untilMs)
  if type(upstream) ~= 'string' or type(model) ~= 'string' or type(untilMs) ~= 'number' or untilMs <= now then
    return
  end
  local k = upstream .. '\n' .. model
  local i = at[k]
  if i == nil then
    list[#list + 1] = {upstream, model, untilMs}
    at[k] = #list
  elseif list[i][3] < untilMs then
    list[i][3] = untilMs
  end
end
local held = redis.call('GET', KEYS[1])
if held then
  local ok, old = pcall(cjson.decode, held)
  if ok and type(old) == 'table' then
    for _, r in ipairs(old) do
      if type(r) == 'table' then
        add(r[1], r[2], r[3])
      end
    end
  end
end
for i = 3, #ARGV - 2, 3 do
  add(ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]))
end
if #list == 0 then
  redis.call('DEL', KEYS[1])
  return '[]'
end
table.sort(list, function(a, b) return a[3] > b[3] end)
for i = #list, most + 1, -1 do
  list[i] = nil
end
local out = cjson.encode(list)
redis.call('SET', KEYS[1], out, 'PX', math.floor(list[1][3] - now) + 1)
return out
