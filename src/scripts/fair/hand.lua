-- hand (fair): what every fair script that lets a key go does the same
-- way: a release, a waiter leaving, a claim that reserves a free key for
-- the waiter ahead. Not a script of its own: it is put before each of
-- them (see script.rs), whose headers document their KEYS and ARGV.

-- The first waiter of `queue` whose ticket in `tickets` is live at `now`
-- (server ms), and its manager's address; waiters ahead of it whose
-- tickets lapsed are dropped. It is taken off the queue when `take`.
local function first_live(queue, tickets, now, take)
    while true do
        local head = redis.call("ZRANGE", queue, 0, 0)[1]
        if not head then
            return nil, ""
        end
        local ticket = redis.call("HGET", tickets, head) or ""
        local deadline, at = string.match(ticket, "^(%d+):?(.*)$")
        local live = deadline and tonumber(deadline) > now
        if take or not live then
            redis.call("ZREM", queue, head)
            redis.call("HDEL", tickets, head)
        end
        if live then
            return head, at
        end
    end
end

-- The channel of the manager at `address`, beside the release channel.
local function beside(channel, address)
    if address ~= "" then
        return channel .. ":" .. address
    end
    return channel
end

-- Hands `key` to the first live waiter of `queue`: the key holds its
-- reservation ("redlock:next:" and its token, nobody's token) for
-- `reserve` ms, and it is taken off the queue; deletes the key when
-- nobody waits. With `publish` (PUBLISH or SPUBLISH), announces it on
-- `channel`, the key's release channel, with `message`: to the waiter's
-- manager, naming it (":" and its token), so that only that waiter is
-- woken; and to the next live waiter's manager, a notice ("~", `reserve`,
-- ":" and its token) that it asks when the reservation lapses: should
-- the first waiter be dead or gone, the key is free then and that waiter
-- is first, so it costs one reservation, never a pause. Nobody waiting,
-- a plain release message. Answers the waiter's token, or nil.
local function hand_off(key, queue, tickets, now, reserve, publish, message, channel)
    local first, address = first_live(queue, tickets, now, true)
    if first then
        redis.call("SET", key, "redlock:next:" .. first, "PX", reserve)
    else
        redis.call("DEL", key)
    end
    if publish then
        if not first then
            redis.pcall(publish, channel, message)
            return nil
        end
        redis.pcall(publish, beside(channel, address), message .. ":" .. first)
        local next, at = first_live(queue, tickets, now, false)
        if next then
            redis.pcall(publish, beside(channel, at), message .. "~" .. reserve .. ":" .. next)
        end
    end
    return first
end

