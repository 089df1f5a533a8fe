-- leave (fair): a waiter gives up its place: its ticket goes, and a
-- reservation it holds goes to the next live waiter (or the key is
-- deleted), which is announced. A token of ours in the key is never
-- touched: leave runs after an acquisition too (where some member did
-- not grant it, and may still queue us or hold a reservation for us).
--
-- KEYS[1]  the lock key
-- KEYS[2]  the queue: waiters' tokens, scored by arrival
-- KEYS[3]  the tickets: each waiter's token, deadline (server ms) and
--          address, as "deadline:address"
-- ARGV[1]  our token
-- ARGV[2]  how long a reservation lasts (ms)
-- ARGV[3]  optional: PUBLISH (nodes) or SPUBLISH (Redis Cluster)
-- ARGV[4]  the release message
-- ARGV[5]  the release channel
--
-- Answers 1 when it gave up a reservation, 0 otherwise. The announcement
-- names the next waiter, as a release's does.
redis.call("ZREM", KEYS[2], ARGV[1])
redis.call("HDEL", KEYS[3], ARGV[1])
if redis.call("GET", KEYS[1]) ~= "redlock:next:" .. ARGV[1] then
    return 0
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local first, address = nil, ""
while true do
    local head = redis.call("ZRANGE", KEYS[2], 0, 0)[1]
    if not head then
        break
    end
        local ticket = redis.call("HGET", KEYS[3], head) or ""
        local deadline, at = string.match(ticket, "^(%d+):?(.*)$")
        redis.call("ZREM", KEYS[2], head)
        redis.call("HDEL", KEYS[3], head)
        if deadline and tonumber(deadline) > now then
            first, address = head, at
            break
        end
end
if first then
    redis.call("SET", KEYS[1], "redlock:next:" .. first, "PX", ARGV[2])
else
    redis.call("DEL", KEYS[1])
end
if ARGV[3] then
    -- A hand-off is announced to the waiter's manager only (its own
    -- channel, beside the release channel in its slot), naming the waiter.
    local message, channel = ARGV[4], ARGV[5]
    if first then
        message = message .. ":" .. first
        if address ~= "" then
            channel = channel .. ":" .. address
        end
    end
    redis.pcall(ARGV[3], channel, message)
end
return 1
