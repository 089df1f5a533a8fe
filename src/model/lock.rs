//! The lock's protocol as a model: three servers, two clients, every
//! request in flight at once, delivered in any order (also after its
//! round ended), lost or delivered twice, servers that restart empty or
//! with their data, a server clock that runs fast within the drift, time
//! in ticks of 10 ms.
//!
//! The clients decide with the library's own code: the acquisition's
//! verdict (`engine::decide`), its validity (`quorum::valid_until`), the
//! extend's rule (`quorum::after_extend`) and the restart quarantine
//! (`members::restart::RunWatch`). The servers run Rust models of the
//! lock's scripts ([`Server::run`]), each tied to its Lua by the
//! differential test in `scripts.rs`.
//!
//! [`Rules`] turns off, one at a time, a rule a past flaw made: the
//! checker must then find the flaw's schedule.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::engine::decide::{self, Ballot};
use crate::engine::quorum::{self, Tally};
use crate::engine::single::take_vote;
use crate::members::request::Said;
use crate::members::restart::{Identity, Policy, RunWatch};
use crate::model::explore::Model;

/// Servers.
pub(crate) const NODES: usize = 3;
/// Clients.
pub(crate) const CLIENTS: usize = 2;
/// One tick of the model's clock.
const TICK_MS: u64 = 10;
/// The lock's TTL, in ticks; the short extend's.
const TTL: u16 = 4;
const SHORT: u16 = 2;
/// Every set of servers a request may run on at once.
const MASKS: [u8; 1 << NODES] = [0, 1, 2, 3, 4, 5, 6, 7];

/// The granting members whose counter lags the token (by the library's
/// verdict): those a raise goes to.
fn lagging(ballots: &[Ballot; NODES]) -> [bool; NODES] {
    let highest = decide::count(*ballots, NODES, false).highest;
    ballots.map(|b| decide::lags(&b, highest))
}

/// Which servers a mask names, for people.
fn at_once(mask: u8) -> String {
    match mask {
        0 => String::new(),
        _ => format!(
            ", running at once on server(s) {:?}",
            (0..NODES)
                .filter(|n| mask & (1 << n) != 0)
                .collect::<Vec<_>>()
        ),
    }
}

/// The drift factor: a server clock may run fast by a tick over a TTL
/// (the drift of a 40 ms TTL is 12 ms).
const FACTOR: f64 = 0.25;

/// The rules past flaws made; each can be turned off to show the checker
/// finds the flaw.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rules {
    /// Each attempt writes a value of its own (`token#attempt`), so that a
    /// late clean-up of one attempt deletes nothing of a later one.
    pub(crate) per_attempt_values: bool,
    /// An extend raises an expiry and never lowers it, so that a late
    /// short extend cuts no later, longer one.
    pub(crate) raise_only_extends: bool,
    /// A server seen restarted does not vote for the longest TTL.
    pub(crate) quarantine: bool,
    /// A fenced grant raises each granting member whose counter lags the
    /// token, so that a quorum holds it.
    pub(crate) raise: bool,
    /// Strict mode ([`Builder::restart_quarantine`] of a TTL): a server
    /// started less than that long ago does not vote, whether or not
    /// this client saw it restart. Off by default: a restart before a
    /// client's first contact is then not seen (assumption 3).
    ///
    /// [`Builder::restart_quarantine`]: crate::Builder::restart_quarantine
    pub(crate) strict: bool,
    /// The store's fenced write (`fence/set.lua`) refuses a token below
    /// the highest it has seen.
    pub(crate) fence_compares: bool,
    /// A raise counts only where the key holds the token
    /// (`lock/raise.lua`'s check): a server that never voted (the
    /// address moved) raises nothing and is no yes.
    pub(crate) raise_checks_value: bool,
    /// A grant names its servers, and a yes beside a refusal whose value
    /// does not name the yes-sayer's server does not count
    /// (`decide::forgetful`): a server that restarted before a client
    /// first reached it does not vote against a holder another member
    /// shows.
    pub(crate) names_servers: bool,
    /// A fencing counter counts on from the larger of its value and the
    /// attempt's clock reading (`lock/count.lua`): a counter that went
    /// back (a restart from an older copy) still counts above every
    /// token before it.
    pub(crate) count_from_clock: bool,
    /// A client counts a counter by `INCR` only on a connection to the
    /// run where it counted it by the script (`members::request::Counts`:
    /// a connection dies with its server's run); off, wherever it ever
    /// counted it by the script.
    pub(crate) incr_in_the_counted_run: bool,
}

impl Rules {
    /// The library's rules, all on.
    pub(crate) const ALL: Rules = Rules {
        per_attempt_values: true,
        raise_only_extends: true,
        quarantine: true,
        raise: true,
        strict: false,
        fence_compares: true,
        raise_checks_value: true,
        names_servers: true,
        count_from_clock: true,
        incr_in_the_counted_run: true,
    };
}

/// How large a system, and which faults.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Size {
    /// Acquisitions each client makes (each of up to two attempts).
    pub(crate) acquisitions: u8,
    /// Fencing counters on (each grant raises its lagging members).
    pub(crate) fenced: bool,
    /// Restarts of a server (empty, or with its data), in all.
    pub(crate) restarts: u8,
    /// Requests delivered twice, in all.
    pub(crate) duplicates: u8,
    /// Messages lost, in all.
    pub(crate) losses: u8,
    /// The last tick time may reach.
    pub(crate) horizon: u16,
    /// Server 0's clock runs fast (keys expire a tick early).
    pub(crate) fast: bool,
    /// Holders extend (short and long).
    pub(crate) extends: bool,
    /// Holders write to a fenced store with their token
    /// ([`Store`]), once a grant; the write may arrive late, after the
    /// writer's validity or release.
    pub(crate) writes: bool,
    /// The sets of servers a request may run on at once as it is sent.
    pub(crate) masks: &'static [u8],
    /// An address moves, once: a client's connection to a server
    /// re-pointed (a forwarder's) to an empty spare that never voted,
    /// during an acquisition or a hold, when nothing of the client's is in
    /// flight to that server (right after a reply: a request that timed
    /// out instead gets its
    /// connection dropped, and the next one's handshake would see the
    /// spare). Its raise, extends, release and clean-ups reach the spare
    /// from then on, and it starts no attempt after: a take answered by a
    /// server that is not the member is a vote the algorithm cannot see
    /// through (assumption 7 of the crate docs' "Why the lock is safe"). Not with restarts (a
    /// restart of the server would cut the spare's connection too).
    pub(crate) moves: bool,
    /// The servers' fencing counters at the start (lagging ones: a
    /// server added or restarted empty).
    pub(crate) counters: [Option<u64>; NODES],
    /// A server may be restarted from an older copy of itself: a snapshot
    /// of its state (key and counter) taken at any moment, once a
    /// server, counted among the restarts.
    pub(crate) snapshots: bool,
    /// Every round waits for the answer of every server that can give
    /// one (nothing is lost, no server is slow): a restart is then the
    /// only fault, as with one restart among three servers whose others
    /// answer.
    pub(crate) patient: bool,
    /// A Sentinel group's failover, once: a member's address leads new
    /// connections to a promoted replica (its state a snapshot of the
    /// master's taken at any earlier moment: a lagging replica; another
    /// run, up for long), while the old master stays up and writable for
    /// the connections still open to it, and for requests in flight
    /// there, however late. A client that never reached the member
    /// reaches the new master; one that did moves there at any moment
    /// (an announcement heard, a failure), never necessarily.
    pub(crate) failover: bool,
}

/// Every set of servers.
pub(crate) const EVERY_MASK: &[u8] = &MASKS;

/// The lock model: its size and its rules.
pub(crate) struct LockModel {
    pub(crate) size: Size,
    pub(crate) rules: Rules,
    /// The instant tick 0 stands for, for the library's clock-taking code.
    base: Instant,
}

impl LockModel {
    pub(crate) fn new(size: Size, rules: Rules) -> LockModel {
        // The promoted replica is the spare, its run one past the old
        // master's: no restart (which would take that run) and no moved
        // address (which uses the spare) beside a failover.
        assert!(
            !(size.failover && (size.restarts > 0 || size.moves)),
            "a failover run has no restarts and no moves"
        );
        LockModel {
            size,
            rules,
            base: Instant::now(),
        }
    }

    fn at(&self, ms: u64) -> Instant {
        self.base + Duration::from_millis(ms)
    }

    fn ms(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.base).as_millis() as u64
    }

    /// Whether `client` keeps server `node` out of votes at `now` (the
    /// library's verdict, on what the client saw of its runs).
    fn quarantined(&self, client: &Client, node: usize, now: u16) -> bool {
        let seen = client.seen[node];
        let Some(run) = seen.run.filter(|_| self.rules.quarantine) else {
            return false;
        };
        let ttl = Duration::from_millis(u64::from(TTL) * TICK_MS);
        let policy = Policy::new(self.rules.strict.then_some(ttl), FACTOR);
        policy.note_ttl(u64::from(TTL) * TICK_MS);
        let watch = RunWatch::default();
        let identity = |run: String, up: Option<u32>| Identity {
            run_id: Some(run),
            uptime: Some(up.map_or(Duration::from_secs(3600), |ms| {
                Duration::from_millis(u64::from(ms))
            })),
            ..Identity::default()
        };
        if seen.witnessed {
            watch.observe(&identity("before".into(), None), self.at(0));
        }
        let at = self.at(u64::from(seen.at) * TICK_MS);
        watch.observe(&identity(format!("run{run}"), seen.uptime_ms), at);
        watch
            .quarantine(&policy, self.at(u64::from(now) * TICK_MS))
            .is_some()
    }

    /// Sends `request` from client `c` to every node `to` selects, and
    /// delivers it at once to those whose bit is set in `now` (in node
    /// order; the rest stay in flight). A shortcut: the same deliveries
    /// one step each reach the same states, deeper.
    fn send(
        &self,
        s: &mut State,
        c: usize,
        to: [bool; NODES],
        now: u8,
        request: impl Fn(usize) -> Request,
    ) {
        for (node, _) in to.iter().enumerate().filter(|(_, on)| **on) {
            meet(s, c, node);
            let run = reached(s, c, node).run;
            s.net.push(Message {
                node: node as u8,
                client: c as u8,
                current: true,
                run,
                request: request(node),
            });
        }
        s.net.sort();
        for node in (0..NODES).filter(|&n| to[n] && now & (1 << n) != 0) {
            let request = request(node);
            let at = s.net.iter().position(|m| {
                usize::from(m.node) == node
                    && usize::from(m.client) == c
                    && m.current
                    && m.request == request
            });
            if let Some(i) = at {
                self.deliver(s, i, true);
            }
        }
    }

    /// Request `i` of the network runs on its server; its answer reaches
    /// the client with `reply` if the client still waits for it.
    fn deliver(&self, s: &mut State, i: usize, reply: bool) {
        let m = s.net.remove(i);
        let n = usize::from(m.node);
        if let Request::Write { token, grant } = m.request {
            if s.store.write(token, self.rules) == Answer::Int(1) {
                let latest = s.store.latest.unwrap_or(0).max(grant);
                if grant < latest && s.stale.is_none() {
                    s.stale = Some((grant, latest));
                }
                s.store.latest = Some(latest);
            }
            return;
        }
        let promoted = promoted(s, &m);
        if !promoted && s.servers[n].run != m.run {
            // Its connection died with the server's run.
            return;
        }
        let server = match promoted || s.moved == Some((m.client, m.node)) {
            true => &mut s.spare,
            false => &mut s.servers[n],
        };
        let answer = server.run(m.request, s.now, self.rules);
        if m.current && reply {
            if let (
                Request::Take {
                    fenced: true,
                    by_incr: false,
                    ..
                },
                Answer::Took { .. },
            ) = (m.request, answer)
            {
                s.clients[usize::from(m.client)].counted[n] = Some(m.run);
            }
            self.receive(s, usize::from(m.client), n, answer);
        }
    }

    /// Whether `client`, idle, may start an attempt: the second of its
    /// acquisition, or the first of another while any is left.
    fn may_start(&self, s: &State, c: usize) -> bool {
        let client = &s.clients[c];
        if s.moved.is_some_and(|(moved, _)| usize::from(moved) == c) {
            return false;
        }
        match client.attempts {
            1 => true,
            0 => client.acquisitions < self.size.acquisitions,
            _ => client.acquisitions + 1 < self.size.acquisitions,
        }
    }

    /// Client `c` stops waiting for its round: what it sent is late from
    /// now on.
    fn end_round(s: &mut State, c: usize) {
        for m in s.net.iter_mut().filter(|m| usize::from(m.client) == c) {
            m.current = false;
        }
        s.net.sort();
    }

    fn value(&self, c: usize, client: &Client) -> Value {
        Value {
            client: c as u8,
            acquisition: client.acquisitions,
            attempt: if self.rules.per_attempt_values {
                client.attempts
            } else {
                0
            },
        }
    }

    /// A reply reaches client `c`.
    fn receive(&self, s: &mut State, c: usize, node: usize, answer: Answer) {
        let now = s.now;
        let quarantined = self.quarantined(&s.clients[c], node, now);
        // A server kept out gives no yes; its refusal, and the holder it
        // names, stand (as the library keeps them for the restart rule).
        let answer = match answer {
            Answer::Took { set: false, .. } => answer,
            _ if quarantined => Answer::Failed,
            _ => answer,
        };
        // A round whose every answer is in ends at once.
        let done = match &mut s.clients[c].phase {
            Phase::Taking { answers, .. } => {
                answers[node] = Some(answer);
                answers.iter().all(Option::is_some)
            }
            Phase::Raising {
                raised, ballots, ..
            } => {
                raised[node] = Some(answer == Answer::Int(1));
                lagging(ballots)
                    .iter()
                    .zip(raised)
                    .all(|(l, r)| !l || r.is_some())
            }
            Phase::Holding {
                extending: Some((_, _, acks)),
                ..
            } => {
                acks[node] = Some(answer == Answer::Int(1));
                acks.iter().all(Option::is_some)
            }
            _ => false,
        };
        if done {
            self.conclude(s, c, 0);
        }
    }

    /// Which yes answers the restart rule does not count, by the
    /// library's verdict (`decide::forgetful`), on what the client saw
    /// of the servers' runs and the holders' names its refusals found.
    fn forgetful(&self, client: &Client, answers: &[Option<Answer>; NODES]) -> [bool; NODES] {
        if !self.rules.names_servers {
            return [false; NODES];
        }
        let yes = answers
            .each_ref()
            .map(|a| matches!(a, Some(Answer::Took { set: true, .. })));
        let seen = client.seen.map(|seen| seen.run.map_or(0, |run| run + 1));
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
        super::names::forgetful(seen, yes, &holders)
    }

    /// Client `c`'s round ends: the verdict, by the library's code.
    fn conclude(&self, s: &mut State, c: usize, mask: u8) {
        let now = s.now;
        let now_ms = u64::from(now) * TICK_MS;
        Self::end_round(s, c);
        let client = &mut s.clients[c];
        match client.phase.clone() {
            Phase::Taking {
                value,
                start,
                answers,
            } => {
                let forgetful = self.forgetful(client, &answers);
                // Each answer read as the library reads it, and a yes the
                // restart rule does not count made a no that may hold
                // the value, as the pipeline does.
                let votes = answers.each_ref().map(|a| take_vote(as_said(a.as_ref())));
                let ballots = std::array::from_fn(|n| match forgetful[n] {
                    true => Ballot::default(),
                    false => votes[n].ballot(),
                });
                let count = decide::count(ballots, NODES, false);
                let lagging = lagging(&ballots);
                // Dirty: every member that may hold the value (the
                // library's clean-up targets, an unanswered request
                // counted among them: see `as_said`).
                let dirty = std::array::from_fn(|n| votes[n].dirty || forgetful[n]);
                if count.reached && lagging.contains(&true) && self.rules.raise {
                    client.phase = Phase::Raising {
                        value,
                        start,
                        ballots,
                        raised: [None; NODES],
                        dirty,
                    };
                    let to = count.highest;
                    self.send(s, c, lagging, mask, |_| Request::Raise { value, to });
                    return;
                }
                self.decide(
                    s,
                    c,
                    value,
                    start,
                    count.reached,
                    count.highest,
                    dirty,
                    mask,
                );
            }
            Phase::Raising {
                value,
                start,
                ballots,
                raised,
                dirty,
            } => {
                let count = decide::count(ballots, NODES, false);
                let behind = lagging(&ballots).iter().filter(|l| **l).count();
                let up = raised.iter().filter(|r| **r == Some(true)).count();
                let ok = decide::raised_enough(count.granted, behind, up, NODES);
                self.decide(s, c, value, start, ok, count.highest, dirty, mask);
            }
            Phase::Holding {
                value,
                until_ms,
                token,
                extending: Some((start, ext, acks)),
                grant,
                wrote,
            } => {
                let tally = Tally::count(acks.map(|ack| {
                    Some(match ack {
                        Some(true) => Ok(Said::Yes(1)),
                        Some(false) => Ok(Said::No),
                        None => Err(unanswered()),
                    })
                }));
                let confirmed =
                    decide::extend_confirmed(&tally, self.at(now_ms), self.at(until_ms));
                let until = quorum::after_extend(
                    self.at(until_ms),
                    self.at(u64::from(start) * TICK_MS),
                    Duration::from_millis(u64::from(ext) * TICK_MS),
                    FACTOR,
                    confirmed,
                );
                client.phase = Phase::Holding {
                    value,
                    until_ms: self.ms(until),
                    token,
                    extending: None,
                    grant,
                    wrote,
                };
            }
            Phase::Holding { .. } | Phase::Idle => {}
        }
    }

    /// The end of an attempt: granted with its validity, or cleaned up.
    #[allow(clippy::too_many_arguments)]
    fn decide(
        &self,
        s: &mut State,
        c: usize,
        value: Value,
        start: u16,
        reached: bool,
        token: u64,
        dirty: [bool; NODES],
        mask: u8,
    ) {
        let ttl = Duration::from_millis(u64::from(TTL) * TICK_MS);
        let elapsed = Duration::from_millis(u64::from(s.now - start) * TICK_MS);
        let until = reached
            .then(|| quorum::valid_until(self.at(u64::from(start) * TICK_MS), elapsed, ttl, FACTOR))
            .flatten();
        match until {
            Some(until) => {
                if self.size.fenced {
                    if token <= s.last_token && s.backwards.is_none() {
                        s.backwards = Some((s.last_token, token));
                    }
                    // The raise's purpose, checked where it is made: on a
                    // quorum of the members every counter is at least the
                    // token, so that every later grant counts above it.
                    let holding = s
                        .servers
                        .iter()
                        .filter(|server| server.counter.is_some_and(|n| n >= token))
                        .count();
                    if self.size.moves && holding < quorum::quorum(NODES) && s.thin.is_none() {
                        s.thin = Some((token, holding));
                    }
                    s.last_token = s.last_token.max(token);
                }
                let grant = match self.size.writes {
                    true => {
                        s.grants += 1;
                        s.grants
                    }
                    false => 0,
                };
                s.clients[c].phase = Phase::Holding {
                    value,
                    until_ms: self.ms(until),
                    token,
                    extending: None,
                    grant,
                    wrote: false,
                };
            }
            None => {
                s.clients[c].phase = Phase::Idle;
                self.send(s, c, dirty, mask, |_| Request::Unlock { value });
                Self::end_round(s, c);
            }
        }
    }
}

mod server;
mod state;
mod steps;

pub(crate) use server::{Answer, Names, Request, Server, Store, Value};
use server::{as_said, unanswered};
pub(crate) use state::{Action, Client, Message, Phase, Seen, State};
use state::{awaits, meet, promoted, reached};
