-- release (fair): releases one lock or a set of them. Deletes each lock
-- key only while it holds our token; when waiters are queued for it,
-- hands the key to the first of them whose ticket is still live instead:
-- the key then holds that waiter's reservation ("redlock:next:" and its
-- token, no token of anyone) for a short time, which only that waiter's
-- claim replaces. The first waiter is taken off that queue: a waiter
-- that does not come loses one reservation, never more.
--
-- KEYS     the n lock keys, then their n queues (waiters' tokens, scored
--          by arrival), then their n tickets hashes (each waiter's token,
--          deadline (server ms) and address, as "deadline:address");
--          then, optionally (one key more), an election's record (see
--          election/claim.lua), deleted where it is ours, whatever the
--          key holds
-- ARGV[1]    our token
-- ARGV[2]    how long a reservation lasts (ms)
-- ARGV[3]    optional: PUBLISH (nodes) or SPUBLISH (Redis Cluster)
-- ARGV[4]    the release message
-- ARGV[4+i]  the release channel of the key i
--
-- Answers 1 when it deleted or handed off keys and no key holds another
-- token, 0 when some key holds another token, -1 when no key was there.
-- Each release is announced (the message, and after a hand-off ":" and
-- the waiter's token, so that only that waiter is woken), and may be
-- refused without failing the release. (A waiter giving up its place
-- runs `leave.lua`, which must never give up a token.)
local n = math.floor(#KEYS / 3)
local record = KEYS[3 * n + 1]
local now = nil

-- Hands the key i to the first live waiter of its queue, or deletes it;
-- announces it.
local function hand_off(i)
    local queue, tickets = KEYS[n + i], KEYS[2 * n + i]
    local first, address = nil, ""
    if redis.call("PTTL", queue) ~= -2 then
        -- The reservation we took the key from, if any, is spent (without
        -- a queue, its note in the tickets expires with them).
        redis.call("HDEL", tickets, "next:" .. ARGV[1])
        if not now then
            local t = redis.call("TIME")
            now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        end
        while true do
            local head = redis.call("ZRANGE", queue, 0, 0)[1]
            if not head then
                break
            end
            local ticket = redis.call("HGET", tickets, head) or ""
            local deadline, at = string.match(ticket, "^(%d+):?(.*)$")
            redis.call("ZREM", queue, head)
            redis.call("HDEL", tickets, head)
            if deadline and tonumber(deadline) > now then
                first, address = head, at
                break
            end
        end
    end
    if first then
        redis.call("SET", KEYS[i], "redlock:next:" .. first, "PX", ARGV[2])
    else
        redis.call("DEL", KEYS[i])
    end
    if ARGV[3] then
        -- A hand-off is announced to the waiter's manager only (its own
        -- channel, beside the release channel in its slot), naming the
        -- waiter.
        local message, channel = ARGV[4], ARGV[4 + i]
        if first then
            message = message .. ":" .. first
            if address ~= "" then
                channel = channel .. ":" .. address
            end
        end
        redis.pcall(ARGV[3], channel, message)
    end
end

local mine, other = 0, 0
for i = 1, n do
    local held = redis.call("GET", KEYS[i])
    if held == ARGV[1] then
        mine = mine + 1
        hand_off(i)
    elseif held then
        other = other + 1
    end
end
-- A record of ours goes after the keys (a user refused the record's
-- commands still frees them: a script's writes before an error stay).
if record and redis.call("HGET", record, "token") == ARGV[1] then
    redis.call("DEL", record)
end
if other > 0 then
    return 0
elseif mine > 0 then
    return 1
end
return -1
