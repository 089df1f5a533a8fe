-- extend-leader: renews a leadership: raises the lock key's expiry only
-- while it holds our token, keeps the term counter alive at least as
-- long, and gives the record the lock key's new expiry.
--
-- KEYS[1]  the election's lock key
-- KEYS[2]  its term counter (the lock key's fencing counter)
-- KEYS[3]  its record (see claim.lua)
-- ARGV[1]  our token
-- ARGV[2]  the new TTL in ms (negative: a last request, see expiry.lua)
-- ARGV[3]  the counter's expiry in ms (at least ARGV[2])
--
-- Answers 1 when done, 0 when the key holds another token, -1 when there
-- is no key. The counter, when it has less than the new TTL left, gets
-- ARGV[3]; the record is touched only when it is ours.
-- Raised, never lowered, unless a last request (see expiry.lua).
local ttl, exact = asked_ttl(ARGV[2])
local held = redis.call("GET", KEYS[1])
if held == ARGV[1] then
    expire(KEYS[1], ttl, exact)
    local done = 1
    local left = redis.call("PTTL", KEYS[2])
    if left >= 0 and left < ttl then
        redis.call("PEXPIRE", KEYS[2], ARGV[3])
    end
    if redis.call("HGET", KEYS[3], "token") == ARGV[1] then
        expire(KEYS[3], ttl, exact)
    end
    return done
elseif held then
    return 0
end
return -1
