-- release (fair): releases one lock or a set of them. Deletes each lock
-- key only while it holds our token; when waiters are queued for it,
-- hands the key to the first of them whose ticket is still live instead:
-- the key then holds that waiter's reservation (RESERVED_PREFIX and its
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
-- ARGV[3]    how long a key is handed on from its first hand-off (or
--            its last yield) before a release yields it ("" for never,
--            see below)
-- ARGV[4]    optional: PUBLISH (nodes) or SPUBLISH (Redis Cluster)
-- ARGV[5]    the release message
-- ARGV[5+i]  the release channel of the key i
--
-- Yielding. Clients that do not queue (other Redlock clients, our
-- managers with fair waiting off) only ever find a key free between
-- holders; a key handed from waiter to waiter never is. So once a key
-- has been handed on for ARGV[3] ms (its "chain", noted in the tickets
-- hash at its first hand-off and cleared by a yield; it goes with the
-- hash once nobody waits. Not cleared by a release that found nobody
-- live in line: under load, lapsed tickets broke every chain, and the
-- other client of the test got no turn in 30 s), and a waiter is live
-- in line, the release deletes it instead, tells nobody, and marks
-- the key "yield" for a reservation's length: meanwhile no claim takes
-- it or reserves it, the first waiter's included (see claim.lua), so a
-- client that does not queue has that long to take it; a lock's claims
-- learn when the mark lapses, and ask then (a claim that finds the first
-- waiter ahead reserves the key for it). Safety is untouched (a
-- plain release); our waiters wait at most a reservation, and the retry
-- after its lapse (the values are in engine/fair.rs), more once a chain
-- (a set, which learns no lapse, up to two reservations), and a
-- reservation more should the first in line be dead.
-- How often. A chain yields once it is ARGV[3] old while a client
-- that cannot queue says it waits here: a manager of this library with
-- fair waiting off, while it waits, listens on the key's release channel
-- followed by ":-" (the name yields are announced to: it asks when it
-- hears one). Otherwise a chain yields once it is PROBE times that old:
-- other clients, which cannot say so, still get a yield that often, and
-- fair waiters with nobody else there lose a reservation once per
-- PROBE periods, not once per period (which cost them a fifth of their
-- throughput, and four times their p99 wait). Asked only of a chain
-- already due by ARGV[3], so one `PUBSUB` call per release at most.
-- Without announcements (ARGV[4] absent) no listener can be seen: the
-- PROBE period. A `PUBSUB` refused by an ACL rule says nobody listens.
-- Members decide alone, by their own clocks, so one may yield at a
-- release at which the others hand the key on: the waiter they told
-- holds it on them only, and its release yields there (their chains are
-- as old) while this member's key stays free under its mark; the chains
-- then all begin at the next hand-off again.
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
local every = tonumber(ARGV[3] or "")
local PROBE = 8

-- Whether a client that cannot queue says it waits for the key i (see
-- "How often" above).
local function outsiders_wait(i)
    if not ARGV[4] then
        return false
    end
    local verb = ARGV[4] == "SPUBLISH" and "SHARDNUMSUB" or "NUMSUB"
    local heard = redis.pcall("PUBSUB", verb, ARGV[5 + i] .. ":-")
    return type(heard) == "table" and heard.err == nil and (tonumber(heard[2] or "0") or 0) > 0
end

-- When the chain of the key of `tickets` began (see above), if it has
-- one and yielding is on.
local function chain_of(tickets)
    if not every then
        return nil
    end
    return tonumber(redis.call("HGET", tickets, "chain") or "")
end

-- Ends the chain of the key of `tickets` and marks its yield for a
-- reservation's length.
local function yield(tickets)
    redis.call("HDEL", tickets, "chain")
    redis.call("HSET", tickets, "yield", now + tonumber(ARGV[2]))
    if redis.call("PTTL", tickets) < tonumber(ARGV[2]) then
        redis.call("PEXPIRE", tickets, ARGV[2])
    end
end

-- Hands the key i to the first live waiter of its queue, or deletes it,
-- and announces it (see hand.lua); answers the waiter, if any.
local function let_go(i)
    local queue, tickets = KEYS[n + i], KEYS[2 * n + i]
    if redis.call("PTTL", queue) == -2 then
        -- Nobody waits: no clock, no queue traffic.
        redis.call("DEL", KEYS[i])
        if ARGV[4] then
            redis.pcall(ARGV[4], ARGV[5 + i], ARGV[5])
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
    -- Read once: whether the chain is due, and whether it begins here.
    local chain = chain_of(tickets)
    if chain and now - chain >= every and (now - chain >= PROBE * every or outsiders_wait(i))
        and first_live(queue, tickets, now, waiter) then
        -- Free for a client that does not queue. Announced with a message
        -- that names no fair waiter (":-"), so that observers (an
        -- election's) hear it, no fair waiter asks, and the waiters of
        -- managers that cannot queue do; with nobody live in line, a
        -- plain release below.
        yield(tickets)
        redis.call("DEL", KEYS[i])
        if ARGV[4] then
            redis.pcall(ARGV[4], ARGV[5 + i], ARGV[5] .. ":-")
        end
        return nil
    end
    local first = hand_off(KEYS[i], queue, tickets, now, ARGV[2], ARGV[4], ARGV[5], ARGV[5 + i],
        waiter)
    if every and first and not chain then
        redis.call("HSET", tickets, "chain", now)
    end
    return first
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
    else
        if held then
            other = other + 1
        end
        -- Granted on the other members, we may still be queued here (a
        -- claim refused here, by a yield say, and its leave lost): we
        -- wait no more, and a reservation of ours goes on, as a leave's.
        if redis.call("PTTL", KEYS[n + i]) == -2 then
            -- Nobody waits: no queue traffic (as let_go).
        elseif held == RESERVED_PREFIX .. waiter then
            if not now then
                local t = redis.call("TIME")
                now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
            end
            hand_off(KEYS[i], KEYS[n + i], KEYS[2 * n + i], now, ARGV[2], ARGV[4], ARGV[5],
                ARGV[5 + i], waiter)
        else
            drop(KEYS[n + i], KEYS[2 * n + i], waiter)
        end
    end
end
-- A record of ours goes after the keys (a user refused the record's
-- commands still frees them: a script's writes before an error stay).
if record and redis.call("HGET", record, "token") == ARGV[1] then
    redis.call("DEL", record)
    if handed and ARGV[4] then
        -- A leadership handed to a candidate: its observers hear the
        -- change on the release channel (":-" names no fair waiter, so
        -- no fair waiter asks; a waiting manager that cannot queue asks
        -- once, and is refused by the candidate's reservation).
        redis.pcall(ARGV[4], ARGV[6], ARGV[5] .. ":-")
    end
end
if other > 0 then
    return 0
elseif mine > 0 then
    return 1
end
return -1
