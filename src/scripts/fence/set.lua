-- fence/set: a fenced write, on the Redis the application stores its
-- data in (see fence.rs). Writes the value only when the caller's
-- fencing token is at least the highest seen for the resource, and then
-- notes the token as the highest; compares and writes in one step.
--
-- KEYS[1]  the resource's highest token seen (a decimal number; no key:
--          none seen)
-- KEYS[2]  the data key
-- ARGV[1]  the caller's fencing token (decimal)
-- ARGV[2]  the value
--
-- Answers {1, token} when it wrote, {0, highest} when a higher token was
-- seen (nothing written), {-1, what KEYS[1] holds} when that is no token.
-- Whether the decimal number `x` is below `y`, compared as digits (Lua's
-- numbers are doubles: exact only below 2^53).
local function below(x, y)
    x, y = string.match(x, "^0*(%d-)$"), string.match(y, "^0*(%d-)$")
    if #x ~= #y then
        return #x < #y
    end
    return x < y
end

local seen = redis.call("GET", KEYS[1])
if seen then
    if not string.match(seen, "^%d+$") then
        return { -1, seen }
    end
    if below(ARGV[1], seen) then
        return { 0, seen }
    end
end
if seen ~= ARGV[1] then
    redis.call("SET", KEYS[1], ARGV[1])
end
redis.call("SET", KEYS[2], ARGV[2])
return { 1, ARGV[1] }
