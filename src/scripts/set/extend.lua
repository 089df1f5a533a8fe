-- extend_set: extends a set, all or nothing.
--
-- KEYS     the n lock keys, then (with ARGV[3]) their n fencing counters
-- ARGV[1]  our token
-- ARGV[2]  the new TTL in ms
-- ARGV[3]  optional (fencing on): the counters' expiry in ms
--
-- Only when every key holds our token, raises their expiry to ARGV[2] ms
-- and keeps each counter alive as the extend script does (expiry ARGV[3]
-- when it has less than the TTL left); answers 1. Otherwise changes
-- nothing and answers 0 when a key holds another token, -1 when one is
-- gone.
-- ARGV[2] is negative for a guard's last request (the end of an
-- at-least hold): the expiry is then set to -ARGV[2] exactly, lowered
-- if need be. Otherwise it is raised, never lowered: an extend delivered
-- late must not cut a later, longer one (see lock/extend.lua).
local ttl = tonumber(ARGV[2])
local exact = ttl < 0
if exact then
    ttl = -ttl
end
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
    if exact or redis.call("PTTL", KEYS[i]) < ttl then
        redis.call("PEXPIRE", KEYS[i], ttl)
    end
    if ARGV[3] then
        local left = redis.call("PTTL", KEYS[n + i])
        if left >= 0 and left < ttl then
            redis.call("PEXPIRE", KEYS[n + i], ARGV[3])
        end
    end
end
return 1
