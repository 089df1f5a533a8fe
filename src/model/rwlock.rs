//! The read-write lock's protocol as a model: three servers running the
//! read-write scripts' Rust models ([`RwServer`]), a reader and a writer,
//! every request in flight at once, delivered in any
//! order (also after its round ended), lost or delivered twice, server
//! 0's clock fast by the drift, time in ticks of 10 ms.
//!
//! A client's acquisition is as the library's: a read is `read.lua` on
//! every member, a write the lock's `SET NX PX`; a failed attempt is
//! cleaned up (`unread.lua`, `unlock.lua`) wherever it may have written;
//! a holder releases, or is abandoned (a guard leaked, a process that
//! died), its keys left to expire. The verdict and validity are the
//! library's code (`engine::decide`, `quorum::valid_until`).
//!
//! Left out: the waiting writer's flag (it only refuses readers; safety
//! never depends on it, as `RwLock`'s docs argue), read extends,
//! restarts, fencing (readers have none), and fair writers.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::fair::EVERY_MASK;
use super::lock::{Answer, NODES, Value};
use super::rw_server::{RwHeld, RwRequest, RwRules, RwServer};
use crate::engine::decide::{self, Ballot};
use crate::engine::quorum;
use crate::model::explore::Model;
use crate::model::net::{Msg, Net, Step, Wired};

/// One tick of the model's clock.
const TICK_MS: u64 = 10;
/// The TTL, in ticks.
const TTL: u64 = 4;
/// Attempts an acquisition makes before it gives up.
const ATTEMPTS: u8 = 2;
/// The drift factor (a tick over a TTL).
const FACTOR: f64 = 0.25;

/// The rules past flaws made; each can be turned off to show the checker
/// finds the flaw.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RwModelRules {
    /// Each attempt writes a token of its own.
    pub(crate) per_attempt_values: bool,
    /// The scripts' rules.
    pub(crate) scripts: RwRules,
}

impl RwModelRules {
    pub(crate) const ALL: RwModelRules = RwModelRules {
        per_attempt_values: true,
        scripts: RwRules::ALL,
    };
}

/// How large a system, and which faults.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RwSize {
    /// Which clients read (the others write).
    pub(crate) reads: [bool; 2],
    /// Acquisitions each client makes.
    pub(crate) acquisitions: [u8; 2],
    /// Requests delivered twice, in all.
    pub(crate) duplicates: u8,
    /// Messages lost, in all.
    pub(crate) losses: u8,
    /// The last tick time may reach.
    pub(crate) horizon: u16,
    /// The sets of servers a request may run on at once as it is sent.
    pub(crate) masks: &'static [u8],
}

/// The default size: a reader of two acquisitions and a writer of one,
/// every set of servers at once, 30 ms.
pub(crate) const RW: RwSize = RwSize {
    reads: [true, false],
    acquisitions: [2, 1],
    duplicates: 0,
    losses: 0,
    horizon: 3,
    masks: EVERY_MASK,
};

/// Where a client is.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum RwPhase {
    Idle,
    Taking {
        value: Value,
        start: u16,
        answers: [Option<Answer>; NODES],
    },
    Holding {
        value: Value,
        until_ms: u64,
    },
}

/// One client.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RwClient {
    phase: RwPhase,
    done: u8,
    attempts: u8,
    /// Guards abandoned (never released): each still counts as held
    /// until its validity ends.
    abandoned: Vec<u64>,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RwState {
    now: u16,
    servers: [RwServer; NODES],
    clients: [RwClient; 2],
    net: Net<RwRequest>,
}

/// A step.
#[derive(Clone, Debug)]
pub(crate) enum RwAction {
    Start(usize, u8),
    /// A step of a message in flight.
    Net(usize, Step),
    Conclude(usize, u8),
    Release(usize, u8),
    Abandon(usize),
    Tick,
}

/// The read-write lock model.
pub(crate) struct RwModel {
    pub(crate) size: RwSize,
    pub(crate) rules: RwModelRules,
    base: Instant,
}

impl RwModel {
    pub(crate) fn new(size: RwSize, rules: RwModelRules) -> RwModel {
        RwModel {
            size,
            rules,
            base: Instant::now(),
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.base + Duration::from_millis(ms)
    }

    /// Client `c`'s attempt ends: granted with its validity, or cleaned
    /// up where it may have written.
    fn conclude(&self, s: &mut RwState, c: usize, mask: u8) {
        let RwPhase::Taking {
            value,
            start,
            answers,
        } = s.clients[c].phase
        else {
            return;
        };
        s.net.end_round(c);
        let yes = |a: &Option<Answer>| {
            matches!(
                a,
                Some(Answer::Took { set: true, .. }) | Some(Answer::Int(1))
            )
        };
        let ballots = answers.map(|a| Ballot {
            yes: yes(&a).then_some(1),
            low: 1,
        });
        let count = decide::count(ballots, NODES, false);
        let ttl = Duration::from_millis(TTL * TICK_MS);
        let elapsed = Duration::from_millis(u64::from(s.now - start) * TICK_MS);
        let start_at = self.at(u64::from(start) * TICK_MS);
        let until = count
            .reached
            .then(|| quorum::valid_until(start_at, elapsed, ttl, FACTOR))
            .flatten();
        if let Some(until) = until {
            let until_ms = until.saturating_duration_since(self.base).as_millis() as u64;
            s.clients[c].phase = RwPhase::Holding { value, until_ms };
            return;
        }
        s.clients[c].phase = RwPhase::Idle;
        // Dirty: every member that did not answer no.
        let dirty = answers.map(|a| {
            !matches!(
                a,
                Some(Answer::Took { set: false, .. } | Answer::Int(..=0) | Answer::Held(_))
            )
        });
        let cleanup = match self.size.reads[c] {
            true => RwRequest::Unread { value },
            false => RwRequest::Unlock { value },
        };
        self.send(s, c, dirty, mask, cleanup);
        let client = &mut s.clients[c];
        if client.attempts >= ATTEMPTS {
            client.done += 1;
            client.attempts = 0;
        }
        s.net.end_round(c);
    }

    fn next_state(&self, s: &RwState, action: &RwAction) -> Option<RwState> {
        let mut s = s.clone();
        match *action {
            RwAction::Start(c, now) => {
                let client = &mut s.clients[c];
                client.attempts += 1;
                let value = Value {
                    client: c as u8,
                    acquisition: client.done,
                    attempt: if self.rules.per_attempt_values {
                        client.attempts
                    } else {
                        0
                    },
                };
                client.phase = RwPhase::Taking {
                    value,
                    start: s.now,
                    answers: [None; NODES],
                };
                let request = match self.size.reads[c] {
                    true => RwRequest::Read { value },
                    false => RwRequest::Write { value },
                };
                self.send(&mut s, c, [true; NODES], now, request);
            }
            RwAction::Net(i, step) => self.step(&mut s, i, step),
            RwAction::Conclude(c, now) => self.conclude(&mut s, c, now),
            RwAction::Release(c, now) => {
                let RwPhase::Holding { value, .. } = s.clients[c].phase else {
                    return None;
                };
                let request = match self.size.reads[c] {
                    true => RwRequest::Unread { value },
                    false => RwRequest::Unlock { value },
                };
                let client = &mut s.clients[c];
                client.phase = RwPhase::Idle;
                client.done += 1;
                client.attempts = 0;
                self.send(&mut s, c, [true; NODES], now, request);
                s.net.end_round(c);
            }
            RwAction::Abandon(c) => {
                let RwPhase::Holding { until_ms, .. } = s.clients[c].phase else {
                    return None;
                };
                let client = &mut s.clients[c];
                client.phase = RwPhase::Idle;
                client.done += 1;
                client.attempts = 0;
                client.abandoned.push(until_ms);
            }
            RwAction::Tick => s.now += 1,
        }
        Some(s)
    }
}

impl Wired for RwModel {
    type State = RwState;
    type Request = RwRequest;

    fn net(s: &mut RwState) -> &mut Net<RwRequest> {
        &mut s.net
    }

    fn arrive(&self, s: &mut RwState, m: Msg<RwRequest>, reply: bool) {
        let n = usize::from(m.node);
        let answer = s.servers[n].run(m.request, u64::from(s.now), TTL, self.rules.scripts);
        let c = usize::from(m.client);
        if m.current
            && reply
            && let RwPhase::Taking { answers, .. } = &mut s.clients[c].phase
        {
            answers[n] = Some(answer);
            if answers.iter().all(Option::is_some) {
                self.conclude(s, c, 0);
            }
        }
    }
}

impl Model for RwModel {
    type State = RwState;
    type Action = RwAction;

    fn init(&self) -> RwState {
        let mut servers: [RwServer; NODES] = Default::default();
        servers[0].fast = true;
        let client = RwClient {
            phase: RwPhase::Idle,
            done: 0,
            attempts: 0,
            abandoned: Vec::new(),
        };
        RwState {
            now: 0,
            servers,
            clients: [client.clone(), client],
            net: Net::default(),
        }
    }

    fn actions(&self, s: &RwState, out: &mut Vec<RwAction>) {
        let masks = self.size.masks;
        for (c, client) in s.clients.iter().enumerate() {
            match client.phase {
                RwPhase::Idle if client.done < self.size.acquisitions[c] => {
                    out.extend(masks.iter().map(|&now| RwAction::Start(c, now)))
                }
                RwPhase::Taking { .. } => {
                    out.extend(masks.iter().map(|&now| RwAction::Conclude(c, now)))
                }
                RwPhase::Holding { .. } => {
                    out.extend(masks.iter().map(|&now| RwAction::Release(c, now)));
                    out.push(RwAction::Abandon(c));
                }
                RwPhase::Idle => {}
            }
        }
        let budgets = (self.size.losses, self.size.duplicates);
        let tick = (s.now < self.size.horizon).then_some(RwAction::Tick);
        s.net.steps_then(budgets, out, RwAction::Net, tick);
    }

    fn next(&self, s: &RwState, action: &RwAction) -> Option<RwState> {
        self.next_state(s, action)
    }

    fn broken(&self, s: &RwState) -> Option<String> {
        let now_ms = u64::from(s.now) * TICK_MS;
        // Valid guards: (client, reads).
        let mut valid = Vec::new();
        for (c, client) in s.clients.iter().enumerate() {
            let holding = matches!(client.phase,
                RwPhase::Holding { until_ms, .. } if now_ms < until_ms);
            let left = client.abandoned.iter().filter(|&&u| now_ms < u).count();
            for _ in 0..usize::from(holding) + left {
                valid.push((c, self.size.reads[c]));
            }
        }
        let writers = valid.iter().filter(|(_, reads)| !reads).count();
        let readers = valid.len() - writers;
        (writers > 1 || (writers == 1 && readers > 0)).then(|| {
            format!("{writers} writer(s) and {readers} reader(s) hold valid guards at {now_ms} ms")
        })
    }

    fn describe(&self, s: &RwState, action: &RwAction) -> String {
        let mut line = format!("t={:>3} ms  ", u64::from(s.now) * TICK_MS);
        let after = self.next_state(s, action);
        let at_once = |mask: u8| match mask {
            0 => String::new(),
            _ => format!(
                ", running at once on server(s) {:?}, keys now {}",
                (0..NODES)
                    .filter(|n| mask & (1 << n) != 0)
                    .collect::<Vec<_>>(),
                after.as_ref().map_or_else(String::new, keys)
            ),
        };
        let role = |c: usize| {
            if self.size.reads[c] {
                "reader"
            } else {
                "writer"
            }
        };
        let _ = match *action {
            RwAction::Net(i, step) => {
                let m = s.net.msgs[i];
                let late = !m.current
                    && matches!(m.request, RwRequest::Read { .. } | RwRequest::Write { .. });
                let what = step.says(late);
                let mut server = s.servers[usize::from(m.node)].clone();
                let answer = server.run(m.request, u64::from(s.now), TTL, self.rules.scripts);
                write!(
                    line,
                    "{} {}'s {:?} to server {}: {what}, answers {answer:?}, key {}",
                    role(usize::from(m.client)),
                    m.client,
                    m.request,
                    m.node,
                    held(&server)
                )
            }
            RwAction::Start(c, now) => {
                write!(line, "{} {c} starts an attempt{}", role(c), at_once(now))
            }
            RwAction::Conclude(c, now) => write!(
                line,
                "{} {c} ends its round ({:?}){}",
                role(c),
                s.clients[c].phase,
                at_once(now)
            ),
            RwAction::Release(c, now) => {
                write!(line, "{} {c} releases{}", role(c), at_once(now))
            }
            RwAction::Abandon(c) => write!(
                line,
                "{} {c} abandons its guard ({:?}): its keys expire",
                role(c),
                s.clients[c].phase
            ),
            RwAction::Tick => write!(line, "{TICK_MS} ms pass"),
        };
        line
    }
}

/// A server's lock key and readers, for people.
fn held(server: &RwServer) -> String {
    let key = match server.key {
        Some((RwHeld::Writer(v), until)) => format!("{v:?} until {}", until * TICK_MS),
        Some((RwHeld::Readers, until)) => format!("readers' mark until {}", until * TICK_MS),
        None => "free".into(),
    };
    let readers: Vec<String> = server
        .readers
        .iter()
        .map(|(v, d)| format!("{v:?} to {}", d * TICK_MS))
        .collect();
    match readers.is_empty() {
        true => key,
        false => format!("{key}, readers [{}]", readers.join(", ")),
    }
}

/// Every server's keys, for people.
fn keys(s: &RwState) -> String {
    s.servers.iter().map(held).collect::<Vec<_>>().join("; ")
}
