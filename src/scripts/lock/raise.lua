-- raise: brings fencing counters up to a token, never down, where this
-- acquisition still holds every key they fence.
--
-- KEYS     the n lock keys (one lock's, or a set's, or a Redis Cluster
--          member's slot group of a set), then their n counters
-- ARGV[1]  the acquisition attempt's value (its token)
-- ARGV[2]  the token: each counter below it is set to it, keeping its
--          expiry
-- ARGV[3]  the expiry in ms of a counter that expired meanwhile (created
--          anew at ARGV[2])
--
-- Answers 1 when every lock key holds ARGV[1] (the counters are then
-- raised); otherwise 0, and writes nothing. The raise counts toward the
-- token's quorum only where the same server granted the attempt: a
-- server that never voted (reached under the member's address after a
-- move that kept the connection up, or restarted empty since the vote)
-- holds neither the value nor the counters the quorum must hold, and an
-- unconditional yes from it gave a token that a later quorum could count
-- below (issue 56: fencing that ran backwards).
local n = #KEYS / 2
if n < 1 or n ~= math.floor(n) then
    return redis.error_reply("ERR raise: lock keys and their counters come in pairs")
end
for i = 1, n do
    if redis.call("GET", KEYS[i]) ~= ARGV[1] then
        return 0
    end
end
for i = n + 1, 2 * n do
    local seen = redis.call("GET", KEYS[i])
    if not seen then
        redis.call("SET", KEYS[i], ARGV[2], "PX", ARGV[3])
    elseif tonumber(seen) < tonumber(ARGV[2]) then
        redis.call("SET", KEYS[i], ARGV[2], "KEEPTTL")
    end
end
return 1
