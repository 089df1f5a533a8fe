-- extend_read: extends a read lock.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the readers
-- ARGV[1]  the reader's token
-- ARGV[2]  the new TTL in ms
-- ARGV[3]  the readers' mark
--
-- Only while the reader is there and not expired, moves its expiry to
-- ARGV[2] ms from now and makes sure the lock key (and the readers' set)
-- lives at least as long; answers 1. Otherwise answers 0 when a writer
-- holds the key, -1 when the reader is gone.
-- The server's clock in ms.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mine = redis.call("ZSCORE", KEYS[2], ARGV[1])
local held = redis.call("GET", KEYS[1])
if not mine or tonumber(mine) <= now or held ~= ARGV[3] then
    if held and held ~= ARGV[3] then
        return 0
    end
    return -1
end
local ttl = tonumber(ARGV[2])
redis.call("ZADD", KEYS[2], now + ttl, ARGV[1])
if redis.call("PTTL", KEYS[1]) < ttl then
    redis.call("PEXPIRE", KEYS[1], ARGV[2])
    redis.call("PEXPIRE", KEYS[2], ARGV[2])
end
return 1
