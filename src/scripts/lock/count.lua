-- count: counts a fencing counter up for an acquisition attempt (sent
-- behind its SET, whether or not that set the key): to one more than the
-- larger of its value and the attempt's clock reading, with its expiry
-- raised to at least the keep, never lowered.
--
-- KEYS[1]  the fencing counter
-- ARGV[1]  the attempt's clock reading (microseconds since 1970)
-- ARGV[2]  how long the counter is kept at least (ms; one with longer
--          left keeps it, one without an expiry keeps none)
--
-- Answers the count. A counter that holds no integer (set by hand) fails
-- the attempt on this server, as INCR would.
local seen = redis.call("GET", KEYS[1])
if seen and not string.match(seen, "^%d+$") then
    return redis.error_reply("ERR the fencing counter holds no integer")
end
local count = string.format("%d", next_count(seen, ARGV[1]))
count_to(KEYS[1], count, ARGV[2])
return tonumber(count)
