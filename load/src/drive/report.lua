-- wrk script of `weir-load run` (load/README.md): counts every answer by status and by the backend
-- that served it, and prints one JSON document after the run. wrk stays the load engine; this
-- script only observes. Settings come from the environment (wrk passes no other way into every
-- thread's Lua state):
--   WEIR_LOAD_DELAY_MS  milliseconds each connection waits before its next request (0: none)
--   WEIR_LOAD_HEADERS   extra request headers, "Name: value" lines separated by "\n"
--   WEIR_LOAD_BACKEND_HEADER  response header naming the backend (default X-Backend); without it,
--                       a body line "Hostname: NAME" (traefik/whoami, the compose demo backends)

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

local delay_ms = tonumber(os.getenv("WEIR_LOAD_DELAY_MS") or "0") or 0
if delay_ms > 0 then
  function delay()
    return delay_ms
  end
end

local name_header = os.getenv("WEIR_LOAD_BACKEND_HEADER") or "X-Backend"
local name_header_lc = string.lower(name_header)

statuses = {}
backends = {}
seen_ok = false
transition = false

function init(args)
  local extra = os.getenv("WEIR_LOAD_HEADERS") or ""
  for line in string.gmatch(extra, "[^\n]+") do
    local k, v = string.match(line, "^%s*([^:]+):%s*(.-)%s*$")
    if k then
      wrk.headers[k] = v
    end
  end
end

local function backend_of(headers, body)
  local name = headers[name_header] or headers[name_header_lc]
  if name then
    return name
  end
  if body then
    name = string.match(body, "Hostname: ([%w%.%-_]+)")
  end
  return name or "(unnamed)"
end

function response(status, headers, body)
  local key = tostring(status)
  statuses[key] = (statuses[key] or 0) + 1
  if status >= 200 and status < 300 then
    seen_ok = true
    local b = backend_of(headers, body)
    backends[b] = (backends[b] or 0) + 1
  elseif status == 429 and seen_ok then
    transition = true
  end
end

local function json_string(s)
  return '"' .. string.gsub(s, '[%c"\\]', function(c)
    return string.format("\\u%04x", string.byte(c))
  end) .. '"'
end

local function json_counts(t)
  local parts = {}
  for k, v in pairs(t) do
    table.insert(parts, json_string(k) .. ":" .. string.format("%d", v))
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

function done(summary, latency, requests)
  local all_status, all_backend, any_transition = {}, {}, false
  for _, t in ipairs(threads) do
    for k, v in pairs(t:get("statuses") or {}) do
      all_status[k] = (all_status[k] or 0) + v
    end
    for k, v in pairs(t:get("backends") or {}) do
      all_backend[k] = (all_backend[k] or 0) + v
    end
    any_transition = any_transition or t:get("transition")
  end
  -- The latency histogram: every distinct value (microseconds) and how many requests took it,
  -- so that windows can be merged into exact percentiles.
  local hist = {}
  for i = 1, #latency do
    local v, c = latency(i)
    table.insert(hist, string.format("[%d,%d]", v, c))
  end
  local e = summary.errors
  io.write("WEIR_LOAD_JSON ")
  io.write(string.format(
    '{"duration_us":%d,"requests":%d,"bytes":%d,' ..
      '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
      '"statuses":%s,"backends":%s,"transition":%s,"latency_us":[%s]}\n',
    summary.duration, summary.requests, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    json_counts(all_status), json_counts(all_backend), tostring(any_transition == true),
    table.concat(hist, ",")))
end
