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

