-- waiter (fair): a function for the fair scripts. Not a script of its
-- own: it is put before each of them (see script.rs).

-- The waiter an attempt's value names: the acquisition's token without
-- the attempt's number ("#" and what follows: each attempt writes a value
-- of its own, see holder.rs, attempt_token). The queues, tickets and
-- reservations name waiters; lock keys hold values. A value with no "#"
-- (another client's) names itself.
local function waiter_of(value)
    return string.match(value, "^[^#]*")
end
