//! The semaphore's protocol as a model: three servers running the
//! semaphore's scripts' Rust models ([`SemServer`]), two clients made
//! with counts of their own (one permit, and two: the case the stored
//! count is for), each taking its own slot, every request in flight at
//! once, delivered in any order (also after its round ended), lost or
//! delivered twice, server 0's clock fast by the drift, time in ticks of
//! 10 ms.
//!
//! A permit's acquisition is the lock's on its slot key, with the count's
//! check ahead of the `SET` in the same write (`PermitShape::take`): a
//! member that stores another count grants nothing, its `SET` having run
//! all the same (cleaned up as a yes would be). A holder extends (the
//! slot's extend keeping the count alive with it) or releases. The
//! verdict, validity and extend rule are the library's code
//! (`engine::decide`, `quorum::valid_until`, `quorum::after_extend`).
//!
//! Restarts (issue 66): a server may restart, empty or from a snapshot
//! of itself, within a budget; each attempt meets the servers first, so
//! that its value names their runs, a slot's refusal (`SET ... NX GET`)
//! answers its holder's names, and the client decides which yes votes
//! count with the library's `decide::forgetful`. A stored count that
//! differs names nobody: a restart beside clients made with different
//! counts is strict mode's (see the crate docs, "Restarts").
//!
//! Left out: the survey and the choice of a slot (they pick where to
//! try, never who holds), fencing, waiting.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::lock::{Answer, NODES, Names, Value};
use super::names::{self, Named, name, names_of};
use super::net::{Msg, Net, Step, Wired};
use super::sem_server::{SemRequest, SemRules, SemServer};
use crate::engine::decide::{self, Ballot};
use crate::engine::quorum;
use crate::model::explore::Model;

/// One tick of the model's clock.
const TICK_MS: u64 = 10;
/// The permit's TTL, and how long the count is kept (fencing off: the
/// TTL, `Engine::companion_keep`), in ticks.
const TTL: u16 = 4;
/// Attempts an acquisition makes before it gives up.
const ATTEMPTS: u8 = 2;
/// The drift factor (a tick over a TTL).
const FACTOR: f64 = 0.25;

/// How large a system, and which faults.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SemSize {
    /// The count each client was made with, and the slot it takes.
    pub(crate) permits: [u8; 2],
    pub(crate) slots: [u8; 2],
    /// Acquisitions each client makes.
    pub(crate) acquisitions: [u8; 2],
    /// Holders extend.
    pub(crate) extends: bool,
    pub(crate) duplicates: u8,
    pub(crate) losses: u8,
    /// The last tick time may reach.
    pub(crate) horizon: u16,
    /// The sets of servers a request may run on at once as it is sent.
    pub(crate) masks: &'static [u8],
    /// Restarts of a server, empty or from its snapshot, in all.
    pub(crate) restarts: u8,
    /// A server may be snapshotted (for a later restart from it).
    pub(crate) snapshots: bool,
    /// A round ends only once nothing of it is in flight (the restart
    /// the only fault).
    pub(crate) patient: bool,
}

/// Where a client is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum SemPhase {
    Idle,
    Taking {
        value: Value,
        start: u16,
        answers: [Option<Answer>; NODES],
    },
    /// Holding, valid until `until_ms`, with an extend under way since
    /// its start, if any.
    Holding {
        value: Value,
        until_ms: u64,
        extending: Option<(u16, [Option<bool>; NODES])>,
    },
}

/// One client.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SemClient {
    phase: SemPhase,
    done: u8,
    attempts: u8,
    /// Per server, the run it last met (+ 1; 0: never).
    seen: Names,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SemState {
    now: u16,
    servers: [SemServer; NODES],
    clients: [SemClient; 2],
    net: Net<SemRequest>,
    /// Each server's run (it changes at every restart).
    runs: [u8; NODES],
    restarts: u8,
    /// Each server's snapshot, once taken.
    snapshots: [Option<SemServer>; NODES],
    /// The servers each value names.
    named: Named,
}

/// A step.
#[derive(Clone, Debug)]
pub(crate) enum SemAction {
    Start(usize, u8),
    Net(usize, Step),
    Conclude(usize, u8),
    Extend(usize, u8),
    Release(usize, u8),
    /// Server `n` restarts empty.
    Restart(usize),
    /// Server `n` is snapshotted.
    Snapshot(usize),
    /// Server `n` restarts from its snapshot.
    RestartOlder(usize),
    Tick,
}

/// The semaphore model.
pub(crate) struct SemModel {
    pub(crate) size: SemSize,
    pub(crate) rules: SemRules,
    base: Instant,
}

impl SemModel {
    pub(crate) fn new(size: SemSize, rules: SemRules) -> SemModel {
        SemModel {
            size,
            rules,
            base: Instant::now(),
        }
    }

    fn at(&self, tick: u16) -> Instant {
        self.base + Duration::from_millis(u64::from(tick) * TICK_MS)
    }

    fn ms(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.base).as_millis() as u64
    }

    /// Client `c`'s round ends: an acquisition granted with its validity
    /// or cleaned up where it may have written; an extend's new validity.
    fn conclude(&self, s: &mut SemState, c: usize, mask: u8) {
        s.net.end_round(c);
        let slot = self.size.slots[c];
        match s.clients[c].phase.clone() {
            SemPhase::Taking {
                value,
                start,
                answers,
            } => {
                let yes = answers
                    .each_ref()
                    .map(|a| matches!(a, Some(Answer::Took { set: true, .. })));
                let forgetful = self.forgetful(s, c, yes, &answers);
                let ballots: [Ballot; NODES] = std::array::from_fn(|n| Ballot {
                    yes: (yes[n] && !forgetful[n]).then_some(1),
                    low: 1,
                });
                let count = decide::count(ballots, NODES, false);
                let ttl = Duration::from_millis(u64::from(TTL) * TICK_MS);
                let elapsed = Duration::from_millis(u64::from(s.now - start) * TICK_MS);
                let until = count
                    .reached
                    .then(|| quorum::valid_until(self.at(start), elapsed, ttl, FACTOR))
                    .flatten();
                if let Some(until) = until {
                    s.clients[c].phase = SemPhase::Holding {
                        value,
                        until_ms: self.ms(until),
                        extending: None,
                    };
                    return;
                }
                s.clients[c].phase = SemPhase::Idle;
                // Dirty: all but a sure no (a count that differs is no
                // vote, its `SET` having run: cleaned up as a yes).
                let dirty = answers.map(|a| !matches!(a, Some(Answer::Took { set: false, .. })));
                self.send(s, c, dirty, mask, SemRequest::Unlock { value, slot });
                let client = &mut s.clients[c];
                if client.attempts >= ATTEMPTS {
                    client.done += 1;
                    client.attempts = 0;
                }
                s.net.end_round(c);
            }
            SemPhase::Holding {
                value,
                until_ms,
                extending: Some((start, acks)),
            } => {
                let yes = acks.iter().filter(|a| **a == Some(true)).count();
                let confirmed =
                    yes >= quorum::quorum(NODES) && u64::from(s.now) * TICK_MS < until_ms;
                let until = quorum::after_extend(
                    self.base + Duration::from_millis(until_ms),
                    self.at(start),
                    Duration::from_millis(u64::from(TTL) * TICK_MS),
                    FACTOR,
                    confirmed,
                );
                s.clients[c].phase = SemPhase::Holding {
                    value,
                    until_ms: self.ms(until),
                    extending: None,
                };
            }
            SemPhase::Holding { .. } | SemPhase::Idle => {}
        }
    }

    /// Client `c` starts an attempt: the permit check on every server,
    /// with the `SET` behind it, both run at once on the servers of `now`.
    fn start(&self, s: &mut SemState, c: usize, now: u8) {
        let client = &mut s.clients[c];
        client.attempts += 1;
        let value = Value {
            client: c as u8,
            acquisition: client.done,
            attempt: client.attempts,
        };
        client.phase = SemPhase::Taking {
            value,
            start: s.now,
            answers: [None; NODES],
        };
        // It meets every server first: its value names them.
        client.seen = s.runs.map(|run| run + 1);
        let names = client.seen;
        name(&mut s.named, value, names);
        let check = SemRequest::Check {
            value,
            slot: self.size.slots[c],
            k: self.size.permits[c],
            keep: TTL,
            ttl: TTL,
        };
        self.send(s, c, [true; NODES], now, check);
        // Where the check ran at once, so does the `SET` behind
        // it (one write: nothing between them then; the check
        // left in flight is followed later, by its own step).
        for node in (0..NODES).filter(|n| now & (1 << n) != 0) {
            let set = s.net.msgs.iter().position(|m| {
                usize::from(m.node) == node
                    && usize::from(m.client) == c
                    && m.current
                    && matches!(m.request, SemRequest::Set { .. })
            });
            if let Some(i) = set {
                self.step(s, i, Step::Deliver);
            }
        }
    }

    fn next_state(&self, s: &SemState, action: &SemAction) -> Option<SemState> {
        let mut s = s.clone();
        match *action {
            SemAction::Start(c, now) => self.start(&mut s, c, now),
            SemAction::Net(i, step) => self.step(&mut s, i, step),
            SemAction::Conclude(c, now) => self.conclude(&mut s, c, now),
            SemAction::Extend(c, now) => {
                let SemPhase::Holding {
                    value, extending, ..
                } = &mut s.clients[c].phase
                else {
                    return None;
                };
                let value = *value;
                *extending = Some((s.now, [None; NODES]));
                let extend = SemRequest::Extend {
                    value,
                    slot: self.size.slots[c],
                    ttl: TTL,
                    keep: TTL,
                };
                self.send(&mut s, c, [true; NODES], now, extend);
            }
            SemAction::Release(c, now) => {
                let SemPhase::Holding { value, .. } = s.clients[c].phase else {
                    return None;
                };
                let client = &mut s.clients[c];
                client.phase = SemPhase::Idle;
                client.done += 1;
                client.attempts = 0;
                let slot = self.size.slots[c];
                self.send(
                    &mut s,
                    c,
                    [true; NODES],
                    now,
                    SemRequest::Unlock { value, slot },
                );
                s.net.end_round(c);
            }
            SemAction::Restart(n) | SemAction::RestartOlder(n) => {
                let empty = SemServer {
                    fast: s.servers[n].fast,
                    ..SemServer::default()
                };
                // Empty, or from its snapshot (an older copy of itself).
                let server = match action {
                    SemAction::RestartOlder(_) => s.snapshots[n].clone()?,
                    _ => empty,
                };
                names::restart(
                    (&mut s.servers, &mut s.runs, &mut s.restarts),
                    &mut s.net,
                    n,
                    server,
                );
            }
            SemAction::Snapshot(n) => s.snapshots[n] = Some(s.servers[n].clone()),
            SemAction::Tick => s.now += 1,
        }
        Some(s)
    }

    /// Which yes votes the restart rule does not count (see
    /// `model::names`): a slot's refusal names its holder's servers
    /// (another acquisition's value).
    fn forgetful(
        &self,
        s: &SemState,
        c: usize,
        yes: [bool; NODES],
        answers: &[Option<Answer>; NODES],
    ) -> [bool; NODES] {
        if !self.rules.names_servers {
            return [false; NODES];
        }
        let holders: Vec<Names> = answers
            .iter()
            .filter_map(|a| match a {
                Some(Answer::Took {
                    set: false,
                    named: Some(names),
                    ..
                }) => Some(*names),
                _ => None,
            })
            .collect();
        super::names::forgetful(s.clients[c].seen, yes, &holders)
    }
}

impl Wired for SemModel {
    type State = SemState;
    type Request = SemRequest;

    fn net(s: &mut SemState) -> &mut Net<SemRequest> {
        &mut s.net
    }

    fn arrive(&self, s: &mut SemState, m: Msg<SemRequest>, reply: bool) {
        let n = usize::from(m.node);
        // What holds the slot, for `SET ... NX GET`'s refusal.
        let holder = match m.request {
            SemRequest::Set { slot, .. } => s.servers[n].slots[usize::from(slot)]
                .filter(|&(_, until)| s.now < until)
                .map(|(v, _)| v),
            _ => None,
        };
        let answer = s.servers[n].run(m.request, s.now, self.rules);
        let c = usize::from(m.client);
        let answer = match (answer, holder) {
            (
                Answer::Took {
                    set: false, count, ..
                },
                Some(v),
            ) if !(usize::from(v.client) == c && v.acquisition == s.clients[c].done) => {
                Answer::Took {
                    set: false,
                    count,
                    named: names_of(&s.named, v),
                }
            }
            (answer, _) => answer,
        };
        if let SemRequest::Check {
            value, slot, ttl, ..
        } = m.request
        {
            // The `SET` behind it, in the same write: it runs next on
            // this connection, whatever the check answered (another
            // client's commands may come between).
            let stored = match answer {
                Answer::Int(k) => k as u8,
                _ => 0,
            };
            s.net.msgs.push(Msg {
                request: SemRequest::Set {
                    value,
                    slot,
                    ttl,
                    stored,
                },
                ..m
            });
            s.net.msgs.sort();
            return;
        }
        if !(m.current && reply) {
            return;
        }
        let answer = match m.request {
            SemRequest::Set { stored, .. } if stored > 0 => Answer::Int(i64::from(stored)),
            _ => answer,
        };
        let done = match &mut s.clients[c].phase {
            SemPhase::Taking { answers, .. } if matches!(m.request, SemRequest::Set { .. }) => {
                answers[n] = Some(answer);
                answers.iter().all(Option::is_some)
            }
            SemPhase::Holding {
                extending: Some((_, acks)),
                ..
            } if matches!(m.request, SemRequest::Extend { .. }) => {
                acks[n] = Some(answer == Answer::Int(1));
                acks.iter().all(Option::is_some)
            }
            _ => false,
        };
        if done {
            self.conclude(s, c, 0);
        }
    }
}

impl Model for SemModel {
    type State = SemState;
    type Action = SemAction;

    fn init(&self) -> SemState {
        let mut servers: [SemServer; NODES] = Default::default();
        servers[0].fast = true;
        let client = SemClient {
            phase: SemPhase::Idle,
            done: 0,
            attempts: 0,
            seen: [0; NODES],
        };
        SemState {
            now: 0,
            servers,
            clients: [client.clone(), client],
            net: Net::default(),
            runs: [0; NODES],
            restarts: 0,
            snapshots: Default::default(),
            named: Default::default(),
        }
    }

    fn actions(&self, s: &SemState, out: &mut Vec<SemAction>) {
        let masks = self.size.masks;
        for (c, client) in s.clients.iter().enumerate() {
            match client.phase {
                SemPhase::Idle if client.done < self.size.acquisitions[c] => {
                    out.extend(masks.iter().map(|&now| SemAction::Start(c, now)))
                }
                // A patient round ends once nothing of it is in flight.
                SemPhase::Taking { .. }
                | SemPhase::Holding {
                    extending: Some(_), ..
                } if !(self.size.patient
                    && s.net
                        .msgs
                        .iter()
                        .any(|m| usize::from(m.client) == c && m.current)) =>
                {
                    out.extend(masks.iter().map(|&now| SemAction::Conclude(c, now)))
                }
                SemPhase::Taking { .. } => {}
                SemPhase::Holding { until_ms, .. } => {
                    // An extend only while valid, a release whenever.
                    if self.size.extends && u64::from(s.now) * TICK_MS < until_ms {
                        out.extend(masks.iter().map(|&now| SemAction::Extend(c, now)));
                    }
                    out.extend(masks.iter().map(|&now| SemAction::Release(c, now)));
                }
                SemPhase::Idle => {}
            }
        }
        for n in 0..NODES {
            if s.restarts < self.size.restarts {
                out.push(SemAction::Restart(n));
                if s.snapshots[n].is_some() {
                    out.push(SemAction::RestartOlder(n));
                }
            }
            if self.size.snapshots && s.snapshots[n].is_none() {
                out.push(SemAction::Snapshot(n));
            }
        }
        let budgets = (self.size.losses, self.size.duplicates);
        let tick = (s.now < self.size.horizon).then_some(SemAction::Tick);
        s.net.steps_then(budgets, out, SemAction::Net, tick);
    }

    fn next(&self, s: &SemState, action: &SemAction) -> Option<SemState> {
        self.next_state(s, action)
    }

    /// More valid permits than a holder's count allows.
    fn broken(&self, s: &SemState) -> Option<String> {
        let now_ms = u64::from(s.now) * TICK_MS;
        let valid: Vec<usize> = (0..2)
            .filter(|&c| {
                matches!(s.clients[c].phase,
                    SemPhase::Holding { until_ms, .. } if now_ms < until_ms)
            })
            .collect();
        let over = valid
            .iter()
            .find(|&&c| valid.len() > usize::from(self.size.permits[c]))?;
        Some(format!(
            "{} valid permits at {now_ms} ms, client {over} of a semaphore of {}",
            valid.len(),
            self.size.permits[*over]
        ))
    }

    fn describe(&self, s: &SemState, action: &SemAction) -> String {
        let mut line = format!("t={:>3} ms  ", u64::from(s.now) * TICK_MS);
        let after = self.next_state(s, action);
        let at_once = |mask: u8| match mask {
            0 => String::new(),
            _ => format!(
                ", running at once on server(s) {:?}, keys now {}",
                (0..NODES)
                    .filter(|n| mask & (1 << n) != 0)
                    .collect::<Vec<_>>(),
                after.as_ref().map_or_else(String::new, |after| after
                    .servers
                    .iter()
                    .map(held)
                    .collect::<Vec<_>>()
                    .join("; "))
            ),
        };
        let _ = match *action {
            SemAction::Net(i, step) => {
                let m = s.net.msgs[i];
                let late = !m.current && matches!(m.request, SemRequest::Check { .. });
                let what = step.says(late);
                let mut server = s.servers[usize::from(m.node)].clone();
                let answer = server.run(m.request, s.now, self.rules);
                write!(
                    line,
                    "client {}'s {:?} to server {}: {what}, answers {answer:?}, keys {}",
                    m.client,
                    m.request,
                    m.node,
                    held(&server)
                )
            }
            SemAction::Start(c, now) => write!(
                line,
                "client {c} (count {}) asks for slot {}{}",
                self.size.permits[c],
                self.size.slots[c],
                at_once(now)
            ),
            SemAction::Conclude(c, now) => write!(
                line,
                "client {c} ends its round ({:?}){}",
                s.clients[c].phase,
                at_once(now)
            ),
            SemAction::Extend(c, now) => write!(line, "client {c} extends{}", at_once(now)),
            SemAction::Release(c, now) => write!(line, "client {c} releases{}", at_once(now)),
            SemAction::Restart(n) => write!(line, "server {n} restarts empty"),
            SemAction::Snapshot(n) => {
                write!(
                    line,
                    "server {n} takes a snapshot ({})",
                    held(&s.servers[n])
                )
            }
            SemAction::RestartOlder(n) => write!(
                line,
                "server {n} restarts from its snapshot ({})",
                s.snapshots[n].as_ref().map_or_else(String::new, held)
            ),
            SemAction::Tick => write!(line, "{TICK_MS} ms pass"),
        };
        line
    }
}

/// A server's count and slots, for people.
fn held(server: &SemServer) -> String {
    let count = match server.count {
        Some((k, until)) => format!("count {k} until {}", u64::from(until) * TICK_MS),
        None => "no count".into(),
    };
    let slots: Vec<String> = server
        .slots
        .iter()
        .map(|slot| match slot {
            Some((v, until)) => format!("{v:?} until {}", u64::from(*until) * TICK_MS),
            None => "free".into(),
        })
        .collect();
    format!("{count}, slots [{}]", slots.join(", "))
}
