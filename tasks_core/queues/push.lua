-- Push the messages that a queue's list does not hold yet; returns how many were pushed.
--
-- KEYS[1]: the list (LPUSH here, pops take from the right: first in, first out)
-- KEYS[2]: a sorted set of the bodies pushed, each scored by its push number (1, 2, ...)
-- ARGV:    the message bodies, in push order
--
-- Pops are plain BLMPOPs that leave the set alone. Since the list is first in, first out, the
-- messages still in it are the LLEN last pushed: those numbered above newest - LLEN. Older
-- entries of the set were popped, so they are pruned here. Whatever empties the list (a
-- FLUSHDB, a DEL, a lost shard) also makes every entry count as popped, so the next push of
-- each task goes through: a marker never outlives its message for long enough to hide a task.
local waiting = redis.call('LLEN', KEYS[1])
local newest = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
local number = 0
if newest[2] then
  number = tonumber(newest[2])
end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', number - waiting)
local pushed = 0
for _, body in ipairs(ARGV) do
  if not redis.call('ZSCORE', KEYS[2], body) then
    number = number + 1
    redis.call('ZADD', KEYS[2], number, body)
    redis.call('LPUSH', KEYS[1], body)
    pushed = pushed + 1
  end
end
return pushed
