//! What the read-write lock's scripts leave on one server, modelled in
//! Rust: the lock key (a writer's token, or the readers' mark) and the
//! readers' sorted set (each reader's token scored by its deadline). Each
//! request runs as its Lua does (`rwlock/read.lua`, `rwlock/unread.lua`,
//! the writer's `SET NX PX` and `lock/unlock.lua`); the differential test
//! in `rw_scripts.rs` ties the two together on real servers.
//!
//! Time is a number of units (ticks for the checker, milliseconds for the
//! differential test); the server's `TIME` reads the caller's `now`.

use super::lock::{Answer, Value};

/// What the lock key holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum RwHeld {
    /// A writer's token.
    Writer(Value),
    /// The readers' mark (`READERS_MARK`).
    Readers,
}

impl RwHeld {
    /// As the key holds it.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        match self {
            RwHeld::Writer(v) => v.bytes(),
            RwHeld::Readers => crate::base::keys::READERS_MARK.to_vec(),
        }
    }
}

/// Which of the scripts' rules are on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RwRules {
    /// A read makes the lock key last at least its TTL (`PTTL < ttl`
    /// in read.lua), not only when it creates the key.
    pub(crate) key_covers_readers: bool,
}

impl RwRules {
    /// The scripts' rules, as they are.
    pub(crate) const ALL: RwRules = RwRules {
        key_covers_readers: true,
    };
}

/// A request, as the library sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum RwRequest {
    /// `rwlock/read.lua`: a reader's attempt.
    Read { value: Value },
    /// `rwlock/unread.lua`: a reader's release, or a failed read's
    /// clean-up.
    Unread { value: Value },
    /// `SET key value NX PX ttl`: a writer's attempt.
    Write { value: Value },
    /// `lock/unlock.lua`: a writer's release, or its clean-up.
    Unlock { value: Value },
}

impl RwRequest {
    /// The value (the attempt) it is sent for.
    pub(crate) fn value(&self) -> Value {
        match *self {
            RwRequest::Read { value }
            | RwRequest::Unread { value }
            | RwRequest::Write { value }
            | RwRequest::Unlock { value } => value,
        }
    }
}

/// One server's keys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RwServer {
    /// The lock key, and when it expires (gone from then on).
    pub(crate) key: Option<(RwHeld, u64)>,
    /// The readers: token and deadline, in the tokens' order.
    pub(crate) readers: Vec<(Value, u64)>,
    /// When the readers' key expires (`None`: no expiry, or no key).
    pub(crate) readers_until: Option<u64>,
    /// Its clock runs fast: every length it is given ends a unit early.
    pub(crate) fast: bool,
}

impl RwServer {
    /// Keys expired at `now` are gone.
    pub(crate) fn expire(&mut self, now: u64) {
        if self.key.is_some_and(|(_, until)| until <= now) {
            self.key = None;
        }
        if self.readers_until.is_some_and(|u| u <= now) {
            self.readers.clear();
            self.readers_until = None;
        }
    }

    /// `len` as this server's clock measures it from `now`.
    fn after(&self, now: u64, len: u64) -> u64 {
        now + len - u64::from(self.fast)
    }

    /// Runs `request` at `now` (`ttl`: the TTL a read or write asks), as
    /// its script (or command) does.
    pub(crate) fn run(&mut self, request: RwRequest, now: u64, ttl: u64, rules: RwRules) -> Answer {
        self.expire(now);
        match request {
            RwRequest::Write { value } => {
                let set = self.key.is_none();
                if set {
                    self.key = Some((RwHeld::Writer(value), self.after(now, ttl)));
                }
                Answer::Took {
                    set,
                    count: 0,
                    named: None,
                }
            }
            RwRequest::Unlock { value } => match self.key {
                Some((RwHeld::Writer(v), _)) if v == value => {
                    self.key = None;
                    Answer::Int(1)
                }
                Some(_) => Answer::Int(0),
                None => Answer::Int(-1),
            },
            RwRequest::Read { value } => {
                let held = self.key;
                if let Some((RwHeld::Writer(v), _)) = held {
                    // Refused, naming the writer's value.
                    return Answer::Held(v);
                }
                let deadline = self.after(now, ttl);
                // ZADD: a new sorted set has no expiry.
                if self.readers.is_empty() {
                    self.readers_until = None;
                }
                match self.readers.binary_search_by_key(&value, |(v, _)| *v) {
                    Ok(at) => self.readers[at].1 = deadline,
                    Err(at) => self.readers.insert(at, (value, deadline)),
                }
                let short = held.is_some_and(|(_, until)| until - now < ttl);
                if held.is_none() || (rules.key_covers_readers && short) {
                    self.key = Some((RwHeld::Readers, deadline));
                    self.readers_until = Some(deadline);
                }
                Answer::Int(1)
            }
            RwRequest::Unread { value } => {
                let mine = self
                    .readers
                    .iter()
                    .find(|(v, _)| *v == value)
                    .map(|&(_, d)| d);
                self.readers.retain(|(v, _)| *v != value);
                if self.readers.is_empty() {
                    self.readers_until = None;
                }
                if let Some((RwHeld::Readers, _)) = self.key {
                    match self.readers.iter().map(|&(_, d)| d).max() {
                        Some(last) if last > now => {
                            self.readers.retain(|&(_, d)| d > now);
                            self.key = Some((RwHeld::Readers, last));
                            self.readers_until = Some(last);
                        }
                        _ => {
                            self.key = None;
                            self.readers.clear();
                            self.readers_until = None;
                        }
                    }
                }
                Answer::Int(if mine.is_some_and(|d| d > now) { 1 } else { -1 })
            }
        }
    }
}
