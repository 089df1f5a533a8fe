-- resign: a leadership's release (and the clean-up of a failed
-- campaign): deletes the lock key and the record only while they hold
-- our token, and announces a deleted key. (Not a PUBLISH pipelined
-- behind, as the lock's release has: this script is not loaded with the
-- handshake, and a PUBLISH behind an EVALSHA refused with NOSCRIPT would
-- announce the release before the reload deletes anything.)
--
-- KEYS[1]  the election's lock key
-- KEYS[2]  its record (see claim.lua)
-- ARGV[1]  our token
-- ARGV[2]  optional: PUBLISH (nodes) or SPUBLISH (Redis Cluster)
-- ARGV[3]  the release message
-- ARGV[4]  the release channel
--
-- Answers 1 when it deleted the key, 0 when the key holds another token,
-- -1 when there is no key. A record of ours is deleted in every case,
-- after the key (so that a user refused the record's commands still
-- frees the key: a script's writes before an error stay done).
local held = redis.call("GET", KEYS[1])
if held == ARGV[1] then
    redis.call("DEL", KEYS[1])
    if ARGV[2] then
        redis.pcall(ARGV[2], ARGV[4], ARGV[3])
    end
end
if redis.call("HGET", KEYS[2], "token") == ARGV[1] then
    redis.call("DEL", KEYS[2])
end
if held == ARGV[1] then
    return 1
elseif held then
    return 0
end
return -1
