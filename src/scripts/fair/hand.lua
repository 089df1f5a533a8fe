-- hand (fair): what every fair script that lets a key go does the same
-- way: a release, a waiter leaving, a claim that reserves a free key for
-- the waiter ahead. Not a script of its own: it is put before each of
-- them (see script.rs), whose headers document their KEYS and ARGV.

-- Whether the waiter `token` of `tickets` is live at `now` (server ms),
-- and its manager's address: its ticket has not lapsed, and it was not
-- offered the key (a hand-off's reservation, see `hand_off`) and let the
-- offer lapse without asking since. A waiter stays in the queue while it
-- is offered the key: should its claim reach a minority only, it is still
-- first on every member, not first on some and gone from others (members
-- would then hand the key to different waiters, and nobody would reach a
-- majority); a waiter that asks again (any claim) is live again.
local function live_at(tickets, token, now)
    local ticket = redis.call("HGET", tickets, token) or ""
    local deadline, at = string.match(ticket, "^(%d+):?(.*)$")
    if not deadline or tonumber(deadline) <= now then
        return false, ""
    end
    local offer = tonumber(redis.call("HGET", tickets, "offer:" .. token) or "")
    return not offer or offer > now, at
end

-- Takes `token` off `queue` and its notes off `tickets`.
local function drop(queue, tickets, token)
    redis.call("ZREM", queue, token)
    redis.call("HDEL", tickets, token, "offer:" .. token, "told:" .. token)
end

-- The first waiter of `queue` that is live at `now` (see `live_at`), and
-- its manager's address; waiters ahead of it that are not are dropped,
-- and so is `gone`, wherever it stands (a releaser: a grant keeps its
-- waiter in the queue until it releases; one that never does is dropped
-- as a lapsed offer).
local function first_live(queue, tickets, now, gone)
    if gone then
        drop(queue, tickets, gone)
    end
    while true do
        local head = redis.call("ZRANGE", queue, 0, 0)[1]
        if not head then
            return nil, ""
        end
        local live, at = live_at(tickets, head, now)
        if live then
            return head, at
        end
        drop(queue, tickets, head)
    end
end

-- Up to `count` live waiters of `queue` after `first` (each with its
-- manager's address), in order, live at `now` (see `live_at`).
local function next_live(queue, tickets, now, count, first)
    local found = {}
    for _, waiter in ipairs(redis.call("ZRANGE", queue, 0, count + 4)) do
        local live, at = live_at(tickets, waiter, now)
        if live and waiter ~= first then
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

-- Hands `key` to the first live waiter of `queue` (`gone`, a releaser,
-- is dropped from it): the key holds its reservation ("redlock:next:"
-- and its token, nobody's token) for `reserve` ms, and its offer is
-- noted in `tickets` ("offer:" and its token: the reservation's
-- deadline); it stays in the queue (see `live_at`). Deletes the key when
-- nobody waits. With `publish` (PUBLISH or SPUBLISH), announces it on
-- `channel`, the key's release channel, with `message`: to the waiter's
-- manager, naming it (":" and its token), so that only that waiter is
-- woken; and to the managers of the next two live waiters, a notice
-- ("~", `reserve`, ":" and its token) that they ask when the reservation
-- lapses (unless a notice to that waiter is still pending, noted in
-- `tickets` as "told:" and its token: it asks when that one lapses, and
-- learns then when this one does): should the first waiter be dead or
-- gone, its offer has lapsed then and the next live one takes the key (a claim that finds a dead
-- waiter still first, not yet offered the key, offers it and asks again
-- at that lapse), so a dead waiter costs one reservation, never a pause,
-- as long as one of the two told is alive. Nobody waiting, a plain
-- release message. Answers the waiter's token, or nil.
local function hand_off(key, queue, tickets, now, reserve, publish, message, channel, gone)
    local first, address = first_live(queue, tickets, now, gone)
    if first then
        redis.call("SET", key, "redlock:next:" .. first, "PX", reserve)
        local deadline = now + tonumber(reserve)
        redis.call("HSET", tickets, "offer:" .. first, deadline)
        if redis.call("PTTL", tickets) < tonumber(reserve) then
            redis.call("PEXPIRE", tickets, reserve)
        end
    else
        redis.call("DEL", key)
    end
    if publish then
        if not first then
            redis.pcall(publish, channel, message)
            return nil
        end
        redis.pcall(publish, beside(channel, address), message .. ":" .. first)
        for _, next in ipairs(next_live(queue, tickets, now, 2, first)) do
            -- Not while a notice to it is pending: it asks when that one
            -- lapses, and its claim then learns when this reservation
            -- lapses (a claim refused for a reservation answers when),
            -- so it asks then. One notice per waiter per reservation's
            -- length, not one per hand-off: notices to every hand-off's
            -- next two waiters cost processes a fifth of their rate.
            local told = "told:" .. next[1]
            if (tonumber(redis.call("HGET", tickets, told) or "") or 0) <= now then
                redis.call("HSET", tickets, told, now + tonumber(reserve))
                redis.pcall(publish, beside(channel, next[2]), message .. "~" .. reserve .. ":" .. next[1])
            end
        end
    end
    return first
end
