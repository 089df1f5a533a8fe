//! What the fair lock's scripts leave on one server, modelled in Rust:
//! the lock key (a token, or a waiter's reservation), its queue (waiters
//! by arrival) and its tickets hash (each waiter's ticket, an offer of
//! the key, the deadline of a reservation a claim took). Each request
//! runs as its Lua does (`fair/claim.lua`, `fair/release.lua`,
//! `fair/unclaim.lua`, `fair/leave.lua`, `fair/join.lua`, with
//! `fair/hand.lua`'s helpers), for one lock key, without fencing; the
//! differential test in `fair_scripts.rs` ties the two together on real
//! servers.
//!
//! Time is a number of units (ticks for the checker, milliseconds for the
//! differential test); the server's `TIME` reads the caller's `now`.

use super::lock::{Answer, Value};
use crate::engine::fair::LAPSE_BASE;

/// A waiter: an acquisition, whatever its attempt (the token without
/// its `#attempt` tail; `waiter_of` in `fair/waiter.lua`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Waiter {
    pub(crate) client: u8,
    pub(crate) acquisition: u8,
}

impl std::fmt::Debug for Waiter {
    /// `c1/a0`, as the queues name it (its order is the names' order).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}/a{}", self.client, self.acquisition)
    }
}

impl Value {
    /// The waiter whose attempt wrote this value.
    pub(crate) fn waiter(&self) -> Waiter {
        Waiter {
            client: self.client,
            acquisition: self.acquisition,
        }
    }
}

/// What the lock key holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Held {
    /// An attempt's token.
    Token(Value),
    /// A waiter's reservation (`RESERVED_PREFIX` and its name).
    Next(Waiter),
}

impl Held {
    /// As the key holds it.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        match self {
            Held::Token(v) => v.bytes(),
            Held::Next(w) => [
                crate::base::keys::RESERVED_PREFIX,
                format!("{w:?}").as_bytes(),
            ]
            .concat(),
        }
    }
}

/// A waiter's fields in the tickets hash: its ticket's deadline, the
/// deadline of an offer of the key (`offer:`), and of the reservation a
/// claim of its took (`next:`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Notes {
    pub(crate) ticket: Option<u64>,
    pub(crate) offer: Option<u64>,
    pub(crate) next: Option<u64>,
}

/// How long things last, in the caller's units.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lengths {
    /// The lock's TTL.
    pub(crate) ttl: u64,
    /// A ticket's life unless refreshed.
    pub(crate) ticket: u64,
    /// A reservation's length (the library's: `engine::fair::reservation`).
    pub(crate) reserve: u64,
    /// How long a key is handed on before a release yields it
    /// (`fair_yield`; `None`: never).
    pub(crate) every: Option<u64>,
    /// Claims hand on keys (claim.lua's ARGV[9], given when waiters are
    /// woken on release): a free key the waiter ahead goes first for is
    /// reserved for it, and a set a holder keeps out gives on its
    /// reservations.
    pub(crate) handing: bool,
}

/// Which of the rules past flaws made are on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScriptRules {
    /// A claim that finds a value of a later attempt of its waiter
    /// changes nothing (`later_attempt` in claim.lua).
    pub(crate) late_claims: bool,
    /// A waiter that let an offer of the key lapse is no longer live
    /// (`live_at` in hand.lua): a dead waiter costs one reservation, not
    /// its ticket's life.
    pub(crate) offers_lapse: bool,
    /// A release yields a chain `every` old while a client that cannot
    /// queue says it waits ([`FairServer::listening`]: release.lua's
    /// `outsiders_wait`); off, only once it is [`PROBE`] times that old.
    pub(crate) yields_heed_listeners: bool,
}

impl ScriptRules {
    /// The scripts' rules, as they are.
    pub(crate) const ALL: ScriptRules = ScriptRules {
        late_claims: true,
        offers_lapse: true,
        yields_heed_listeners: true,
    };
}

/// How much longer a chain runs before a release yields it when no
/// client that cannot queue says it waits (release.lua's `PROBE`).
pub(crate) const PROBE: u64 = 8;

/// A request, as the library sends it (for one lock key).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum FairRequest {
    /// `SET key value NX PX ttl`: an acquisition's first attempt.
    Take { value: Value },
    /// `fair/join.lua`: refused, it takes its place in line.
    Join { value: Value, arrival: u64 },
    /// `fair/claim.lua`: a queued waiter's attempt.
    Claim { value: Value, arrival: u64 },
    /// `fair/unclaim.lua`: a failed claim's clean-up.
    Unclaim { value: Value },
    /// `lock/unlock.lua`: a failed first attempt's clean-up.
    Unlock { value: Value },
    /// `fair/release.lua`: a release, handing the key on.
    Release { value: Value },
    /// `fair/leave.lua`: a waiter steps out of line.
    Leave { value: Value },
}

/// What `ours_to_take` found: whether the key is ours to take, what it
/// holds (a value of an earlier attempt of ours reads as none), and a
/// release's yield that keeps it from us (when it lapses).
pub(super) struct Taking {
    pub(super) take: bool,
    pub(super) held: Option<Held>,
    pub(super) mark: Option<u64>,
}

impl FairRequest {
    /// The value (the attempt) it is sent for.
    pub(crate) fn value(&self) -> Value {
        match *self {
            FairRequest::Take { value }
            | FairRequest::Join { value, .. }
            | FairRequest::Claim { value, .. }
            | FairRequest::Unclaim { value }
            | FairRequest::Unlock { value }
            | FairRequest::Release { value }
            | FairRequest::Leave { value } => value,
        }
    }
}

/// One server's keys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct FairServer {
    /// The lock key, and when it expires (gone from then on).
    pub(crate) key: Option<(Held, u64)>,
    /// The queue: arrival and waiter, in the sorted set's order.
    pub(crate) queue: Vec<(u64, Waiter)>,
    /// When the queue key expires (`None`: no expiry, or no key).
    pub(crate) queue_until: Option<u64>,
    /// The tickets hash, by waiter.
    pub(crate) tickets: Vec<(Waiter, Notes)>,
    /// The tickets hash's own fields: when the key's chain of hand-offs
    /// began (`chain`), and until when a release's yield stands (`yield`).
    pub(crate) chain: Option<u64>,
    pub(crate) yielded: Option<u64>,
    /// When the tickets key expires.
    pub(crate) tickets_until: Option<u64>,
    /// Its run: a restart starts another.
    pub(crate) run: u8,
    /// Its clock runs fast: a token expires a unit early.
    pub(crate) fast: bool,
    /// A client that cannot queue waits for the key and says so (a
    /// manager with `fair(false)` listening on the name's `:-` channel).
    pub(crate) listening: bool,
    /// A release handed the key to a waiter on a chain due for a yield
    /// while a client that cannot queue waited: passed over.
    pub(crate) passed_over: bool,
}

/// `PEXPIRE key len` where `PTTL key < len` (no expiry reads -1).
pub(super) fn at_least(until: &mut Option<u64>, now: u64, len: u64) {
    if until.is_none_or(|u| u - now < len) {
        *until = Some(now + len);
    }
}

impl FairServer {
    /// Keys expired at `now` are gone.
    pub(crate) fn expire(&mut self, now: u64) {
        if self.key.is_some_and(|(_, until)| until <= now) {
            self.key = None;
        }
        if self.queue_until.is_some_and(|u| u <= now) {
            self.queue.clear();
            self.queue_until = None;
        }
        if self.tickets_until.is_some_and(|u| u <= now) {
            self.tickets.clear();
            (self.chain, self.yielded) = (None, None);
            self.tickets_until = None;
        }
    }

    /// The lock key, set for `len` at `now`; a token's expires a unit
    /// early on a fast clock (the drift of a TTL; a reservation, a
    /// unit long in the checker, is left whole).
    pub(super) fn set(&mut self, held: Held, now: u64, len: u64) {
        let early = matches!(held, Held::Token(_)) && self.fast;
        self.key = Some((held, now + len - u64::from(early)));
    }

    pub(super) fn notes(&self, w: Waiter) -> Notes {
        self.tickets
            .iter()
            .find(|(t, _)| *t == w)
            .map_or_else(Notes::default, |(_, n)| *n)
    }

    /// Changes `w`'s fields (`HSET`, `HDEL`); a hash left empty is gone,
    /// and one created anew has no expiry.
    /// Whether the tickets hash exists (has a field).
    fn has_tickets(&self) -> bool {
        !self.tickets.is_empty() || self.chain.is_some() || self.yielded.is_some()
    }

    pub(super) fn note(&mut self, w: Waiter, change: impl FnOnce(&mut Notes)) {
        if !self.has_tickets() {
            self.tickets_until = None;
        }
        let at = match self.tickets.binary_search_by_key(&w, |(t, _)| *t) {
            Ok(at) => at,
            Err(at) => {
                self.tickets.insert(at, (w, Notes::default()));
                at
            }
        };
        change(&mut self.tickets[at].1);
        if self.tickets[at].1 == Notes::default() {
            self.tickets.remove(at);
        }
        if !self.has_tickets() {
            self.tickets_until = None;
        }
    }

    pub(super) fn queued(&self, w: Waiter) -> bool {
        self.queue.iter().any(|(_, q)| *q == w)
    }

    /// `ZADD queue NX arrival w`.
    pub(super) fn enqueue(&mut self, arrival: u64, w: Waiter) {
        if self.queued(w) {
            return;
        }
        if self.queue.is_empty() {
            self.queue_until = None;
        }
        let at = self.queue.partition_point(|e| *e < (arrival, w));
        self.queue.insert(at, (arrival, w));
    }

    /// `drop` in hand.lua: off the queue, its ticket and offer gone.
    pub(super) fn drop_waiter(&mut self, w: Waiter) {
        self.queue.retain(|(_, q)| *q != w);
        if self.queue.is_empty() {
            self.queue_until = None;
        }
        self.note(w, |n| {
            n.ticket = None;
            n.offer = None;
        });
    }

    /// `live_at` in hand.lua.
    fn live(&self, w: Waiter, now: u64, rules: ScriptRules) -> bool {
        let n = self.notes(w);
        n.ticket.is_some_and(|t| t > now)
            && (!rules.offers_lapse || n.offer.is_none_or(|o| o > now))
    }

    /// `first_live` in hand.lua.
    pub(super) fn first_live(
        &mut self,
        now: u64,
        rules: ScriptRules,
        gone: Option<Waiter>,
        passed: Option<Waiter>,
    ) -> Option<Waiter> {
        if let Some(gone) = gone {
            self.drop_waiter(gone);
        }
        let mut at = 0;
        loop {
            let &(_, head) = self.queue.get(at)?;
            if Some(head) == passed {
                at += 1;
            } else if self.live(head, now, rules) {
                return Some(head);
            } else {
                self.drop_waiter(head);
            }
        }
    }

    /// `hand_off` in hand.lua.
    pub(super) fn hand_off(
        &mut self,
        now: u64,
        len: Lengths,
        rules: ScriptRules,
        gone: Option<Waiter>,
        passed: Option<Waiter>,
    ) -> Option<Waiter> {
        let first = self.first_live(now, rules, gone, passed);
        match first {
            Some(first) => {
                self.set(Held::Next(first), now, len.reserve);
                self.note(first, |n| n.offer = Some(now + len.reserve));
                at_least(&mut self.tickets_until, now, len.reserve);
            }
            None => self.key = None,
        }
        first
    }

    /// Runs `request` at `now`, as its script (or command) does.
    pub(crate) fn run(
        &mut self,
        request: FairRequest,
        now: u64,
        len: Lengths,
        rules: ScriptRules,
    ) -> Answer {
        self.expire(now);
        match request {
            FairRequest::Take { value } => {
                let set = self.key.is_none();
                if set {
                    self.set(Held::Token(value), now, len.ttl);
                }
                Answer::Took {
                    set,
                    count: 0,
                    named: None,
                }
            }
            FairRequest::Unlock { value } => match self.key {
                Some((Held::Token(v), _)) if v == value => {
                    self.key = None;
                    Answer::Int(1)
                }
                Some(_) => Answer::Int(0),
                None => Answer::Int(-1),
            },
            FairRequest::Join { value, arrival } => {
                let w = value.waiter();
                self.enqueue(arrival, w);
                self.note(w, |n| n.ticket = Some(now + len.ticket));
                at_least(&mut self.queue_until, now, len.ticket);
                at_least(&mut self.tickets_until, now, len.ticket);
                Answer::Int(1)
            }
            FairRequest::Claim { value, arrival } => self.claim(value, arrival, now, len, rules),
            FairRequest::Unclaim { value } => self.unclaim(value, now),
            FairRequest::Release { value } => self.release(value, now, len, rules),
            FairRequest::Leave { value } => {
                let w = value.waiter();
                self.drop_waiter(w);
                if self.key.is_some_and(|(h, _)| h == Held::Next(w)) {
                    self.hand_off(now, len, rules, Some(w), None);
                    return Answer::Int(1);
                }
                Answer::Int(0)
            }
        }
    }

    /// A release's yield that stands (a key free for clients that do not
    /// queue), when the claim's cap (a ticket's life) allows: when it
    /// lapses.
    fn yield_mark(&self, now: u64, cap: u64) -> Option<u64> {
        self.yielded.filter(|&m| m > now && m - now <= cap)
    }

    /// `ours_to_take` in claim.lua (see [`Taking`]); `cap`: the longest
    /// a yield's mark may stand (a ticket's life).
    pub(super) fn ours_to_take(
        &mut self,
        w: Waiter,
        arrival: u64,
        now: u64,
        cap: u64,
        rules: ScriptRules,
    ) -> Taking {
        let mut held = self.key.map(|(h, _)| h);
        let refused = |held| Taking {
            take: false,
            held,
            mark: None,
        };
        match held {
            Some(Held::Next(x)) if x == w => {
                return Taking {
                    take: true,
                    held,
                    mark: None,
                };
            }
            Some(Held::Token(v)) if v.waiter() == w => held = None,
            Some(Held::Token(_)) => return refused(held),
            Some(Held::Next(x)) if self.queued(x) => return refused(held),
            Some(Held::Next(_)) | None => {}
        }
        if let Some(mark) = self.yield_mark(now, cap) {
            return Taking {
                take: false,
                held,
                mark: Some(mark),
            };
        }
        while let Some(&(score, head)) = self.queue.first() {
            let before = score < arrival || (score == arrival && head < w);
            if head == w || !before {
                break;
            }
            if self.live(head, now, rules) {
                return refused(held);
            }
            self.drop_waiter(head);
        }
        Taking {
            take: true,
            held,
            mark: None,
        }
    }

    fn claim(
        &mut self,
        value: Value,
        arrival: u64,
        now: u64,
        len: Lengths,
        rules: ScriptRules,
    ) -> Answer {
        let w = value.waiter();
        if let Some((Held::Token(held), _)) = self.key
            && rules.late_claims
            && held.waiter() == w
            && held.attempt > value.attempt
        {
            return Answer::Int(0);
        }
        let Taking { take, held, mark } = self.ours_to_take(w, arrival, now, len.ticket, rules);
        if take {
            self.grant(value, held == Some(Held::Next(w)), now, len);
            self.note(w, |n| n.offer = None);
            return Answer::Int(1);
        }
        self.wait_in_line(w, arrival, now, len);
        if let Some(mark) = mark {
            return Answer::Int(-(LAPSE_BASE + (mark - now) as i64));
        }
        if held.is_none() && len.handing {
            // Free, a live waiter ahead: reserved for it (once an offer).
            let head = self.queue.first().map(|&(_, h)| h);
            let offer = head.and_then(|h| self.notes(h).offer);
            if let Some(offer) = offer.filter(|&o| o > now) {
                return Answer::Int(-(LAPSE_BASE + (offer - now) as i64));
            } else if head.is_some_and(|h| h != w)
                && self.hand_off(now, len, rules, None, None).is_some()
            {
                return Answer::Int(-(LAPSE_BASE + len.reserve as i64));
            }
        }
        match (held, self.key) {
            (Some(Held::Next(_)), Some((_, until))) => {
                Answer::Int(-(LAPSE_BASE + (until - now) as i64))
            }
            // Another owner's value: named.
            (Some(Held::Token(v)), _) => Answer::Held(v),
            _ => Answer::Int(0),
        }
    }

    /// A claim's grant here: the key set to `value`; the deadline of
    /// the reservation it replaced (`reserved`) noted, for the clean-up.
    pub(super) fn grant(&mut self, value: Value, reserved: bool, now: u64, len: Lengths) {
        if reserved
            && let Some((_, until)) = self.key
            && until > now
        {
            let left = until - now;
            self.note(value.waiter(), |n| n.next = Some(now + left));
            at_least(&mut self.tickets_until, now, left);
        }
        self.set(Held::Token(value), now, len.ttl);
    }

    /// A refused claim's place in line: queued at `arrival` (if not
    /// already), its ticket refreshed, an offer of its forgotten.
    pub(super) fn wait_in_line(&mut self, w: Waiter, arrival: u64, now: u64, len: Lengths) {
        self.enqueue(arrival, w);
        self.note(w, |n| {
            n.ticket = Some(now + len.ticket);
            n.offer = None;
        });
        at_least(&mut self.queue_until, now, len.ticket);
        at_least(&mut self.tickets_until, now, len.ticket);
    }

    pub(super) fn unclaim(&mut self, value: Value, now: u64) -> Answer {
        let w = value.waiter();
        match self.key {
            Some((Held::Token(v), _)) if v == value => {
                let deadline = self.notes(w).next;
                self.note(w, |n| n.next = None);
                match deadline.filter(|&d| d > now) {
                    Some(d) => self.set(Held::Next(w), now, d - now),
                    None => self.key = None,
                }
                Answer::Int(1)
            }
            Some(_) => Answer::Int(0),
            None => Answer::Int(-1),
        }
    }

    pub(super) fn release(
        &mut self,
        value: Value,
        now: u64,
        len: Lengths,
        rules: ScriptRules,
    ) -> Answer {
        let w = value.waiter();
        let (mut mine, mut other) = (false, false);
        match self.key {
            Some((Held::Token(v), _)) if v == value => {
                mine = true;
                self.let_go(w, now, len, rules);
            }
            Some((Held::Token(v), _)) if v.waiter() == w && value.attempt > v.attempt => {
                self.let_go(w, now, len, rules);
            }
            held => {
                // Not ours here: out of line (a reservation of ours goes
                // on), where a queue stands.
                other = held.is_some();
                if self.queue.is_empty() {
                } else if held.is_some_and(|(h, _)| h == Held::Next(w)) {
                    self.hand_off(now, len, rules, Some(w), None);
                } else {
                    self.drop_waiter(w);
                }
            }
        }
        Answer::Int(match (other, mine) {
            (true, _) => 0,
            (false, true) => 1,
            (false, false) => -1,
        })
    }

    /// `let_go` in release.lua: hands the key on, or yields it once its
    /// chain of hand-offs is due and a waiter is live in line.
    fn let_go(&mut self, w: Waiter, now: u64, len: Lengths, rules: ScriptRules) {
        if self.queue.is_empty() {
            self.key = None;
            return;
        }
        self.note(w, |n| n.next = None);
        let chain = len.every.and(self.chain);
        // Due once `every` old for a client that says it waits, else once
        // PROBE times that.
        // Seen only by a release that announces (ARGV[4]: with wakes).
        let heard = self.listening && rules.yields_heed_listeners && len.handing;
        let due = |chain: u64, every: u64| {
            now - chain >= every && (heard || now - chain >= PROBE * every)
        };
        if let (Some(chain), Some(every)) = (chain, len.every)
            && due(chain, every)
            && self.first_live(now, rules, Some(w), None).is_some()
        {
            self.chain = None;
            self.yielded = Some(now + len.reserve);
            at_least(&mut self.tickets_until, now, len.reserve);
            self.key = None;
            return;
        }
        let first = self.hand_off(now, len, rules, Some(w), None);
        if let (Some(chain), Some(every)) = (chain, len.every)
            && first.is_some()
            && self.listening
            && now - chain >= every
        {
            self.passed_over = true;
        }
        if len.every.is_some() && first.is_some() && chain.is_none() {
            if !self.has_tickets() {
                self.tickets_until = None;
            }
            self.chain = Some(now);
        }
    }
}

#[cfg(test)]
mod tests;
