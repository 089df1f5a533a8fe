//! The lock model's steps: the state each action leads to, and the
//! checker's view of the model (its actions, properties and words).

use super::*;

impl LockModel {
    /// The state `action` leads to, as reached (not yet the least of it
    /// and its mirror).
    fn next_raw(&self, s: &State, action: &Action) -> Option<State> {
        let mut s = s.clone();
        match *action {
            Action::Start(c, now) => self.start(&mut s, c, now),
            Action::Deliver(i) => self.deliver(&mut s, i, true),
            Action::DeliverMute(i) => {
                s.losses += 1;
                self.deliver(&mut s, i, false);
            }
            Action::Duplicate(i) => {
                s.duplicates += 1;
                let copy = s.net[i];
                self.deliver(&mut s, i, true);
                s.net.push(Message {
                    current: false,
                    ..copy
                });
                s.net.sort();
            }
            Action::Lose(i) => {
                s.net.remove(i);
                s.losses += 1;
            }
            Action::Conclude(c, now) => self.conclude(&mut s, c, now),
            Action::Extend(c, ttl, now) => {
                let Phase::Holding {
                    value, extending, ..
                } = &mut s.clients[c].phase
                else {
                    return None;
                };
                let value = *value;
                *extending = Some((s.now, ttl, [None; NODES]));
                self.send(&mut s, c, [true; NODES], now, |_| Request::Extend {
                    value,
                    ttl,
                });
            }
            Action::Write(c) => write(&mut s, c)?,
            Action::Release(c, now) => {
                let Phase::Holding { value, .. } = s.clients[c].phase else {
                    return None;
                };
                s.clients[c].phase = Phase::Idle;
                s.clients[c].attempts = 2;
                self.send(&mut s, c, [true; NODES], now, |_| Request::Unlock { value });
                Self::end_round(&mut s, c);
            }
            Action::Restart(n, keeps) => restart(&mut s, n, keeps),
            Action::Snapshot(n) => s.snapshots[n] = Some(s.servers[n].clone()),
            Action::RestartOlder(n) => restart_older(&mut s, n)?,
            Action::Failover(n) => {
                let replica = s.snapshots[n].clone()?;
                s.spare = Server {
                    // Another server, up for long (a replica until now).
                    run: s.servers[n].run + 1,
                    started: None,
                    fast: false,
                    ..replica
                };
                s.failover = Some(n as u8);
                // A client that never reached the member asks where its
                // master is now.
                for c in 0..CLIENTS {
                    s.on_new[c] = s.clients[c].seen[n].run.is_none();
                }
            }
            Action::Reconnect(c) => s.on_new[c] = true,
            Action::Move(c, n) => {
                s.moved = Some((c as u8, n as u8));
                s.spare = Server {
                    run: s.servers[n].run,
                    ..Server::default()
                };
            }
            Action::Tick => {
                s.now += 1;
                let now = s.now;
                for server in s.servers.iter_mut().chain([&mut s.spare]) {
                    if server.held(now).is_none() {
                        server.key = None;
                    }
                }
            }
        }
        Some(s)
    }
}

impl LockModel {
    /// Client `c` starts an attempt, sent at once where `now` says.
    fn start(&self, s: &mut State, c: usize, now: u8) {
        let client = &mut s.clients[c];
        if client.attempts >= 2 {
            client.acquisitions += 1;
            client.attempts = 0;
        }
        client.attempts += 1;
        if client.attempts == 1 {
            // A new acquisition: its manager meets the servers it never
            // reached, then names the servers it knows.
            for n in 0..NODES {
                if s.clients[c].seen[n].run.is_none() {
                    meet(s, c, n);
                }
            }
            let client = &mut s.clients[c];
            client.names = client.seen.map(|seen| seen.run.map_or(0, |run| run + 1));
        }
        let value = self.value(c, &s.clients[c]);
        let names = s.clients[c].names;
        let client = &mut s.clients[c];
        client.phase = Phase::Taking {
            value,
            start: s.now,
            answers: [None; NODES],
        };
        let (ttl, fenced) = (TTL, self.size.fenced);
        // Its connection to each server counts by `INCR` where it counted
        // by the script in that server's run (`send` meets a server on a
        // connection to its current run).
        let counted = s.clients[c].counted;
        let by_incr: [bool; NODES] =
            std::array::from_fn(|n| match self.rules.incr_in_the_counted_run {
                true => counted[n] == Some(reached(s, c, n).run),
                false => counted[n].is_some(),
            });
        self.send(s, c, [true; NODES], now, |n| Request::Take {
            value,
            ttl,
            fenced,
            names,
            by_incr: fenced && by_incr[n],
        });
    }
}

/// Holder `c` writes to the store with its token (`None`: it holds
/// nothing).
fn write(s: &mut State, c: usize) -> Option<()> {
    let Phase::Holding {
        token,
        grant,
        wrote,
        ..
    } = &mut s.clients[c].phase
    else {
        return None;
    };
    *wrote = true;
    let (token, grant) = (*token, *grant);
    s.net.push(Message {
        node: NODES as u8,
        client: c as u8,
        current: false,
        run: 0,
        request: Request::Write { token, grant },
    });
    s.net.sort();
    Some(())
}

/// Server `n` restarts, keeping its data or not (`keeps`).
fn restart(s: &mut State, n: usize, keeps: bool) {
    restarted(s, n, |server| {
        if !keeps {
            server.key = None;
            server.counter = None;
        }
    });
}

/// Server `n` restarts from its snapshot: its key and counter as they
/// were then.
fn restart_older(s: &mut State, n: usize) -> Option<()> {
    let older = s.snapshots[n].clone()?;
    restarted(s, n, |server| {
        server.key = older.key;
        server.names = older.names;
        server.counter = older.counter;
    });
    Some(())
}

/// Server `n`'s new run, started now, after `keep` chose what it kept.
fn restarted(s: &mut State, n: usize, keep: impl FnOnce(&mut Server)) {
    let server = &mut s.servers[n];
    keep(server);
    server.run += 1;
    server.started = Some(s.now);
    s.restarts += 1;
    // Its connections die: what was in flight to or from it.
    s.net.retain(|m| usize::from(m.node) != n);
}

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init(&self) -> State {
        let mut servers: [Server; NODES] = Default::default();
        servers[0].fast = self.size.fast;
        for (server, counter) in servers.iter_mut().zip(self.size.counters) {
            server.counter = counter;
        }
        let client = Client {
            phase: Phase::Idle,
            acquisitions: 0,
            attempts: 0,
            seen: [Seen::default(); NODES],
            names: [0; NODES],
            counted: [None; NODES],
        };
        State {
            now: 0,
            servers,
            clients: [client.clone(), client],
            net: Vec::new(),
            last_token: 0,
            backwards: None,
            restarts: 0,
            duplicates: 0,
            losses: 0,
            store: Store::default(),
            grants: 0,
            stale: None,
            moved: None,
            spare: Server::default(),
            thin: None,
            snapshots: Default::default(),
            failover: None,
            on_new: [false; CLIENTS],
        }
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        for (c, client) in s.clients.iter().enumerate() {
            match &client.phase {
                Phase::Idle if self.may_start(s, c) => {
                    out.extend(self.size.masks.iter().map(|&now| Action::Start(c, now)))
                }
                // A round ends when its node timeout runs out, which may
                // be at any moment (a tick is longer than a node timeout);
                // a patient one once every answer that can come is in.
                Phase::Taking { .. }
                | Phase::Raising { .. }
                | Phase::Holding {
                    extending: Some(_), ..
                } if !self.size.patient || !awaits(s, c) => {
                    out.extend(self.size.masks.iter().map(|&now| Action::Conclude(c, now)))
                }
                Phase::Taking { .. }
                | Phase::Raising { .. }
                | Phase::Holding {
                    extending: Some(_), ..
                } => {}
                Phase::Holding {
                    extending: None,
                    until_ms,
                    wrote,
                    ..
                } => {
                    // A write whenever (a holder paused past its validity
                    // writes too).
                    if self.size.writes && !wrote {
                        out.push(Action::Write(c));
                    }
                    // An extend only while valid (the guard refuses one
                    // after), a release whenever.
                    if self.size.extends && u64::from(s.now) * TICK_MS < *until_ms {
                        let masks = self.size.masks.iter();
                        out.extend(masks.clone().map(|&now| Action::Extend(c, SHORT, now)));
                        out.extend(masks.map(|&now| Action::Extend(c, TTL, now)));
                    }
                    out.extend(self.size.masks.iter().map(|&now| Action::Release(c, now)));
                }
                Phase::Idle => {}
            }
        }
        for (i, m) in s.net.iter().enumerate() {
            if i > 0 && s.net[i - 1] == *m {
                continue;
            }
            out.push(Action::Deliver(i));
            if s.losses < self.size.losses {
                out.push(Action::Lose(i));
                out.push(Action::DeliverMute(i));
            }
            if s.duplicates < self.size.duplicates {
                out.push(Action::Duplicate(i));
            }
        }
        if s.moved.is_none() && self.size.moves {
            for (c, client) in s.clients.iter().enumerate() {
                if !matches!(client.phase, Phase::Idle) {
                    let idle = |n: usize| {
                        !s.net
                            .iter()
                            .any(|m| usize::from(m.client) == c && usize::from(m.node) == n)
                    };
                    out.extend((0..NODES).filter(|&n| idle(n)).map(|n| Action::Move(c, n)));
                }
            }
        }
        let restarts = s.restarts < self.size.restarts;
        let failover = self.size.failover && s.failover.is_none();
        if restarts {
            out.extend((0..NODES).map(|n| Action::Restart(n, false)));
            out.extend((0..NODES).map(|n| Action::Restart(n, true)));
        }
        for n in 0..NODES {
            match s.snapshots[n] {
                None if (restarts && self.size.snapshots) || failover => {
                    out.push(Action::Snapshot(n))
                }
                None => {}
                Some(_) => {
                    if restarts && self.size.snapshots {
                        out.push(Action::RestartOlder(n));
                    }
                    if failover {
                        out.push(Action::Failover(n));
                    }
                }
            }
        }
        if s.failover.is_some() {
            out.extend(
                (0..CLIENTS)
                    .filter(|&c| !s.on_new[c])
                    .map(Action::Reconnect),
            );
        }
        if s.now < self.size.horizon {
            out.push(Action::Tick);
        }
    }

    fn next(&self, s: &State, action: &Action) -> Option<State> {
        self.next_raw(s, action).map(State::canonical)
    }

    fn mirrored(&self, from: &State, action: &Action, to: &State) -> bool {
        self.next_raw(from, action).as_ref() != Some(to)
    }

    fn unmirror(&self, line: String) -> String {
        line.replace("client 0", "client \u{0}")
            .replace("client 1", "client 0")
            .replace("client \u{0}", "client 1")
            .replace("c0/", "\u{0}/")
            .replace("c1/", "c0/")
            .replace("\u{0}/", "c1/")
    }

    fn broken(&self, s: &State) -> Option<String> {
        let now_ms = u64::from(s.now) * TICK_MS;
        let valid: Vec<usize> = (0..CLIENTS)
            .filter(|&c| {
                matches!(s.clients[c].phase, Phase::Holding { until_ms, .. } if now_ms < until_ms)
            })
            .collect();
        if valid.len() > 1 {
            return Some(format!(
                "clients {valid:?} both hold the lock at {now_ms} ms"
            ));
        }
        if let Some((token, holding)) = s.thin {
            return Some(format!(
                "fencing token {token} granted while {holding} server(s) held a counter that \
                 high: a later grant may count lower"
            ));
        }
        if let Some((earlier, later)) = s.stale {
            return Some(format!(
                "the store took grant {earlier}'s write after grant {later}'s"
            ));
        }
        s.backwards
            .map(|(before, now)| format!("fencing token {now} granted after {before}"))
    }

    fn describe(&self, s: &State, action: &Action) -> String {
        let mut line = format!("t={:>3} ms  ", u64::from(s.now) * TICK_MS);
        let _ = match *action {
            Action::Deliver(i)
            | Action::DeliverMute(i)
            | Action::Duplicate(i)
            | Action::Lose(i) => {
                let m = s.net[i];
                let c = usize::from(m.client);
                if let Request::Write { token, grant } = m.request {
                    let mut store = s.store;
                    let answer = store.write(token, self.rules);
                    let what = match (action, answer) {
                        (Action::Lose(_), _) => "lost",
                        (_, Answer::Int(1)) => "written",
                        _ => "refused",
                    };
                    let _ = write!(
                        line,
                        "client {c}'s write of grant {grant} with token {token} reaches the store: {what}"
                    );
                    return line;
                }
                let what = match action {
                    Action::Lose(_) => "lost",
                    Action::DeliverMute(_) => "runs, its reply is lost",
                    Action::Duplicate(_) => "runs (and again later)",
                    _ if m.current => "runs",
                    _ => "runs LATE (its round is over)",
                };
                let spare = s.moved == Some((m.client, m.node));
                let promoted = state::promoted(s, &m);
                let mut server = match spare || promoted {
                    true => s.spare.clone(),
                    false => s.servers[usize::from(m.node)].clone(),
                };
                let answer = server.run(m.request, s.now, self.rules);
                let reaching = match (spare, promoted, s.failover == Some(m.node)) {
                    (true, _, _) => " (reaching the spare)",
                    (_, true, _) => " (reaching its new master)",
                    (_, _, true) => " (reaching its old master)",
                    _ => "",
                };
                write!(
                    line,
                    "client {c}'s {:?} to server {}{reaching}: {what}, answers {answer:?}",
                    m.request, m.node,
                )
            }
            Action::Start(c, now) => {
                write!(line, "client {c} starts an attempt{}", at_once(now))
            }
            Action::Conclude(c, now) => write!(
                line,
                "client {c} ends its round ({:?}){}",
                s.clients[c].phase,
                at_once(now)
            ),
            Action::Extend(c, ttl, now) => write!(
                line,
                "client {c} extends by {} ms{}",
                u64::from(ttl) * TICK_MS,
                at_once(now)
            ),
            Action::Release(c, now) => write!(line, "client {c} releases{}", at_once(now)),
            Action::Write(c) => write!(line, "client {c} writes to the store"),
            Action::Move(c, n) => write!(
                line,
                "client {c}'s connection to server {n} now reaches an empty spare"
            ),
            Action::Restart(n, false) => write!(line, "server {n} restarts empty"),
            Action::Restart(n, true) => write!(line, "server {n} restarts with its data"),
            Action::Snapshot(n) => write!(line, "server {n} is snapshotted"),
            Action::RestartOlder(n) => write!(line, "server {n} restarts from its snapshot"),
            Action::Failover(n) => write!(
                line,
                "member {n} fails over to a replica promoted with its snapshot (its old master \
                 stays up, writable)"
            ),
            Action::Reconnect(c) => write!(
                line,
                "client {c}'s connection to the member failed over now reaches its new master"
            ),
            Action::Tick => write!(line, "{} ms pass", TICK_MS),
        };
        line
    }
}
