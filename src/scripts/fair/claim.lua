-- claim (fair): a queued waiter's attempt, on one lock or on a set of
-- them (all or nothing). A lock key is ours to take when it holds our
-- reservation, or when it is free (or holds the reservation of a waiter
-- no longer queued for it) and no waiter with a live ticket is queued
-- before us (the first in its queue goes first; lapsed tickets
-- ahead are dropped, as are waiters that let an offer lapse: see
-- hand.lua). When every key is ours to take, sets each to our token; we
-- keep our place in the queue until our release (should this attempt
-- reach a minority only, we are still first everywhere). Otherwise
-- writes no key of ours and keeps our place in the queue of one key (our
-- ticket there is added, at our arrival, or refreshed): the one the
-- client names (ARGV[6]), or else the first not ours to take here; a set
-- leaves the other keys' queues (see the crate docs' fair waiting
-- section, "Why sets cannot deadlock").
--
-- KEYS     the n lock keys, then their n queues (waiters' tokens, scored
--          by arrival), their n tickets hashes (each waiter's token,
--          deadline (server ms) and address, as "deadline:address"; and,
--          where the claim takes our reservation, its deadline under
--          "next:" and our token), then, with ARGV[7], their n fencing
--          counters
-- ARGV[1]  our token
-- ARGV[2]  the lock's TTL (ms)
-- ARGV[3]  our arrival (microseconds, the same on every member)
-- ARGV[4]  how long our ticket lasts unless refreshed (ms)
-- ARGV[5]  our manager's address ("" for none; see join.lua)
-- ARGV[6]  where a set waits in line when refused: "" for the first key
--          not ours to take here, "k" for the key k of these (the
--          client's choice: the same on every member, so that members
--          queue it the same way), "0" for none of these (the set waits
--          at a key of another call: a Redis Cluster's other slot group);
--          granted, we keep our place at that key only (a lock: its key)
-- ARGV[7]  optional (fencing on; "" for off): the attempt's clock reading
--          (µs): a counter counts on from it when it is behind (see
--          next_count)
-- ARGV[8]  with ARGV[7]: how long the counters are kept at least (ms;
--          one with longer left keeps it)
-- ARGV[9]  optional: how long a reservation lasts (ms); the first key
--          not ours to take, when it is free but a live waiter ahead of
--          us goes first for it, is then reserved for that waiter (an
--          offer, see hand.lua), as a release hands a key on; not while
--          a release's yield of the key stands (see release.lua:
--          meanwhile no claim takes it)
-- ARGV[10] optional, with ARGV[9]: PUBLISH (nodes) or SPUBLISH (Redis
--          Cluster), to tell that waiter
-- ARGV[11] with ARGV[10]: the message (":" and the waiter's token follow)
-- ARGV[11+i] with ARGV[10]: the release channel of the key i (":" and the
--          waiter's manager's address follow, as a release's hand-off)
--
-- Answers, when it set the keys, 1, or with fencing the number every
-- counter of the keys reached (each counted up by one from the larger of
-- its value and the clock reading, then all set to
-- the highest: a token above each resource's earlier ones). Otherwise,
-- a lock (ARGV[6] empty): the value that holds it when another owner
-- holds it; 0 when a waiter ahead of us goes first (or this claim came
-- after a later attempt of ours); READERS_HOLD when readers hold it;
-- -(LAPSE_BASE + N) when it holds another
-- waiter's reservation (or we reserved it for the waiter ahead), or a
-- release's yield of it stands, which lapses in N ms. A set (ARGV[6] given, whatever n): -i for the first
-- key i a holder keeps, or else for the first key i not ours to take
-- (another's reservation, a waiter ahead, a yield), where the set waits in
-- line once a majority named it (the set goes where it is kept longest;
-- a reservation whose waiter has left the key's queue keeps the key from
-- nobody: see ours_to_take); {-i, value} when the first key not ours to
-- take, or any other, holds another owner's grant's value (named, as a
-- lock's: the first such value).
-- (READERS_HOLD and LAPSE_BASE are the room's codes, given by
-- engine/fair.rs, which reads them back.)

-- A lock refused until a reservation or a yield lapses, in `ms`.
local function lapses_in(ms)
    return -(LAPSE_BASE + ms)
end

-- Our name in the queues (see waiter.lua); ARGV[1] whole is the value
-- this attempt writes or holds.
local waiter = waiter_of(ARGV[1])
local fencing = ARGV[7] ~= nil and ARGV[7] ~= ""
local n = #KEYS / 3
if fencing then
    n = #KEYS / 4
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local arrival = tonumber(ARGV[3])
local mine = RESERVED_PREFIX .. waiter
-- Where we wait in line (see ARGV[6]); nil: the first key refused here,
-- or, granted, the one key of a lock.
local named = nil
if ARGV[6] and ARGV[6] ~= "" then
    named = tonumber(ARGV[6])
end

-- A late claim: one of these keys holds a value of a later attempt of
-- ours. The client gave up on this attempt (the network held it back past
-- the node timeout) and sent the later one, which may be granted, here
-- and on a majority: this one changes nothing at all, not the keys, not
-- the queues, not a counter. (Taken as a free key, the later grant was
-- replaced by this attempt's value, and this attempt's clean-up, late
-- too, then deleted it: two holders.) A later attempt's value is the only
-- sign here that the waiter moved on; a claim that comes after the later
-- attempt's value is gone (released) takes a free key for nobody, which
-- keeps others out until its TTL, as any late acquisition does. Each
-- key's value is read here once (a table for a key of another type), for
-- ours_to_take too: nothing below writes a lock key before it has looked.
local values = {}
for i = 1, n do
    local held = redis.pcall("GET", KEYS[i])
    if type(held) == "string" and later_attempt(held, ARGV[1]) then
        return 0
    end
    values[i] = held
end

-- Whether a waiter queued at `score` (nil: not queued) with `token`
-- comes before us in a queue: the sorted set's order, arrival then token,
-- so that two waiters that arrived in the same microsecond are ordered
-- too (each refused for the other, they would wait for each other).
local function before(score, token)
    return score ~= nil and (score < arrival or (score == arrival and token < waiter))
end

-- Where a key is free under a release's yield (see ours_to_take): when
-- the yield's mark lapses (server ms), by key.
local yielded = {}

-- Whether the key i is ours to take, and what it holds.
local function ours_to_take(i)
    local held = values[i]
    if type(held) == "table" then
        -- A key of another type holds the name (WRONGTYPE): taken, as
        -- SET NX finds it.
        return false, "redlock:wrongtype"
    end
    local queue, tickets = KEYS[n + i], KEYS[2 * n + i]
    if held == mine then
        return true, held
    elseif held and waiter_of(held) == waiter then
        -- A value of one of our earlier attempts (later ones sent this
        -- claim back above), all of which failed (a claim delivered after
        -- its own clean-up, or a clean-up that missed this member):
        -- nobody holds it. Taken as a free key, so
        -- that it keeps nobody out for its TTL, us included; the late
        -- clean-up of that attempt then finds our new value, and leaves
        -- it.
        held = nil
    elseif held then
        -- Another waiter's reservation keeps the key from us only while
        -- that waiter is queued for the key: a set waits in line at one
        -- key and leaves the others' queues, keeping a reservation it was
        -- handed there; two sets that each moved to the queue of a key
        -- the other's reservation holds would otherwise keep each other
        -- waiting, swapping queues, until the reservations lapsed (the
        -- schedule checker's liveness run traced a lock kept 1.3 s from a
        -- free key behind two such sets). Such a reservation is no one's
        -- token: taking it is as safe as taking a free key, and the same
        -- rule then applies (no live waiter queued before us).
        if string.sub(held, 1, #RESERVED_PREFIX) ~= RESERVED_PREFIX then
            return false, held
        end
        if redis.call("ZSCORE", queue, string.sub(held, #RESERVED_PREFIX + 1)) then
            return false, held
        end
    end
    -- A key a release yielded (see release.lua) is free for clients that
    -- do not queue until the mark lapses: none of our waiters takes it,
    -- the first in line included. (Taken by the first at its next claim,
    -- the key was free only until then: often too short for a client
    -- that retries every 100 ms or so; and a member that yielded while
    -- the others handed the key on then had its key taken at once by the
    -- waiter they told, which began its chain a release early: its yields
    -- never again met the others', and CI saw a client that does not
    -- queue get no turn in 30 s.)
    -- A mark further ahead than our ticket's life (ARGV[4]; the values
    -- are in engine/fair.rs), which leaves room for a releaser's
    -- reservation longer than ours, is a clock that stepped back: ignored.
    local mark = tonumber(redis.call("HGET", tickets, "yield") or "") or 0
    if mark > now and mark - now <= tonumber(ARGV[4]) then
        yielded[i] = mark
        return false, held
    end
    while true do
        local head = redis.call("ZRANGE", queue, 0, 0, "WITHSCORES")
        if not head[1] or head[1] == waiter or not before(tonumber(head[2]), head[1]) then
            return true, held
        end
        if live_at(tickets, head[1], now) then
            return false, held
        end
        drop(queue, tickets, head[1])
    end
end

-- Whether `held` (a value a refusal found) is one another owner's grant
-- wrote (not readers' mark, a reservation or a key of another type):
-- answered in a refusal, so that the claimant can tell which servers that
-- grant was asked of (see the crate docs, "Restarts").
local function grant_value(held)
    -- (A key MGET found absent reads as false.)
    return type(held) == "string" and held ~= READERS_MARK
        and held ~= "redlock:wrongtype" and string.sub(held, 1, #RESERVED_PREFIX) ~= RESERVED_PREFIX
end

-- A set's claim (the client names where it waits: ARGV[6]) looks at
-- every key: `refused` is the first not ours to take, `blocker` the first
-- a holder keeps (another's token, readers, a key of another type), not
-- a reservation or a waiter ahead, which are soon gone; `grant_held` the
-- first value a holder's grant wrote (see grant_value) on any of them.
local is_set = ARGV[6] ~= nil and ARGV[6] ~= ""
local refused, refused_held, blocker, grant_held = nil, nil, nil, nil
local reserved = {}
for i = 1, n do
    local take, held = ours_to_take(i)
    reserved[i] = take and held == mine
    if not take then
        if not refused then
            refused, refused_held = i, held
        end
        if not blocker and held and waiter_of(held) ~= waiter
            and string.sub(held, 1, #RESERVED_PREFIX) ~= RESERVED_PREFIX then
            blocker = i
        end
        if not grant_held and grant_value(held) then
            grant_held = held
        end
        if not is_set then
            break
        end
    end
end

if not refused then
    for i = 1, n do
        local tickets = KEYS[2 * n + i]
        if reserved[i] then
            -- Our reservation's deadline, for the clean-up of this attempt
            -- should it fail (unclaim.lua puts the reservation back).
            local left = redis.call("PTTL", KEYS[i])
            if left > 0 then
                redis.call("HSET", tickets, "next:" .. waiter, now + left)
                if redis.call("PTTL", tickets) < left then
                    redis.call("PEXPIRE", tickets, left)
                end
            end
        end
        redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
        -- We keep our place where we wait in line, and only there, until
        -- our release drops us (see hand.lua, `first_live`): should this
        -- attempt reach a minority only, we are still first on every
        -- member. Any other queue of ours goes (a set's part on a Redis
        -- Cluster's slot group that does not hold the key it waits at
        -- must not stay first in a queue it no longer waits in).
        if i == (named or 1) then
            redis.call("HDEL", tickets, "offer:" .. waiter)
        else
            drop(KEYS[n + i], tickets, waiter)
        end
    end
    if not fencing then
        return 1
    end
    local top = 0
    for i = 3 * n + 1, 4 * n do
        local count = next_count(redis.call("GET", KEYS[i]), ARGV[7])
        if count > top then
            top = count
        end
    end
    top = string.format("%d", top)
    for i = 3 * n + 1, 4 * n do
        count_to(KEYS[i], top, ARGV[8])
    end
    return tonumber(top)
end

-- Refused: we wait in line on one key only: the one the client names
-- (ARGV[6], the same on every member: the key that refused a set on a
-- majority of members), or else the first not ours to take here; a set
-- leaves the other keys' queues, so that its place never keeps a
-- free key it cannot use yet from anyone (a holder of the key that
-- refused us may be waiting for it).
local ticket = tonumber(ARGV[4])
local wait_at = named or refused
for i = 1, n do
    local queue, tickets = KEYS[n + i], KEYS[2 * n + i]
    if i == wait_at then
        redis.call("ZADD", queue, "NX", ARGV[3], waiter)
        redis.call("HSET", tickets, waiter, (now + ticket) .. ":" .. ARGV[5])
        -- We asked: live again, should an offer of ours have lapsed.
        redis.call("HDEL", tickets, "offer:" .. waiter)
        for _, key in ipairs({ queue, tickets }) do
            if redis.call("PTTL", key) < ticket then
                redis.call("PEXPIRE", key, ticket)
            end
        end
    else
        drop(queue, tickets, waiter)
    end
end
-- A set that a holder keeps from one of its keys gives on at once every
-- reservation of ours it holds (it cannot use them until that holder
-- lets go, which may take long): held to their deadlines, they kept free
-- keys from the waiters behind us, reservation after reservation (the
-- liveness run of the schedule checker found a lock of `a` kept 1.5 s
-- from it, free, while two sets waiting for `b`, held, were offered `a`
-- in turn). We keep our place in line; the next live waiter after us is
-- offered the key, and told, as a release would; with nobody else live in
-- its queue, the reservation stays (it keeps the key from nobody). A key
-- that holds our own token (a clean-up that missed this member) keeps us
-- from nothing: no holder. Refused only for another waiter's reservation or
-- a waiter ahead, which are soon gone (within a reservation; see
-- engine/fair.rs), the set keeps its reservations until their
-- deadlines, as a lock does: the key that refused it may be free by its
-- next claim.
-- Without ARGV[9] (nobody is told of releases) they stay until their
-- deadlines too.
if is_set and blocker and ARGV[9] then
    for i = 1, n do
        if reserved[i] and first_live(KEYS[n + i], KEYS[2 * n + i], now, nil, waiter) then
            hand_off(KEYS[i], KEYS[n + i], KEYS[2 * n + i], now, ARGV[9], ARGV[10], ARGV[11],
                ARGV[11 + i], nil, waiter)
        end
    end
end
-- A key a release yielded (see ours_to_take) is reserved for nobody
-- until the mark lapses: a lock asks again then (the first waiter in
-- line takes it; a claim of one behind it offers it the key, as below).
local yield_until = yielded[refused]
if yield_until and not is_set then
    return lapses_in(yield_until - now)
end
if not refused_held and ARGV[9] and not yield_until then
    -- Free, but a live waiter arrived before us: it may not know (its
    -- holder died and the key expired, attempts split the votes, or its
    -- wake was lost). Reserve the key for it and tell it, as a release
    -- would; if it does not come, it costs one reservation.
    -- (Not when we are first now: a waiter ahead with our arrival score
    -- sorts after us, and the key is ours at our next claim.)
    local head = redis.call("ZRANGE", KEYS[n + refused], 0, 0)[1]
    local offer = head and tonumber(redis.call("HGET", KEYS[2 * n + refused], "offer:" .. head) or "")
    if offer and offer > now then
        -- Offered the key already (its reservation was given back early):
        -- not offered again, so that a dead waiter costs one offer; we
        -- ask again when the offer lapses.
        if not is_set then
            return lapses_in(offer - now)
        end
    elseif head and head ~= waiter then
        local first = hand_off(KEYS[refused], KEYS[n + refused], KEYS[2 * n + refused], now,
            ARGV[9], ARGV[10], ARGV[11], ARGV[11 + refused])
        if first and not is_set then
            return lapses_in(tonumber(ARGV[9]))
        end
    end
end
if is_set then
    if grant_held then
        return { -(blocker or refused), grant_held }
    end
    return -(blocker or refused)
end
if refused_held == READERS_MARK then
    return READERS_HOLD
end
if refused_held and string.sub(refused_held, 1, #RESERVED_PREFIX) == RESERVED_PREFIX then
    -- Another waiter's reservation: when it lapses, in ms.
    local left = redis.call("PTTL", KEYS[1])
    if left >= 0 then
        return lapses_in(left)
    end
elseif grant_value(refused_held) then
    return refused_held
end
return 0
