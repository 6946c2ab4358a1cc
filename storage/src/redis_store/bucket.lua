-- weir rate-limit bucket: one GCRA step on the Redis server's clock (C-RATE-1, C-RATE-3).
--
-- KEYS[1]  the bucket key; its value is the theoretical arrival time (tat) in nanoseconds
--          since the Unix epoch, as a decimal string (absent = a full bucket)
-- ARGV[1]  'take', 'peek' or 'set'
-- ARGV[2]  interval_ns: time one token takes to refill (weir_core::bucket::BucketParams)
-- ARGV[3]  window_ns: capacity * interval_ns, the time a full refill takes
-- ARGV[4]  ttl_ms: key TTL, the full refill time plus a margin
-- ARGV[5]  tokens ('set' only): whole tokens the bucket holds afterwards, 0..=capacity
--
-- take -> {1, remaining, now_s, now_us} when allowed, {0, retry_after_ns, now_s, now_us} when not
-- peek -> {2, tat, now_s, now_us} (tat as a string; the caller computes the tokens)
-- set  -> {3, 0, now_s, now_us}: tat = now + window - tokens * interval (a full bucket is
--         the absent key), the management "refill to n tokens" command (C-MGMT-4)
--
-- Lua numbers are doubles: integers are exact below 2^53 ns (104 days), which an absolute
-- epoch time in nanoseconds (~1.8e18) is not. So times are kept as (seconds, nanoseconds)
-- pairs and only differences, which are bounded by window_ns + interval_ns (checked by the
-- caller to be below 2^51), are ever formed as one number. The arithmetic is then exactly
-- that of BucketParams::take.

local BILLION = 1000000000

-- floor(a / b) and a - b * floor(a / b) for integers 0 <= a < 2^53, 0 < b, exactly.
local function divmod(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q, a - q * b
end

local t = redis.call('TIME')
local now_s = tonumber(t[1])
local now_n = tonumber(t[2]) * 1000

if ARGV[1] == 'set' then
  -- debt = window - tokens * interval: 0 <= debt <= window < 2^51, exact.
  local debt = tonumber(ARGV[3]) - tonumber(ARGV[5]) * tonumber(ARGV[2])
  if debt <= 0 then
    redis.call('DEL', KEYS[1])
  else
    local carry, n = divmod(now_n + debt, BILLION)
    redis.call('SET', KEYS[1], string.format('%d%09d', now_s + carry, n), 'PX', ARGV[4])
  end
  return {3, 0, t[1], t[2]}
end

local raw = redis.call('GET', KEYS[1])
if ARGV[1] == 'peek' then
  return {2, raw or '0', t[1], t[2]}
end

local tat_s, tat_n = 0, 0
if raw then
  local len = string.len(raw)
  if len > 9 then
    tat_s = tonumber(string.sub(raw, 1, len - 9))
    tat_n = tonumber(string.sub(raw, len - 8))
  else
    tat_n = tonumber(raw)
  end
  if tat_s == nil or tat_n == nil then
    return redis.error_reply('weir: bucket ' .. KEYS[1] .. ' holds a non-number')
  end
end

local interval = tonumber(ARGV[2])
local window = tonumber(ARGV[3])

-- debt = max(tat - now, 0)
local debt = 0
if tat_s > now_s or (tat_s == now_s and tat_n > now_n) then
  debt = (tat_s - now_s) * BILLION + (tat_n - now_n)
end

-- Allowed iff at least one whole token: window - debt >= interval.
if debt + interval <= window then
  local new_debt = debt + interval
  local remaining = divmod(window - new_debt, interval)
  local carry, n = divmod(now_n + new_debt, BILLION)
  local s = now_s + carry
  redis.call('SET', KEYS[1], string.format('%d%09d', s, n), 'PX', ARGV[4])
  return {1, remaining, t[1], t[2]}
end
return {0, debt + interval - window, t[1], t[2]}
