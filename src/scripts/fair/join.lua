-- join (fair): a waiter refused by an ordinary attempt takes its place
-- in the queue: its ticket is added at its arrival, or refreshed.
--
-- KEYS[1]  the queue: waiters' tokens, scored by arrival
-- KEYS[2]  the tickets: each waiter's token, deadline (server ms) and
--          address, as "deadline:address"
-- ARGV[1]  our token
-- ARGV[2]  our arrival (microseconds, the same on every member)
-- ARGV[3]  how long our ticket lasts unless refreshed (ms)
-- ARGV[4]  our manager's address ("" for none): a release that hands us
--          the lock announces it on the release channel, ":", and this
--
-- Answers 1. Both keys last at least as long as the ticket.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ticket = tonumber(ARGV[3])
redis.call("ZADD", KEYS[1], "NX", ARGV[2], ARGV[1])
redis.call("HSET", KEYS[2], ARGV[1], (now + ticket) .. ":" .. ARGV[4])
for i = 1, 2 do
    if redis.call("PTTL", KEYS[i]) < ticket then
        redis.call("PEXPIRE", KEYS[i], ticket)
    end
end
return 1
