-- extend_set: extends a set, all or nothing.
--
-- KEYS     the n lock keys, then (with ARGV[3]) their n fencing counters
-- ARGV[1]  our token
-- ARGV[2]  the new TTL in ms (negative: a last request, see expiry.lua)
-- ARGV[3]  optional (fencing on): the counters' expiry in ms
--
-- Only when every key holds our token, raises their expiry to ARGV[2] ms
-- and keeps each counter alive as the extend script does (expiry ARGV[3]
-- when it has less than the TTL left); answers 1. Otherwise changes
-- nothing and answers 0 when a key holds another token, -1 when one is
-- gone.
-- Raised, never lowered, unless a last request (see expiry.lua).
local ttl, exact = asked_ttl(ARGV[2])
local n = #KEYS
if ARGV[3] then
    n = n / 2
end
local held = redis.call("MGET", unpack(KEYS, 1, n))
for i = 1, n do
    if held[i] ~= ARGV[1] then
        if held[i] then
            return 0
        end
        return -1
    end
end
for i = 1, n do
    expire(KEYS[i], ttl, exact)
    if ARGV[3] then
        local left = redis.call("PTTL", KEYS[n + i])
        if left >= 0 and left < ttl then
            redis.call("PEXPIRE", KEYS[n + i], ARGV[3])
        end
    end
end
return 1
