-- claim (fair): a queued waiter's attempt. Sets the lock key to our
-- token when it holds our reservation, or when it is free and no waiter
-- with a live ticket arrived before us (the first in the queue goes
-- first; lapsed tickets ahead are dropped); then takes us off the queue.
-- Otherwise keeps our place: our ticket is added (at our arrival) or
-- refreshed.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the queue: waiters' tokens, scored by arrival
-- KEYS[3]  the tickets: each waiter's token, deadline (server ms) and
--          address, as "deadline:address"; and, where the claim takes
--          our reservation, its deadline under "next:" and our token
-- KEYS[4]  optional: the fencing counter
-- ARGV[1]  our token
-- ARGV[2]  the lock's TTL (ms)
-- ARGV[3]  our arrival (microseconds, the same on every member)
-- ARGV[4]  how long our ticket lasts unless refreshed (ms)
-- ARGV[5]  our manager's address ("" for none; see join.lua)
-- ARGV[6]  with KEYS[4]: the counter's first value
-- ARGV[7]  with KEYS[4]: how long the counter is kept (ms)
--
-- Answers the counter's new value (with KEYS[4]) or 1 when it set the
-- key; 0 when another holds it or a waiter ahead of us goes first; -2
-- when readers hold it; -3 - N when it holds another waiter's
-- reservation, which lapses in N ms.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = redis.call("GET", KEYS[1])
local ours = held == "redlock:next:" .. ARGV[1]
local take = ours
if not held then
    take = true
    local arrival = tonumber(ARGV[3])
    while true do
        local head = redis.call("ZRANGE", KEYS[2], 0, 0, "WITHSCORES")
        if not head[1] or head[1] == ARGV[1] or tonumber(head[2]) > arrival then
            break
        end
        local ticket = redis.call("HGET", KEYS[3], head[1]) or ""
        local deadline = tonumber(string.match(ticket, "^(%d+)") or "")
        if deadline and deadline > now then
            take = false
            break
        end
        redis.call("ZREM", KEYS[2], head[1])
        redis.call("HDEL", KEYS[3], head[1])
    end
end
if take then
    if ours then
        -- Our reservation's deadline, for the clean-up of this attempt
        -- should it fail (unclaim.lua puts the reservation back).
        local left = redis.call("PTTL", KEYS[1])
        if left > 0 then
            redis.call("HSET", KEYS[3], "next:" .. ARGV[1], now + left)
            if redis.call("PTTL", KEYS[3]) < left then
                redis.call("PEXPIRE", KEYS[3], left)
            end
        end
    end
    redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
    redis.call("ZREM", KEYS[2], ARGV[1])
    redis.call("HDEL", KEYS[3], ARGV[1])
    if KEYS[4] then
        redis.call("SET", KEYS[4], ARGV[6], "NX", "PX", ARGV[7])
        local n = redis.call("INCR", KEYS[4])
        redis.call("PEXPIRE", KEYS[4], ARGV[7])
        return n
    end
    return 1
end
local ticket = tonumber(ARGV[4])
redis.call("ZADD", KEYS[2], "NX", ARGV[3], ARGV[1])
redis.call("HSET", KEYS[3], ARGV[1], (now + ticket) .. ":" .. ARGV[5])
for i = 2, 3 do
    if redis.call("PTTL", KEYS[i]) < ticket then
        redis.call("PEXPIRE", KEYS[i], ticket)
    end
end
if held == "redlock:readers" then
    return -2
end
if held and string.sub(held, 1, 13) == "redlock:next:" then
    -- Another waiter's reservation: when it lapses, in ms.
    local left = redis.call("PTTL", KEYS[1])
    if left >= 0 then
        return -(3 + left)
    end
end
return 0
