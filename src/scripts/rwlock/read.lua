-- read: takes a read lock.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the readers: a sorted set of reader tokens scored by their
--          expiry, in ms of the server's clock
-- KEYS[3]  the waiting-writer flag
-- ARGV[1]  the reader's token
-- ARGV[2]  the TTL in ms
--
-- Refused while the lock key holds anything but the readers' mark (READERS_MARK) (a writer: the
-- answer is the value it holds, named so that the reader can tell which
-- servers that grant was asked of, see the crate docs, "Restarts") or a
-- writer waits (the flag exists: 0). Otherwise adds this reader, and
-- makes sure the lock key holds the mark for at least the TTL (the key
-- lives as long as its longest reader, so a writer's SET NX fails until
-- every reader is gone); the readers' set always gets the key's expiry.
-- Answers 1. (Expired readers are dropped on release.)
local got = redis.call("MGET", KEYS[1], KEYS[3])
local held = got[1]
if held and held ~= READERS_MARK then
    return held
end
if got[2] then
    return 0
end
-- The server's clock in ms.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call("ZADD", KEYS[2], now + ttl, ARGV[1])
if not held or redis.call("PTTL", KEYS[1]) < ttl then
    redis.call("SET", KEYS[1], READERS_MARK, "PX", ARGV[2])
    redis.call("PEXPIRE", KEYS[2], ARGV[2])
end
return 1
