-- force-unlock: removes a lock whoever holds it, for an operator
-- (LockManager::force_unlock), and advances its fencing counter so that
-- the old holder's token is below every later one.
--
-- KEYS[1]  the lock key
-- KEYS[2]  its fencing counter
-- KEYS[3]  its readers (a read-write lock's)
-- KEYS[4]  its waiting writer's flag
-- KEYS[5]  its record (an election's)
-- ARGV[1]  the clock reading (µs) the counter counts on from when it is
--          behind (see the lock's take)
-- ARGV[2]  how long the counter is kept at least, in ms
-- ARGV[3]  optional: PUBLISH (nodes) or SPUBLISH (Redis Cluster)
-- ARGV[4]  the release message
-- ARGV[5]  the release channel
--
-- Answers an array: the value removed (nil when the key was free) and
-- the counter after. The announcement goes out only when a key was
-- removed, and may be refused (that never fails the removal).
local held = redis.call("GET", KEYS[1])
redis.call("DEL", KEYS[1], KEYS[3], KEYS[4], KEYS[5])
local count = next_count(redis.call("GET", KEYS[2]), ARGV[1])
count_to(KEYS[2], string.format("%d", count), ARGV[2])
if held and ARGV[3] then
    redis.pcall(ARGV[3], ARGV[5], ARGV[4])
end
return {held, count}
