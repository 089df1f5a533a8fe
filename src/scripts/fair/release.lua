-- release (fair): deletes the lock key only while it holds our token;
-- when waiters are queued, hands the key to the first of them whose
-- ticket is still live instead: the key then holds that waiter's
-- reservation ("redlock:next:" and its token, no token of anyone) for a
-- short time, which only that waiter's claim replaces. The first waiter
-- is taken off the queue: a waiter that does not come loses one
-- reservation, never more.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the queue: waiters' tokens, scored by arrival
-- KEYS[3]  the tickets: each waiter's token, deadline (server ms) and
--          address, as "deadline:address"
-- KEYS[4]  optional: an election's record (see election/claim.lua),
--          deleted where it is ours, whatever the key holds
-- ARGV[1]  our token
-- ARGV[2]  how long a reservation lasts (ms)
-- ARGV[3]  optional: PUBLISH (nodes) or SPUBLISH (Redis Cluster)
-- ARGV[4]  the release message
-- ARGV[5]  the release channel
--
-- Answers 1 when it deleted or handed off the key, 0 when the key holds
-- another token, -1 when there is no key. The announcement goes out only
-- then (the message, and after a hand-off ":" and the waiter's token, so
-- that only that waiter is woken), and may be refused without failing
-- the release. (A waiter giving up its place runs `leave.lua`, which
-- must never give up a token.)
-- A record of ours goes after the key (a user refused the record's
-- commands still frees the key: a script's writes before an error stay).
local function unrecord()
    if KEYS[4] and redis.call("HGET", KEYS[4], "token") == ARGV[1] then
        redis.call("DEL", KEYS[4])
    end
end
local held = redis.call("GET", KEYS[1])
if held ~= ARGV[1] then
    unrecord()
    if held then
        return 0
    end
    return -1
end
local first, address = nil, ""
if redis.call("PTTL", KEYS[2]) ~= -2 then
    -- The reservation we took the key from, if any, is spent (without a
    -- queue, its note in the tickets expires with them).
    redis.call("HDEL", KEYS[3], "next:" .. ARGV[1])
    local t = redis.call("TIME")
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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
unrecord()
return 1
