//! What the fair scripts leave on one server for two lock keys, `a` and
//! `b`, each with its queue and tickets ([`FairServer`], a lane per
//! key), and a set's requests over both, modelled in Rust as their Lua
//! runs them: `set/lock.lua` and `set/unlock.lua` (a set's first attempt
//! and its clean-up), and `fair/claim.lua`, `fair/unclaim.lua`,
//! `fair/release.lua` and `fair/leave.lua` for several keys. A lock's
//! request runs on its key's lane as `fair_server.rs` has it. The
//! differential test in `set_scripts.rs` ties them to the Lua.

use super::fair_server::{FairRequest, FairServer, Held, Lengths, ScriptRules};
use super::lock::Answer;

/// The lock keys: `a` and `b`.
pub(crate) const KEYS: usize = 2;

/// What a request is for: one lock key, or a set of both, in the set's
/// order (its answers and the key it names count from 1 in that order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum On {
    Key(u8),
    Set([u8; KEYS]),
}

/// A request, as the library sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SetRequest {
    pub(crate) on: On,
    pub(crate) request: FairRequest,
    /// A set's claim: where it waits in line when refused (claim.lua's
    /// ARGV[6]: the k-th key of the set, from 1; 0 for none of them).
    pub(crate) named: u8,
}

/// Which of the rules past flaws made are on, for sets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SetRules {
    /// A refused set waits in line at one key, and leaves the other
    /// keys' queues (claim.lua; the library's join too). Off: it queues
    /// at every key of the set, as sets did before issue 38, which kept
    /// a holder of one key from another the set cannot take yet.
    pub(crate) one_key: bool,
}

impl SetRules {
    pub(crate) const ALL: SetRules = SetRules { one_key: true };
}

/// One server's keys: a lane per lock key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SetServer {
    pub(crate) lanes: [FairServer; KEYS],
}

/// A multi-key script's answer from each key's: 0 when some key held
/// another token, else 1 when one held ours, else -1.
fn combined(answers: impl IntoIterator<Item = Answer>) -> Answer {
    let (mut mine, mut other) = (false, false);
    for answer in answers {
        mine |= answer == Answer::Int(1);
        other |= answer == Answer::Int(0);
    }
    Answer::Int(match (other, mine) {
        (true, _) => 0,
        (false, true) => 1,
        (false, false) => -1,
    })
}

impl SetServer {
    /// Runs `r` at `now`, as its script (or command) does.
    pub(crate) fn run(
        &mut self,
        r: SetRequest,
        now: u64,
        len: Lengths,
        rules: ScriptRules,
        set_rules: SetRules,
    ) -> Answer {
        let keys = match r.on {
            On::Key(k) => return self.lanes[usize::from(k)].run(r.request, now, len, rules),
            On::Set(keys) => keys.map(usize::from),
        };
        for lane in &mut self.lanes {
            lane.expire(now);
        }
        match r.request {
            FairRequest::Take { value } => {
                // set/lock.lua: all or nothing; -i for the first key held,
                // with the first grant's value among the keys held.
                if let Some(i) = keys.iter().position(|&k| self.lanes[k].key.is_some()) {
                    let busy = -(i as i64 + 1);
                    let grant = keys.iter().find_map(|&k| match self.lanes[k].key {
                        Some((Held::Token(v), _)) => Some(v),
                        _ => None,
                    });
                    return match grant {
                        Some(v) => Answer::BusyHeld(busy, v),
                        None => Answer::Int(busy),
                    };
                }
                for k in keys {
                    self.lanes[k].set(Held::Token(value), now, len.ttl);
                }
                Answer::Int(1)
            }
            FairRequest::Unlock { value } => combined(keys.map(|k| {
                let lane = &mut self.lanes[k];
                match lane.key {
                    Some((Held::Token(v), _)) if v == value => {
                        lane.key = None;
                        Answer::Int(1)
                    }
                    Some(_) => Answer::Int(0),
                    None => Answer::Int(-1),
                }
            })),
            FairRequest::Unclaim { value } => {
                combined(keys.map(|k| self.lanes[k].unclaim(value, now)))
            }
            FairRequest::Release { value } => {
                combined(keys.map(|k| self.lanes[k].release(value, now, len, rules)))
            }
            FairRequest::Leave { .. } | FairRequest::Join { .. } => {
                // leave.lua answers 1 when it gave a reservation on;
                // join.lua queues at every key it is given.
                let answers = keys.map(|k| self.lanes[k].run(r.request, now, len, rules));
                answers.into_iter().max().unwrap_or(Answer::Int(0))
            }
            FairRequest::Claim { value, arrival } => {
                self.claim(keys, r.named, value, arrival, now, len, rules, set_rules)
            }
        }
    }

    /// claim.lua for a set (ARGV[6] given).
    #[allow(clippy::too_many_arguments)]
    fn claim(
        &mut self,
        keys: [usize; KEYS],
        named: u8,
        value: super::lock::Value,
        arrival: u64,
        now: u64,
        len: Lengths,
        rules: ScriptRules,
        set_rules: SetRules,
    ) -> Answer {
        let w = value.waiter();
        let later = |lane: &FairServer| {
            matches!(lane.key, Some((Held::Token(h), _))
                if h.waiter() == w && h.attempt > value.attempt)
        };
        if rules.late_claims && keys.iter().any(|&k| later(&self.lanes[k])) {
            return Answer::Int(0);
        }
        let (mut refused, mut refused_held, mut blocker) = (None, None, None);
        // The first grant's value among the keys not ours to take.
        let mut grant_held = None;
        let mut reserved = [false; KEYS];
        let mut marks = [None; KEYS];
        for (i, &k) in keys.iter().enumerate() {
            let t = self.lanes[k].ours_to_take(w, arrival, now, len.ticket, rules);
            reserved[i] = t.take && t.held == Some(Held::Next(w));
            marks[i] = t.mark;
            if !t.take {
                if refused.is_none() {
                    (refused, refused_held) = (Some(i), t.held);
                }
                if let Some(Held::Token(v)) = t.held
                    && v.waiter() != w
                    && grant_held.is_none()
                {
                    grant_held = Some(v);
                }
                if blocker.is_none() && matches!(t.held, Some(Held::Token(v)) if v.waiter() != w) {
                    blocker = Some(i);
                }
            }
        }
        let Some(refused) = refused else {
            for (i, &k) in keys.iter().enumerate() {
                let lane = &mut self.lanes[k];
                lane.grant(value, reserved[i], now, len);
                // Its place kept where it waits in line, and only there.
                if i + 1 == usize::from(named) || !set_rules.one_key {
                    lane.note(w, |n| n.offer = None);
                } else {
                    lane.drop_waiter(w);
                }
            }
            return Answer::Int(1);
        };
        for (i, &k) in keys.iter().enumerate() {
            let lane = &mut self.lanes[k];
            if i + 1 == usize::from(named) || !set_rules.one_key {
                lane.wait_in_line(w, arrival, now, len);
            } else {
                lane.drop_waiter(w);
            }
        }
        // Held out by a holder: its reservations given on at once.
        if blocker.is_some() && len.handing {
            for (i, &k) in keys.iter().enumerate() {
                let lane = &mut self.lanes[k];
                if reserved[i] && lane.first_live(now, rules, None, Some(w)).is_some() {
                    lane.hand_off(now, len, rules, None, Some(w));
                }
            }
        }
        // A free key a live waiter ahead goes first for: reserved for it
        // (once an offer).
        let lane = &mut self.lanes[keys[refused]];
        if refused_held.is_none() && len.handing && marks[refused].is_none() {
            let head = lane.queue.first().map(|&(_, h)| h);
            let offered = head
                .and_then(|h| lane.notes(h).offer)
                .is_some_and(|o| o > now);
            if !offered && head.is_some_and(|h| h != w) {
                lane.hand_off(now, len, rules, None, None);
            }
        }
        let busy = -(blocker.unwrap_or(refused) as i64 + 1);
        match grant_held {
            // Another owner's grant's value: named.
            Some(v) => Answer::BusyHeld(busy, v),
            None => Answer::Int(busy),
        }
    }
}
