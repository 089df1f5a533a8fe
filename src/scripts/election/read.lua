-- read-leader: what one member knows of an election, for a majority
-- read. Writes nothing.
--
-- KEYS[1]  the election's lock key
-- KEYS[2]  its record (see claim.lua)
-- ARGV     none
--
-- Answers an array: the lock key's value (nil when free), its expiry in
-- ms (PTTL: negative when free), then the record's token, term, seq and
-- value (each nil when there is no record).
local rec = redis.call("HMGET", KEYS[2], "token", "term", "seq", "value")
return {redis.call("GET", KEYS[1]), redis.call("PTTL", KEYS[1]), rec[1], rec[2], rec[3], rec[4]}
