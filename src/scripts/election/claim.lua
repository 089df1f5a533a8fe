-- claim: writes a leader's record (its term and the value it proclaims)
-- beside the election's lock key, where that key holds the leader's
-- token. A new leader claims once its term is known; a proclaim claims
-- again with the next sequence number.
--
-- KEYS[1]  the election's lock key
-- KEYS[2]  its record: a hash of token, term, seq and value
-- ARGV[1]  our token
-- ARGV[2]  our term
-- ARGV[3]  the sequence number of this claim (1, then one more for
--          each proclaim)
-- ARGV[4]  the value proclaimed
--
-- Answers 1 when the record holds this claim (or a later one of ours, so
-- that a claim delayed in the network never overwrites a newer value), 0
-- when the lock key holds another token, -1 when there is no lock key.
-- Claims of one token are ordered by term, then sequence number (a
-- leader's proclaims). Every attempt of a campaign writes a value of its
-- own (the campaign's token, "#", the attempt's number), so a record a
-- failed attempt left here names another value, and the elected
-- attempt's claim replaces it; a failed attempt's claim that comes late
-- finds the lock key holding another value, and writes nothing. The record gets the lock key's expiry: it
-- never outlives the leadership it describes.
local held = redis.call("GET", KEYS[1])
if held ~= ARGV[1] then
    if held then
        return 0
    end
    return -1
end
local mine = redis.call("HMGET", KEYS[2], "token", "term", "seq")
local term, seq = tonumber(mine[2]), tonumber(mine[3])
local our_term, our_seq = tonumber(ARGV[2]), tonumber(ARGV[3])
if mine[1] == ARGV[1] and term and seq
    and (term > our_term or (term == our_term and seq >= our_seq)) then
    return 1
end
redis.call("DEL", KEYS[2])
redis.call("HSET", KEYS[2], "token", ARGV[1], "term", ARGV[2], "seq", ARGV[3], "value", ARGV[4])
-- (A key in its last millisecond reads a PTTL of 0: the record gets 1
-- ms, not none, which would outlive the leadership.)
local left = redis.call("PTTL", KEYS[1])
if left >= 0 then
    redis.call("PEXPIRE", KEYS[2], math.max(left, 1))
end
return 1
