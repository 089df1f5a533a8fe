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
-- (ZRANGE with scores, filtered here: BYSCORE needs Redis 6.2, and
-- ZRANGEBYSCORE a permission read locks do not otherwise need.)
local all = redis.call("ZRANGE", KEYS[1], 0, -1, "WITHSCORES")
local live = {}
for i = 1, #all, 2 do
    if tonumber(all[i + 1]) >= now then
        live[#live + 1] = all[i]
    end
end
return live
