-- release (fair): releases one lock or a set of them. Deletes each lock
-- key only while it holds our token; when waiters are queued for it,
-- hands the key to the first of them whose ticket is still live instead:
-- the key then holds that waiter's reservation ("redlock:next:" and its
-- token, no token of anyone) for a short time, which only that waiter's
-- claim replaces. We leave the queue (a claim keeps its waiter there
-- until it releases); the waiter handed the key stays in it, offered the
-- key: one that does not come by the reservation's deadline is dropped
-- (see hand.lua), so it loses one reservation, never more.
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
-- A key that holds a value of an earlier attempt of ours (a late claim,
-- see claim.lua) is let go as ours, and not counted.
--
-- Answers 1 when it deleted or handed off keys and no key holds another
-- token, 0 when some key holds another token, -1 when no key was there.
-- Each release is announced (see hand.lua: after a hand-off only the
-- waiter handed the key is told; a leadership handed on is told on
-- the release channel too, for observers), and may be refused without
-- failing the release. (A waiter giving up its place
-- runs `leave.lua`, which must never give up a token.)
-- Our name in the queues (see waiter.lua); ARGV[1] whole is the value
-- this attempt writes or holds.
local waiter = waiter_of(ARGV[1])
local n = math.floor(#KEYS / 3)
local record = KEYS[3 * n + 1]
local now = nil

-- Hands the key i to the first live waiter of its queue, or deletes it,
-- and announces it (see hand.lua); answers the waiter, if any.
local function let_go(i)
    local queue, tickets = KEYS[n + i], KEYS[2 * n + i]
    if redis.call("PTTL", queue) == -2 then
        -- Nobody waits: no clock, no queue traffic.
        redis.call("DEL", KEYS[i])
        if ARGV[3] then
            redis.pcall(ARGV[3], ARGV[4 + i], ARGV[4])
        end
        return nil
    end
    -- The reservation we took the key from, if any, is spent (without a
    -- queue, its note in the tickets expires with them).
    redis.call("HDEL", tickets, "next:" .. waiter)
    if not now then
        local t = redis.call("TIME")
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    return hand_off(KEYS[i], queue, tickets, now, ARGV[2], ARGV[3], ARGV[4], ARGV[4 + i], waiter)
end

local mine, other, handed = 0, 0, false
for i = 1, n do
    local held = redis.call("GET", KEYS[i])
    if held == ARGV[1] then
        mine = mine + 1
        handed = let_go(i) ~= nil or handed
    elseif held and later_attempt(ARGV[1], held) then
        -- A value of an earlier attempt of ours: a claim the network held
        -- back and delivered after a later attempt of ours was granted
        -- elsewhere (see claim.lua). Nobody holds it; it goes with our
        -- release rather than keep the key from everyone until its TTL.
        -- (Not counted: our grant was not here.)
        handed = let_go(i) ~= nil or handed
    elseif held then
        other = other + 1
    end
end
-- A record of ours goes after the keys (a user refused the record's
-- commands still frees them: a script's writes before an error stay).
if record and redis.call("HGET", record, "token") == ARGV[1] then
    redis.call("DEL", record)
    if handed and ARGV[3] then
        -- A leadership handed to a candidate: its observers hear the
        -- change on the release channel (":-" names no waiter, so no
        -- waiter asks).
        redis.pcall(ARGV[3], ARGV[5], ARGV[4] .. ":-")
    end
end
if other > 0 then
    return 0
elseif mine > 0 then
    return 1
end
return -1
