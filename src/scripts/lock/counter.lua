-- next_count (a function for the scripts that count fencing counters):
-- one more than the larger of a counter's value `seen` (GET's answer;
-- nil when there is none) and `start`, the attempt's clock reading in
-- microseconds since 1970. A counter that went back (its server
-- restarted from an older copy, or a replica that lagged was promoted)
-- counts on from the clock, above every count an earlier grant took
-- from any counter (see the crate docs, "Fencing tokens").
local function next_count(seen, start)
    -- Only digits count (tonumber would read "nan", "inf" or "0x10" too).
    local value = seen and string.match(seen, "^%d+$") and tonumber(seen) or 0
    return math.max(value, tonumber(start)) + 1
end

-- count_to (a function for the scripts that set fencing counters): sets
-- the counter `key` to `value`, and its expiry to at least `keep` ms:
-- a counter's expiry is only ever raised, so that it outlives every lock
-- taken on it, whoever asks with a shorter keep; a counter without an
-- expiry keeps none.
local function count_to(key, value, keep)
    local left = redis.call("PTTL", key)
    if left == -1 then
        redis.call("SET", key, value)
    else
        local ms = math.max(left, tonumber(keep))
        redis.call("SET", key, value, "PX", string.format("%d", ms))
    end
end

