-- keep: raises a fencing counter's expiry to ARGV[1] ms from now, never
-- lowers it: what `PEXPIRE counter ms GT` does on Redis 7.0 and later,
-- for the acquisition pipeline on older servers.
--
-- KEYS[1]  the fencing counter
-- ARGV[1]  its expiry in ms
--
-- Answers 1 when the expiry was raised, 0 when the counter had as long
-- left, or no expiry, or was not there (as PEXPIRE ... GT answers).
local left = redis.call("PTTL", KEYS[1])
if left >= 0 and left < tonumber(ARGV[1]) then
    return redis.call("PEXPIRE", KEYS[1], ARGV[1])
end
return 0
