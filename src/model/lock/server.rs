//! A lock server as the model runs it: its key, counters and store,
//! and what each request does there (the scripts, modelled).

use super::*;
use crate::base::node_error::{Cause, NodeError};
use crate::engine::pipeline::Answer as Answered;

/// The application's store, where holders write with their fencing
/// token (`fence::Fence`, `fence/set.lua`): the highest token seen, and
/// the latest grant (by the order grants were made) whose write it took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Store {
    pub(crate) seen: Option<u64>,
    pub(crate) latest: Option<u8>,
}

impl Store {
    /// `fence/set.lua`: writes when `token` is at least the highest seen
    /// (and notes it); answers 1 when it wrote, 0 when refused.
    pub(crate) fn write(&mut self, token: u64, rules: Rules) -> Answer {
        if rules.fence_compares && self.seen.is_some_and(|seen| token < seen) {
            return Answer::Int(0);
        }
        self.seen = Some(token);
        Answer::Int(1)
    }
}

/// The value a key holds: whose, which acquisition, which attempt.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Value {
    pub(crate) client: u8,
    pub(crate) acquisition: u8,
    pub(crate) attempt: u8,
}

impl std::fmt::Debug for Value {
    /// `c1/a0#2`: client 1's first acquisition, its second attempt.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "c{}/a{}#{}", self.client, self.acquisition, self.attempt)
    }
}

/// The servers an acquisition's value names (see
/// `holder::server_names`): each server's run, plus one (0: unknown).
pub(crate) type Names = [u8; NODES];

/// One server: the lock key and its fencing counter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Server {
    /// The value, and the tick it expires at (gone from then on).
    pub(crate) key: Option<(Value, u16)>,
    /// The servers the key's value names.
    pub(crate) names: Names,
    /// The fencing counter (its keep outlives the model).
    pub(crate) counter: Option<u64>,
    /// Its run: a restart starts another.
    pub(crate) run: u8,
    /// Its clock runs fast by a tick over a TTL.
    pub(crate) fast: bool,
    /// The tick its run started (none: long before the model's start).
    pub(crate) started: Option<u16>,
}

impl Value {
    /// As the key holds it (the form of a token's `#attempt` tail).
    pub(crate) fn bytes(&self) -> Vec<u8> {
        format!("{self:?}").into_bytes()
    }

    /// A value back from its bytes (`c1/a0#2`).
    pub(crate) fn parse(token: &str) -> Value {
        let digits: Vec<u8> = token
            .split(|c: char| !c.is_ascii_digit())
            .filter(|d| !d.is_empty())
            .map(|d| d.parse().unwrap())
            .collect();
        Value {
            client: digits[0],
            acquisition: digits[1],
            attempt: digits[2],
        }
    }
}

/// A request, as the library sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Request {
    /// `SET key value NX GET PX ttl`, with the count script behind it
    /// when fenced: answers the count, whether it set, and what a refusal
    /// found (the value's names); `names`, the servers the value names.
    Take {
        value: Value,
        ttl: u16,
        fenced: bool,
        names: Names,
        /// Counted by `INCR` in the script's place (a connection that
        /// counted the counter by the script: `members::request::Counts`).
        by_incr: bool,
    },
    /// `lock/raise.lua`: the counter up to `to` where the key holds
    /// `value`.
    Raise { value: Value, to: u64 },
    /// `lock/extend.lua`.
    Extend { value: Value, ttl: u16 },
    /// `lock/unlock.lua` (a release, or a failed attempt's clean-up).
    Unlock { value: Value },
    /// `fence/set.lua` on the store: a holder's write, with its token
    /// and its grant's number (the order grants were made in).
    Write { token: u64, grant: u8 },
}

/// A server's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Answer {
    /// A take: set or not, and the counter after it (0 unfenced); a
    /// refusal's holder's names, where the model tells them.
    Took {
        set: bool,
        count: u64,
        named: Option<Names>,
    },
    /// A script's integer answer.
    Int(i64),
    /// A fair claim's refusal that names the value holding the key.
    Held(Value),
    /// A set's refusal (`-i` for its busy key i) that names the value
    /// holding that key (an attempt's; a reservation reads as `Int`).
    BusyHeld(i64, Value),
    /// A failure: what the client makes of the answer of a server it
    /// keeps out of votes (the restart quarantine).
    Failed,
}

impl Server {
    /// The key as it stands at `now`.
    pub(super) fn held(&self, now: u16) -> Option<Value> {
        self.key.filter(|&(_, until)| now < until).map(|(v, _)| v)
    }

    /// The tick a key set at `now` for `ttl` expires at, on this clock.
    pub(super) fn expiry(&self, now: u16, ttl: u16) -> u16 {
        now + ttl - u16::from(self.fast)
    }

    /// Runs `request` at `now`, as the script (or command) does.
    pub(crate) fn run(&mut self, request: Request, now: u16, rules: Rules) -> Answer {
        if self.held(now).is_none() {
            self.key = None;
        }
        match request {
            Request::Take {
                value,
                ttl,
                fenced,
                names,
                by_incr,
            } => {
                let set = self.key.is_none();
                let named = (!set).then_some(self.names);
                if set {
                    self.key = Some((value, self.expiry(now, ttl)));
                    self.names = names;
                }
                let mut count = 0;
                if fenced {
                    // One more than the larger of the counter and the
                    // clock (µs): a counter created anew, or gone back,
                    // counts on from the clock, above every count before
                    // it.
                    let clock = match rules.count_from_clock {
                        true => 1000 * u64::from(now + 1),
                        false => 0,
                    };
                    count = match (self.counter, by_incr) {
                        (Some(c), true) => c + 1,
                        (None, true) => 1,
                        (Some(c), false) => c.max(clock) + 1,
                        (None, false) => 1000 * u64::from(now + 1) + 1,
                    };
                    self.counter = Some(count);
                }
                Answer::Took { set, count, named }
            }
            Request::Raise { value, to } => {
                if rules.raise_checks_value && self.held(now) != Some(value) {
                    return Answer::Int(0);
                }
                self.counter = Some(self.counter.map_or(to, |c| c.max(to)));
                Answer::Int(1)
            }
            Request::Extend { value, ttl } => match self.key {
                Some((held, until)) if held == value => {
                    let to = self.expiry(now, ttl);
                    let to = if rules.raise_only_extends {
                        until.max(to)
                    } else {
                        to
                    };
                    self.key = Some((held, to));
                    Answer::Int(1)
                }
                Some(_) => Answer::Int(0),
                None => Answer::Int(-1),
            },
            Request::Unlock { value } => match self.key {
                Some((held, _)) if held == value => {
                    self.key = None;
                    Answer::Int(1)
                }
                Some(_) => Answer::Int(0),
                None => Answer::Int(-1),
            },
            // For the store ([`Store::write`]), never a lock server.
            Request::Write { .. } => Answer::Failed,
        }
    }
}

impl Value {
    pub(super) fn swapped(self) -> Value {
        Value {
            client: 1 - self.client,
            ..self
        }
    }
}

impl Request {
    pub(super) fn swapped(self) -> Request {
        match self {
            Request::Take {
                value,
                ttl,
                fenced,
                names,
                by_incr,
            } => Request::Take {
                value: value.swapped(),
                ttl,
                fenced,
                names,
                by_incr,
            },
            Request::Raise { value, to } => Request::Raise {
                value: value.swapped(),
                to,
            },
            Request::Extend { value, ttl } => Request::Extend {
                value: value.swapped(),
                ttl,
            },
            Request::Unlock { value } => Request::Unlock {
                value: value.swapped(),
            },
            Request::Write { .. } => self,
        }
    }
}

/// A model server's answer to a take as the library's members' layer
/// decodes it (`SET ... NX GET` and the count: a yes with the count, 1
/// unfenced; a no), for the library's own vote reading. A server kept
/// out after a restart fails, and so does a request with no answer: as
/// an unsettled failure (it may have run), a superset of the library,
/// which writes a clean-up behind a request that timed out and counts
/// that settled (the model sends it with the attempt's clean-up instead).
pub(super) fn as_said(answer: Option<&Answer>) -> Answered {
    Some(match answer {
        Some(Answer::Took {
            set: true, count, ..
        }) => Ok(Said::Yes((*count).max(1))),
        Some(Answer::Took { set: false, .. }) => Ok(Said::No),
        Some(Answer::Failed) => Err(NodeError::classify(
            "model".into(),
            Cause::Restarted("kept out of votes".into()),
            false,
            Duration::ZERO,
        )),
        Some(_) | None => Err(unanswered()),
    })
}

/// A request whose answer did not come (it may have run).
pub(super) fn unanswered() -> NodeError {
    NodeError::classify(
        "model".into(),
        crate::members::conn::timed_out(),
        false,
        Duration::ZERO,
    )
}
