-- readers: the readers that hold a read-write lock's key, for a writer
-- refused by their mark on this member while others granted it (so that
-- it can tell which servers their grants were asked of: see the crate
-- docs, "Restarts"). Writes nothing.
--
-- KEYS[1]  the readers: a sorted set of reader tokens scored by their
--          expiry, in ms of the server's clock
-- ARGV     none
--
-- Answers the tokens of the readers whose expiry has not passed.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call("ZRANGE", KEYS[1], now, "+inf", "BYSCORE")
