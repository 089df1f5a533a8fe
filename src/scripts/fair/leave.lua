-- leave (fair): a waiter gives up its place, for one lock or a set of
-- them: its ticket goes from each queue, and each reservation it holds
-- goes to the next live waiter of that key (or the key is deleted),
-- which is announced. A token of ours in a key is never touched: leave
-- runs after an acquisition too (where some member did not grant it, and
-- may still queue us or hold a reservation for us).
--
-- KEYS       the n lock keys, then their n queues (waiters' tokens, scored
--            by arrival), then their n tickets hashes (each waiter's
--            token, deadline (server ms) and address, as
--            "deadline:address")
-- ARGV[1]    our token
-- ARGV[2]    how long a reservation lasts (ms)
-- ARGV[3]    unused (a release's: the same arguments are built for both)
-- ARGV[4]    optional: PUBLISH (nodes) or SPUBLISH (Redis Cluster)
-- ARGV[5]    the release message
-- ARGV[5+i]  the release channel of the key i
--
-- Answers 1 when it gave up a reservation, 0 otherwise. The announcement
-- names the next waiter, as a release's does.
-- Our name in the queues (see waiter.lua); ARGV[1] whole is the value
-- this attempt writes or holds.
local waiter = waiter_of(ARGV[1])
local n = #KEYS / 3
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gave = 0
for i = 1, n do
    local queue, tickets = KEYS[n + i], KEYS[2 * n + i]
    drop(queue, tickets, waiter)
    if redis.call("GET", KEYS[i]) == RESERVED_PREFIX .. waiter then
        gave = 1
        hand_off(KEYS[i], queue, tickets, now, ARGV[2], ARGV[4], ARGV[5], ARGV[5 + i], waiter)
    end
end
return gave
