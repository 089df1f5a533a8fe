-- unclaim (fair): the clean-up of a queued waiter's failed attempt, on
-- one lock or a set of them. Where the attempt replaced our reservation
-- with our token, the reservation goes back, until the deadline it had
-- (never later: a waiter cannot keep a key by failing); past that
-- deadline, and where the key was free when we took it, the key is
-- deleted as any clean-up does, and that is announced. Another's token
-- is never touched.
--
-- KEYS       the n lock keys, then their n tickets hashes (the claim left
--            our reservation's deadline (server ms) under "next:" and our
--            token)
-- ARGV[1]    our token
-- ARGV[2]    optional: PUBLISH (nodes) or SPUBLISH (Redis Cluster)
-- ARGV[3]    the release message
-- ARGV[3+i]  the release channel of the key i
--
-- Answers 1 when it put back or deleted keys of ours and no key holds
-- another token, 0 when some key holds another token, -1 when no key was
-- there.
-- Our name in the queues (see waiter.lua); ARGV[1] whole is the value
-- this attempt writes or holds.
local waiter = waiter_of(ARGV[1])
local n = #KEYS / 2
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local field = "next:" .. waiter
local mine, other = 0, 0
for i = 1, n do
    local held = redis.call("GET", KEYS[i])
    if held == ARGV[1] then
        mine = mine + 1
        local tickets = KEYS[n + i]
        local deadline = tonumber(redis.call("HGET", tickets, field) or "")
        redis.call("HDEL", tickets, field)
        if deadline and deadline > now then
            redis.call("SET", KEYS[i], RESERVED_PREFIX .. waiter, "PX", deadline - now)
        else
            redis.call("DEL", KEYS[i])
            if ARGV[2] then
                redis.pcall(ARGV[2], ARGV[3 + i], ARGV[3])
            end
        end
    elseif held then
        other = other + 1
    end
end
if other > 0 then
    return 0
elseif mine > 0 then
    return 1
end
return -1
