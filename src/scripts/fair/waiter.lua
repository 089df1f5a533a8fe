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

-- The attempt's number in a value (what follows its last "#"), 0 when
-- it has none.
local function attempt_of(value)
    return tonumber(string.match(value, "#(%d+)$") or "") or 0
end

-- Whether `held`, a key's value, was written by an attempt of the
-- waiter `value` names that came after `value`'s own (a larger number).
-- A request of an earlier attempt is late: the client gave up on it and
-- moved on, and the later attempt may be granted. Such a request changes
-- nothing of the later attempt's (see claim.lua).
local function later_attempt(held, value)
    return waiter_of(held) == waiter_of(value) and attempt_of(held) > attempt_of(value)
end
