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
local seen = redis.call("GET", KEYS[1])
if seen then
    local highest = tonumber(seen)
    if not highest or not string.match(seen, "^%d+$") then
        return { -1, seen }
    end
    if highest > tonumber(ARGV[1]) then
        return { 0, seen }
    end
end
if seen ~= ARGV[1] then
    redis.call("SET", KEYS[1], ARGV[1])
end
redis.call("SET", KEYS[2], ARGV[2])
return { 1, ARGV[1] }
