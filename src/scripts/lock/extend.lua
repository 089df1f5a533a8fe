-- extend: raises the lock key's expiry to the new TTL (never lowers it)
-- only while it holds our token, and keeps its companions alive at
-- least as long.
--
-- KEYS[1]  the lock key
-- KEYS[2…] optional: its fencing counter, a permit's semaphore count
-- ARGV[1]  our token
-- ARGV[2]  the new TTL in ms (negative: a last request, see expiry.lua)
-- ARGV[3]  with companions: their expiry in ms (at least ARGV[2])
--
-- Answers 1 when done, 0 when the key holds another token, -1 when there
-- is no key. A companion with less than the new TTL left gets the expiry
-- ARGV[3] (one with no expiry, or none at all, is left alone). The lock's
-- expiry is set first, so that on a server whose clock moves during a
-- script the companions' end no earlier.
-- Raised, never lowered, unless a last request (see expiry.lua).
local ttl, exact = asked_ttl(ARGV[2])
local held = redis.call("GET", KEYS[1])
if held == ARGV[1] then
    expire(KEYS[1], ttl, exact)
    local done = 1
    for i = 2, #KEYS do
        local left = redis.call("PTTL", KEYS[i])
        if left >= 0 and left < ttl then
            redis.call("PEXPIRE", KEYS[i], ARGV[3])
        end
    end
    return done
elseif held then
    return 0
end
return -1
