"""The Redis sink's server-side Lua scripts: the apply rule and the publish of a staged key, run atomically.

Kept apart from ``sinks/redis.py``, which calls them: each script's contract
(KEYS, ARGV, replies) is in the comment above it. Loaded once per server by
``RedisSink`` and called by SHA.
"""

from __future__ import annotations

import hashlib

NEWER = """
local function newer(a, b)
  -- canonical non-negative decimal strings: the longer is larger; else the first differing
  -- byte decides (byte by byte, because Lua's string '<' follows the server's collation locale)
  if #a ~= #b then return #a > #b end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return false
end
"""
# Applies many rows in one call. KEYS: per row, its key and its target's marker hash. ARGV[1]: a JSON
# array with one array of strings per row, in KEYS order: doc id, version, op ('u' | 'd'), then field,
# value, ... (one JSON argument instead of a dozen per row: redis-py's packing of many small arguments
# cost more than the server's work). Every value is a JSON string, so cjson gives back the exact bytes
# and never a number. Returns one reply per row, in order: 1 applied, 0 stale (the store holds this
# version or a newer one), or the error of the command Redis refused for that row. redis.pcall turns
# such an error into a value, so one refused row does not abort the rows after it.
APPLY = (
    NEWER
    + """
local SLICE = 1000  -- field and value strings per HSET: unpack() is bounded by Lua's C stack (~8000)

local function failed(reply) return type(reply) == 'table' end  -- only an error reply is a table here

local function hset(key, version, r)
  local reply = redis.pcall('HSET', key, '_v', version, unpack(r, 4, math.min(3 + SLICE, #r)))
  for at = 4 + SLICE, #r, SLICE do
    if failed(reply) then return reply end
    reply = redis.pcall('HSET', key, unpack(r, at, math.min(at + SLICE - 1, #r)))
  end
  return reply
end

local function apply(row, marker, r)
  local id, version = r[1], r[2]
  -- The reads come first: a key of another type refuses the row before anything is written.
  local held = redis.pcall('HGET', row, '_v')
  if failed(held) then return held end
  if held and not newer(version, held) then return 0 end
  local deleted = redis.pcall('HGET', marker, id)
  if failed(deleted) then return deleted end
  if deleted and not newer(version, deleted) then return 0 end
  local reply = redis.pcall('DEL', row)
  if failed(reply) then return reply end
  if r[3] == 'd' then
    reply = redis.pcall('HSET', marker, id, version)
  else
    reply = hset(row, version, r)
    if deleted and not failed(reply) then reply = redis.pcall('HDEL', marker, id) end
  end
  if failed(reply) then return reply end
  return 1
end

local replies = {}
for i, r in ipairs(cjson.decode(ARGV[1])) do
  replies[i] = apply(KEYS[2 * i - 1], KEYS[2 * i], r)
end
return replies
"""
)
# Publish one staged key. KEYS: staged row key or staged marker hash, live row key, live marker hash.
# ARGV: doc id, 'row' | 'marker'. Returns 1 when the staged state replaced the live one, else 0.
PROMOTE = (
    NEWER
    + """
local version
if ARGV[2] == 'row' then version = redis.call('HGET', KEYS[1], '_v')
else version = redis.call('HGET', KEYS[1], ARGV[1]) end
if not version then return 0 end
local row = redis.call('HGET', KEYS[2], '_v')
local marker = redis.call('HGET', KEYS[3], ARGV[1])
local wins = (not row or newer(version, row)) and (not marker or newer(version, marker))
if ARGV[2] == 'row' then
  if wins then
    redis.call('RENAME', KEYS[1], KEYS[2])
    if marker then redis.call('HDEL', KEYS[3], ARGV[1]) end
  else
    redis.call('DEL', KEYS[1])
  end
else
  if wins then
    if row then redis.call('DEL', KEYS[2]) end
    redis.call('HSET', KEYS[3], ARGV[1], version)
  end
  redis.call('HDEL', KEYS[1], ARGV[1])
end
if wins then return 1 end
return 0
"""
)
SCRIPTS = {
    name: (text, hashlib.sha1(text.encode()).hexdigest()) for name, text in (("apply", APPLY), ("promote", PROMOTE))
}
APPLY_SHA, PROMOTE_SHA = SCRIPTS["apply"][1], SCRIPTS["promote"][1]
