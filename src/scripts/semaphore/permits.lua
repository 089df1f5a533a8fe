-- permits: a semaphore's stored permit count, checked ahead of a
-- permit's acquisition in the same write.
--
-- KEYS[1]  the count's key
-- ARGV[1]  the count this client was made with
-- ARGV[2]  how long (ms) the count is kept at least
--
-- When another count is stored, changes nothing and answers it; otherwise
-- stores ours (or keeps it alive at least ARGV[2] ms) and answers 0.
local stored = redis.call("GET", KEYS[1])
if stored and stored ~= ARGV[1] then
    return tonumber(stored) or -1
end
if not stored then
    redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
elseif redis.call("PTTL", KEYS[1]) < tonumber(ARGV[2]) then
    redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
