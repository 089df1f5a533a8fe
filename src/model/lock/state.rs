//! The lock model's state: its messages, its clients' phases, the whole
//! system and its steps, with the state's mirror (clients swapped).

use super::*;

/// A request in flight to `node`, from `client`'s current round or an
/// earlier one, on a connection to the server's run `run`. Its reply is
/// not a message of its own: it reaches the client at once if the client
/// still waits for that round, or never (a reply delayed past the round's
/// end, or lost, is one the client never reads; the server ran the
/// request all the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Message {
    pub(crate) node: u8,
    pub(crate) client: u8,
    /// Of the client's current round (else of one it ended: which one
    /// does not matter, and is not kept, so that states that differ only
    /// in it are one).
    pub(crate) current: bool,
    pub(crate) run: u8,
    pub(crate) request: Request,
}

/// Where a client is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Between acquisitions.
    Idle,
    /// An attempt's first round: the answers so far.
    Taking {
        value: Value,
        start: u16,
        answers: [Option<Answer>; NODES],
    },
    /// Its raise round.
    Raising {
        value: Value,
        start: u16,
        ballots: [Ballot; NODES],
        raised: [Option<bool>; NODES],
        /// The members that may hold the value (a yes, or no answer).
        dirty: [bool; NODES],
    },
    /// Holding, valid until `until_ms` (on the model's clock), with an
    /// extend round of `ttl` under way since `start` if any.
    Holding {
        value: Value,
        until_ms: u64,
        token: u64,
        extending: Option<(u16, u16, [Option<bool>; NODES])>,
        /// Its grant's number, and whether it wrote to the store (runs
        /// with writes only: 0 and false otherwise).
        grant: u8,
        wrote: bool,
    },
}

/// One client.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Client {
    pub(crate) phase: Phase,
    pub(crate) acquisitions: u8,
    pub(crate) attempts: u8,
    /// Per server: what its last handshake there read.
    pub(crate) seen: [Seen; NODES],
    /// The servers its acquisition's value names (its runs as seen when
    /// the acquisition began).
    pub(crate) names: Names,
    /// Per server: the run in which it counted the counter by the
    /// script, as its connection there learned (see
    /// [`Rules::incr_in_the_counted_run`]).
    pub(crate) counted: [Option<u8>; NODES],
}

/// What a client's connections told of one server (its handshakes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Seen {
    /// The run last seen (none: never reached).
    pub(crate) run: Option<u8>,
    /// It was seen to change (a restart witnessed).
    pub(crate) witnessed: bool,
    /// The tick of the handshake that read it, and the uptime the server
    /// reported then, in ms on its own clock (none: long).
    pub(crate) at: u16,
    pub(crate) uptime_ms: Option<u32>,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct State {
    pub(crate) now: u16,
    pub(crate) servers: [Server; NODES],
    pub(crate) clients: [Client; CLIENTS],
    /// In flight, kept sorted (a multiset).
    pub(crate) net: Vec<Message>,
    /// The highest fencing token granted so far.
    pub(crate) last_token: u64,
    /// A grant whose token was not above every earlier one: (earlier,
    /// this).
    pub(crate) backwards: Option<(u64, u64)>,
    pub(crate) restarts: u8,
    pub(crate) duplicates: u8,
    pub(crate) losses: u8,
    /// The store, the grants made so far (runs with writes), and a write
    /// of an earlier grant taken after one of a later grant: (earlier,
    /// later).
    pub(crate) store: Store,
    pub(crate) grants: u8,
    pub(crate) stale: Option<(u8, u8)>,
    /// Each server's snapshot, once taken.
    pub(crate) snapshots: [Option<Server>; NODES],
    /// A moved address: which client's connection to which server now
    /// reaches the spare, and the spare.
    pub(crate) moved: Option<(u8, u8)>,
    pub(crate) spare: Server,
    /// In runs with moves: a token granted while fewer than a quorum of
    /// the servers (the spare not counted) held a counter that high, and
    /// how many did.
    pub(crate) thin: Option<(u64, usize)>,
    /// In runs with a failover: the member failed over, once it is (its
    /// new master is `spare`), and which clients' connections to it
    /// reach the new master.
    pub(crate) failover: Option<u8>,
    pub(crate) on_new: [bool; CLIENTS],
}

/// A step.
#[derive(Clone, Debug)]
pub(crate) enum Action {
    /// A client starts an acquisition (or its next attempt); what it
    /// sends runs at once on the servers of the mask (see
    /// [`LockModel::send`]), so do the clean-ups or raises of `Conclude`
    /// and the requests of `Extend` and `Release`.
    Start(usize, u8),
    /// Request `i` of the network arrives (and its reply, if the client
    /// still waits for it).
    Deliver(usize),
    /// Request `i` arrives, its reply is lost.
    DeliverMute(usize),
    /// Request `i` arrives and stays in flight (delivered again later).
    Duplicate(usize),
    /// Request `i` is lost.
    Lose(usize),
    /// A client stops waiting for its round (answers or node timeout).
    Conclude(usize, u8),
    /// A holder extends by `ttl` ticks.
    Extend(usize, u16, u8),
    /// A holder releases.
    Release(usize, u8),
    /// A holder sends its write to the store (it stays in flight).
    Write(usize),
    /// Client `c`'s connection to server `n` now reaches the spare.
    Move(usize, usize),
    /// A server restarts: empty, or with its data (`true`).
    Restart(usize, bool),
    /// Server `n` is snapshotted (its state now, for a later restart
    /// from it).
    Snapshot(usize),
    /// Server `n` restarts from its snapshot.
    RestartOlder(usize),
    /// Member `n` fails over to a replica promoted with its snapshot's
    /// state; its old master stays up.
    Failover(usize),
    /// Client `c`'s connection to the member failed over now reaches its
    /// new master.
    Reconnect(usize),
    /// Time moves on a tick.
    Tick,
}

/// The server client `c`'s connection to member `n` reaches: the member's
/// new master once the client's connection moved there after a failover,
/// else its server.
pub(crate) fn reached(s: &State, c: usize, n: usize) -> &Server {
    match s.failover == Some(n as u8) && s.on_new[c] {
        true => &s.spare,
        false => &s.servers[n],
    }
}

/// Whether `m` goes to a failed-over member's new master (a connection
/// to its run).
pub(crate) fn promoted(s: &State, m: &Message) -> bool {
    s.failover == Some(m.node) && s.spare.run == m.run
}

/// Client `c` reaches server `n` and learns its run (a restart cut its
/// connections: it reconnects and reads the new one).
pub(crate) fn meet(s: &mut State, c: usize, n: usize) {
    let server = reached(s, c, n);
    let run = server.run;
    // The uptime it reports, on its own clock (fast by the drift).
    let rate = if server.fast { 1.0 + FACTOR } else { 1.0 };
    let uptime_ms = server
        .started
        .map(|t| (f64::from((s.now - t) as u32 * TICK_MS as u32) * rate) as u32);
    let seen = &mut s.clients[c].seen[n];
    if seen.run != Some(run) {
        *seen = Seen {
            run: Some(run),
            witnessed: seen.run.is_some(),
            at: s.now,
            uptime_ms,
        };
    }
}

/// Whether client `c`'s round still awaits an answer that can come: a
/// request of it in flight to a server of the run it was sent to.
pub(crate) fn awaits(s: &State, c: usize) -> bool {
    s.net.iter().any(|m| {
        usize::from(m.client) == c
            && m.current
            && usize::from(m.node) < NODES
            && (s.servers[usize::from(m.node)].run == m.run || promoted(s, m))
    })
}

impl State {
    /// The same state with the two clients' names swapped (they behave
    /// alike: a state and its mirror are explored once).
    pub(crate) fn swapped(&self) -> State {
        let mut s = self.clone();
        s.clients.swap(0, 1);
        let snapshots = s.snapshots.iter_mut().flatten();
        for server in s.servers.iter_mut().chain([&mut s.spare]).chain(snapshots) {
            if let Some((value, until)) = server.key {
                server.key = Some((value.swapped(), until));
            }
        }
        if let Some((c, _)) = &mut s.moved {
            *c = 1 - *c;
        }
        s.on_new.swap(0, 1);
        for m in &mut s.net {
            m.client = 1 - m.client;
            m.request = m.request.swapped();
        }
        s.net.sort();
        for client in &mut s.clients {
            match &mut client.phase {
                Phase::Idle => {}
                Phase::Taking { value, .. }
                | Phase::Raising { value, .. }
                | Phase::Holding { value, .. } => *value = value.swapped(),
            }
        }
        s
    }

    /// The least of the state and its mirror.
    pub(crate) fn canonical(self) -> State {
        let mirror = self.swapped();
        self.min(mirror)
    }
}
