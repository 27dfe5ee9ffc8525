"""The Redis sink's server-side Lua scripts: the apply rule and the two passes of a publish, run atomically.

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
# Applies many rows of one target in one call. KEYS[1]: the target's marker hash; KEYS[2]: its journal
# (a set that exists only while a reindex of the target runs, ``RedisSink.stage``); KEYS[2 + i]: row i's
# key. ARGV[1]: a JSON array with one array per row, in KEYS order: doc id, version, op ('u' | 'd'),
# then for 'u' an object of field -> value (one JSON argument instead of a dozen per row: redis-py's
# packing of many small arguments cost more than the server's work). Every id, version and value is a
# JSON string, so cjson gives back the exact bytes and never a number.
# Answers an array: first a string of one byte per row, in order: '1' applied, '0' older (the store
# holds this version or a newer one), 'e' refused; then the error of each refused row, in the same
# order (the command Redis refused for it). One string, not a reply per row: the client's parsing of a
# hundred replies cost more than the rows' commands. redis.pcall turns a refusal into a value, so one
# refused row does not abort the rows after it. A row applied while the journal exists adds its id
# there, in the same atomic call: the publish of the reindex then knows the running follower wrote that
# key after the stage began.
APPLY = (
    NEWER
    + """
local SLICE = 1000  -- field and value strings per HSET: unpack() is bounded by Lua's C stack (~8000)
local marker, journal = KEYS[1], KEYS[2]

local function failed(reply) return type(reply) == 'table' end  -- only an error reply is a table here

local function hset(key, version, doc)
  local args, n = {'_v', version}, 2
  for f, v in pairs(doc) do
    args[n + 1], args[n + 2] = f, v
    n = n + 2
    if n >= SLICE then
      local reply = redis.pcall('HSET', key, unpack(args, 1, n))
      if failed(reply) then return reply end
      args, n = {}, 0
    end
  end
  if n > 0 then return redis.pcall('HSET', key, unpack(args, 1, n)) end
  return 0
end

local open = nil  -- whether the journal exists: asked once per call

local function note(id)
  if open == nil then
    local exists = redis.pcall('EXISTS', journal)
    if failed(exists) then return exists end
    open = exists == 1
  end
  if open then return redis.pcall('SADD', journal, id) end
  return 0
end

local function apply(row, r)
  local id, version = r[1], r[2]
  -- The reads come first: a key of another type refuses the row before anything is written.
  local held = redis.pcall('HGET', row, '_v')
  if failed(held) then return held end
  if held and not newer(version, held) then return 0 end
  local deleted = redis.pcall('HGET', marker, id)
  if failed(deleted) then return deleted end
  if deleted and not newer(version, deleted) then return 0 end
  -- Noted before the writes: a journaled id that then fails only gets the version rule at publish.
  local reply = note(id)
  if failed(reply) then return reply end
  reply = redis.pcall('DEL', row)
  if failed(reply) then return reply end
  if r[3] == 'd' then
    reply = redis.pcall('HSET', marker, id, version)
  else
    reply = hset(row, version, r[4])
    if deleted and not failed(reply) then reply = redis.pcall('HDEL', marker, id) end
  end
  if failed(reply) then return reply end
  return 1
end

local statuses, answer = {}, {''}
for i, r in ipairs(cjson.decode(ARGV[1])) do
  local reply = apply(KEYS[2 + i], r)
  if reply == 1 then statuses[i] = '1'
  elseif reply == 0 then statuses[i] = '0'
  else
    statuses[i] = 'e'
    answer[#answer + 1] = reply
  end
end
answer[1] = table.concat(statuses)
return answer
"""
)
# The ids a publish call covers, in one of two forms. By id: ARGV[1] 'row' | 'marker', then the ids; per id,
# two KEYS in the order each script names. By scan, for rows: ARGV[1] 'scan', ARGV[2] a SCAN cursor, ARGV[3]
# its MATCH pattern, ARGV[4] the head of the matched keys (the id follows it), ARGV[5] the head of the other
# generation's row keys, ARGV[6] SCAN's COUNT; the matched key comes first, the other second. The server
# finds the keys itself, so no key travels to the client and back (the promote pass took 1.6-2x as long when
# the client scanned the keys and sent them back: bench.redis_publish). Both forms answer {cursor, count};
# the cursor is '0' when there is no more to scan, and always '0' by id.
PUBLISH_IDS = """
local function ids()
  local list = {}
  if ARGV[1] ~= 'scan' then
    for i = 2, #ARGV do list[#list + 1] = {ARGV[i], KEYS[2 * i - 1], KEYS[2 * i]} end
    return ARGV[1] == 'row', list, '0'
  end
  local found, head = redis.call('SCAN', ARGV[2], 'MATCH', ARGV[3], 'COUNT', ARGV[6]), #ARGV[4]
  for _, key in ipairs(found[2]) do
    local id = string.sub(key, head + 1)
    list[#list + 1] = {id, key, ARGV[5] .. id}
  end
  return true, list, found[1]
end
"""
# Publish, first pass: drop the live rows or live markers the staged generation knows nothing about, many
# ids per call (a call per id spent most of a publish on per-call costs). KEYS[1]: the staged marker hash;
# KEYS[2]: the journal; per id (PUBLISH_IDS): the live row key (or the live marker hash) and the staged row
# key. An id stays when the staged generation has a row or a marker for it (the second pass replaces it) or
# when the running follower wrote it since the stage began (journal). Counts what it dropped.
PURGE = (
    PUBLISH_IDS
    + """
local row, list, cursor = ids()
local dropped = 0
for _, entry in ipairs(list) do
  local id, live, staged = entry[1], entry[2], entry[3]
  if redis.call('EXISTS', staged) == 0 and redis.call('HEXISTS', KEYS[1], id) == 0
     and redis.call('SISMEMBER', KEYS[2], id) == 0 then
    if row then dropped = dropped + redis.call('DEL', live)
    else dropped = dropped + redis.call('HDEL', live, id) end
  end
end
return {cursor, dropped}
"""
)
# Publish, second pass: staged keys over live ones, many ids per call. KEYS[1]: the live marker hash;
# KEYS[2]: the journal; per id (PUBLISH_IDS): the staged row key (or the staged marker hash) and the live
# row key. The staged state replaces the live one, unless the running follower wrote the key since the
# stage began (its id is in the journal) with a newer version than the staged one; on a tie the staged
# state wins (it carries the reindex's mapping).
# A live key the follower did not write since the stage began reflects an earlier offset than the
# staged generation, so it is replaced whatever its version says: that is what resets a stale marker.
# Counts the staged states that replaced the live one.
PUBLISH = (
    NEWER
    + PUBLISH_IDS
    + """
local marker, journal = KEYS[1], KEYS[2]
local row, list, cursor = ids()
-- Asked once per call: whether the follower wrote anything since the stage (the journal holds more
-- than the member that opened it) and whether the live marker hash exists. A bootstrap's publish,
-- with neither, costs one RENAME per row.
local busy = redis.call('SCARD', journal) > 1
local markers = redis.call('EXISTS', marker) == 1

local function staged_version(id, staged)
  if row then return redis.call('HGET', staged, '_v') end
  return redis.call('HGET', staged, id)
end

local function promote(id, staged, live)
  -- Not busy: the journal holds at most its opening member '', which a doc id '' matches.
  local journaled = (busy or id == '') and redis.call('SISMEMBER', journal, id) == 1
  local wins = true
  if journaled or not row then
    local version = staged_version(id, staged)
    if not version then return 0 end
    if journaled then
      local held = redis.call('HGET', live, '_v')
      local deleted = markers and redis.call('HGET', marker, id)
      wins = (not held or not newer(held, version)) and (not deleted or not newer(deleted, version))
    end
    if not row then
      if wins then
        redis.call('DEL', live)
        redis.call('HSET', marker, id, version)
        markers = true
      end
      redis.call('HDEL', staged, id)
      if wins then return 1 end
      return 0
    end
  end
  if not wins then
    redis.call('DEL', staged)
    return 0
  end
  -- A staged row already gone (moved by an earlier, killed publish) is not an error; anything else is.
  local moved = redis.pcall('RENAME', staged, live)
  if type(moved) == 'table' and moved.err then
    if string.find(moved.err, 'no such key', 1, true) then return 0 end
    error(moved)
  end
  if markers then redis.call('HDEL', marker, id) end
  return 1
end

local promoted = 0
for _, entry in ipairs(list) do
  promoted = promoted + promote(entry[1], entry[2], entry[3])
end
return {cursor, promoted}
"""
)
SCRIPTS = {
    name: (text, hashlib.sha1(text.encode()).hexdigest())
    for name, text in (("apply", APPLY), ("purge", PURGE), ("publish", PUBLISH))
}
APPLY_SHA, PURGE_SHA, PUBLISH_SHA = SCRIPTS["apply"][1], SCRIPTS["purge"][1], SCRIPTS["publish"][1]
