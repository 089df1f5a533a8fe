//! An election's protocol as a model: three servers running the election
//! scripts' Rust models ([`ElServer`]), two candidates and an observer,
//! every request in flight at once, delivered in any order (also after
//! its round ended), lost or delivered twice, server 0's clock fast by
//! the drift, time in ticks of 10 ms.
//!
//! A candidate campaigns as `Election::try_campaign` does (one attempt):
//! a fenced `SET NX` on every member, the library's verdict (the term is the highest count
//! granted) and validity; elected, a claim round writes its record (claim
//! number 1); a claim round short of a quorum, or ending past the
//! validity, fails the campaign, which resigns everywhere (a failed
//! attempt resigns where it may have written). A leader proclaims (the
//! next claim number; a proclaim short of a quorum fails, and the number
//! stays used) or resigns. The observer reads as `Election::leader`
//! does: `read.lua` on every member, then the library's majority read
//! (`shapes::election::majority`).
//!
//! Properties: at most one valid leader; and a read that starts after a
//! claim round succeeded, and ends while that leader is still valid,
//! names that leader with that claim or a later one, or fails (the
//! "Reading who leads" promise on `Election`).
//!
//! Restarts (issue 66): a server may restart, empty or from a snapshot
//! of itself (key, record and counter as they were), within a budget;
//! each campaign meets the servers first, so that its value names their
//! runs, a take's refusal answers the holder's names, and the candidate
//! decides which yes votes count with the library's `decide::forgetful`.
//!
//! Left out: campaigns of more than one attempt, the raise of lagging
//! term counters (terms are the lock's fencing tokens: the lock model's
//! fenced run checks that they grow, also across restarts from an older
//! copy), renewals, fair campaigns,
//! the record's channel, the clean-up queued behind a take that timed out
//! (the model lets it overtake the take: a superset).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::el_server::{ElAnswer, ElRequest, ElRules, ElServer, Record};
use super::lock::{NODES, Names, Value};
use super::names::{self, Named, name, names_of, token};
use crate::base::node_error::NodeError;
use crate::engine::decide::{self, Ballot};
use crate::engine::quorum;
use crate::model::explore::Model;
use crate::model::net::{Msg, Net, Step, Wired};
use crate::shapes::election::majority::{View, forget_restarted, majority};

/// One tick of the model's clock.
const TICK_MS: u64 = 10;
/// The TTL, in ticks.
const TTL: u64 = 4;
/// The drift factor.
const FACTOR: f64 = 0.25;
/// The observer's index among the actors.
const OBSERVER: usize = 2;

/// The election model.
pub(crate) struct ElModel {
    pub(crate) size: ElSize,
    pub(crate) rules: ElRules,
    base: Instant,
}

impl ElModel {
    pub(crate) fn new(size: ElSize, rules: ElRules) -> ElModel {
        ElModel {
            size,
            rules,
            base: Instant::now(),
        }
    }

    /// Actor `c`'s round ends.
    fn conclude(&self, s: &mut ElState, c: usize, mask: u8) {
        s.net.end_round(c);
        match s.phases[c].clone() {
            ElPhase::Taking {
                value,
                start,
                answers,
                ..
            } => self.taken(s, c, mask, (value, start), answers),
            ElPhase::Leading {
                value,
                until_ms,
                term,
                seq,
                answers: Some(answers),
            } => self.claim_ended(s, c, mask, (value, until_ms, term, seq), answers),
            ElPhase::Reading { answers, floor } => {
                read_ended(s, c, answers, floor, self.rules.reads_name_servers)
            }
            _ => {}
        }
    }

    /// A campaign's attempt ended (begun at `start`): elected, its first
    /// claim goes out; else it fails.
    fn taken(
        &self,
        s: &mut ElState,
        c: usize,
        mask: u8,
        (value, start): (Value, u16),
        answers: [Option<ElAnswer>; NODES],
    ) {
        let forgetful = self.forgetful(s, c, &answers);
        let ballots: [Ballot; NODES] = std::array::from_fn(|n| match answers[n] {
            Some(ElAnswer::Took {
                set: true, count, ..
            }) if !forgetful[n] => Ballot {
                yes: Some(count),
                low: count,
            },
            _ => Ballot::default(),
        });
        let count = decide::count(ballots, NODES, false);
        let ttl = Duration::from_millis(TTL * TICK_MS);
        let elapsed = Duration::from_millis(u64::from(s.now - start) * TICK_MS);
        let from = self.base + Duration::from_millis(u64::from(start) * TICK_MS);
        let until = count
            .reached
            .then(|| {
                let factor = if self.size.drift { FACTOR } else { 0.0 };
                quorum::valid_until(from, elapsed, ttl, factor)
            })
            .flatten();
        match until {
            Some(until) => {
                let until_ms = until.saturating_duration_since(self.base).as_millis();
                let term = count.highest;
                s.phases[c] = ElPhase::Leading {
                    value,
                    until_ms: until_ms as u64,
                    term,
                    seq: 1,
                    answers: Some([None; NODES]),
                };
                let claim = ElRequest::Claim {
                    value,
                    term,
                    seq: 1,
                };
                self.send(s, c, [true; NODES], mask, claim);
            }
            None => {
                let dirty = answers.map(|a| !matches!(a, Some(ElAnswer::Took { set: false, .. })));
                self.fail(s, c, value, dirty, mask);
            }
        }
    }

    /// Which yes votes the restart rule does not count (see
    /// `model::names`): a take's refusal names its holder's servers.
    fn forgetful(
        &self,
        s: &ElState,
        c: usize,
        answers: &[Option<ElAnswer>; NODES],
    ) -> [bool; NODES] {
        if !self.rules.names_servers {
            return [false; NODES];
        }
        let yes = answers
            .each_ref()
            .map(|a| matches!(a, Some(ElAnswer::Took { set: true, .. })));
        let holders: Vec<Names> = answers
            .iter()
            .filter_map(|a| match a {
                Some(ElAnswer::Took {
                    set: false,
                    named: Some(names),
                    ..
                }) => Some(*names),
                _ => None,
            })
            .collect();
        super::names::forgetful(s.seen[c], yes, &holders)
    }

    /// A leader's claim round ended: the claim counts while the leader is
    /// valid; a first claim that fails ends the campaign.
    fn claim_ended(
        &self,
        s: &mut ElState,
        c: usize,
        mask: u8,
        (value, until_ms, term, seq): (Value, u64, u64, u8),
        answers: [Option<ElAnswer>; NODES],
    ) {
        let now_ms = u64::from(s.now) * TICK_MS;
        let yes = answers
            .iter()
            .filter(|a| **a == Some(ElAnswer::Int(1)))
            .count();
        // Then `ensure_held`: the claim counts while valid.
        let ok = yes >= quorum::quorum(NODES) && now_ms < until_ms;
        if ok {
            s.claimed = Some(Claimed {
                leader: c as u8,
                term,
                seq,
            });
        }
        if !ok && seq == 1 {
            // The campaign fails: its guard is dropped.
            self.fail(s, c, value, [true; NODES], mask);
            return;
        }
        s.phases[c] = ElPhase::Leading {
            value,
            until_ms,
            term,
            seq,
            answers: None,
        };
    }

    /// A campaign that failed: resigns where it may have written.
    fn fail(&self, s: &mut ElState, c: usize, value: Value, dirty: [bool; NODES], mask: u8) {
        s.phases[c] = ElPhase::Idle;
        s.done[c] += 1;
        self.send(s, c, dirty, mask, ElRequest::Resign { value });
        s.net.end_round(c);
    }

    fn next_state(&self, s: &ElState, action: &ElAction) -> Option<ElState> {
        let mut s = s.clone();
        match *action {
            ElAction::Start(c, now) => {
                let value = Value {
                    client: c as u8,
                    acquisition: s.done[c],
                    attempt: 1,
                };
                s.phases[c] = ElPhase::Taking {
                    value,
                    start: s.now,
                    answers: [None; NODES],
                    mask: now,
                };
                // It meets every server first: its value names them.
                s.seen[c] = s.runs.map(|run| run + 1);
                name(&mut s.named, value, s.seen[c]);
                self.send(&mut s, c, [true; NODES], now, ElRequest::Take { value });
            }
            ElAction::Proclaim(c, now) => {
                let ElPhase::Leading {
                    value,
                    until_ms,
                    term,
                    seq,
                    answers: None,
                } = s.phases[c]
                else {
                    return None;
                };
                // `ensure_held` first: a leadership past its validity
                // proclaims nothing.
                if u64::from(s.now) * TICK_MS >= until_ms {
                    return None;
                }
                let seq = seq + 1;
                s.phases[c] = ElPhase::Leading {
                    value,
                    until_ms,
                    term,
                    seq,
                    answers: Some([None; NODES]),
                };
                let claim = ElRequest::Claim { value, term, seq };
                self.send(&mut s, c, [true; NODES], now, claim);
            }
            ElAction::Resign(c, now) => {
                let ElPhase::Leading { value, .. } = s.phases[c] else {
                    return None;
                };
                self.fail(&mut s, c, value, [true; NODES], now);
            }
            ElAction::Read(now) => {
                let floor = s.claimed;
                // It meets every server as it reads (as a manager's first
                // round connects).
                s.seen[OBSERVER] = s.runs.map(|run| run + 1);
                s.phases[OBSERVER] = ElPhase::Reading {
                    answers: [None; NODES],
                    floor,
                };
                self.send(&mut s, OBSERVER, [true; NODES], now, ElRequest::Read);
            }
            ElAction::Net(i, step) => self.step(&mut s, i, step),
            ElAction::Conclude(c, now) => self.conclude(&mut s, c, now),
            ElAction::Restart(n) | ElAction::RestartOlder(n) => {
                let empty = ElServer {
                    fast: s.servers[n].fast,
                    ..ElServer::default()
                };
                // Empty, or from its snapshot (an older copy of itself).
                let server = match action {
                    ElAction::RestartOlder(_) => s.snapshots[n].clone()?,
                    _ => empty,
                };
                names::restart(
                    (&mut s.servers, &mut s.runs, &mut s.restarts),
                    &mut s.net,
                    n,
                    server,
                );
            }
            ElAction::Snapshot(n) => s.snapshots[n] = Some(s.servers[n].clone()),
            ElAction::Tick => s.now += 1,
        }
        Some(s)
    }
}

/// The library's view of a member's read (`read.lua`'s array); tokens
/// name the servers their campaigns met (`named`).
fn view(named: &Named, holder: Option<Value>, left: u64, record: Option<Record>) -> View {
    let token = |v: Value| token(v, names_of(named, v));
    View::new(
        holder.map(token),
        left * TICK_MS,
        record.map(|r| (token(r.token), r.term, u64::from(r.seq), vec![r.seq])),
    )
}

impl Wired for ElModel {
    type State = ElState;
    type Request = ElRequest;

    fn net(s: &mut ElState) -> &mut Net<ElRequest> {
        &mut s.net
    }

    fn arrive(&self, s: &mut ElState, m: Msg<ElRequest>, reply: bool) {
        let n = usize::from(m.node);
        let now = u64::from(s.now);
        // What holds the key, for `SET ... NX GET`'s refusal.
        let holder = s.servers[n]
            .key
            .filter(|&(_, until)| now < until)
            .map(|(v, _)| v);
        let answer = s.servers[n].run(m.request, now, TTL, self.rules);
        let c = usize::from(m.client);
        let answer = match (answer, holder, m.request) {
            (
                ElAnswer::Took {
                    set: false, count, ..
                },
                Some(v),
                ElRequest::Take { value },
            ) if v.client != value.client || v.acquisition != value.acquisition => ElAnswer::Took {
                set: false,
                count,
                named: names_of(&s.named, v),
            },
            (answer, ..) => answer,
        };
        if !(m.current && reply) {
            return;
        }
        let answers = match &mut s.phases[c] {
            ElPhase::Taking { answers, .. } | ElPhase::Reading { answers, .. } => answers,
            ElPhase::Leading {
                answers: Some(answers),
                ..
            } => answers,
            _ => return,
        };
        answers[n] = Some(answer);
        if answers.iter().all(Option::is_some) {
            let mask = match s.phases[c] {
                ElPhase::Taking { mask, .. } => mask,
                _ => 0,
            };
            self.conclude(s, c, mask);
        }
    }
}

impl Model for ElModel {
    type State = ElState;
    type Action = ElAction;

    fn init(&self) -> ElState {
        let mut servers: [ElServer; NODES] = Default::default();
        servers[0].fast = true;
        ElState {
            now: 0,
            servers,
            phases: [ElPhase::Idle, ElPhase::Idle, ElPhase::Idle],
            done: [0; 3],
            claimed: None,
            net: Net::default(),
            misread: None,
            runs: [0; NODES],
            restarts: 0,
            snapshots: Default::default(),
            named: Default::default(),
            seen: [[0; NODES]; 3],
        }
    }

    fn actions(&self, s: &ElState, out: &mut Vec<ElAction>) {
        let masks = self.size.masks;
        for c in 0..2 {
            match &s.phases[c] {
                ElPhase::Idle if s.done[c] < self.size.campaigns[c] => {
                    out.extend(masks.iter().map(|&now| ElAction::Start(c, now)))
                }
                // A patient round ends once nothing of it is in flight.
                ElPhase::Taking { .. }
                | ElPhase::Leading {
                    answers: Some(_), ..
                } if !(self.size.patient && in_flight(s, c)) => {
                    out.extend(masks.iter().map(|&now| ElAction::Conclude(c, now)))
                }
                ElPhase::Leading { seq, .. } => {
                    if *seq <= self.size.proclaims {
                        out.extend(masks.iter().map(|&now| ElAction::Proclaim(c, now)));
                    }
                    out.extend(masks.iter().map(|&now| ElAction::Resign(c, now)));
                }
                _ => {}
            }
        }
        match s.phases[OBSERVER] {
            ElPhase::Idle if s.done[OBSERVER] < self.size.reads => {
                out.extend(masks.iter().map(|&now| ElAction::Read(now)))
            }
            ElPhase::Reading { .. } if !(self.size.patient && in_flight(s, OBSERVER)) => {
                out.extend(masks.iter().map(|&now| ElAction::Conclude(OBSERVER, now)))
            }
            _ => {}
        }
        for n in 0..NODES {
            if s.restarts < self.size.restarts {
                out.push(ElAction::Restart(n));
                if s.snapshots[n].is_some() {
                    out.push(ElAction::RestartOlder(n));
                }
            }
            if self.size.snapshots && s.snapshots[n].is_none() {
                out.push(ElAction::Snapshot(n));
            }
        }
        let budgets = (self.size.losses, self.size.duplicates);
        let tick = (s.now < self.size.horizon).then_some(ElAction::Tick);
        s.net.steps_then(budgets, out, ElAction::Net, tick);
    }

    fn next(&self, s: &ElState, action: &ElAction) -> Option<ElState> {
        self.next_state(s, action)
    }

    fn broken(&self, s: &ElState) -> Option<String> {
        let now_ms = u64::from(s.now) * TICK_MS;
        let leaders: Vec<usize> = (0..2)
            .filter(
                |&c| matches!(s.phases[c], ElPhase::Leading { until_ms, .. } if now_ms < until_ms),
            )
            .collect();
        if leaders.len() > 1 {
            return Some(format!("candidates {leaders:?} both lead at {now_ms} ms"));
        }
        s.misread.clone()
    }

    fn describe(&self, s: &ElState, action: &ElAction) -> String {
        let mut line = format!("t={:>3} ms  ", u64::from(s.now) * TICK_MS);
        let after = self.next_state(s, action);
        let at_once = |mask: u8| match mask {
            0 => String::new(),
            _ => format!(
                ", running at once on server(s) {:?}; servers now {}",
                (0..NODES)
                    .filter(|n| mask & (1 << n) != 0)
                    .collect::<Vec<_>>(),
                after.as_ref().map_or_else(String::new, servers)
            ),
        };
        let who = |c: usize| match c {
            OBSERVER => "the observer".to_owned(),
            c => format!("candidate {c}"),
        };
        let _ = match *action {
            ElAction::Net(i, step) => {
                let m = s.net.msgs[i];
                let late = !m.current && !matches!(m.request, ElRequest::Resign { .. });
                let what = step.says(late);
                let mut server = s.servers[usize::from(m.node)].clone();
                let answer = server.run(m.request, u64::from(s.now), TTL, self.rules);
                write!(
                    line,
                    "{}'s {:?} to server {}: {what}, answers {answer:?}; server {}",
                    who(usize::from(m.client)),
                    m.request,
                    m.node,
                    held(&server)
                )
            }
            ElAction::Start(c, now) => write!(line, "{} campaigns{}", who(c), at_once(now)),
            ElAction::Proclaim(c, now) => write!(line, "{} proclaims{}", who(c), at_once(now)),
            ElAction::Resign(c, now) => write!(line, "{} resigns{}", who(c), at_once(now)),
            ElAction::Read(now) => write!(line, "the observer reads{}", at_once(now)),
            ElAction::Conclude(c, now) => write!(
                line,
                "{} ends its round ({:?}){}",
                who(c),
                s.phases[c],
                at_once(now)
            ),
            ElAction::Restart(n) => write!(line, "server {n} restarts empty"),
            ElAction::Snapshot(n) => {
                write!(
                    line,
                    "server {n} takes a snapshot ({})",
                    held(&s.servers[n])
                )
            }
            ElAction::RestartOlder(n) => write!(
                line,
                "server {n} restarts from its snapshot ({})",
                s.snapshots[n].as_ref().map_or_else(String::new, held)
            ),
            ElAction::Tick => write!(line, "{TICK_MS} ms pass"),
        };
        line
    }
}

/// Whether a request of actor `c`'s current round is in flight.
fn in_flight(s: &ElState, c: usize) -> bool {
    s.net
        .msgs
        .iter()
        .any(|m| usize::from(m.client) == c && m.current)
}

/// A server's key and record, for people.
fn held(server: &ElServer) -> String {
    let key = match server.key {
        Some((v, _)) => format!("key {v:?}"),
        None => "key free".into(),
    };
    match server.record {
        Some((r, _)) => format!(
            "{key}, record {:?} term {} claim {}",
            r.token, r.term, r.seq
        ),
        None => key,
    }
}

/// Every server's key and record, for people.
fn servers(s: &ElState) -> String {
    s.servers.iter().map(held).collect::<Vec<_>>().join("; ")
}

/// The observer's read ended: it must name the leader of the claim
/// `floor` (done before the read began) while that leader is valid.
fn read_ended(
    s: &mut ElState,
    c: usize,
    answers: [Option<ElAnswer>; NODES],
    floor: Option<Claimed>,
    names_servers: bool,
) {
    let now_ms = u64::from(s.now) * TICK_MS;
    s.phases[c] = ElPhase::Idle;
    s.done[c] += 1;
    let views = answers
        .iter()
        .map(|a| {
            Some(match a {
                Some(ElAnswer::View {
                    holder,
                    left,
                    record,
                }) => Ok(view(&s.named, *holder, *left, *record)),
                _ => Err(NodeError::cluster(
                    "n".into(),
                    "no answer".into(),
                    Duration::from_millis(TICK_MS),
                )),
            })
        })
        .collect();
    // The library's restart rule on the read, on the runs the observer met.
    let views = match names_servers {
        true => forget_restarted(views, &names::servers(s.seen[c]), |_| {
            NodeError::cluster(
                "n".into(),
                "not counted".into(),
                Duration::from_millis(TICK_MS),
            )
        }),
        false => views,
    };
    let read = majority(views, b"e");
    // The leader of that claim still leads, valid.
    let leads = |f: &Claimed| {
        matches!(s.phases[usize::from(f.leader)],
            ElPhase::Leading { term, until_ms, .. } if term == f.term && now_ms < until_ms)
    };
    if let Some(floor) = floor.filter(leads) {
        let fine = match &read {
            Err(_) => true,
            Ok(Some(leader)) => leader.term() == floor.term && leader.value() >= &[floor.seq][..],
            Ok(None) => false,
        };
        if !fine && s.misread.is_none() {
            s.misread = Some(format!(
                "a read names {read:?} while the leader of term {} is valid, its claim {} done before the read began",
                floor.term, floor.seq
            ));
        }
    }
}

mod state;

pub(crate) use state::{Claimed, ElAction, ElPhase, ElSize, ElState};
