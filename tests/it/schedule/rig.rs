//! The rig of the schedule runs (servers behind per-worker forwarders,
//! spares, a Redis Cluster variant), their runs and the nemesis.

use super::*;

/// The servers behind forwarders (one per worker and node, so that one
/// worker can be cut off from one node), the spares an address may move
/// to, and the nemesis's bookkeeping.
pub(super) struct Rig {
    /// `proxies[i][w]`: worker `w`'s way to plain node `i`. Dropped before
    /// the servers (fields drop in order): dropped after them, a run's
    /// end took 20-45 s more in 3 of 12 late-delivery runs on a loaded
    /// machine, in 0 of 16 this way.
    pub(super) proxies: Vec<Vec<Proxy>>,
    pub(super) servers: Vec<Server>,
    /// The variant with a Redis Cluster member beside two plain nodes.
    pub(super) cluster: Option<RedisCluster>,
    /// Which server each plain node's forwarders reach now.
    pub(super) behind: Vec<usize>,
    /// Until when each member counts as disturbed for every worker
    /// (paused, or migrating). A restart or a move counts only while it
    /// happens: keeping a server that lost its keys out of the votes
    /// afterwards is the library's job (the restart quarantine), and the
    /// checker holds it to it.
    pub(super) disturbed: Vec<Instant>,
    /// `cut[w][i]`: until when worker `w` cannot reach node `i`.
    pub(super) cut: Vec<Vec<Instant>>,
    /// The liveness run (see [`live`]): no restarts or moves (a restarted
    /// server sits out votes, which may leave no quorum for a while: no
    /// waiter could progress then); dead waiters queued instead.
    pub(super) gentle: bool,
    /// Late deliveries only (see [`no_schedule_breaks_the_promise_with_late_deliveries`]).
    pub(super) late_only: bool,
    /// Fresh managers with default settings, and restarts from older
    /// copies (see [`no_schedule_breaks_the_promise_with_fresh_managers_and_older_copies`]).
    pub(super) fresh: bool,
    /// When each server last took a snapshot (`SAVE`), if it did.
    pub(super) snapshots: Vec<Option<Instant>>,
    /// The fresh-managers run: the node paused last, whose pause ended
    /// or will; the next restart goes to another node, so that grants
    /// made without the paused node (on a bare majority) meet a restart
    /// of one of their voters while they are valid.
    pub(super) after_pause: Option<usize>,
    /// The fresh-managers run: a restart from a snapshot happened (the
    /// first restart that finds a snapshot takes it; later ones two times
    /// in three).
    pub(super) restored: bool,
    /// Until when the last dead waiter's ticket is live: one at a time
    /// (each costs the waiters behind it one reservation; several in a
    /// row cost one each, which the stall bound does not cover).
    pub(super) ghost_until: Instant,
}

/// What the nemesis undoes when a fault's time is up.
pub(super) enum Undo {
    Resume(usize),
    Heal(usize, usize),
}

pub(super) fn addr(server: &Server) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], server.port()))
}

impl Rig {
    /// `nodes` plain nodes behind forwarders (and two spares, all up a
    /// while before any move), and with `cluster` a Redis Cluster member.
    pub(super) fn start(nodes: usize, cluster: bool) -> Rig {
        Rig::start_clocked(nodes, cluster, &[])
    }

    /// As [`start`](Self::start), the plain servers' clocks running at
    /// `rates` (server `i` at `rates[i]`; none given: the real clock).
    pub(super) fn start_clocked(nodes: usize, cluster: bool, rates: &[f64]) -> Rig {
        let servers: Vec<Server> = (0..nodes + 2)
            .map(|i| match rates.get(i) {
                Some(&rate) => Server::start_clocked(rate).unwrap(),
                None => Server::start().unwrap(),
            })
            .collect();
        let proxies = (0..nodes)
            .map(|i| {
                (0..WORKERS)
                    .map(|_| Proxy::start(addr(&servers[i])).unwrap())
                    .collect()
            })
            .collect();
        let members = nodes + usize::from(cluster);
        let now = Instant::now();
        Rig {
            servers,
            proxies,
            cluster: cluster.then(|| RedisCluster::start(3, 0).unwrap()),
            behind: (0..nodes).collect(),
            disturbed: vec![now; members],
            cut: vec![vec![now; members]; WORKERS],
            gentle: false,
            late_only: false,
            fresh: false,
            snapshots: vec![None; nodes + 2],
            after_pause: None,
            restored: false,
            ghost_until: now,
        }
    }

    /// A waiter that dies while queued for `cell` (`a` or `b`): its
    /// ticket, valid for 3 s, at the back of the cell's queue on every
    /// server not disturbed now (as a fair waiter's join writes it), from
    /// a manager nobody runs any more.
    pub(super) fn ghost(&mut self, cell: &str, now: Instant, log: &mut Vec<String>) {
        if self.ghost_until > now {
            return;
        }
        self.ghost_until = now + Duration::from_secs(3);
        let name = format!("sched:{cell}");
        let fence = String::from_utf8(redlock_sync::fence_key(&name)).unwrap();
        let queue = fence.replace(":redlock-fence", ":redlock-queue");
        let tickets = fence.replace(":redlock-fence", ":redlock-tickets");
        let ghost = format!("ghost{:x}", getrandom::u64().unwrap());
        for i in 0..self.proxies.len() {
            if self.disturbed[i] > now {
                continue;
            }
            let mut con = support::admin(&self.servers[self.behind[i]]);
            let server_now: (String, String) = redis::cmd("TIME").query(&mut con).unwrap();
            let (sec, micros) = (
                server_now.0.parse::<u64>().unwrap(),
                server_now.1.parse::<u64>().unwrap(),
            );
            let deadline = sec * 1000 + micros / 1000 + 3000;
            let arrival = sec * 1_000_000 + micros;
            // As the join script writes it: the keys last at least as
            // long as the ticket.
            let _: i64 = redis::Script::new(
                "redis.call('ZADD', KEYS[1], 'NX', ARGV[1], ARGV[2]) \
                 redis.call('HSET', KEYS[2], ARGV[2], ARGV[3]) \
                 for _, k in ipairs(KEYS) do \
                   if redis.call('PTTL', k) < 3000 then redis.call('PEXPIRE', k, 3000) end \
                 end return 1",
            )
            .key(&queue)
            .key(&tickets)
            .arg(arrival)
            .arg(&ghost)
            .arg(format!("{deadline}:gone-manager"))
            .invoke(&mut con)
            .unwrap();
        }
        log.push(format!("a waiter queued for {cell} dies"));
    }

    /// How many members may be disturbed at once, for any worker.
    pub(super) fn minority(&self) -> usize {
        (self.disturbed.len() - 1) / 2
    }

    /// Whether also disturbing member `i` (for every worker, or for
    /// `only` one) leaves every worker a majority.
    pub(super) fn may_disturb(&self, i: usize, only: Option<usize>, now: Instant) -> bool {
        // One fault at a time on a member.
        if self.disturbed[i] > now || only.is_some_and(|w| self.cut[w][i] > now) {
            return false;
        }
        (0..WORKERS)
            .filter(|&w| only.is_none_or(|o| o == w))
            .all(|w| {
                let down = (0..self.disturbed.len())
                    .filter(|&j| j == i || self.disturbed[j] > now || self.cut[w][j] > now)
                    .count();
                down <= self.minority()
            })
    }

    pub(super) fn manager(&self, w: usize) -> LockManager {
        let cluster = self.cluster.as_ref().map(RedisCluster::seeds);
        Rig::manager_of(self.urls(w), w, cluster)
    }

    /// Worker `w`'s ways to the plain nodes.
    pub(super) fn urls(&self, w: usize) -> Vec<String> {
        self.proxies.iter().map(|p| p[w].url()).collect()
    }

    /// A manager with default settings (no strict mode), made for one
    /// acquisition, as each `lockrun` run is: it meets the servers at its
    /// first attempt, whatever restarted before.
    pub(super) fn fresh_manager(urls: &[String], w: usize) -> LockManager {
        LockManager::builder()
            .nodes(urls)
            .node_timeout(NODE_TIMEOUT)
            .retry(2, Duration::from_millis(15))
            .fencing_expiry(Duration::from_secs(1))
            .fair(w.is_multiple_of(2))
            .build()
            .unwrap()
    }

    /// The fresh-managers run's fault on plain node `i`: a snapshot
    /// (`SAVE`, what `save 3600 1` does on its schedule), a pause, or a
    /// restart, empty or from the node's last snapshot (an older copy of
    /// its data). A restarted node counts as failed for the longest TTL
    /// (the assumption: for as long as a lock it forgot could be valid),
    /// so that no other fault meets it; the library must keep its vote
    /// from breaking anything, by itself, with default settings.
    pub(super) fn fresh_fault(
        &mut self,
        rng: &mut Rng,
        i: usize,
        now: Instant,
        log: &mut Vec<String>,
    ) -> Option<(Instant, Undo)> {
        // Right after a pause, a restart of one of the nodes that voted
        // without the paused one.
        let (i, roll) = match self.after_pause {
            Some(j) if self.disturbed[j] <= now => {
                self.after_pause = None;
                let i = (j + 1 + rng.below(2) as usize) % self.proxies.len();
                (i, 4)
            }
            _ => (i, rng.below(4)),
        };
        let s = self.behind[i];
        if roll == 0 {
            if self.disturbed[i] > now {
                return None;
            }
            let _: () = redis::cmd("SAVE")
                .query(&mut support::admin(&self.servers[s]))
                .unwrap();
            self.snapshots[s] = Some(Instant::now());
            log.push(format!("node {i} takes a snapshot"));
            return None;
        }
        if !self.may_disturb(i, None, now) {
            return None;
        }
        if roll == 1 || roll == 2 {
            self.after_pause = Some(i);
            return Some(self.pause(rng, i, now, log));
        }
        let older = match self.snapshots[s] {
            Some(at) if !self.restored || rng.below(3) > 0 => {
                self.restored = true;
                Some(at)
            }
            _ => {
                let _ = std::fs::remove_file(self.servers[s].dir().join("dump.rdb"));
                self.snapshots[s] = None;
                None
            }
        };
        self.servers[s].restart().unwrap();
        match older {
            Some(at) => log.push(format!(
                "restart node {i} from its snapshot of {:.0}ms ago",
                at.elapsed().as_secs_f64() * 1000.0
            )),
            None => log.push(format!("restart node {i} empty")),
        }
        self.disturbed[i] = Instant::now() + QUARANTINE;
        None
    }

    /// Worker `w`'s manager on the members at `urls` (and a Redis
    /// Cluster's `seeds`, if any).
    pub(super) fn manager_of(
        urls: impl IntoIterator<Item = impl AsRef<str>>,
        w: usize,
        cluster: Option<Vec<String>>,
    ) -> LockManager {
        let mut builder = LockManager::builder()
            .nodes(urls)
            .node_timeout(NODE_TIMEOUT)
            .retry(2, Duration::from_millis(15))
            .restart_quarantine(QUARANTINE)
            // Counters idle this long expire and start again from the
            // clock: members' counters then differ widely, as after
            // restarts, which is what raising laggards is for.
            .fencing_expiry(Duration::from_secs(1))
            // Half the workers wait fairly (queued across managers): the
            // queue must never change who may hold.
            .fair(w.is_multiple_of(2));
        if let Some(seeds) = cluster {
            builder = builder.cluster(seeds);
        }
        builder.build().unwrap()
    }

    /// One fault on member `i`, if it leaves every worker a majority;
    /// what to undo, and when.
    /// `now` is when the faults due were undone: a fault whose time ran
    /// out since is still in place, and counts.
    pub(super) fn fault(
        &mut self,
        rng: &mut Rng,
        i: usize,
        now: Instant,
        log: &mut Vec<String>,
    ) -> Option<(Instant, Undo)> {
        let plain = i < self.proxies.len();
        if self.fresh {
            return self.fresh_fault(rng, i, now, log);
        }
        // Late deliveries (issue 56): for a short window, every script one
        // worker sends one plain node (claims, clean-ups, extends, raises,
        // releases) is held back past the node timeout, then delivered,
        // whatever the worker did meanwhile: a waiter's claim and its
        // clean-up arrive after its next attempt, sent once the window
        // closed, was granted there.
        if plain && (self.late_only || rng.below(4) == 0) {
            // The late-delivery run aims at fair waiters (the even workers).
            let w = match self.late_only {
                true => 2 * rng.below(WORKERS as u64 / 2) as usize,
                false => rng.below(WORKERS as u64) as usize,
            };
            if !self.may_disturb(i, Some(w), now) {
                return None;
            }
            if self.late_only {
                // With it, another client's value on another node for a
                // while (its late acquisition, for nobody): members then
                // disagree, so that the worker's attempt in the window
                // fails and its next one, after it, passes.
                let j = (i + 1 + rng.below(2) as usize) % self.proxies.len();
                let key = ["sched:a", "sched:b", "sched:rw"][rng.below(3) as usize];
                let d = rng.ms(50, 400);
                let _ = redis::cmd("SET")
                    .arg(key)
                    .arg("a-late-stray")
                    .arg("NX")
                    .arg("PX")
                    .arg(d.as_millis() as u64)
                    .query::<Option<String>>(&mut support::admin(&self.servers[self.behind[j]]));
                log.push(format!("a stray value of {key} on node {j} for {d:?}"));
            }
            // Late enough that the attempt times out (node timeout 50 ms),
            // soon enough to land while the later grant is held (TTLs up
            // to 400 ms).
            let window = rng.ms(30, 150);
            let late = rng.ms(100, 400);
            // Scripts (claims, clean-ups, extends, raises), or every
            // request (plain acquisitions too: one that lands late takes a
            // key for nobody, so that members disagree).
            let every = !self.late_only && rng.below(2) == 0;
            self.proxies[i][w].set(if every {
                Mode::DelayAll(late)
            } else {
                Mode::DelayScripts(late)
            });
            // Counted as cut off until the last held request is delivered.
            self.cut[w][i] = now + window + late;
            log.push(format!(
                "hold worker {w}'s {} to node {i} back {late:?} each, for {window:?}",
                if every { "requests" } else { "scripts" }
            ));
            return Some((now + window, Undo::Heal(i, w)));
        }
        // A partition: one worker cut off from one plain node.
        if plain && rng.below(2) == 0 {
            let w = rng.below(WORKERS as u64) as usize;
            if !self.may_disturb(i, Some(w), now) {
                return None;
            }
            let d = rng.ms(50, 1500);
            self.proxies[i][w].set(Mode::Blackhole);
            self.cut[w][i] = now + d;
            log.push(format!("cut worker {w} off node {i} for {d:?}"));
            return Some((now + d, Undo::Heal(i, w)));
        }
        if !self.may_disturb(i, None, now) {
            return None;
        }
        if !plain && rng.below(2) == 0 {
            // The cluster member: a master restarts empty (it keeps its
            // slots: its cluster configuration is on disk). Its counters
            // start again from the clock, far from the other members'.
            let cluster = self.cluster.as_mut().unwrap();
            let m = rng.below(3) as usize;
            cluster.masters[m].restart().unwrap();
            // Until it rejoins, the cluster says CLUSTERDOWN (and MIGRATE
            // to it fails): the fault lasts that long.
            cluster.wait_ok().unwrap();
            log.push(format!("restart cluster master {m} empty"));
            self.disturbed[i] = Instant::now();
            return None;
        }
        if !plain {
            // The cluster member: one of the shapes' slots moves to
            // another master (no vote while it migrates).
            let cluster = self.cluster.as_ref().unwrap();
            let keys = ["sched:a", "sched:b", "sched:sem", "sched:rw"];
            let key = keys[rng.below(keys.len() as u64) as usize];
            let from = cluster.master_of(key.as_bytes());
            let to = (from + 1 + rng.below(2) as usize) % 3;
            let slot = keyslot(&cluster.masters[0], key.as_bytes());
            self.disturbed[i] = now + Duration::from_secs(3600);
            cluster.move_slot(slot, from, to, || thread::sleep(rng.ms(0, 200)));
            self.disturbed[i] = Instant::now();
            log.push(format!("move the slot of {key} from master {from} to {to}"));
            return None;
        }
        let s = self.behind[i];
        let roll = rng.below(5);
        if self.gentle && roll >= 3 {
            self.ghost(["a", "b"][rng.below(2) as usize], now, log);
            return None;
        }
        match roll {
            0..=2 => Some(self.pause(rng, i, now, log)),
            3 => {
                self.servers[s].restart().unwrap();
                log.push(format!("restart node {i} empty"));
                self.disturbed[i] = Instant::now();
                None
            }
            _ => {
                // Move the address to a server no forwarder reaches (up
                // for a while, none of these keys).
                let spare = (0..self.servers.len())
                    .find(|j| !self.behind.contains(j))
                    .unwrap();
                let _ =
                    redis::cmd("FLUSHALL").query::<()>(&mut support::admin(&self.servers[spare]));
                for p in &self.proxies[i] {
                    p.retarget(addr(&self.servers[spare]));
                }
                self.behind[i] = spare;
                log.push(format!("move node {i} to a spare server"));
                self.disturbed[i] = Instant::now();
                None
            }
        }
    }

    /// Pauses plain node `i` (its server now) for 30 to 500 ms: what to
    /// undo, and when.
    pub(super) fn pause(
        &mut self,
        rng: &mut Rng,
        i: usize,
        now: Instant,
        log: &mut Vec<String>,
    ) -> (Instant, Undo) {
        let s = self.behind[i];
        let d = rng.ms(30, 500);
        self.servers[s].pause();
        log.push(format!("pause node {i} for {d:?}"));
        self.disturbed[i] = now + d;
        (now + d, Undo::Resume(s))
    }

    pub(super) fn undo(&mut self, undo: Undo) {
        match undo {
            Undo::Resume(s) => self.servers[s].resume(),
            Undo::Heal(i, w) => self.proxies[i][w].set(Mode::Pass),
        }
    }
}

pub(super) fn seed() -> u64 {
    std::env::var("SCHEDULE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| getrandom::u64().unwrap())
}

pub(super) fn seconds(default: u64) -> Duration {
    Duration::from_secs(
        std::env::var("SCHEDULE_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default),
    )
}

/// Runs one schedule for `length`; returns the spans and the nemesis log.
pub(super) fn run(seed: u64, length: Duration, cluster: bool) -> (Vec<Span>, Vec<String>, Instant) {
    run_clocked(seed, length, cluster, &[])
}

/// [`run`] with the plain servers' clocks at `rates` (see
/// [`Rig::start_clocked`]).
pub(super) fn run_clocked(
    seed: u64,
    length: Duration,
    cluster: bool,
    rates: &[f64],
) -> (Vec<Span>, Vec<String>, Instant) {
    let nodes = if cluster { 2 } else { NODES };
    run_on(seed, length, Rig::start_clocked(nodes, cluster, rates))
}

/// One schedule for `length` on `rig`: six workers over every shape, the
/// nemesis at them; the spans and the nemesis log.
pub(super) fn run_on(
    seed: u64,
    length: Duration,
    mut rig: Rig,
) -> (Vec<Span>, Vec<String>, Instant) {
    let spans = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    // The late-delivery run moves no address: its servers can be read
    // directly for where each guard's keys stand.
    let oracle = rig.late_only.then(|| Oracle {
        servers: (0..rig.proxies.len())
            .map(|i| rig.servers[rig.behind[i]].url())
            .collect(),
    });
    let oracle = oracle.as_ref();
    let managers: Vec<LockManager> = (0..WORKERS).map(|w| rig.manager(w)).collect();
    // The fresh-managers run: each attempt a manager of its own.
    let fresh: Vec<Option<Vec<String>>> = (0..WORKERS)
        .map(|w| rig.fresh.then(|| rig.urls(w)))
        .collect();
    // Every manager knows every server before the first fault, so that
    // it sees each change of server behind an address (not the fresh
    // ones, which meet them when they start).
    for dlm in managers.iter().filter(|_| !rig.fresh) {
        for op in 0..OPS.len() {
            if let Some((guard, _)) = take(dlm, op, Duration::from_millis(TTL_MS.1), Duration::ZERO)
            {
                guard.release();
            }
        }
    }
    let t0 = Instant::now();
    let mut log = Vec::new();
    thread::scope(|scope| {
        for (w, dlm) in managers.iter().enumerate() {
            let (spans, stop) = (&spans, &stop);
            let fresh = &fresh[w];
            scope.spawn(move || {
                let mut rng = Rng(seed ^ (w as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
                while !stop.load(Ordering::Relaxed) {
                    let op = rng.below(OPS.len() as u64) as usize;
                    let ttl = rng.ms(TTL_MS.0, TTL_MS.1);
                    // A fresh manager waits briefly and the next one asks
                    // again: most meet the servers after a restart, none
                    // having seen it (one that waits sees it, and keeps the
                    // server out on its own).
                    let wait = match fresh {
                        Some(_) => rng.ms(0, 60),
                        None => rng.ms(0, 2 * TTL_MS.1),
                    };
                    let own = fresh.as_ref().map(|urls| Rig::fresh_manager(urls, w));
                    let dlm = own.as_ref().unwrap_or(dlm);
                    match take(dlm, op, ttl, wait) {
                        Some((guard, holds)) => {
                            if let Some(span) = hold_seen(&mut rng, w, op, guard, holds, oracle) {
                                spans.lock().push(span);
                            }
                        }
                        None => thread::sleep(rng.ms(1, 20)),
                    }
                }
            });
        }
        // The workers stop when the nemesis is done, and also when it
        // fails (a panic here must end the test, not leave them running).
        let _stop = Stop(&stop);
        nemesis(&mut rig, seed, length, t0, &mut log);
    });
    (spans.into_inner(), log, t0)
}

/// Sets its flag when dropped: the workers stop when the nemesis is
/// done, and also when it fails.
pub(super) struct Stop<'a>(pub(super) &'a AtomicBool);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The undoings of `pending` due at `now`, taken out of it.
pub(super) fn take_due(pending: &mut Vec<(Instant, Undo)>, now: Instant) -> Vec<Undo> {
    let (due, later) = std::mem::take(pending)
        .into_iter()
        .partition(|(u, _)| *u <= now);
    *pending = later;
    due.into_iter().map(|(_, undo)| undo).collect()
}

/// The nemesis for `length` from `t0`: a fault every 20-150 ms on a
/// member of `rig`, never more than a minority disturbed at once, each
/// undone when its time is up (and all at the end); what it did goes to
/// `log`.
pub(super) fn nemesis(
    rig: &mut Rig,
    seed: u64,
    length: Duration,
    t0: Instant,
    log: &mut Vec<String>,
) {
    let mut rng = Rng(seed);
    let mut pending: Vec<(Instant, Undo)> = Vec::new();
    while t0.elapsed() < length {
        thread::sleep(rng.ms(20, 150));
        let now = Instant::now();
        for undo in take_due(&mut pending, now) {
            rig.undo(undo);
        }
        let i = rng.below(rig.disturbed.len() as u64) as usize;
        let entry = format!("{:.0}ms: ", t0.elapsed().as_secs_f64() * 1000.0);
        let mut said = Vec::new();
        if let Some(undo) = rig.fault(&mut rng, i, now, &mut said) {
            pending.push(undo);
        }
        log.extend(said.into_iter().map(|l| format!("{entry}{l}")));
    }
    for (_, undo) in pending {
        rig.undo(undo);
    }
}
