-- join (fair): a waiter refused by an ordinary attempt takes its place
-- in the queue of one lock, or of each lock of a set: its ticket is added
-- at its arrival, or refreshed.
--
-- KEYS     the n queues (waiters' tokens, scored by arrival), then their
--          n tickets hashes (each waiter's token, deadline (server ms)
--          and address, as "deadline:address")
-- ARGV[1]  our token
-- ARGV[2]  our arrival (microseconds, the same on every member)
-- ARGV[3]  how long our ticket lasts unless refreshed (ms)
-- ARGV[4]  our manager's address ("" for none): a release that hands us
--          a lock announces it on its release channel, ":", and this
--
-- Answers 1. Every key lasts at least as long as the ticket.
-- Our name in the queues (see waiter.lua); ARGV[1] whole is the value
-- this attempt writes or holds.
local waiter = waiter_of(ARGV[1])
local n = #KEYS / 2
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ticket = tonumber(ARGV[3])
for i = 1, n do
    redis.call("ZADD", KEYS[i], "NX", ARGV[2], waiter)
    redis.call("HSET", KEYS[n + i], waiter, (now + ticket) .. ":" .. ARGV[4])
end
for i = 1, 2 * n do
    if redis.call("PTTL", KEYS[i]) < ticket then
        redis.call("PEXPIRE", KEYS[i], ticket)
    end
end
return 1
