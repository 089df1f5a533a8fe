//! The fair lock's protocol as a model, and sets' beside locks: three
//! servers running the fair scripts' Rust models for two lock keys, `a`
//! and `b` ([`SetServer`], a [`FairServer`] lane per key; the fair lock's
//! runs use `a` alone), two fair clients, each wanting the lock of one key
//! or the set of both ([`FairSize::wants`]), every request
//! in flight at once, delivered in any order (also after its round
//! ended), lost or delivered twice, server 0's lock key expiring a tick
//! early (its clock fast by the drift), time in ticks of 10 ms.
//!
//! A client's acquisition is as the library's (`engine::fair::attempt`):
//! its first attempt a plain `SET NX`; refused, it joins the queue on
//! every server and claims from then on; a failed attempt is cleaned up
//! where it may have written (a claim's clean-up puts back a reservation
//! it took); granted by some servers only, or giving up, it leaves the
//! queues; its release hands the key to the first live waiter. The
//! verdict and validity are the library's code (`engine::decide`,
//! `quorum::valid_until`).
//!
//! A set waits in line where the library's code says
//! (`pipeline::most_busy`, `set::waits_next`, `set::named`).
//!
//! The liveness runs ([`FairSize::synchronous`]) have no network faults
//! and no timeouts; their clients ask once a tick and when woken (the
//! wake on release), one may crash, and a live waiter must not wait longer
//! than the size's bound ([`WAIT_BOUND`] for the fair lock) for a lock
//! free for it: nobody alive holds a key it wants, or is ahead of it in
//! line and able to take what it waits for (a set in line that needs a
//! key the waiter holds is not: waiting for it is a deadlock).
//!
//! Restarts (issue 66): a server may restart empty, or from a snapshot
//! of itself taken earlier (an older copy), within a budget; each attempt
//! meets the servers first, so that its value names their runs, and a
//! yes beside a refusal whose value names other runs is not counted
//! (`decide::forgetful`, [`FairRules::names_servers`]).
//!
//! Left out: fencing, the wake messages in the safety runs (a
//! waiter may ask at any moment, which covers any timing of them), and
//! the release that knows of no waiter (the plain unlock, then the
//! hand-off: the model always sends the hand-off).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::fair_server::{FairRequest, FairServer, Held, Lengths, ScriptRules};
use super::lock::{Answer, CLIENTS, NODES, Names, Value};
use super::names::{self, Named, name, names_of};
use super::set_server::{KEYS, On, SetRequest, SetRules, SetServer};
use crate::engine::decide::{self, Ballot};
use crate::engine::{pipeline, quorum};
use crate::model::explore::Model;
use crate::model::net::{Msg, Net, Step, Wired};
use crate::shapes::set;

/// One tick of the model's clock.
const TICK_MS: u64 = 10;
/// The lock's TTL, a ticket's life and a reservation's, in ticks.
pub(crate) const LENGTHS: Lengths = Lengths {
    ttl: 4,
    ticket: 3,
    reserve: 1,
    every: None,
    handing: true,
};
/// The drift factor (a tick over a TTL).
const FACTOR: f64 = 0.25;
/// Every set of servers a request may run on at once.
const MASKS: [u8; 1 << NODES] = [0, 1, 2, 3, 4, 5, 6, 7];

/// The rules past flaws made; each can be turned off to show the checker
/// finds the flaw.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FairRules {
    /// Each attempt writes a value of its own.
    pub(crate) per_attempt_values: bool,
    /// The scripts' rules (a late claim changes nothing).
    pub(crate) scripts: ScriptRules,
    /// The sets' rules (a set waits in line at one key).
    pub(crate) sets: SetRules,
    /// A grant names its servers, and a yes beside a refusal whose value
    /// names servers but not the yes-sayer's is not counted
    /// (`decide::forgetful`; see `lock::Rules::names_servers`).
    pub(crate) names_servers: bool,
}

impl FairRules {
    pub(crate) const ALL: FairRules = FairRules {
        per_attempt_values: true,
        scripts: ScriptRules::ALL,
        sets: SetRules::ALL,
        names_servers: true,
    };
}

/// How large a system, and which faults.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FairSize {
    /// Acquisitions each client makes.
    pub(crate) acquisitions: [u8; CLIENTS],
    /// Requests delivered twice, in all.
    pub(crate) duplicates: u8,
    /// Messages lost, in all.
    pub(crate) losses: u8,
    /// The last tick time may reach.
    pub(crate) horizon: u16,
    /// Where the run starts: from nothing, or (to reach deeper
    /// schedules) client 0 holding the lock, granted by every server at
    /// 0 ms, and client 1 refused by them and queued on each.
    pub(crate) contended: bool,
    /// Releases yield a key handed on for this many ticks
    /// (`fair_yield`; `None`: never) while a client that cannot queue
    /// says it waits, else for [`PROBE`](super::fair_server::PROBE)
    /// times that.
    pub(crate) yield_every: Option<u64>,
    /// A client that cannot queue waits for every key and says so
    /// throughout (it listens on each name's `:-` channel): a release
    /// must not hand a key on along a chain due for a yield.
    pub(crate) outsider_listens: bool,
    /// The sets of servers a request may run on at once as it is sent
    /// (a shortcut; the others are delivered one step each).
    pub(crate) masks: &'static [u8],
    /// Attempts an acquisition makes before it gives up.
    pub(crate) attempts: u8,
    /// Clients that may crash (stop for good), in all.
    pub(crate) crashes: u8,
    /// The liveness run: no timeouts, every request answered within its
    /// tick (a tick passes only when nothing is in flight and every live
    /// waiter has asked in it), and a live waiter that the lock is free
    /// for, nobody alive ahead of it, waits at most [`WAIT_BOUND`] ticks.
    pub(crate) synchronous: bool,
    /// What each client's acquisitions are for: the lock key `a`
    /// (`On::Key(0)`), `b`, or a set of both.
    pub(crate) wants: [On; CLIENTS],
    /// Client [`HOLDER`] holds `a` throughout (granted before the run,
    /// valid past its end), while its acquisitions ask for what it
    /// wants.
    pub(crate) holds_a: bool,
    /// Which clients' acquisitions claim from their first attempt on
    /// (the library's, when its manager's threads waited for the name
    /// lately).
    pub(crate) claims_first: [bool; CLIENTS],
    /// Managers wake waiters on release (`wake_on_release`): claims
    /// hand keys on (see [`Lengths::handing`]). Without it an acquisition
    /// never claims first (nothing tells that threads waited lately).
    pub(crate) handing: bool,
    /// `b` holds the token of a client that died until this tick (it
    /// expires; nobody releases it).
    pub(crate) b_dead_until: Option<u64>,
    /// The liveness run's bound: the longest, in ticks, a live waiter may
    /// wait for a lock free for it (see [`WAIT_BOUND`], one reservation:
    /// the fair lock's; the runs of sets have their own).
    pub(crate) wait_bound: u8,
    /// Restarts of a server, empty or from its snapshot, in all (each
    /// a new run: the connections to it die with what is in flight).
    pub(crate) restarts: u8,
    /// A server may be snapshotted (its state then, for a later restart
    /// from it: an older copy).
    pub(crate) snapshots: bool,
    /// A round ends only once every request of it that is still in
    /// flight has run (none lost, no server slow: a restart is the only
    /// fault, see `lock::Size::patient`).
    pub(crate) patient: bool,
}

/// Every client's acquisitions lock `a`; nobody claims first; claims
/// hand keys on (the sizes of the fair lock's runs).
pub(crate) const LOCK_OF_A: FairSize = FairSize {
    acquisitions: [1, 1],
    duplicates: 0,
    losses: 0,
    horizon: 3,
    contended: false,
    yield_every: None,
    outsider_listens: false,
    masks: EVERY_MASK,
    attempts: 3,
    crashes: 0,
    synchronous: false,
    wants: [On::Key(0), On::Key(0)],
    holds_a: false,
    claims_first: [false, false],
    handing: true,
    b_dead_until: None,
    wait_bound: WAIT_BOUND,
    restarts: 0,
    snapshots: false,
    patient: false,
};

/// The longest a live waiter waits, in ticks, while nobody alive holds
/// the lock or is ahead of it in line, and no token holds the key on a
/// majority (a crashed holder's, until its TTL): a dead waiter's
/// reservation (a hand-off's offer), the library's account ("a dead
/// waiter costs one reservation"; see hand.lua). A waiter asks once a
/// tick, and at once when a hand-off tells it (the wake on release).
pub(crate) const WAIT_BOUND: u8 = LENGTHS.reserve as u8;

/// Every set of servers.
pub(crate) const EVERY_MASK: &[u8] = &MASKS;
/// None or all.
pub(crate) const NONE_OR_ALL: &[u8] = &[0, 7];
/// All.
pub(crate) const ALL_AT_ONCE: &[u8] = &[7];

/// The fair lock model.
pub(crate) struct FairModel {
    pub(crate) size: FairSize,
    pub(crate) rules: FairRules,
    base: Instant,
}

/// The key a set's refusal names (its `-i`), as the library reads it.
fn busy(answer: &Option<Answer>) -> Option<usize> {
    match answer {
        Some(Answer::Int(i) | Answer::BusyHeld(i, _)) if *i < 0 => Some((-*i - 1) as usize),
        _ => None,
    }
}

/// Whether `answer` says no for sure (nothing of the attempt's written).
fn refusal(answer: &Option<Answer>) -> bool {
    matches!(
        answer,
        Some(
            Answer::Took { set: false, .. }
                | Answer::Int(..=0)
                | Answer::Held(_)
                | Answer::BusyHeld(..)
        )
    )
}

fn yes(answer: &Option<Answer>) -> bool {
    matches!(
        answer,
        Some(Answer::Took { set: true, .. }) | Some(Answer::Int(1))
    )
}

impl FairModel {
    pub(crate) fn new(size: FairSize, rules: FairRules) -> FairModel {
        FairModel {
            size,
            rules,
            base: Instant::now(),
        }
    }

    /// The scripts' lengths, with the size's yield and hand-offs.
    fn lengths(&self) -> Lengths {
        Lengths {
            every: self.size.yield_every,
            handing: self.size.handing,
            ..LENGTHS
        }
    }

    /// Client `c`'s `request`, for what it wants; a set's claim names
    /// where it waits in line (`shapes::set::named`).
    fn keyed(&self, s: &FairState, c: usize, request: FairRequest) -> SetRequest {
        let on = self.size.wants[c];
        let named = match on {
            On::Set(_) => set::named(s.clients[c].wait_at, &[0, 1]) as u8,
            On::Key(_) => 0,
        };
        SetRequest { on, request, named }
    }

    /// Where client `c` joins the line: a set at the one key it waits
    /// at (at every key with that rule off), a lock at its key.
    fn join_on(&self, s: &FairState, c: usize) -> On {
        match self.size.wants[c] {
            On::Set(keys) if self.rules.sets.one_key => On::Key(keys[s.clients[c].wait_at]),
            on => on,
        }
    }

    /// The keys of `on`.
    fn keys(on: On) -> &'static [u8] {
        match on {
            On::Key(0) => &[0],
            On::Key(_) => &[1],
            On::Set(_) => &[0, 1],
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.base + Duration::from_millis(ms)
    }

    /// Client `c`'s attempt ends: granted with its validity, or cleaned
    /// up, and its place in line taken, kept or left.
    fn conclude(&self, s: &mut FairState, c: usize, mask: u8) {
        let Phase::Taking {
            value,
            start,
            answers,
        } = s.clients[c].phase
        else {
            return;
        };
        s.net.end_round(c);
        let forgetful = self.forgetful(s, c, &answers);
        let ballots: [Ballot; NODES] = std::array::from_fn(|n| Ballot {
            yes: (yes(&answers[n]) && !forgetful[n]).then_some(1),
            low: 1,
        });
        let count = decide::count(ballots, NODES, false);
        let ttl = Duration::from_millis(LENGTHS.ttl * TICK_MS);
        let elapsed = Duration::from_millis(u64::from(s.now - start) * TICK_MS);
        let start_at = self.at(u64::from(start) * TICK_MS);
        let until = count
            .reached
            .then(|| quorum::valid_until(start_at, elapsed, ttl, FACTOR))
            .flatten();
        let all = [true; NODES];
        let queued = s.clients[c].arrival.is_some();
        let leave = self.keyed(s, c, FairRequest::Leave { value });
        if let Some(until) = until {
            let until_ms = until.saturating_duration_since(self.base).as_millis() as u64;
            s.clients[c].phase = Phase::Holding { value, until_ms };
            s.clients[c].waited = 0;
            s.clients[c].heard.clear();
            if queued && count.granted < NODES {
                self.send(s, c, all, mask, leave);
            }
            s.net.end_round(c);
            return;
        }
        // Failed: cleaned up wherever it may have written (the round is
        // over first: the clean-up's answers are not the attempt's).
        s.clients[c].phase = Phase::Idle;
        let dirty = answers.map(|a| !refusal(&a));
        let cleanup = match queued {
            true => FairRequest::Unclaim { value },
            false => FairRequest::Unlock { value },
        };
        let cleanup = self.keyed(s, c, cleanup);
        self.send(s, c, dirty, mask, cleanup);
        // `Taken` (`quorum::Tally::acquire_error`): the refusals alone
        // rule a quorum out. Only then does a waiter join the queue (a
        // set at the key a majority refused it at, `pipeline::most_busy`).
        let refusals = answers.iter().filter(|a| refusal(a)).count();
        let taken = quorum::ruled_out(refusals, NODES);
        let answered = answers.iter().filter(|a| a.is_some()).count();
        let blocked = match self.size.wants[c] {
            On::Set(_) => pipeline::most_busy(answers.iter().map(busy), KEYS),
            On::Key(_) => None,
        };
        let client = &mut s.clients[c];
        let mut leaves = false;
        // Where a set waits in line next (`engine::fair::attempt`).
        let next = set::waits_next(client.wait_at, blocked.filter(|_| taken));
        if taken && queued {
            client.wait_at = next;
        } else if !queued && taken {
            let arrival = u64::from(s.now);
            client.arrival = Some(arrival);
            client.wait_at = next;
            let join = SetRequest {
                on: self.join_on(s, c),
                ..self.keyed(s, c, FairRequest::Join { value, arrival })
            };
            self.send(s, c, all, mask, join);
        } else if queued && answered < quorum::quorum(NODES) {
            // Cut off: it steps out of line (its arrival stays).
            leaves = true;
        }
        let client = &mut s.clients[c];
        if client.attempts >= self.size.attempts {
            // It gives up: out of line everywhere.
            leaves = client.arrival.is_some();
            client.done += 1;
            client.attempts = 0;
            client.arrival = None;
            client.wait_at = 0;
        }
        if leaves {
            self.send(s, c, all, mask, leave);
        }
        s.net.end_round(c);
    }

    fn next_state(&self, s: &FairState, action: &FairAction) -> Option<FairState> {
        let mut s = s.clone();
        match *action {
            FairAction::Start(c, now) => {
                let client = &mut s.clients[c];
                client.attempts += 1;
                client.asked = self.size.synchronous;
                let value = Value {
                    client: c as u8,
                    acquisition: client.done,
                    attempt: if self.rules.per_attempt_values {
                        client.attempts
                    } else {
                        0
                    },
                };
                client.phase = Phase::Taking {
                    value,
                    start: s.now,
                    answers: [None; NODES],
                };
                // It meets every server first: its value names them.
                client.seen = s.runs.map(|run| run + 1);
                let names = client.seen;
                name(&mut s.named, value, names);
                if self.size.claims_first[c] && client.arrival.is_none() {
                    client.arrival = Some(u64::from(s.now));
                }
                let request = match client.arrival {
                    Some(arrival) => FairRequest::Claim { value, arrival },
                    None => FairRequest::Take { value },
                };
                let request = self.keyed(&s, c, request);
                self.send(&mut s, c, [true; NODES], now, request);
            }
            FairAction::Net(i, step) => self.step(&mut s, i, step),
            FairAction::Conclude(c, now) => self.conclude(&mut s, c, now),
            FairAction::Release(c, now) => {
                let Phase::Holding { value, .. } = s.clients[c].phase else {
                    return None;
                };
                let client = &mut s.clients[c];
                client.phase = Phase::Idle;
                client.done += 1;
                client.attempts = 0;
                client.arrival = None;
                client.wait_at = 0;
                // Its next acquisition asks anew.
                client.asked = false;
                let release = self.keyed(&s, c, FairRequest::Release { value });
                self.send(&mut s, c, [true; NODES], now, release);
                s.net.end_round(c);
            }
            FairAction::Crash(c) => {
                s.crashes += 1;
                s.clients[c].alive = false;
            }
            FairAction::Restart(n) | FairAction::RestartOlder(n) => {
                // Empty, or from its snapshot (an older copy of itself).
                let mut server = match action {
                    FairAction::RestartOlder(_) => s.snapshots[n].clone()?,
                    _ => SetServer::default(),
                };
                // Its clock, the listeners (who subscribe again), and what
                // the run saw, outlive it.
                for (lane, old) in server.lanes.iter_mut().zip(&s.servers[n].lanes) {
                    (lane.fast, lane.listening, lane.passed_over) =
                        (old.fast, old.listening, old.passed_over);
                }
                names::restart(
                    (&mut s.servers, &mut s.runs, &mut s.restarts),
                    &mut s.net,
                    n,
                    server,
                );
            }
            FairAction::Snapshot(n) => s.snapshots[n] = Some(s.servers[n].clone()),
            FairAction::Tick => {
                for c in 0..CLIENTS {
                    let free = self.size.synchronous && self.waits(&s, c) && self.free_for(&s, c);
                    let client = &mut s.clients[c];
                    client.waited = if free { client.waited + 1 } else { 0 };
                    client.asked = false;
                }
                s.now += 1;
            }
        }
        Some(s)
    }

    /// Which yes answers the restart rule does not count, by the
    /// library's verdict (`decide::forgetful`), on the runs client `c`
    /// met and the holders its refusals found (other clients' values:
    /// each names the servers its own client met; this acquisition's
    /// own earlier values say nothing, as `give_holders` has it).
    fn forgetful(
        &self,
        s: &FairState,
        c: usize,
        answers: &[Option<Answer>; NODES],
    ) -> [bool; NODES] {
        if !self.rules.names_servers {
            return [false; NODES];
        }
        let client = &s.clients[c];
        let mine = |v: &Value| usize::from(v.client) == c && v.acquisition == client.done;
        let holders: Vec<Names> = answers
            .iter()
            .filter_map(|a| match a {
                Some(Answer::Held(v) | Answer::BusyHeld(_, v)) if !mine(v) => {
                    names_of(&s.named, *v)
                }
                Some(Answer::Took {
                    set: false,
                    named: Some(names),
                    ..
                }) => Some(*names),
                _ => None,
            })
            .collect();
        super::names::forgetful(client.seen, answers.each_ref().map(yes), &holders)
    }

    /// Whether client `c` is alive and wants the lock (between attempts;
    /// the liveness run has no other moment at a tick).
    fn waits(&self, s: &FairState, c: usize) -> bool {
        let client = &s.clients[c];
        client.alive
            && !matches!(client.phase, Phase::Holding { .. })
            && client.done < self.size.acquisitions[c]
    }

    /// Whether the lock is free for client `c` (see [`WAIT_BOUND`]).
    fn free_for(&self, s: &FairState, c: usize) -> bool {
        let now = u64::from(s.now);
        let wants = Self::keys(self.size.wants[c]);
        let taken = wants.iter().any(|&k| {
            let tokens = s
                .servers
                .iter()
                .filter(|v| {
                    matches!(v.lanes[usize::from(k)].key,
                        Some((Held::Token(_), until)) if until > now)
                })
                .count();
            tokens >= quorum::quorum(NODES)
        });
        let me = &s.clients[c];
        // Whether client `d` validly holds the key `k`.
        let holds = |d: usize, k: u8| {
            (d == HOLDER && k == 0 && self.size.holds_a)
                || (Self::keys(self.size.wants[d]).contains(&k)
                    && matches!(s.clients[d].phase,
                        Phase::Holding { until_ms, .. } if now * TICK_MS < until_ms))
        };
        // Another client keeps the lock from `c` when it is alive and
        // holds a key `c` wants, or is ahead of it in line for one and
        // can take what it waits for (a set that waits for a key `c`
        // holds cannot: should it keep `c` waiting, that is a deadlock).
        let kept = |d: usize| {
            let other = &s.clients[d];
            let ahead = match (other.arrival, me.arrival) {
                (Some(a), Some(b)) => (a, d) < (b, c),
                (Some(_), None) => true,
                (None, _) => false,
            };
            let theirs = Self::keys(self.size.wants[d]);
            let shared = wants.iter().any(|k| theirs.contains(k));
            let stuck = theirs.iter().any(|&k| holds(c, k));
            other.alive && (wants.iter().any(|&k| holds(d, k)) || (shared && ahead && !stuck))
        };
        !taken && !(0..CLIENTS).any(|d| d != c && kept(d))
    }

    /// Whether time may pass: in the liveness run, only once nothing is
    /// in flight and every live client that waits has asked in this tick.
    fn may_tick(&self, s: &FairState) -> bool {
        s.now < self.size.horizon
            && (!self.size.synchronous
                || (s.net.msgs.is_empty()
                    && (0..CLIENTS).all(|c| {
                        let client = &s.clients[c];
                        !client.alive
                            || (!matches!(client.phase, Phase::Taking { .. })
                                && (client.asked || !self.waits(s, c)))
                    })))
    }
}

/// The client that holds `a` throughout in the runs of sets
/// ([`FairSize::holds_a`]), and the acquisition number of its token
/// there.
pub(crate) const HOLDER: usize = 1;
const HOLDS_A: u8 = 9;

/// The lock keys' names, for people.
const KEY_NAMES: [&str; KEYS] = ["a", "b"];

impl FairModel {
    /// Whether the run has two keys (sets, or a lock of `b`).
    fn two_keys(&self) -> bool {
        self.size.holds_a || self.size.wants != [On::Key(0); CLIENTS]
    }

    /// What a server's lock keys hold, for people.
    fn shown(&self, server: &SetServer) -> String {
        let key = |k: usize| held(server.lanes[k].key.map(|(h, _)| h));
        // With two keys, who waits in line for each.
        let line = |k: usize| match &server.lanes[k].queue[..] {
            [] => String::new(),
            queue => format!(
                " (in line: {})",
                queue
                    .iter()
                    .map(|(_, w)| format!("{w:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        match self.two_keys() {
            false => format!("key {}", key(0)),
            true => format!("[a {}{}, b {}{}]", key(0), line(0), key(1), line(1)),
        }
    }
}

/// What a lock key holds, for people.
fn held(key: Option<Held>) -> String {
    match key {
        Some(Held::Token(v)) => format!("{v:?}"),
        Some(Held::Next(w)) => format!("reserved for {w:?}"),
        None => "free".into(),
    }
}

mod checked;
mod state;
mod wire;

pub(crate) use state::{FairAction, FairClient, FairState, Phase};
