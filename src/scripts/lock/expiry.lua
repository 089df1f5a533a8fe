-- expiry: functions for the extend scripts. Not a script of its own: it
-- is put before each of them (see script.rs).

-- The TTL an extend asks for (its ARGV[2], in ms), and whether it is set
-- exactly. An extend raises an expiry and never lowers it: one delivered
-- late (sent on a connection that then timed out) must not cut a later,
-- longer one, whose holder counts that node's vote; a shorter TTL
-- shortens the holder's validity only. A negative TTL is a guard's last
-- request (the end of an at-least hold, after which nobody counts on the
-- key): set exactly, lowered if need be.
local function asked_ttl(arg)
    local ttl = tonumber(arg)
    if ttl < 0 then
        return -ttl, true
    end
    return ttl, false
end

-- Gives `key` the expiry `ttl` ms from now where that raises it, or
-- whatever it is when `exact`.
local function expire(key, ttl, exact)
    if exact or redis.call("PTTL", key) < ttl then
        redis.call("PEXPIRE", key, ttl)
    end
end
