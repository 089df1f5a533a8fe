//! The fair model's state: its clients' phases, the whole system and
//! its steps.

use super::*;

/// Where a client is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Phase {
    Idle,
    /// An attempt's round (a claim when the client is queued).
    Taking {
        value: Value,
        start: u16,
        answers: [Option<Answer>; NODES],
    },
    /// Holding, valid until `until_ms`.
    Holding {
        value: Value,
        until_ms: u64,
    },
}

/// One client.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct FairClient {
    pub(crate) phase: Phase,
    /// Acquisitions over (granted and released, or given up).
    pub(crate) done: u8,
    /// Attempts of the current acquisition.
    pub(crate) attempts: u8,
    /// Its arrival, once refused (it then claims).
    pub(crate) arrival: Option<u64>,
    /// Not crashed.
    pub(crate) alive: bool,
    /// It asked in this tick (the liveness run).
    pub(crate) asked: bool,
    /// Release messages heard since it last acquired, by the value they
    /// were sent for and the key, and how many servers sent each (the
    /// liveness run only).
    pub(crate) heard: Vec<(Value, u8, u8)>,
    /// Ticks it has waited while the lock was free for it (see
    /// [`WAIT_BOUND`]).
    pub(crate) waited: u8,
    /// A set's: the index of the key it waits in line at (its first
    /// before a majority refused it elsewhere; `engine::fair::Fair`'s
    /// `wait_at`).
    pub(crate) wait_at: usize,
    /// Per server, the run its connections last met (its run + 1; 0:
    /// never reached). A client meets every server as an attempt
    /// starts, so that its value names them (as `Engine::meet`).
    pub(crate) seen: [u8; NODES],
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct FairState {
    pub(crate) now: u16,
    pub(crate) servers: [SetServer; NODES],
    pub(crate) clients: [FairClient; CLIENTS],
    /// In flight, kept sorted (a multiset).
    pub(crate) net: Net<SetRequest>,
    pub(crate) crashes: u8,
    /// Each server's run (it changes at every restart).
    pub(crate) runs: [u8; NODES],
    pub(crate) restarts: u8,
    /// Each server's snapshot, once taken.
    pub(crate) snapshots: [Option<SetServer>; NODES],
    /// The servers each value names (its client's runs met as its
    /// attempt started).
    pub(crate) named: Named,
}

/// A step (see `lock::Action`).
#[derive(Clone, Debug)]
pub(crate) enum FairAction {
    Start(usize, u8),
    /// A step of a message in flight.
    Net(usize, Step),
    Conclude(usize, u8),
    Release(usize, u8),
    Crash(usize),
    /// Server `n` restarts empty.
    Restart(usize),
    /// Server `n` is snapshotted.
    Snapshot(usize),
    /// Server `n` restarts from its snapshot.
    RestartOlder(usize),
    Tick,
}
