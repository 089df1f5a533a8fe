//! What an election's scripts leave on one server, modelled in Rust: the
//! election's lock key (a campaign attempt's token), its term counter
//! (the lock's fencing counter) and the leader's record (token, term,
//! claim number, value). Each request runs as its Lua does
//! (`election/claim.lua`, `election/resign.lua`, `election/read.lua`, the
//! fenced `SET NX PX` with the counter's `INCR`); the differential test in
//! `el_scripts.rs` ties the two together on real servers.
//!
//! Time is a number of units (ticks for the checker, milliseconds for the
//! differential test).

use super::lock::{Names, Value};

/// A leader's record: whose token, its term, the claim's number, and
/// the value proclaimed (here the claim's number again: a value per
/// claim).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Record {
    pub(crate) token: Value,
    pub(crate) term: u64,
    pub(crate) seq: u8,
}

/// Which of the scripts' rules are on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ElRules {
    /// A claim finding a later claim of its own token (a higher term,
    /// or the same term and a higher number) leaves it (claim.lua).
    pub(crate) newer_claims_kept: bool,
    /// A grant names its servers, and a yes beside a refusal whose value
    /// names servers but not the yes-sayer's is not counted
    /// (`decide::forgetful`; see `lock::Rules::names_servers`).
    pub(crate) names_servers: bool,
    /// The same rule on a read (`majority::forget_restarted`): a view
    /// from a server that a holder's value seen on another member does
    /// not name is no answer.
    pub(crate) reads_name_servers: bool,
}

impl ElRules {
    /// The scripts' rules, as they are.
    pub(crate) const ALL: ElRules = ElRules {
        newer_claims_kept: true,
        names_servers: true,
        reads_name_servers: true,
    };
}

/// A request, as the library sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum ElRequest {
    /// `SET key value NX PX ttl`, with the counter's `SET NX`, `INCR`:
    /// a campaign's attempt.
    Take { value: Value },
    /// `election/claim.lua`: the record, where the key holds `value`.
    Claim { value: Value, term: u64, seq: u8 },
    /// `election/resign.lua`: a resignation, or a failed campaign's
    /// clean-up.
    Resign { value: Value },
    /// `election/read.lua`: a member's view, for a majority read.
    Read,
}

/// A server's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum ElAnswer {
    /// A take: set or not, and the counter after it; a refusal's
    /// holder's names, where the model tells them.
    Took {
        set: bool,
        count: u64,
        named: Option<Names>,
    },
    /// A script's integer answer.
    Int(i64),
    /// The read's view: the key's token and time left, and the record.
    View {
        holder: Option<Value>,
        left: u64,
        record: Option<Record>,
    },
}

/// One server's keys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ElServer {
    /// The lock key, and when it expires.
    pub(crate) key: Option<(Value, u64)>,
    /// The term counter (its keep outlives the model).
    pub(crate) counter: Option<u64>,
    /// The record, and when it expires (`None`: no expiry).
    pub(crate) record: Option<(Record, Option<u64>)>,
    /// Its clock runs fast: a key expires a unit early.
    pub(crate) fast: bool,
}

impl ElServer {
    /// Keys expired at `now` are gone.
    pub(crate) fn expire(&mut self, now: u64) {
        if self.key.is_some_and(|(_, until)| until <= now) {
            self.key = None;
        }
        if self
            .record
            .is_some_and(|(_, until)| until.is_some_and(|u| u <= now))
        {
            self.record = None;
        }
    }

    /// Runs `request` at `now` (`ttl`: a take's TTL), as its script (or
    /// command) does.
    pub(crate) fn run(
        &mut self,
        request: ElRequest,
        now: u64,
        ttl: u64,
        rules: ElRules,
    ) -> ElAnswer {
        self.expire(now);
        let held = self.key.map(|(v, _)| v);
        let refused = |held: Option<Value>| ElAnswer::Int(if held.is_some() { 0 } else { -1 });
        match request {
            ElRequest::Take { value } => {
                let set = held.is_none();
                if set {
                    self.key = Some((value, now + ttl - u64::from(self.fast)));
                }
                // One more than the larger of the counter and the clock
                // (µs): a counter created anew, or gone back, counts on
                // from the clock, above every count before it.
                let count = self.counter.unwrap_or(0).max(1000 * (now + 1)) + 1;
                self.counter = Some(count);
                ElAnswer::Took {
                    set,
                    count,
                    named: None,
                }
            }
            ElRequest::Claim { value, term, seq } => {
                if held != Some(value) {
                    return refused(held);
                }
                if let Some((r, _)) = self.record
                    && rules.newer_claims_kept
                    && r.token == value
                    && (r.term > term || (r.term == term && r.seq >= seq))
                {
                    return ElAnswer::Int(1);
                }
                let until = self.key.map(|(_, u)| u).filter(|&u| u > now);
                let record = Record {
                    token: value,
                    term,
                    seq,
                };
                self.record = Some((record, until));
                ElAnswer::Int(1)
            }
            ElRequest::Resign { value } => {
                if held == Some(value) {
                    self.key = None;
                }
                if self.record.is_some_and(|(r, _)| r.token == value) {
                    self.record = None;
                }
                match held {
                    Some(v) if v == value => ElAnswer::Int(1),
                    held => refused(held),
                }
            }
            ElRequest::Read => ElAnswer::View {
                holder: held,
                left: self.key.map_or(0, |(_, u)| u - now),
                record: self.record.map(|(r, _)| r),
            },
        }
    }
}
