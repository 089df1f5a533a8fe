-- unread: releases a read lock.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the readers
-- ARGV[1]  the reader's token
-- ARGV[2]  optional: PUBLISH (nodes) or SPUBLISH (Redis Cluster)
-- ARGV[3]  the release message
-- ARGV[4]  the release channel
--
-- Removes the reader. When no valid reader is left, deletes the lock key
-- (if it holds the readers' mark, READERS_MARK) and the readers, and announces the release;
-- otherwise drops the expired readers and shortens the key's expiry to
-- the longest remaining reader's. Answers 1 when the reader was there and
-- valid, -1 when it was gone or expired.
-- The server's clock in ms.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mine = redis.call("ZSCORE", KEYS[2], ARGV[1])
if mine then
    redis.call("ZREM", KEYS[2], ARGV[1])
end
if redis.call("GET", KEYS[1]) == READERS_MARK then
    local last = redis.call("ZRANGE", KEYS[2], -1, -1, "WITHSCORES")
    if #last == 0 or tonumber(last[2]) <= now then
        redis.call("DEL", KEYS[1], KEYS[2])
        if ARGV[2] then
            redis.pcall(ARGV[2], ARGV[4], ARGV[3])
        end
    else
        redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", now)
        local left = tonumber(last[2]) - now
        redis.call("PEXPIRE", KEYS[1], left)
        redis.call("PEXPIRE", KEYS[2], left)
    end
end
if mine and tonumber(mine) > now then
    return 1
end
return -1
