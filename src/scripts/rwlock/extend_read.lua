-- extend_read: extends a read lock.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the readers
-- ARGV[1]  the reader's token
-- ARGV[2]  the new TTL in ms (negative: a last request, see expiry.lua)
--
-- Only while the reader is there and not expired, raises its expiry to
-- ARGV[2] ms from now (never lowers it, but for a last request) and makes
-- sure the lock key (and the readers' set) lives at least as long; answers 1. Otherwise answers 0 when a writer
-- holds the key, -1 when the reader is gone.
-- The server's clock in ms.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mine = redis.call("ZSCORE", KEYS[2], ARGV[1])
local held = redis.call("GET", KEYS[1])
if not mine or tonumber(mine) <= now or held ~= READERS_MARK then
    if held and held ~= READERS_MARK then
        return 0
    end
    return -1
end
-- The reader's deadline is raised, never lowered, unless a last request
-- (see expiry.lua): a deadline that a late extend lowered would let a
-- writer in while the reader holds. The lock key, shared by every
-- reader, is only ever raised.
local ttl, exact = asked_ttl(ARGV[2])
if exact or now + ttl > tonumber(mine) then
    redis.call("ZADD", KEYS[2], now + ttl, ARGV[1])
end
if redis.call("PTTL", KEYS[1]) < ttl then
    redis.call("PEXPIRE", KEYS[1], ttl)
    redis.call("PEXPIRE", KEYS[2], ttl)
end
return 1
