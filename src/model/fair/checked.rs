//! The fair model as the checker sees it: its actions, the state each
//! leads to, its properties (one holder, the waiting bounds) and words.

use super::*;

impl Model for FairModel {
    type State = FairState;
    type Action = FairAction;

    fn init(&self) -> FairState {
        let mut servers: [SetServer; NODES] = Default::default();
        for lane in &mut servers[0].lanes {
            lane.fast = true;
        }
        for lane in servers.iter_mut().flat_map(|s| &mut s.lanes) {
            lane.listening = self.size.outsider_listens;
        }
        if self.size.holds_a {
            // The holder's token on `a` everywhere, past the run's end.
            let a = Value {
                client: HOLDER as u8,
                acquisition: HOLDS_A,
                attempt: 1,
            };
            for server in &mut servers {
                server.lanes[0].key = Some((Held::Token(a), u64::MAX));
            }
        }
        if let Some(until) = self.size.b_dead_until {
            // A client that is not in the run, dead.
            let dead = Value {
                client: CLIENTS as u8,
                acquisition: 0,
                attempt: 1,
            };
            for server in &mut servers {
                server.lanes[1].key = Some((Held::Token(dead), until));
            }
        }
        let client = FairClient {
            phase: Phase::Idle,
            done: 0,
            attempts: 0,
            arrival: None,
            alive: true,
            asked: false,
            heard: Vec::new(),
            waited: 0,
            wait_at: 0,
            seen: [0; NODES],
        };
        let mut s = FairState {
            now: 0,
            servers,
            clients: [client.clone(), client],
            net: Net::default(),
            crashes: 0,
            runs: [0; NODES],
            restarts: 0,
            snapshots: Default::default(),
            named: Default::default(),
        };
        if self.size.contended {
            // Client 0's first attempt granted everywhere, client 1's
            // refused everywhere, and its join run everywhere.
            for (c, answer) in [(0, true), (1, false)] {
                self.next_state(&s, &FairAction::Start(c, 7))
                    .map(|next| s = next)
                    .expect("an attempt starts");
                debug_assert!(matches!(s.clients[c].phase, Phase::Holding { .. }) == answer);
            }
            while !s.net.msgs.is_empty() {
                let m = s.net.msgs.remove(0);
                self.arrive(&mut s, m, false);
            }
        }
        s
    }

    fn actions(&self, s: &FairState, out: &mut Vec<FairAction>) {
        let sync = self.size.synchronous;
        for (c, client) in s.clients.iter().enumerate() {
            if !client.alive {
                continue;
            }
            if s.crashes < self.size.crashes {
                out.push(FairAction::Crash(c));
            }
            match client.phase {
                Phase::Idle if client.done < self.size.acquisitions[c] && !client.asked => {
                    out.extend(self.size.masks.iter().map(|&now| FairAction::Start(c, now)))
                }
                // Rounds end when answered in the liveness run, and in a
                // patient run once nothing of theirs is in flight.
                Phase::Taking { .. }
                    if !sync
                        && (!self.size.patient
                            || !s
                                .net
                                .msgs
                                .iter()
                                .any(|m| usize::from(m.client) == c && m.current)) =>
                {
                    out.extend(
                        self.size
                            .masks
                            .iter()
                            .map(|&now| FairAction::Conclude(c, now)),
                    )
                }
                Phase::Holding { .. } => out.extend(
                    self.size
                        .masks
                        .iter()
                        .map(|&now| FairAction::Release(c, now)),
                ),
                Phase::Idle | Phase::Taking { .. } => {}
            }
        }
        for n in 0..NODES {
            if s.restarts < self.size.restarts {
                out.push(FairAction::Restart(n));
                if s.snapshots[n].is_some() {
                    out.push(FairAction::RestartOlder(n));
                }
            }
            if self.size.snapshots && s.snapshots[n].is_none() {
                out.push(FairAction::Snapshot(n));
            }
        }
        let budgets = (self.size.losses, self.size.duplicates);
        let tick = (self.may_tick(s)).then_some(FairAction::Tick);
        s.net.steps_then(budgets, out, FairAction::Net, tick);
    }

    fn next(&self, s: &FairState, action: &FairAction) -> Option<FairState> {
        self.next_state(s, action)
    }

    fn broken(&self, s: &FairState) -> Option<String> {
        let now_ms = u64::from(s.now) * TICK_MS;
        for k in 0..KEYS as u8 {
            let valid: Vec<usize> = (0..CLIENTS)
                .filter(|&c| {
                    (c == HOLDER && k == 0 && self.size.holds_a)
                        || (Self::keys(self.size.wants[c]).contains(&k)
                            && matches!(s.clients[c].phase,
                                Phase::Holding { until_ms, .. } if now_ms < until_ms))
                })
                .collect();
            if valid.len() > 1 {
                let lock = match (k, self.size.wants) {
                    (_, [On::Key(0), On::Key(0)]) => "the lock".to_owned(),
                    (0, _) => "a".to_owned(),
                    _ => "b".to_owned(),
                };
                return Some(format!("clients {valid:?} both hold {lock} at {now_ms} ms"));
            }
        }
        if let Some(n) = (0..NODES).find(|&n| s.servers[n].lanes.iter().any(|l| l.passed_over)) {
            return Some(format!(
                "server {n} passed over a client that cannot queue: it handed the key on \
                 along a chain due for a yield while that client said it waited"
            ));
        }
        let waited = (0..CLIENTS).find(|&c| s.clients[c].waited > self.size.wait_bound)?;
        Some(format!(
            "client {waited} waited {} ms for a lock free for it, nobody alive ahead of it \
             that can take it",
            u64::from(s.clients[waited].waited) * TICK_MS
        ))
    }

    fn describe(&self, s: &FairState, action: &FairAction) -> String {
        let mut line = format!("t={:>3} ms  ", u64::from(s.now) * TICK_MS);
        // A request run at once: where, and the keys it left there.
        let after = self.next_state(s, action);
        let at_once = |mask: u8| match mask {
            0 => String::new(),
            _ => format!(
                ", running at once on server(s) {:?}, keys now {}",
                (0..NODES)
                    .filter(|n| mask & (1 << n) != 0)
                    .collect::<Vec<_>>(),
                after.as_ref().map_or_else(String::new, |after| {
                    let keys: Vec<String> =
                        (0..NODES).map(|n| self.shown(&after.servers[n])).collect();
                    match keys.iter().all(|k| *k == keys[0]) {
                        true => format!("{} on each", keys[0]),
                        false => keys.join(", "),
                    }
                })
            ),
        };
        let _ = match *action {
            FairAction::Net(i, step) => {
                let m = s.net.msgs[i];
                // Late: a round's own request (not a clean-up, a join or
                // a leave, sent as the round ended).
                let late = !m.current
                    && matches!(
                        m.request.request,
                        FairRequest::Take { .. } | FairRequest::Claim { .. }
                    );
                let what = step.says(late);
                let mut server = s.servers[usize::from(m.node)].clone();
                let answer = server.run(
                    m.request,
                    u64::from(s.now),
                    self.lengths(),
                    self.rules.scripts,
                    self.rules.sets,
                );
                let request = match m.request.on {
                    On::Key(_) if !self.two_keys() => format!("{:?}", m.request.request),
                    On::Key(k) => {
                        format!("{:?} of {}", m.request.request, KEY_NAMES[usize::from(k)])
                    }
                    On::Set(keys)
                        if m.request.named > 0
                            && matches!(m.request.request, FairRequest::Claim { .. }) =>
                    {
                        format!(
                            "set's {:?} (waiting at {})",
                            m.request.request,
                            KEY_NAMES[usize::from(keys[usize::from(m.request.named - 1)])]
                        )
                    }
                    On::Set(_) => format!("set's {:?}", m.request.request),
                };
                write!(
                    line,
                    "client {}'s {request} to server {}: {what}, answers {answer:?}, {}",
                    m.client,
                    m.node,
                    self.shown(&server)
                )
            }
            FairAction::Start(c, now) => {
                let what = match s.clients[c].arrival {
                    Some(_) => "claims",
                    None => "starts an attempt",
                };
                write!(line, "client {c} {what}{}", at_once(now))
            }
            FairAction::Conclude(c, now) => write!(
                line,
                "client {c} ends its round ({:?}){}",
                s.clients[c].phase,
                at_once(now)
            ),
            FairAction::Release(c, now) => write!(line, "client {c} releases{}", at_once(now)),
            FairAction::Crash(c) => write!(line, "client {c} crashes"),
            FairAction::Restart(n) => write!(line, "server {n} restarts empty"),
            FairAction::Snapshot(n) => {
                write!(
                    line,
                    "server {n} takes a snapshot ({})",
                    self.shown(&s.servers[n])
                )
            }
            FairAction::RestartOlder(n) => write!(
                line,
                "server {n} restarts from its snapshot ({})",
                s.snapshots[n]
                    .as_ref()
                    .map_or_else(String::new, |o| self.shown(o))
            ),
            FairAction::Tick => write!(line, "{TICK_MS} ms pass"),
        };
        line
    }
}
