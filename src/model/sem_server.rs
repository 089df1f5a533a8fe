//! What a semaphore's scripts leave on one server, modelled in Rust: its
//! stored count (`semaphore/permits.lua`) and two slot keys, each a lock
//! key (`SET NX PX`, `lock/extend.lua` keeping the count alive with it,
//! `lock/unlock.lua`). A permit's take is the count's check and the
//! slot's `SET NX` behind it in one write: two commands the server runs
//! one after the other, which another client's may come between (the
//! model delivers them as two messages). The differential test in
//! `sem_scripts.rs` ties them to the Lua.
//!
//! Time is in ticks; a fast server's keys expire a tick early.

use super::lock::{Answer, Value};

/// The slots.
pub(crate) const SLOTS: usize = 2;

/// A request, as the library sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum SemRequest {
    /// `permits.lua` with the client's count `k`, kept `keep` ticks; the
    /// slot's `SET NX PX` follows it.
    Check {
        value: Value,
        slot: u8,
        k: u8,
        keep: u16,
        ttl: u16,
    },
    /// The `SET slot value NX PX ttl` behind a check, which answered
    /// `stored` (0: it passed; else the count another client stored).
    Set {
        value: Value,
        slot: u8,
        ttl: u16,
        stored: u8,
    },
    /// `lock/extend.lua` on the slot, the count its companion, kept
    /// `keep` ticks where it has less than `ttl` left.
    Extend {
        value: Value,
        slot: u8,
        ttl: u16,
        keep: u16,
    },
    /// `lock/unlock.lua` on the slot (a release or a clean-up).
    Unlock { value: Value, slot: u8 },
}

/// Which of the rules past flaws made are on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SemRules {
    /// A take checks the stored count (`permits.lua` ahead of the
    /// `SET`): a server that stores another count grants nothing.
    pub(crate) count_checked: bool,
    /// An extend keeps the stored count alive with the slot.
    pub(crate) count_kept: bool,
    /// A grant names its servers, and a yes beside a refusal whose value
    /// names servers but not the yes-sayer's is not counted
    /// (`decide::forgetful`; see `lock::Rules::names_servers`).
    pub(crate) names_servers: bool,
}

impl SemRules {
    pub(crate) const ALL: SemRules = SemRules {
        count_checked: true,
        count_kept: true,
        names_servers: true,
    };
}

/// One server's keys.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SemServer {
    /// The stored count, and the tick it expires at.
    pub(crate) count: Option<(u8, u16)>,
    /// Each slot's value, and the tick it expires at.
    pub(crate) slots: [Option<(Value, u16)>; SLOTS],
    /// Its clock runs fast: keys expire a tick early.
    pub(crate) fast: bool,
}

impl SemServer {
    /// The tick a key set at `now` for `len` expires at.
    fn expiry(&self, now: u16, len: u16) -> u16 {
        now + len - u16::from(self.fast)
    }

    /// Keys expired at `now` are gone.
    pub(crate) fn expire(&mut self, now: u16) {
        if self.count.is_some_and(|(_, until)| until <= now) {
            self.count = None;
        }
        for slot in &mut self.slots {
            if slot.is_some_and(|(_, until)| until <= now) {
                *slot = None;
            }
        }
    }

    /// `PEXPIRE key len` where `PTTL key < len` (a key that exists).
    fn keep(&self, until: &mut u16, now: u16, len: u16) {
        if *until - now < len {
            *until = self.expiry(now, len);
        }
    }

    /// Runs `request` at `now`, as its script (or command) does; a
    /// check's answer is the count stored where it differs, else 0.
    pub(crate) fn run(&mut self, request: SemRequest, now: u16, rules: SemRules) -> Answer {
        self.expire(now);
        match request {
            SemRequest::Check { k, keep, .. } => {
                if !rules.count_checked {
                    return Answer::Int(0);
                }
                match self.count {
                    Some((stored, _)) if stored != k => Answer::Int(i64::from(stored)),
                    Some((_, mut until)) => {
                        self.keep(&mut until, now, keep);
                        self.count = Some((k, until));
                        Answer::Int(0)
                    }
                    None => {
                        self.count = Some((k, self.expiry(now, keep)));
                        Answer::Int(0)
                    }
                }
            }
            SemRequest::Set {
                value, slot, ttl, ..
            } => {
                let slot = &mut self.slots[usize::from(slot)];
                let set = slot.is_none();
                if set {
                    *slot = Some((value, now + ttl - u16::from(self.fast)));
                }
                Answer::Took {
                    set,
                    count: 0,
                    named: None,
                }
            }
            SemRequest::Extend {
                value,
                slot,
                ttl,
                keep,
            } => match self.slots[usize::from(slot)] {
                Some((held, mut until)) if held == value => {
                    self.keep(&mut until, now, ttl);
                    self.slots[usize::from(slot)] = Some((held, until));
                    if let Some((k, mut until)) = self.count
                        && rules.count_kept
                    {
                        // The companion: kept where it has less than the
                        // TTL left.
                        if until - now < ttl {
                            until = self.expiry(now, keep);
                        }
                        self.count = Some((k, until));
                    }
                    Answer::Int(1)
                }
                Some(_) => Answer::Int(0),
                None => Answer::Int(-1),
            },
            SemRequest::Unlock { value, slot } => match self.slots[usize::from(slot)] {
                Some((held, _)) if held == value => {
                    self.slots[usize::from(slot)] = None;
                    Answer::Int(1)
                }
                Some(_) => Answer::Int(0),
                None => Answer::Int(-1),
            },
        }
    }
}
