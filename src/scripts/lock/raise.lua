-- raise: brings fencing counters up to a token, never down.
--
-- KEYS     the counters (one lock's, or a set's)
-- ARGV[1]  the token: each counter below it is set to it, keeping its
--          expiry
-- ARGV[2]  the expiry in ms of a counter that expired meanwhile (created
--          anew at ARGV[1])
--
-- Answers 1.
for i = 1, #KEYS do
    local seen = redis.call("GET", KEYS[i])
    if not seen then
        redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
    elseif tonumber(seen) < tonumber(ARGV[1]) then
        redis.call("SET", KEYS[i], ARGV[1], "KEEPTTL")
    end
end
return 1
