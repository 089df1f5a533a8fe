-- unlock: deletes the lock key only while it holds our token. A
-- release sends it with a PUBLISH pipelined behind it (cheaper than one
-- in here); the clean-up of a failed attempt passes the announcement, so
-- that only a key it really deleted is announced.
--
-- KEYS[1]  the lock key
-- KEYS[2]  optional (a fair manager's release that knows of no waiter):
--          the lock's fair queue; where it exists, nothing is deleted
--          and the answer is 2 (the fair release script then hands the
--          key to the first waiter)
-- ARGV[1]  our token
-- ARGV[2]  optional (a clean-up): PUBLISH (nodes) or SPUBLISH (Redis Cluster)
-- ARGV[3]  the release message
-- ARGV[4]  the release channel
--
-- Answers 1 when it deleted the key, 0 when the key holds another token,
-- -1 when there is no key, 2 when it held our token but a fair queue
-- stands (KEYS[2]). The announcement goes out only when it deleted
-- the key, and may be refused (an ACL user without channels, a server
-- without sharded pub/sub): that never fails the unlock.
local held = redis.call("GET", KEYS[1])
if held == ARGV[1] then
    if KEYS[2] and redis.call("PTTL", KEYS[2]) ~= -2 then
        return 2
    end
    redis.call("DEL", KEYS[1])
    if ARGV[2] then
        redis.pcall(ARGV[2], ARGV[4], ARGV[3])
    end
    return 1
elseif held then
    return 0
end
return -1
