-- extend: resets the lock key's expiry only while it holds our token,
-- and keeps its companions alive at least as long.
--
-- KEYS[1]  the lock key
-- KEYS[2…] optional: its fencing counter, a permit's semaphore count
-- ARGV[1]  our token
-- ARGV[2]  the new TTL in ms
-- ARGV[3]  with companions: their expiry in ms (at least ARGV[2])
--
-- Answers 1 when done, 0 when the key holds another token, -1 when there
-- is no key. A companion with less than the new TTL left gets the expiry
-- ARGV[3] (one with no expiry, or none at all, is left alone). The lock's
-- expiry is set first, so that on a server whose clock moves during a
-- script the companions' end no earlier.
local held = redis.call("GET", KEYS[1])
if held == ARGV[1] then
    local done = redis.call("PEXPIRE", KEYS[1], ARGV[2])
    for i = 2, #KEYS do
        local left = redis.call("PTTL", KEYS[i])
        if left >= 0 and left < tonumber(ARGV[2]) then
            redis.call("PEXPIRE", KEYS[i], ARGV[3])
        end
    end
    return done
elseif held then
    return 0
end
return -1
