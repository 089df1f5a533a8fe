-- unclaim (fair): the clean-up of a queued waiter's failed attempt.
-- Where the attempt replaced our reservation with our token, the
-- reservation goes back, until the deadline it had (never later: a
-- waiter cannot keep a key by failing); past that deadline, and where
-- the key was free when we took it, the key is deleted as any clean-up
-- does, and that is announced. Another's token is never touched.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the tickets: the claim left our reservation's deadline (server
--          ms) under "next:" and our token
-- ARGV[1]  our token
-- ARGV[2]  optional: PUBLISH (nodes) or SPUBLISH (Redis Cluster)
-- ARGV[3]  the release message
-- ARGV[4]  the release channel
--
-- Answers 1 when it put back or deleted our key, 0 when the key holds
-- another token, -1 when there is no key.
local held = redis.call("GET", KEYS[1])
if held ~= ARGV[1] then
    if held then
        return 0
    end
    return -1
end
local field = "next:" .. ARGV[1]
local deadline = tonumber(redis.call("HGET", KEYS[2], field) or "")
redis.call("HDEL", KEYS[2], field)
if deadline then
    local t = redis.call("TIME")
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    if deadline > now then
        redis.call("SET", KEYS[1], "redlock:next:" .. ARGV[1], "PX", deadline - now)
        return 1
    end
end
redis.call("DEL", KEYS[1])
if ARGV[2] then
    redis.pcall(ARGV[2], ARGV[4], ARGV[3])
end
return 1
