-- lock_set: takes a set of resources, all or nothing.
--
-- KEYS     the n lock keys, then (with fencing) their n fencing counters
-- ARGV[1]  our token
-- ARGV[2]  the TTL in ms
-- ARGV[3]  optional (fencing on): the attempt's clock reading (µs)
-- ARGV[4]  the counters' expiry in ms (at least: one with longer left
--          keeps it)
--
-- When some key exists, nothing is written and the answer is {-i, value}
-- for the first such key i (1-based) and the value it holds (named, so
-- that the client can tell which servers that grant was asked of: see
-- the crate docs, "Restarts"). Otherwise every key is set to the token;
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
for i = 1, n do
    if held[i] then
        return { -i, held[i] }
    end
end
for i = 1, n do
    redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
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
