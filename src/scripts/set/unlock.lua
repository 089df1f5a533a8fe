-- unlock_set: releases a set.
--
-- KEYS       the lock keys
-- ARGV[1]    our token
-- ARGV[2]    optional: PUBLISH (nodes) or SPUBLISH (Redis Cluster)
-- ARGV[3]    the release message
-- ARGV[3+i]  the release channel of KEYS[i]
--
-- Deletes each key that holds our token, and announces each release it
-- made. Answers 1 when it deleted keys and no key holds another token, 0
-- when some key holds another token, -1 when no key was there.
local held = redis.call("MGET", unpack(KEYS))
local mine, other = {}, 0
for i = 1, #KEYS do
    if held[i] == ARGV[1] then
        mine[#mine + 1] = i
    elseif held[i] then
        other = other + 1
    end
end
if #mine > 0 then
    local keys = {}
    for j, i in ipairs(mine) do
        keys[j] = KEYS[i]
    end
    redis.call("DEL", unpack(keys))
    if ARGV[2] then
        for _, i in ipairs(mine) do
            redis.pcall(ARGV[2], ARGV[3 + i], ARGV[3])
        end
    end
end
if other > 0 then
    return 0
elseif #mine > 0 then
    return 1
end
return -1
