//! The election model's size, state and steps.

use super::*;

/// How large a system, and which faults.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ElSize {
    /// Campaigns each candidate makes (one attempt each).
    pub(crate) campaigns: [u8; 2],
    /// Proclaims a leader makes.
    pub(crate) proclaims: u8,
    /// Reads the observer makes.
    pub(crate) reads: u8,
    /// Requests delivered twice, in all.
    pub(crate) duplicates: u8,
    /// Messages lost, in all.
    pub(crate) losses: u8,
    /// The last tick time may reach.
    pub(crate) horizon: u16,
    /// The sets of servers a request may run on at once as it is sent.
    pub(crate) masks: &'static [u8],
    /// Validity allows for clock drift (the library's factor; off only
    /// to show the checker finds two leaders without it).
    pub(crate) drift: bool,
    /// Restarts of a server, empty or from its snapshot, in all.
    pub(crate) restarts: u8,
    /// A server may be snapshotted (for a later restart from it).
    pub(crate) snapshots: bool,
    /// A round ends only once nothing of it is in flight (the restart
    /// the only fault).
    pub(crate) patient: bool,
}

/// A claim round that succeeded: whose, the term and claim number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Claimed {
    pub(crate) leader: u8,
    pub(crate) term: u64,
    pub(crate) seq: u8,
}

/// Where an actor is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum ElPhase {
    Idle,
    /// A campaign's attempt (sent running at once on `mask`: its claim
    /// round, should it end answered, runs there at once too).
    Taking {
        value: Value,
        start: u16,
        answers: [Option<ElAnswer>; NODES],
        mask: u8,
    },
    /// Elected (valid until `until_ms`, term `term`); a claim round for
    /// claim number `seq` under way, or none (`answers` is `None`).
    Leading {
        value: Value,
        until_ms: u64,
        term: u64,
        seq: u8,
        answers: Option<[Option<ElAnswer>; NODES]>,
    },
    /// The observer's read, and the claim it must see (see the module's
    /// properties).
    Reading {
        answers: [Option<ElAnswer>; NODES],
        floor: Option<Claimed>,
    },
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ElState {
    pub(crate) now: u16,
    pub(crate) servers: [ElServer; NODES],
    /// Two candidates, then the observer.
    pub(crate) phases: [ElPhase; 3],
    /// Campaigns (candidates) or reads (the observer) over.
    pub(crate) done: [u8; 3],
    /// The latest claim round that succeeded.
    pub(crate) claimed: Option<Claimed>,
    pub(crate) net: Net<ElRequest>,
    /// A read that broke the property: what it found.
    pub(crate) misread: Option<String>,
    /// Each server's run (it changes at every restart).
    pub(crate) runs: [u8; NODES],
    pub(crate) restarts: u8,
    /// Each server's snapshot, once taken.
    pub(crate) snapshots: [Option<ElServer>; NODES],
    /// The servers each value names, and the runs each actor last met
    /// (+ 1; 0: never).
    pub(crate) named: Named,
    pub(crate) seen: [Names; 3],
}

/// A step.
#[derive(Clone, Debug)]
pub(crate) enum ElAction {
    Start(usize, u8),
    Proclaim(usize, u8),
    Resign(usize, u8),
    Read(u8),
    /// A step of a message in flight.
    Net(usize, Step),
    Conclude(usize, u8),
    /// Server `n` restarts empty.
    Restart(usize),
    /// Server `n` is snapshotted.
    Snapshot(usize),
    /// Server `n` restarts from its snapshot.
    RestartOlder(usize),
    Tick,
}
