-- lock_set: takes a set of resources, all or nothing.
--
-- KEYS     the n lock keys, then (with fencing) their n fencing counters
-- ARGV[1]  our token
-- ARGV[2]  the TTL in ms
-- ARGV[3]  optional (fencing on): the attempt's clock reading (µs)
-- ARGV[4]  the counters' expiry in ms (at least: one with longer left
--          keeps it)
--
-- When some key exists (of any type), nothing is written and the answer
-- is -i for the first such key i (1-based), or {-i, value} with the first
-- value among those keys that a holder's grant wrote (not a reservation
-- or readers' mark: named, so that the client can tell which servers that
-- grant was asked of; see the crate docs, "Restarts"). Otherwise every key is set to the token;
-- with fencing, every counter is counted up as for one lock (one more
-- than the larger of its value and ARGV[3]), then all are set to
-- the highest of them, which is the answer (a number every counter of the
-- set reached, so a token above each resource's earlier ones); without
-- fencing the answer is 1.
local n = #KEYS
if ARGV[3] then
    n = n / 2
end
local held = redis.call("MGET", unpack(KEYS, 1, n))
-- The first key held, and the first value that a holder's grant wrote
-- (not a waiter's reservation, not readers' mark), on any key.
local first, named = nil, nil
for i = 1, n do
    local value = held[i]
    if value then
        first = first or i
        if not named and value ~= READERS_MARK
            and string.sub(value, 1, #RESERVED_PREFIX) ~= RESERVED_PREFIX then
            named = value
        end
    end
end
if first then
    if named then
        return { -first, named }
    end
    return -first
end
-- A key of another type reads as nil above (MGET), and is taken all
-- the same: `NX` leaves it, and what this call set goes back.
for i = 1, n do
    if not redis.call("SET", KEYS[i], ARGV[1], "NX", "PX", ARGV[2]) then
        for j = 1, i - 1 do
            redis.call("DEL", KEYS[j])
        end
        return -i
    end
end
if not ARGV[3] then
    return 1
end
local counts = redis.call("MGET", unpack(KEYS, n + 1, 2 * n))
local top = 0
for i = 1, n do
    local count = next_count(counts[i], ARGV[3])
    if count > top then
        top = count
    end
end
top = string.format("%d", top)
for i = n + 1, 2 * n do
    count_to(KEYS[i], top, ARGV[4])
end
return tonumber(top)
