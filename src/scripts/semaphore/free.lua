-- free: a semaphore's survey of its slots.
--
-- KEYS     the slot keys, in order
-- ARGV[1]  "mask", or the index to start looking from
--
-- Answers, with "mask" (at most 52 keys, exact in a Lua number), the sum
-- of 2^i over the free keys i; otherwise the first free key looking from
-- index ARGV[1] on and around: its index plus one, or 0 when every slot
-- is held here.
local n = #KEYS
if ARGV[1] == "mask" then
    local mask = 0
    for i = 1, n do
        if not redis.call("GET", KEYS[i]) then
            mask = mask + 2 ^ (i - 1)
        end
    end
    return mask
end
local start = tonumber(ARGV[1])
for j = 0, n - 1 do
    local i = (start + j) % n + 1
    if not redis.call("GET", KEYS[i]) then
        return i
    end
end
return 0
