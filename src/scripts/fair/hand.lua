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
    redis.call("HDEL", tickets, token, "offer:" .. token)
end

-- The first waiter of `queue` that is live at `now` (see `live_at`), and
-- its manager's address; waiters ahead of it that are not are dropped,
-- and so is `gone`, wherever it stands (a releaser: a grant keeps its
-- waiter in the queue until it releases; one that never does, crashed
-- or lost, is dropped when its ticket lapses, or once the key is free
-- and a claim has offered it the key, when that offer lapses). `passed`,
-- if given, is passed over where it stands, and keeps its place (a set
-- that gives on a reservation it cannot use yet, see claim.lua).
local function first_live(queue, tickets, now, gone, passed)
    if gone then
        drop(queue, tickets, gone)
    end
    local at = 0
    while true do
        local head = redis.call("ZRANGE", queue, at, at)[1]
        if not head then
            return nil, ""
        end
        if head == passed then
            at = at + 1
        else
            local live, address = live_at(tickets, head, now)
            if live then
                return head, address
            end
            drop(queue, tickets, head)
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

-- Hands `key` to the first live waiter of `queue` (`gone`, a releaser,
-- is dropped from it; `passed` is passed over, see `first_live`): the key holds its reservation (RESERVED_PREFIX
-- and its token, nobody's token) for `reserve` ms, and its offer is
-- noted in `tickets` ("offer:" and its token: the reservation's
-- deadline); it stays in the queue (see `live_at`). Deletes the key when
-- nobody waits. With `publish` (PUBLISH or SPUBLISH), announces it on
-- `channel`, the key's release channel, with `message`: to the waiter's
-- manager, naming it (":" and its token), so that only that waiter is
-- woken. Nobody else is told: should that waiter be dead or gone, the
-- next live one learns when its reservation lapses from its own next
-- claim (every queued waiter asks at least once a reservation, and a
-- claim refused for a reservation answers when it lapses; the values are
-- in engine/fair.rs), and asks then; the dead one's offer has lapsed by
-- then, and it is dropped. So a dead waiter costs one reservation, never
-- a pause. Nobody waiting, a plain release message. Answers the
-- waiter's token, or nil.
local function hand_off(key, queue, tickets, now, reserve, publish, message, channel, gone, passed)
    local first, address = first_live(queue, tickets, now, gone, passed)
    if first then
        redis.call("SET", key, RESERVED_PREFIX .. first, "PX", reserve)
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
    end
    return first
end
