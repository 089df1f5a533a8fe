-- hand (fair): what every fair script that lets a key go does the same
-- way: a release, a waiter leaving, a claim that reserves a free key for
-- the waiter ahead. Not a script of its own: it is put before each of
-- them (see script.rs), whose headers document their KEYS and ARGV.

-- The first waiter of `queue` whose ticket in `tickets` is live at `now`
-- (server ms), and its manager's address; waiters ahead of it whose
-- tickets lapsed are dropped. It is taken off the queue.
local function first_live(queue, tickets, now)
    while true do
        local head = redis.call("ZRANGE", queue, 0, 0)[1]
        if not head then
            return nil, ""
        end
        local ticket = redis.call("HGET", tickets, head) or ""
        local deadline, at = string.match(ticket, "^(%d+):?(.*)$")
        local live = deadline and tonumber(deadline) > now
        redis.call("ZREM", queue, head)
        redis.call("HDEL", tickets, head)
        if live then
            return head, at
        end
    end
end

-- Up to `count` live waiters of `queue` (each with its manager's
-- address), in order, whose tickets in `tickets` are live at `now`.
local function next_live(queue, tickets, now, count)
    local found = {}
    for _, waiter in ipairs(redis.call("ZRANGE", queue, 0, count + 3)) do
        local ticket = redis.call("HGET", tickets, waiter) or ""
        local deadline, at = string.match(ticket, "^(%d+):?(.*)$")
        if deadline and tonumber(deadline) > now then
            found[#found + 1] = { waiter, at }
            if #found == count then
                break
            end
        end
    end
    return found
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
-- woken; and to the managers of the next two live waiters, a notice
-- ("~", `reserve`, ":" and its token) that they ask when the reservation
-- lapses: should the first waiter be dead or gone, the key is free then
-- and the next live one takes it (a claim that finds a dead waiter still
-- first reserves the key for it and asks again at that lapse), so a dead
-- waiter costs one reservation, never a pause, as long as one of the two
-- told is alive. Nobody waiting, a plain release message. Answers the
-- waiter's token, or nil.
local function hand_off(key, queue, tickets, now, reserve, publish, message, channel)
    local first, address = first_live(queue, tickets, now)
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
        for _, next in ipairs(next_live(queue, tickets, now, 2)) do
            redis.pcall(publish, beside(channel, next[2]), message .. "~" .. reserve .. ":" .. next[1])
        end
    end
    return first
end

