//! A randomized schedule checker: workers over every shape (lock,
//! `lock_all`, permit, read, write, an election's leadership) with random
//! TTLs, extends (shorter
//! ones too), holders that pause past their validity and holders that
//! crash (guard leaked), while a nemesis pauses nodes, cuts one worker
//! off one node (each worker has forwarders of its own), holds one
//! worker's scripts to one node back past the node timeout and delivers
//! them late (after the worker's next attempt), restarts nodes
//! empty and moves a node's address to another server that has been up
//! for a while (cutting live connections), so that each worker always
//! reaches a majority. Restarts and moves are not counted against that
//! majority once done: keeping a server that lost its keys out of the
//! votes is the library's job. A variant puts a Redis Cluster member
//! beside two plain nodes, and moves its slots and restarts its masters.
//!
//! Each holder records the span in which `ensure_held()` was `Ok` (from
//! the instant before its first `Ok` check to the instant before its last
//! one: moments at which the guard claimed to hold). Afterwards the
//! checker asserts the promise:
//! - no two exclusive holders of one resource overlap (locks, sets, write
//!   locks, each permit slot, leaderships: spans in which `is_leader()`
//!   was true);
//! - never more than K permits of a semaphore at once;
//! - no reader beside a writer;
//! - fencing tokens (an election's terms) grow in the order of holders
//!   that did not overlap.
//!
//! A liveness run (`no_schedule_keeps_a_waiter_from_a_free_resource`,
//! behind `#[ignore]` for now: see its docs) checks progress as well: every worker fair and pausing 1.5 to 3 s
//! between attempts, locks and a set of two resources and a holder of
//! one (kept alive) asking for the other, while the nemesis pauses nodes,
//! cuts workers off nodes and queues waiters that then die. No waiter may
//! wait while what it waits for is free (no other worker's keys could
//! stand on a majority) for longer than [`STALL`]. Reverting issue 38's
//! fixes, it fails: a set waiting in every queue (4 and 6 stalls in two
//! runs of two), and hand-offs that tell nobody but the waiter handed to
//! with no cap on a queued waiter's pause (11 stalls in one run of two).
//!
//! A lockrun run (`lockruns_never_run_two_commands_at_once`) checks the
//! `lockrun` binary whole, as processes: three workers, each reaching
//! three nodes through forwarders of its own, run lockrun after lockrun
//! (`--ttl` 500 ms to 1.5 s, `--wait 3s`) on one of two resources,
//! around a command that appends CLOCK_MONOTONIC to a file every 5 ms
//! for 0.1 to 3 s (a python; the clock is comparable across processes).
//! Half the commands ignore SIGTERM (only SIGKILL stops them early), and
//! half run under `sh -c 'python3 ...; :'` (only a signal to the process
//! group reaches the python). The nemesis cuts one worker at a time off
//! two of the three nodes for 1 to 4 s, so that its renewals fail and
//! the others take the lock once its keys expire (preferably a worker
//! whose command has longer left than its TTL, on a resource another
//! lockrun waits for), cuts workers off one node and pauses nodes,
//! always leaving every other worker a majority. No two commands' spans
//! (first beat to last) on one resource may overlap; and lest it pass
//! idle, at least 8 commands must have run, and one cut must have
//! outlasted the TTL while the cut worker's command would have run on
//! past it (a cut that exposes a lockrun which lets its command run on;
//! lockrun's exit statuses are not looked at). With lockrun's 10 s
//! grace between SIGTERM and SIGKILL, counted from the end of the
//! validity (issue 39, flaw 1), and its signals to COMMAND's pid alone,
//! it fails: 1 to 5 overlaps in every run of 19 (commands that ignore
//! SIGTERM, and pythons orphaned by a killed `sh`, beating up to 1.6 s
//! past the next command's start).
//!
//! A fresh-managers run (`no_schedule_breaks_the_promise_with_fresh_managers_and_older_copies`,
//! issue 66) has every acquisition made by a new manager with default
//! settings, while servers snapshot and restart empty or from an older
//! copy (see its docs).
//!
//! The schedule is seeded: the seed is printed, and `SCHEDULE_SEED=<n>`
//! replays its random choices (thread timing still varies, so a replay
//! finds the same kind of schedule, not the same interleaving).
//!
//! A late-delivery run (`no_schedule_breaks_the_promise_with_late_deliveries`,
//! issue 56) puts the workers on three nodes, so that grants rest on bare
//! majorities, under a nemesis that only holds a fair worker's scripts to
//! one node back past the node timeout and delivers them after the worker
//! moved on, while another client's value stands on another node for a
//! while (members disagree: the attempt in the window fails, the next
//! passes). Besides the overlaps, it reads the servers directly whenever
//! an exclusive guard of plain keys says it holds (between two checks
//! that say so): within the acquisition's validity every member that
//! granted it must still hold its value, and a majority always (no
//! restart or move in this run, and nothing else removes it; a member
//! whose extend came late lets the key expire with the TTL it had). With
//! the fair claim's rule against a later attempt's value removed by hand
//! it failed 6 of 8 runs of 10 s (a lock, a set, a write lock: "stands on
//! 1 of the 2 servers that granted it"); with the rule, none of 7.
//! `SCHEDULE_SECONDS` sets the length; the CI runs are 12 s on five plain
//! nodes, 8 s on two nodes and a Redis Cluster member whose slots move
//! and 15 s of lockruns, and
//!
//! ```text
//! SCHEDULE_SECONDS=600 cargo test --release --all-features --test it schedule:: -- --ignored --nocapture
//! ```
//!
//! runs the long one (ten minutes: a minute per seed, both variants in
//! turn).

use crate::support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redlock_sync::mode::Mode as GuardMode;
use redlock_sync::{Guard, Leadership, LockGuard, LockManager, ReadGuard};
use support::Server;
use support::proxy::{Mode, Proxy};
use support::redis_cluster::{RedisCluster, keyslot};

const NODES: usize = 5;
const WORKERS: usize = 6;
const PERMITS: u32 = 2;
/// TTLs are drawn from this range (ms); extends too, so some are shorter.
const TTL_MS: (u64, u64) = (60, 400);
/// Every manager keeps any server started within this out (strict mode),
/// so that restarts are safe whatever each worker has used: the longest
/// TTL any worker may use, and a margin.
const QUARANTINE: Duration = Duration::from_millis(TTL_MS.1 + 100);
const NODE_TIMEOUT: Duration = Duration::from_millis(50);

/// splitmix64: small, seedable, good enough for schedules.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.between(lo, hi))
    }
}

/// What a holder held.
#[derive(Clone, Debug, PartialEq)]
enum Hold {
    /// Exclusive on each of these cells (a lock, a set, a write lock, a
    /// permit's slot), with the fencing token.
    Exclusive(Vec<String>),
    /// A permit of the semaphore (also exclusive on its slot's cell).
    Permit(String),
    /// A read lock on the cell.
    Read(String),
}

#[derive(Clone, Debug)]
struct Span {
    worker: usize,
    what: &'static str,
    holds: Vec<Hold>,
    token: Option<u64>,
    start: Instant,
    end: Instant,
}

/// The shapes a worker takes, and the cells each one holds.
const OPS: [&str; 7] = [
    "lock a", "lock b", "set a+b", "permit", "read rw", "write rw", "lead e",
];

/// A guard of any shape: exclusive (with a fencing token) or a reader's.
enum Held {
    Lock(LockGuard),
    Read(ReadGuard),
    Lead(Leadership),
}

impl Held {
    fn release(self) {
        let _ = match self {
            Held::Lock(g) => g.release(),
            Held::Read(g) => g.release(),
            Held::Lead(l) => l.resign(),
        };
    }
}

/// Takes shape `op` for `ttl`, waiting up to `wait` (contenders wait on
/// each other, so a lock is taken again soon after it is free).
fn take(dlm: &LockManager, op: usize, ttl: Duration, wait: Duration) -> Option<(Held, Vec<Hold>)> {
    let ex = |cells: &[&str]| {
        vec![Hold::Exclusive(
            cells.iter().map(|c| (*c).to_owned()).collect(),
        )]
    };
    match op {
        0 => Some((
            Held::Lock(dlm.try_lock_for("sched:a", ttl, wait).ok()?),
            ex(&["a"]),
        )),
        1 => Some((
            Held::Lock(dlm.try_lock_for("sched:b", ttl, wait).ok()?),
            ex(&["b"]),
        )),
        2 => Some((
            Held::Lock(
                dlm.try_lock_all_for(["sched:a", "sched:b"], ttl, wait)
                    .ok()?,
            ),
            ex(&["a", "b"]),
        )),
        3 => {
            let permit = dlm
                .semaphore("sched:sem", PERMITS)
                .unwrap()
                .try_acquire_for(ttl, wait)
                .ok()?;
            let slot = format!("sem:{}", permit.slot());
            let holds = vec![Hold::Permit("sem".into()), Hold::Exclusive(vec![slot])];
            Some((Held::Lock(permit.into_guard()), holds))
        }
        4 => Some((
            Held::Read(
                dlm.rwlock("sched:rw")
                    .unwrap()
                    .try_read_for(ttl, wait)
                    .ok()?,
            ),
            vec![Hold::Read("rw".into())],
        )),
        5 => Some((
            Held::Lock(
                dlm.rwlock("sched:rw")
                    .unwrap()
                    .try_write_for(ttl, wait)
                    .ok()?,
            ),
            ex(&["rw"]),
        )),
        _ => Some((
            Held::Lead(
                dlm.election("sched:e")
                    .unwrap()
                    .try_campaign_for(ttl, wait)
                    .ok()?,
            ),
            ex(&["e"]),
        )),
    }
}

/// One holder's life: checks, extends (shorter ones too), sleeps, a pause
/// past its validity, a crash (the guard leaked) or a release. Returns
/// its span, if any check was `Ok`.
fn hold(rng: &mut Rng, worker: usize, op: usize, held: Held, holds: Vec<Hold>) -> Option<Span> {
    hold_seen(rng, worker, op, held, holds, None)
}

/// [`hold`], and with `oracle` (the servers, reached directly), whenever
/// an exclusive guard of one or more plain keys says it holds: its value
/// must stand under each key on every server that granted it within the
/// acquisition's validity, and on a majority always, read on the servers
/// between two checks that said so (see [`Oracle`]).
fn hold_seen(
    rng: &mut Rng,
    worker: usize,
    op: usize,
    held: Held,
    holds: Vec<Hold>,
    oracle: Option<&Oracle>,
) -> Option<Span> {
    match held {
        Held::Lock(guard) => {
            let token = guard.fencing_token();
            let keys: Vec<String> = match holds.first() {
                Some(Hold::Exclusive(cells)) if op != 3 => {
                    cells.iter().map(|c| format!("sched:{c}")).collect()
                }
                _ => Vec::new(),
            };
            let oracle = oracle.filter(|_| !keys.is_empty()).map(|o| (o, keys));
            hold_guard(rng, worker, op, guard, token, holds, oracle)
        }
        Held::Read(guard) => hold_guard(rng, worker, op, guard, None, holds, None),
        Held::Lead(lead) => hold_lead(rng, worker, op, lead, holds),
    }
}

/// A leader's term: checks (`is_leader`), sleeps of up to a TTL and more
/// (its renewals keep it), proclaims, then resigns or drops. A leader
/// cannot crash here: its renewal thread would keep leading.
fn hold_lead(
    rng: &mut Rng,
    worker: usize,
    op: usize,
    lead: Leadership,
    holds: Vec<Hold>,
) -> Option<Span> {
    let mut span: Option<(Instant, Instant)> = None;
    let mut check = |lead: &Leadership| {
        let at = Instant::now();
        let ok = lead.is_leader();
        if ok {
            let s = span.get_or_insert((at, at));
            s.1 = at;
        }
        ok
    };
    if check(&lead) {
        for _ in 0..rng.between(1, 12) {
            let roll = rng.below(100);
            if roll < 60 {
                thread::sleep(rng.ms(0, TTL_MS.1));
            } else if roll < 85 {
                let _ = lead.proclaim(rng.next().to_string());
            } else {
                break;
            }
            if !check(&lead) {
                break;
            }
        }
    }
    let term = lead.term();
    if rng.below(2) == 0 {
        let _ = lead.resign();
    } else {
        drop(lead);
    }
    let (start, end) = span?;
    Some(Span {
        worker,
        what: OPS[op],
        holds,
        token: Some(term),
        start,
        end,
    })
}

/// The servers of a run whose addresses never move, read directly (not
/// through the forwarders): where each key of a guard stands.
struct Oracle {
    servers: Vec<String>,
}

impl Oracle {
    /// How many servers hold `value` under every one of `keys` (fewest).
    fn standing(&self, keys: &[String], value: &[u8]) -> usize {
        keys.iter()
            .map(|key| {
                self.servers
                    .iter()
                    .filter(|url| {
                        let got: Option<Vec<u8>> = redis::Client::open(url.as_str())
                            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
                            .and_then(|mut con| redis::cmd("GET").arg(key).query(&mut con))
                            .unwrap_or(None);
                        got.as_deref() == Some(value)
                    })
                    .count()
            })
            .min()
            .unwrap_or(0)
    }
}

/// [`hold`] of a guard in any mode, whose fencing token is `token`; with
/// `oracle`, the guard's `keys` are looked at on the servers at each
/// check that says it holds.
fn hold_guard<M: GuardMode>(
    rng: &mut Rng,
    worker: usize,
    op: usize,
    guard: Guard<M>,
    token: Option<u64>,
    holds: Vec<Hold>,
    oracle: Option<(&Oracle, Vec<String>)>,
) -> Option<Span> {
    let mut span: Option<(Instant, Instant)> = None;
    // Until the acquisition's validity ends, every member that granted it
    // holds the value (each key's TTL there started after the round's
    // start); later, only those that confirmed the latest extend are
    // known to (a member whose extend was late lets its key expire when
    // the TTL it had runs out), and they are a majority.
    let granted_until = Instant::now() + guard.validity();
    let mut check = |guard: &Guard<M>| {
        let at = Instant::now();
        let ok = guard.ensure_held().is_ok();
        if ok {
            let s = span.get_or_insert((at, at));
            s.1 = at;
            if let Some((oracle, keys)) = &oracle {
                // Read between two checks that say the guard holds:
                // nothing but the holder's own requests removes its value
                // (no restart or move in this run) and only expiry
                // otherwise, so within the acquisition's validity every
                // member that granted it must still hold it, and a
                // majority always (a grant replaced or deleted behind its
                // back is a holder counting votes that are gone; past a
                // bare majority, a second holder).
                let standing = oracle.standing(keys, guard.token());
                let (needed, of) = match Instant::now() < granted_until {
                    true => (guard.agreed(), "servers that granted it"),
                    false => (oracle.servers.len() / 2 + 1, "servers a majority needs"),
                };
                assert!(
                    standing >= needed || guard.ensure_held().is_err(),
                    "worker {worker}'s {} says it holds, but its value {} stands on {standing} \
                     of the {needed} {of}",
                    OPS[op],
                    String::from_utf8_lossy(guard.token()),
                );
            }
        }
        ok
    };
    let mut guard = Some(guard);
    if check(guard.as_ref().unwrap()) {
        for _ in 0..rng.between(1, 12) {
            let g = guard.as_mut().unwrap();
            let roll = rng.below(100);
            if roll < 45 {
                thread::sleep(rng.ms(0, TTL_MS.0 / 2));
            } else if roll < 70 {
                // Half of the extends are short: about a round with a
                // stalled node, so that some fail after reaching nodes.
                let ttl = if rng.below(2) == 0 {
                    rng.ms(10, 2 * NODE_TIMEOUT.as_millis() as u64)
                } else {
                    rng.ms(TTL_MS.0, TTL_MS.1)
                };
                let _ = g.extend(ttl);
            } else if roll < 78 {
                // A holder that stalls past its validity (a GC pause, a
                // swapped-out process), then looks again.
                thread::sleep(g.validity() + rng.ms(1, 100));
            } else if roll < 83 {
                // A holder that dies: nothing is released.
                std::mem::forget(guard.take());
                break;
            } else {
                break;
            }
            if !check(guard.as_ref().unwrap()) {
                break;
            }
        }
    }
    drop(guard);
    let (start, end) = span?;
    Some(Span {
        worker,
        what: OPS[op],
        holds,
        token,
        start,
        end,
    })
}

fn overlap(a: &Span, b: &Span) -> bool {
    a.start <= b.end && b.start <= a.end
}

fn exclusive_cells(s: &Span) -> impl Iterator<Item = &String> {
    s.holds.iter().flat_map(|h| match h {
        Hold::Exclusive(cells) => cells.iter().collect::<Vec<_>>(),
        _ => Vec::new(),
    })
}

fn reads(s: &Span, cell: &str) -> bool {
    s.holds
        .iter()
        .any(|h| matches!(h, Hold::Read(c) if c == cell))
}

/// Every violation of the promise among `spans`, as readable lines.
fn violations(spans: &[Span], t0: Instant) -> Vec<String> {
    let at = |i: Instant| i.duration_since(t0).as_secs_f64() * 1000.0;
    let show = |s: &Span| {
        format!(
            "worker {} {} [{:.1}ms, {:.1}ms] token {:?}",
            s.worker,
            s.what,
            at(s.start),
            at(s.end),
            s.token
        )
    };
    let mut found = Vec::new();
    let mut by_cell: BTreeMap<&str, Vec<&Span>> = BTreeMap::new();
    for s in spans {
        for c in exclusive_cells(s) {
            by_cell.entry(c).or_default().push(s);
        }
    }
    for (cell, list) in &by_cell {
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                if overlap(a, b) {
                    found.push(format!(
                        "two holders of {cell}: {} and {}",
                        show(a),
                        show(b)
                    ));
                }
                // Fencing: of two holders that did not overlap, the later
                // has the larger token.
                if let (Some(ta), Some(tb)) = (a.token, b.token) {
                    let (first, then, tf, tt) = if a.end < b.start {
                        (a, b, ta, tb)
                    } else {
                        (b, a, tb, ta)
                    };
                    if first.end < then.start && tf >= tt {
                        found.push(format!(
                            "fencing ran backwards on {cell}: {} then {}",
                            show(first),
                            show(then)
                        ));
                    }
                }
            }
        }
        // No reader beside a writer.
        for w in list {
            for r in spans.iter().filter(|r| reads(r, cell)) {
                if overlap(w, r) {
                    found.push(format!(
                        "a reader beside a writer of {cell}: {} and {}",
                        show(w),
                        show(r)
                    ));
                }
            }
        }
    }
    // Never more than K permits.
    let mut edges: Vec<(Instant, i32, &Span)> = Vec::new();
    for s in spans
        .iter()
        .filter(|s| s.holds.iter().any(|h| matches!(h, Hold::Permit(_))))
    {
        edges.push((s.start, 1, s));
        edges.push((s.end, -1, s));
    }
    // At one instant, starts before ends: touching spans count as overlap.
    edges.sort_by_key(|e| (e.0, -e.1));
    let mut now = 0;
    for (t, d, s) in edges {
        now += d;
        if now > PERMITS as i32 {
            found.push(format!(
                "{now} permits of {PERMITS} held at {:.1}ms (the last: {})",
                at(t),
                show(s)
            ));
        }
    }
    found
}

/// The servers behind forwarders (one per worker and node, so that one
/// worker can be cut off from one node), the spares an address may move
/// to, and the nemesis's bookkeeping.
struct Rig {
    /// `proxies[i][w]`: worker `w`'s way to plain node `i`. Dropped before
    /// the servers (fields drop in order): dropped after them, a run's
    /// end took 20-45 s more in 3 of 12 late-delivery runs on a loaded
    /// machine, in 0 of 16 this way.
    proxies: Vec<Vec<Proxy>>,
    servers: Vec<Server>,
    /// The variant with a Redis Cluster member beside two plain nodes.
    cluster: Option<RedisCluster>,
    /// Which server each plain node's forwarders reach now.
    behind: Vec<usize>,
    /// Until when each member counts as disturbed for every worker
    /// (paused, or migrating). A restart or a move counts only while it
    /// happens: keeping a server that lost its keys out of the votes
    /// afterwards is the library's job (the restart quarantine), and the
    /// checker holds it to it.
    disturbed: Vec<Instant>,
    /// `cut[w][i]`: until when worker `w` cannot reach node `i`.
    cut: Vec<Vec<Instant>>,
    /// The liveness run (see [`live`]): no restarts or moves (a restarted
    /// server sits out votes, which may leave no quorum for a while: no
    /// waiter could progress then); dead waiters queued instead.
    gentle: bool,
    /// Late deliveries only (see [`no_schedule_breaks_the_promise_with_late_deliveries`]).
    late_only: bool,
    /// Fresh managers with default settings, and restarts from older
    /// copies (see [`no_schedule_breaks_the_promise_with_fresh_managers_and_older_copies`]).
    fresh: bool,
    /// When each server last took a snapshot (`SAVE`), if it did.
    snapshots: Vec<Option<Instant>>,
    /// The fresh-managers run: the node paused last, whose pause ended
    /// or will; the next restart goes to another node, so that grants
    /// made without the paused node (on a bare majority) meet a restart
    /// of one of their voters while they are valid.
    after_pause: Option<usize>,
    /// The fresh-managers run: a restart from a snapshot happened (the
    /// first restart that finds a snapshot takes it; later ones two times
    /// in three).
    restored: bool,
    /// Until when the last dead waiter's ticket is live: one at a time
    /// (each costs the waiters behind it one reservation; several in a
    /// row cost one each, which the stall bound does not cover).
    ghost_until: Instant,
}

/// What the nemesis undoes when a fault's time is up.
enum Undo {
    Resume(usize),
    Heal(usize, usize),
}

fn addr(server: &Server) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], server.port()))
}

impl Rig {
    /// `nodes` plain nodes behind forwarders (and two spares, all up a
    /// while before any move), and with `cluster` a Redis Cluster member.
    fn start(nodes: usize, cluster: bool) -> Rig {
        Rig::start_clocked(nodes, cluster, &[])
    }

    /// As [`start`](Self::start), the plain servers' clocks running at
    /// `rates` (server `i` at `rates[i]`; none given: the real clock).
    fn start_clocked(nodes: usize, cluster: bool, rates: &[f64]) -> Rig {
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
    fn ghost(&mut self, cell: &str, now: Instant, log: &mut Vec<String>) {
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
    fn minority(&self) -> usize {
        (self.disturbed.len() - 1) / 2
    }

    /// Whether also disturbing member `i` (for every worker, or for
    /// `only` one) leaves every worker a majority.
    fn may_disturb(&self, i: usize, only: Option<usize>, now: Instant) -> bool {
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

    fn manager(&self, w: usize) -> LockManager {
        let cluster = self.cluster.as_ref().map(RedisCluster::seeds);
        Rig::manager_of(self.urls(w), w, cluster)
    }

    /// Worker `w`'s ways to the plain nodes.
    fn urls(&self, w: usize) -> Vec<String> {
        self.proxies.iter().map(|p| p[w].url()).collect()
    }

    /// A manager with default settings (no strict mode), made for one
    /// acquisition, as each `lockrun` run is: it meets the servers at its
    /// first attempt, whatever restarted before.
    fn fresh_manager(urls: &[String], w: usize) -> LockManager {
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
    fn fresh_fault(
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
    fn manager_of(
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
    fn fault(
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
    fn pause(
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

    fn undo(&mut self, undo: Undo) {
        match undo {
            Undo::Resume(s) => self.servers[s].resume(),
            Undo::Heal(i, w) => self.proxies[i][w].set(Mode::Pass),
        }
    }
}

fn seed() -> u64 {
    std::env::var("SCHEDULE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| getrandom::u64().unwrap())
}

fn seconds(default: u64) -> Duration {
    Duration::from_secs(
        std::env::var("SCHEDULE_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default),
    )
}

/// Runs one schedule for `length`; returns the spans and the nemesis log.
fn run(seed: u64, length: Duration, cluster: bool) -> (Vec<Span>, Vec<String>, Instant) {
    run_clocked(seed, length, cluster, &[])
}

/// [`run`] with the plain servers' clocks at `rates` (see
/// [`Rig::start_clocked`]).
fn run_clocked(
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
fn run_on(seed: u64, length: Duration, mut rig: Rig) -> (Vec<Span>, Vec<String>, Instant) {
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
struct Stop<'a>(&'a AtomicBool);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The undoings of `pending` due at `now`, taken out of it.
fn take_due(pending: &mut Vec<(Instant, Undo)>, now: Instant) -> Vec<Undo> {
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
fn nemesis(rig: &mut Rig, seed: u64, length: Duration, t0: Instant, log: &mut Vec<String>) {
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

/// Late deliveries, aimed (issue 56): three plain nodes, so that grants
/// rest on bare majorities, and a nemesis that does nothing else: every
/// 20-150 ms, one fair worker's scripts to one node are held back 100-400
/// ms each for a 30-150 ms window and delivered after the worker moved on
/// (a claim and its clean-up after its next attempt was granted), while
/// another client's value stands on another node for 50-400 ms; the
/// servers are read whenever a guard says it holds (see the module docs).
#[test]
fn no_schedule_breaks_the_promise_with_late_deliveries() {
    let _heavy = support::heavy();
    let seed = seed();
    let length = seconds(10);
    eprintln!(
        "schedule seed {seed} (replay with SCHEDULE_SEED={seed}), {length:?} of late deliveries \
         on 3 nodes"
    );
    let mut rig = Rig::start(3, false);
    rig.late_only = true;
    let (spans, log, t0) = run_on(seed, length, rig);
    judge(seed, &spans, &log, t0);
}

/// Restarts safe by default (issue 66): three plain nodes (grants on bare
/// majorities), workers whose every acquisition is a new manager with
/// default settings (no strict mode: a `lockrun` run each), and a
/// nemesis that has servers snapshot (`SAVE`) at random moments, pauses
/// them, and restarts them empty or from their last snapshot (an older
/// copy: lock keys that were released since come back, fencing counters
/// and election records go back). A restart counts as a node failed for
/// the longest TTL, never beside another fault (Redlock's one assumption
/// about restarts); nothing else helps: the managers never saw the
/// servers before, so it is the grants' named servers that keep a
/// restarted server's yes from counting beside a holder, and counting
/// from the clock that keeps tokens and terms growing. Every shape.
/// Before Redis 7.0 a refusal does not say who holds a key (strict mode
/// covers that): skipped there.
#[test]
fn no_schedule_breaks_the_promise_with_fresh_managers_and_older_copies() {
    if !support::server::server_at_least(7, 0) {
        eprintln!(
            "{}",
            support::server::skip(
                "skipped: before Redis 7.0 a refusal does not say who holds the key".into()
            )
        );
        return;
    }
    let _heavy = support::heavy();
    let seed = seed();
    let length = seconds(12);
    eprintln!(
        "schedule seed {seed} (replay with SCHEDULE_SEED={seed}), {length:?} of fresh managers, \
         snapshots and restarts on 3 nodes"
    );
    let mut rig = Rig::start(3, false);
    rig.fresh = true;
    let (spans, log, t0) = run_on(seed, length, rig);
    assert!(
        log.iter().any(|l| l.contains("from its snapshot")),
        "no restart from an older copy in this schedule:\n{}",
        log.join("\n")
    );
    judge(seed, &spans, &log, t0);
}

fn check(seed: u64, length: Duration, cluster: bool) {
    let _heavy = support::heavy();
    let what = if cluster {
        "2 nodes and a Redis Cluster member"
    } else {
        "5 nodes"
    };
    eprintln!("schedule seed {seed} (replay with SCHEDULE_SEED={seed}), {length:?} on {what}");
    let (spans, log, t0) = run(seed, length, cluster);
    judge(seed, &spans, &log, t0);
}

/// The verdict on a schedule's `spans` (with the nemesis `log`, times
/// from `t0`): no violation, and a holder of every shape.
fn judge(seed: u64, spans: &[Span], log: &[String], t0: Instant) {
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for s in spans {
        *per.entry(s.what).or_default() += 1;
    }
    eprintln!("{} holders: {per:?}; {} faults", spans.len(), log.len());
    let found = violations(spans, t0);
    assert!(
        found.is_empty(),
        "seed {seed} (replay with SCHEDULE_SEED={seed}): {} violations:\n{}\nnemesis:\n{}",
        found.len(),
        found
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
        log.join("\n")
    );
    // A schedule that held nothing checked nothing.
    for op in OPS {
        assert!(
            per.get(op).copied().unwrap_or(0) > 0,
            "no holder of {op}: {per:?}"
        );
    }
}

/// The schedule with every worker a process of its own (this test binary
/// again, running [`schedule_worker_process`]), each through its own
/// forwarders as in [`run`]: every shape's cross-process witness. The
/// children say when they are ready (their managers know every server),
/// then the nemesis runs while they work; each prints its spans, on the
/// machine's monotonic clock, which all processes share.
fn run_processes(seed: u64, length: Duration) -> (Vec<Span>, Vec<String>, Instant) {
    use std::io::{BufRead, BufReader};
    let mut rig = Rig::start(NODES, false);
    // Spans are placed against a clock reading taken before any child
    // starts: a child works from its own READY on, which may come before
    // the last child's. (Placed against the nemesis's start, taken after
    // every READY, a child's early spans were clamped to 0.0 ms, and two
    // holders one after the other read as two at once: seed
    // 13569031855132003166, "worker 0 set a+b [0.0ms, 0.0ms] … and worker
    // 1 lock a [0.0ms, 0.0ms]", tokens in order.)
    let (base, base_ns) = (Instant::now(), crate::exclusion::mono_ns());
    let mut children: Vec<(Child, BufReader<std::process::ChildStdout>)> = (0..WORKERS)
        .map(|w| {
            let urls: Vec<String> = rig.proxies.iter().map(|p| p[w].url()).collect();
            let mut child = crate::exclusion::child(
                "schedule::schedule_worker_process",
                &[
                    ("REDLOCK_SCHED_NODES", urls.join(",")),
                    ("REDLOCK_SCHED_WORKER", w.to_string()),
                    ("REDLOCK_SCHED_SEED", seed.to_string()),
                    ("REDLOCK_SCHED_MS", length.as_millis().to_string()),
                ],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
            let out = BufReader::new(child.stdout.take().unwrap());
            (child, out)
        })
        .collect();
    for (_, out) in &mut children {
        let mut line = String::new();
        let ready = loop {
            line.clear();
            match out.read_line(&mut line) {
                Ok(0) | Err(_) => break false,
                Ok(_) if line.trim_end() == "READY" => break true,
                Ok(_) => {}
            }
        };
        assert!(ready, "a schedule worker process never got ready");
    }
    let t0 = Instant::now();
    let mut log = Vec::new();
    nemesis(&mut rig, seed, length, t0, &mut log);
    // The nemesis counts from `t0`, the spans from `base`: each entry says
    // both, so that a violation's spans can be set beside the faults.
    let offset = t0.duration_since(base).as_secs_f64() * 1000.0;
    for entry in &mut log {
        if let Some((ms, rest)) = entry.split_once("ms: ")
            && let Ok(ms) = ms.parse::<f64>()
        {
            *entry = format!(
                "{ms:.0}ms ({:.0}ms on the spans' clock): {rest}",
                ms + offset
            );
        }
    }
    let at = |ns: u64| base + Duration::from_nanos(ns.saturating_sub(base_ns));
    let mut spans = Vec::new();
    for (mut child, out) in children {
        for line in out.lines().map_while(Result::ok) {
            if let Some(span) = line.strip_prefix("SPAN ") {
                spans.push(parse_span(span, at));
            }
        }
        assert!(
            child.wait().unwrap().success(),
            "a schedule worker process failed"
        );
    }
    (spans, log, base)
}

/// A span as a worker process prints it: worker, op, token (or -),
/// start and end (monotonic ns), and its holds (`E:a,b`, `P:sem`, `R:rw`,
/// separated by `;`).
fn show_span(s: &Span, ns: impl Fn(Instant) -> u64) -> String {
    let holds: Vec<String> = s
        .holds
        .iter()
        .map(|h| match h {
            Hold::Exclusive(cells) => format!("E:{}", cells.join(",")),
            Hold::Permit(c) => format!("P:{c}"),
            Hold::Read(c) => format!("R:{c}"),
        })
        .collect();
    let op = OPS.iter().position(|o| *o == s.what).unwrap();
    let token = s.token.map_or("-".to_owned(), |t| t.to_string());
    format!(
        "{} {op} {token} {} {} {}",
        s.worker,
        ns(s.start),
        ns(s.end),
        holds.join(";")
    )
}

fn parse_span(line: &str, at: impl Fn(u64) -> Instant) -> Span {
    let f: Vec<&str> = line.split(' ').collect();
    let holds = f[5]
        .split(';')
        .map(|h| match h.split_once(':').unwrap() {
            ("E", cells) => Hold::Exclusive(cells.split(',').map(str::to_owned).collect()),
            ("P", c) => Hold::Permit(c.to_owned()),
            (_, c) => Hold::Read(c.to_owned()),
        })
        .collect();
    Span {
        worker: f[0].parse().unwrap(),
        what: OPS[f[1].parse::<usize>().unwrap()],
        holds,
        token: f[2].parse().ok(),
        start: at(f[3].parse().unwrap()),
        end: at(f[4].parse().unwrap()),
    }
}

/// Child process entry of [`run_processes`]: one worker of the schedule,
/// as a thread of [`run`] does, for the parent's length; prints `READY`
/// once its manager knows every server, then a `SPAN` line per holder.
#[test]
#[ignore = "a child process of the cross-process schedule, run by it"]
fn schedule_worker_process() {
    use std::io::Write;
    let Ok(urls) = std::env::var("REDLOCK_SCHED_NODES") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap().parse::<u64>().unwrap();
    let (w, seed) = (
        var("REDLOCK_SCHED_WORKER") as usize,
        var("REDLOCK_SCHED_SEED"),
    );
    let length = Duration::from_millis(var("REDLOCK_SCHED_MS"));
    let dlm = Rig::manager_of(urls.split(','), w, None);
    for op in 0..OPS.len() {
        if let Some((guard, _)) = take(&dlm, op, Duration::from_millis(TTL_MS.1), Duration::ZERO) {
            guard.release();
        }
    }
    let (t0, t0_ns) = (Instant::now(), crate::exclusion::mono_ns());
    let ns = |i: Instant| t0_ns + i.duration_since(t0).as_nanos() as u64;
    let mut out = std::io::stdout().lock();
    // Start on a line of our own: the test runner's "test ... " precedes.
    writeln!(out, "\nREADY").unwrap();
    out.flush().unwrap();
    let mut rng = Rng(seed ^ (w as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    while t0.elapsed() < length {
        let op = rng.below(OPS.len() as u64) as usize;
        let ttl = rng.ms(TTL_MS.0, TTL_MS.1);
        let wait = rng.ms(0, 2 * TTL_MS.1);
        match take(&dlm, op, ttl, wait) {
            Some((guard, holds)) => {
                if let Some(span) = hold(&mut rng, w, op, guard, holds) {
                    writeln!(out, "SPAN {}", show_span(&span, ns)).unwrap();
                }
            }
            None => thread::sleep(rng.ms(1, 20)),
        }
    }
    out.flush().unwrap();
}

/// Every shape across processes: locks, sets, permits, read and write
/// locks and leaderships, each worker a process of its own, under the
/// nemesis of [`no_schedule_breaks_the_promise`].
#[test]
fn no_schedule_breaks_the_promise_across_processes() {
    let _heavy = support::heavy();
    let (seed, length) = (seed(), seconds(8));
    eprintln!(
        "schedule seed {seed} (replay with SCHEDULE_SEED={seed}), {length:?} on 5 nodes, \
         {WORKERS} processes"
    );
    let (spans, log, t0) = run_processes(seed, length);
    judge(seed, &spans, &log, t0);
}

/// The liveness run's shapes: locks and a set of the same two
/// resources, and a holder of `a` (kept alive) that asks for `b` while
/// holding it: issue 38's deadlock, where a set {a, b} waiting in line
/// kept `b` free for itself from the holder of `a`.
const LIVE_OPS: [&str; 4] = ["lock a", "lock b", "set a+b", "a then b"];

/// No waiter waits longer than this while what it waits for is free (no
/// other worker's keys may stand on a majority): a dead waiter's
/// reservation (100 ms), one more for a set that cannot use a key yet,
/// claim rounds (50 ms each) and a release message, with slack for this
/// shared 2-core machine (six workers, seven servers, thirty forwarders).
const STALL: Duration = Duration::from_millis(1000);

/// One acquisition call of a worker: what it waited for, from its call to
/// its return, and whether it got it.
struct Waited {
    worker: usize,
    what: &'static str,
    cells: Vec<&'static str>,
    start: Instant,
    end: Instant,
    /// The TTL it asked for, and how it ended: `Ok` or the error.
    ttl: Duration,
    outcome: String,
}

/// When a worker's keys for `cells` may stand on a majority of members.
struct Occupied {
    worker: usize,
    cells: Vec<&'static str>,
    from: Instant,
    to: Instant,
}

/// What the liveness run's workers recorded.
#[derive(Default)]
struct Record {
    spans: Vec<Span>,
    waits: Vec<Waited>,
    held: Vec<Occupied>,
}

/// A guard of the liveness run and what is known of its keys.
struct Holding {
    guard: LockGuard,
    what: &'static str,
    cells: Vec<&'static str>,
    /// The earliest its keys may have been written: the acquisition's
    /// last round, at most two node timeouts before the call returned.
    from: Instant,
    /// The latest its keys may expire unless renewed (`None`: kept
    /// alive).
    expires: Option<Instant>,
    ttl: Duration,
    span: Option<(Instant, Instant)>,
}

impl Holding {
    fn check(&mut self) -> bool {
        let at = Instant::now();
        let ok = self.guard.ensure_held().is_ok();
        if ok {
            self.span.get_or_insert((at, at)).1 = at;
        }
        ok
    }

    /// The latest the keys may stand (the servers' clocks may run 1%
    /// slow).
    fn expiry(&self) -> Option<Instant> {
        self.expires
            .map(|e| e + self.ttl / 50 + Duration::from_millis(5))
    }

    /// Releases (or, `crash`, leaks) the guard and records its span and
    /// when its keys may have stood.
    fn end(self, worker: usize, crash: bool, rec: &Mutex<Record>) {
        let token = self.guard.fencing_token();
        let expiry = self.expiry();
        let gone = if crash {
            std::mem::forget(self.guard);
            expiry.expect("a leaked guard is not kept alive")
        } else {
            let _ = self.guard.release();
            let now = Instant::now();
            expiry.map_or(now, |e| e.min(now))
        };
        let mut rec = rec.lock();
        rec.held.push(Occupied {
            worker,
            cells: self.cells.clone(),
            from: self.from,
            to: gone,
        });
        if let Some((start, end)) = self.span {
            rec.spans.push(Span {
                worker,
                what: self.what,
                holds: vec![Hold::Exclusive(
                    self.cells.iter().map(|c| (*c).to_owned()).collect(),
                )],
                token,
                start,
                end,
            });
        }
    }
}

/// A liveness run's acquisition of `cells` (`a`, `b`, or both as a set),
/// recorded as a wait.
fn live_take(
    dlm: &LockManager,
    worker: usize,
    what: &'static str,
    cells: &[&'static str],
    ttl: Duration,
    wait: Duration,
    rec: &Mutex<Record>,
) -> Option<Holding> {
    let names: Vec<String> = cells.iter().map(|c| format!("sched:{c}")).collect();
    let start = Instant::now();
    let got = match &names[..] {
        [one] => dlm.try_lock_for(one, ttl, wait),
        _ => dlm.try_lock_all_for(&names, ttl, wait),
    };
    let end = Instant::now();
    rec.lock().waits.push(Waited {
        worker,
        what,
        cells: cells.to_vec(),
        start,
        end,
        ttl,
        outcome: match &got {
            Ok(_) => "got it".to_owned(),
            Err(e) => format!("gave up: {e}"),
        },
    });
    Some(Holding {
        guard: got.ok()?,
        what,
        cells: cells.to_vec(),
        from: end - (end - start).min(2 * NODE_TIMEOUT),
        expires: Some(end + ttl),
        ttl,
        span: None,
    })
}

/// Holds `held` for a while (checks, short sleeps, extends), then
/// releases each, or leaks the ones not kept alive (a crash).
fn live_hold(rng: &mut Rng, worker: usize, mut held: Vec<Holding>, rec: &Mutex<Record>) {
    for _ in 0..rng.between(1, 4) {
        if !held.iter_mut().all(Holding::check) {
            break;
        }
        if rng.below(4) == 0 {
            let ttl = rng.ms(TTL_MS.0, TTL_MS.1);
            for h in held.iter_mut().filter(|h| h.expires.is_some()) {
                let _ = h.guard.extend(ttl);
                h.ttl = h.ttl.max(ttl);
                let now = Instant::now();
                h.expires = h.expires.map(|e| e.max(now + ttl));
            }
        } else {
            thread::sleep(rng.ms(0, 30));
        }
    }
    let crash = rng.below(10) == 0 && held.iter().all(|h| h.expires.is_some());
    for h in held {
        h.end(worker, crash, rec);
    }
}

/// Every wait during which what it waited for was free for longer than
/// `bound` (no other worker's keys could stand on it), as readable lines.
fn stalls(rec: &Record, bound: Duration, t0: Instant) -> Vec<String> {
    let at = |i: Instant| i.duration_since(t0).as_secs_f64() * 1000.0;
    let mut found = Vec::new();
    for w in &rec.waits {
        let mut busy: Vec<(Instant, Instant)> = rec
            .held
            .iter()
            .filter(|o| o.worker != w.worker && o.cells.iter().any(|c| w.cells.contains(c)))
            .map(|o| (o.from, o.to))
            .collect();
        busy.sort();
        let mut free_from = w.start;
        let mut gap = |from: Instant, to: Instant| {
            if to > from && to - from > bound {
                found.push(format!(
                    "worker {} ({}, TTL {:?}) waited for {:?} from {:.1}ms to {:.1}ms ({}), and \
                     it was free from {:.1}ms to {:.1}ms",
                    w.worker,
                    w.what,
                    w.ttl,
                    w.cells,
                    at(w.start),
                    at(w.end),
                    w.outcome,
                    at(from),
                    at(to)
                ));
            }
        };
        for (from, to) in busy {
            if from > free_from {
                gap(free_from, from.min(w.end));
            }
            free_from = free_from.max(to);
            if free_from >= w.end {
                break;
            }
        }
        if free_from < w.end {
            gap(free_from, w.end);
        }
    }
    found
}

/// The liveness run: every worker fair and pausing 1.5 to 3 s between
/// attempts (so a waiter that depends on its pause shows), locks and
/// sets of `a` and `b` and holders of `a` asking for `b`, while the
/// nemesis pauses nodes, cuts workers off nodes and queues waiters that
/// die; afterwards, the safety violations and the stalls.
fn live(seed: u64, length: Duration) -> (Vec<String>, Vec<String>, Record, Vec<String>) {
    let trace = trace::start();
    let mut rig = Rig::start(NODES, false);
    rig.gentle = true;
    let rec = Mutex::new(Record::default());
    let stop = AtomicBool::new(false);
    let managers: Vec<LockManager> = (0..WORKERS)
        .map(|w| {
            LockManager::builder()
                .nodes(rig.proxies.iter().map(|p| p[w].url()))
                .node_timeout(NODE_TIMEOUT)
                .retry(1000, Duration::from_secs(3))
                .restart_quarantine(QUARANTINE)
                .fair(true)
                .build()
                .unwrap()
        })
        .collect();
    for dlm in &managers {
        dlm.lock_all(["sched:a", "sched:b"], Duration::from_millis(TTL_MS.1))
            .unwrap()
            .release()
            .unwrap();
    }
    let t0 = Instant::now();
    trace::at(t0);
    let mut log = Vec::new();
    thread::scope(|scope| {
        for (w, dlm) in managers.iter().enumerate() {
            let (rec, stop) = (&rec, &stop);
            let worker = thread::Builder::new().name(format!("worker {w}"));
            let _ = worker.spawn_scoped(scope, move || {
                let mut rng = Rng(seed ^ (w as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
                while !stop.load(Ordering::Relaxed) {
                    let op = rng.below(LIVE_OPS.len() as u64) as usize;
                    let what = LIVE_OPS[op];
                    let ttl = rng.ms(TTL_MS.0, TTL_MS.1);
                    let wait = rng.ms(300, 3000);
                    let cells: &[&'static str] = match op {
                        0 | 3 => &["a"],
                        1 => &["b"],
                        _ => &["a", "b"],
                    };
                    let Some(mut first) = live_take(dlm, w, what, cells, ttl, wait, rec) else {
                        thread::sleep(rng.ms(1, 20));
                        continue;
                    };
                    if op != 3 {
                        live_hold(&mut rng, w, vec![first], rec);
                        continue;
                    }
                    // Holds `a` (kept alive) and asks for `b`.
                    first.guard = first.guard.keep_alive();
                    first.expires = None;
                    first.check();
                    match live_take(dlm, w, what, &["b"], ttl, wait, rec) {
                        Some(second) => live_hold(&mut rng, w, vec![first, second], rec),
                        None => first.end(w, false, rec),
                    }
                }
            });
        }
        let _stop = Stop(&stop);
        nemesis(&mut rig, seed, length, t0, &mut log);
    });
    let rec = rec.into_inner();
    let unsafe_ = violations(&rec.spans, t0);
    let stalled = stalls(&rec, STALL, t0);
    if let Some(path) = trace {
        trace::write(&path, &log);
    }
    (unsafe_, stalled, rec, log)
}

/// The library's trace logs of a liveness run, with `SCHEDULE_TRACE=<file>`
/// (and the `log` feature): each attempt's answer from every member, each
/// fair waiter's outcome and each release, with the worker and the time
/// from the run's start, written to the file with the nemesis's log after
/// the run. Lighter than `MONITOR` on every server, which kept the stalls
/// it was meant to trace from happening (0 in 38 runs).
mod trace {
    use std::path::{Path, PathBuf};
    use std::time::Instant;

    #[cfg(feature = "log")]
    mod logger {
        use std::sync::OnceLock;
        use std::time::Instant;

        use parking_lot::Mutex;

        pub(super) struct Tracer {
            pub(super) t0: OnceLock<Instant>,
            pub(super) lines: Mutex<Vec<String>>,
        }

        impl log::Log for Tracer {
            fn enabled(&self, m: &log::Metadata<'_>) -> bool {
                m.target().starts_with("redlock_sync")
            }
            fn log(&self, r: &log::Record<'_>) {
                if !self.enabled(r.metadata()) {
                    return;
                }
                let at = self
                    .t0
                    .get()
                    .map_or(-1.0, |t0| t0.elapsed().as_secs_f64() * 1000.0);
                let thread = std::thread::current();
                self.lines.lock().push(format!(
                    "{at:.1} [{}] {} {}",
                    thread.name().unwrap_or("-"),
                    r.target(),
                    r.args()
                ));
            }
            fn flush(&self) {}
        }

        pub(super) static TRACER: Tracer = Tracer {
            t0: OnceLock::new(),
            lines: Mutex::new(Vec::new()),
        };
    }

    /// The file to write, when asked for (and the logger installed).
    pub(super) fn start() -> Option<PathBuf> {
        let path = PathBuf::from(std::env::var_os("SCHEDULE_TRACE")?);
        #[cfg(feature = "log")]
        {
            if log::set_logger(&logger::TRACER).is_ok() {
                log::set_max_level(log::LevelFilter::Trace);
            }
            Some(path)
        }
        #[cfg(not(feature = "log"))]
        {
            eprintln!("SCHEDULE_TRACE needs the log feature: not traced ({path:?})");
            None
        }
    }

    /// The run starts now: times in the trace count from `t0`.
    pub(super) fn at(t0: Instant) {
        #[cfg(feature = "log")]
        let _ = logger::TRACER.t0.set(t0);
        #[cfg(not(feature = "log"))]
        let _ = t0;
    }

    /// Writes the trace, then the nemesis's log, to `path`.
    pub(super) fn write(path: &Path, nemesis: &[String]) {
        #[cfg(feature = "log")]
        let lines = std::mem::take(&mut *logger::TRACER.lines.lock());
        #[cfg(not(feature = "log"))]
        let lines: Vec<String> = Vec::new();
        let text = [lines.join("\n"), "nemesis:".into(), nemesis.join("\n")].join("\n");
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("trace not written to {path:?}: {e}");
        }
    }
}

fn check_live(seed: u64, length: Duration) {
    let _heavy = support::heavy();
    eprintln!("liveness seed {seed} (replay with SCHEDULE_SEED={seed}), {length:?} on 5 nodes");
    let (unsafe_, stalled, rec, log) = live(seed, length);
    let mut per: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for w in &rec.waits {
        let e = per.entry(w.what).or_default();
        e.0 += 1;
        e.1 += usize::from(w.outcome == "got it");
    }
    eprintln!("waits (calls, got): {per:?}");
    assert!(
        unsafe_.is_empty() && stalled.is_empty(),
        "seed {seed}: {} violations, {} stalls:\n{}\nnemesis:\n{}",
        unsafe_.len(),
        stalled.len(),
        unsafe_
            .iter()
            .chain(&stalled)
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
        log.join("\n")
    );
    // A run whose waits all gave up, or that held nothing, checked little.
    for op in LIVE_OPS {
        let (calls, got) = per.get(op).copied().unwrap_or_default();
        assert!(got > 0 && calls > 0, "no {op} was taken: {per:?}");
    }
}

/// Liveness: no waiter waits while what it waits for is free, with every
/// worker fair (see [`live`]).
///
/// Behind `#[ignore]` until 2026-11-26, while it found stalls (7 runs in
/// 212, then 3 in 150): the last, traced with `SCHEDULE_TRACE=<file>`
/// (the library's trace of the run), was two sets each holding a
/// reservation of a key the other needed, swapping queues, and a lock
/// behind them kept 1.3 s from a free key. A reservation now keeps a key
/// only while its waiter is queued for it: 0 stalls in 40 runs since.
#[test]
fn no_schedule_keeps_a_waiter_from_a_free_resource() {
    check_live(seed(), seconds(12));
}

#[test]
fn no_schedule_breaks_the_promise() {
    check(seed(), seconds(12), false);
}

/// The drift factor the managers of these runs use (the default).
const DRIFT: f64 = 0.01;

/// The clock nemesis (issue 41): every server's clock runs fast or slow
/// by a rate the seed draws, up to 0.9 of the managers' drift factor
/// (1%) either way, while the nemesis of [`check`] pauses, cuts, restarts
/// and moves nodes: every shape keeps every promise, fair waiting and
/// elections included. The servers are Valkey's under libfaketime
/// (`REDLOCK_CLOCK_SERVER_BIN`, see `support::server::clock_server`).
#[test]
fn no_schedule_breaks_the_promise_with_clocks_inside_the_drift_factor() {
    let Some(()) = clocks_here() else { return };
    check_clocked(seed(), seconds(10));
}

/// The clock nemesis's long run: `SCHEDULE_SECONDS` (default 600) split
/// over seeds of a minute each:
///
/// ```text
/// REDLOCK_CLOCK_SERVER_BIN=/path/to/valkey-server SCHEDULE_SECONDS=600 \
///     cargo test --release --all-features --test it schedule::clocks_long -- --ignored
/// ```
#[test]
#[ignore = "a soak: see its docs for the command"]
fn clocks_long_inside_the_drift_factor() {
    let Some(()) = clocks_here() else { return };
    let total = seconds(600);
    let start = Instant::now();
    while start.elapsed() < total {
        check_clocked(seed(), Duration::from_secs(60).min(total));
    }
}

/// [`check`] on 5 nodes (and 2 spares) whose clocks run at rates the
/// seed draws, each within 0.9 of [`DRIFT`] of the real clock.
fn check_clocked(seed: u64, length: Duration) {
    let _heavy = support::heavy();
    let mut rng = Rng(seed ^ 0xC10C);
    let rates: Vec<f64> = (0..NODES + 2)
        .map(|_| 1.0 + (rng.between(0, 1800) as f64 - 900.0) / 1000.0 * DRIFT)
        .collect();
    eprintln!(
        "schedule seed {seed} (replay with SCHEDULE_SEED={seed}), {length:?} on 5 nodes at \
         clock rates {rates:?}"
    );
    let (spans, log, t0) = run_clocked(seed, length, false, &rates);
    judge(seed, &spans, &log, t0);
}

/// Whether servers with fast or slow clocks can run here (a skip, with
/// `REDLOCK_REQUIRE_ALL=1` a failure, otherwise).
fn clocks_here() -> Option<()> {
    match support::server::clock_server() {
        Ok(_) => Some(()),
        Err(why) => {
            eprintln!("{}", support::server::skip(why));
            None
        }
    }
}

/// A manager of the clock races over `urls`, with drift factor `drift`:
/// fair waiting off and pauses of at most 4 ms, so that a waiter asks
/// about every 4 ms and takes a key that expired early on a majority
/// within milliseconds.
fn racer(urls: Vec<String>, drift: f64) -> LockManager {
    LockManager::builder()
        .nodes(urls)
        .node_timeout(NODE_TIMEOUT)
        .drift_factor(drift)
        .fair(false)
        .retry(100_000, Duration::from_millis(4))
        .build()
        .unwrap()
}

/// Workers that take the lock `a` over nodes whose clocks run at `rates`,
/// with managers of drift factor `drift`, and each hold it for as long as
/// they may: until `is_valid` says no (checked every 2 ms: the span runs
/// to the last yes), for `length`. Fair waiting off and short pauses, so
/// that a waiter asks about every 4 ms: a key that expires early on a
/// majority is taken within milliseconds.
fn clocked_race(rates: &[f64], drift: f64, length: Duration) -> (Vec<Span>, Instant) {
    let servers: Vec<Server> = rates
        .iter()
        .map(|&r| Server::start_clocked(r).unwrap())
        .collect();
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let spans = Mutex::new(Vec::new());
    let t0 = Instant::now();
    thread::scope(|scope| {
        for worker in 0..3 {
            let dlm = racer(urls.clone(), drift);
            let spans = &spans;
            scope.spawn(move || {
                while t0.elapsed() < length {
                    let Ok(guard) = dlm.try_lock_for(
                        "clock:a",
                        Duration::from_millis(300),
                        Duration::from_secs(1),
                    ) else {
                        continue;
                    };
                    let start = Instant::now();
                    let mut end = start;
                    while guard.is_valid() {
                        end = Instant::now();
                        thread::sleep(Duration::from_millis(2));
                    }
                    spans.lock().push(Span {
                        worker,
                        what: "lock a",
                        holds: vec![Hold::Exclusive(vec!["a".into()])],
                        token: guard.fencing_token(),
                        start,
                        end,
                    });
                }
            });
        }
    });
    (spans.into_inner(), t0)
}

/// Proof of power: a majority of nodes whose clocks run 25% fast (their
/// keys expire at 240 ms of a 300 ms TTL), against the default 1% drift
/// factor (a holder believes it holds the lock for about 290 ms): the
/// checker finds two holders at once. With a drift factor of 0.3, which
/// covers the rate, it finds none (the holder gives up at about 205 ms).
#[test]
fn clocks_past_the_drift_factor_make_two_holders_and_a_covering_drift_factor_none() {
    let Some(()) = clocks_here() else { return };
    let _heavy = support::heavy();
    let rates = [1.25, 1.25, 1.25, 1.0, 1.0];
    let (spans, t0) = clocked_race(&rates, DRIFT, Duration::from_secs(2));
    let found = violations(&spans, t0);
    assert!(
        !found.is_empty() && spans.len() >= 3,
        "no violation in {} holders with a majority 25% fast and a 1% drift factor",
        spans.len()
    );
    assert!(found.iter().any(|v| v.contains("two holders")), "{found:?}");
    let (spans, t0) = clocked_race(&rates, 0.3, Duration::from_secs(2));
    let found = violations(&spans, t0);
    assert!(
        found.is_empty(),
        "{} violations with a drift factor covering the clocks:\n{}",
        found.len(),
        found.join("\n")
    );
    assert!(spans.len() >= 3, "only {} holders", spans.len());
}

/// Leaderships over the same clocks (a majority 25% fast, the 1% drift
/// factor), each leader cut off from every node as soon as it is elected,
/// and leading for as long as `leads` says (checked every 2 ms), for 3 s.
fn leader_race(leads: fn(&Leadership) -> bool) -> (Vec<Span>, Instant) {
    let servers: Vec<Server> = [1.25, 1.25, 1.25, 1.0, 1.0]
        .iter()
        .map(|&r| Server::start_clocked(r).unwrap())
        .collect();
    let spans = Mutex::new(Vec::new());
    let t0 = Instant::now();
    let length = Duration::from_secs(3);
    thread::scope(|scope| {
        for worker in 0..3 {
            let proxies: Vec<Proxy> = servers
                .iter()
                .map(|s| Proxy::start(addr(s)).unwrap())
                .collect();
            let dlm = racer(proxies.iter().map(Proxy::url).collect(), DRIFT);
            let spans = &spans;
            scope.spawn(move || {
                let election = dlm.election("clock:e").unwrap();
                while t0.elapsed() < length {
                    let ttl = Duration::from_millis(300);
                    let Ok(lead) = election.try_campaign_for(ttl, Duration::from_secs(1)) else {
                        continue;
                    };
                    let start = Instant::now();
                    for p in &proxies {
                        p.set(Mode::Blackhole);
                    }
                    let mut end = start;
                    while leads(&lead) {
                        end = Instant::now();
                        thread::sleep(Duration::from_millis(2));
                    }
                    spans.lock().push(Span {
                        worker,
                        what: "lead e",
                        holds: vec![Hold::Exclusive(vec!["e".into()])],
                        token: Some(lead.term()),
                        start,
                        end,
                    });
                    for p in &proxies {
                        p.set(Mode::Pass);
                    }
                    drop(lead);
                }
            });
        }
    });
    (spans.into_inner(), t0)
}

/// A second leader: over a majority 25% fast, a cut-off leader that
/// trusts its validity alone (the clock, with the 1% drift factor) leads
/// on after its keys expired on the fast majority (at 0.8 of the TTL), and
/// the checker finds another elected meanwhile. `is_leader` does not let
/// that happen: it fails closed at the first missed renewal (TTL/3 and a
/// round after the last one), before the keys expire, so the renewal
/// cadence, not the drift factor, protects a leadership from clocks up to
/// about 2x fast; a lock that is not kept alive has only the drift factor
/// (above).
#[test]
fn a_leader_that_trusts_its_clock_alone_meets_a_second_leader_and_is_leader_none() {
    let Some(()) = clocks_here() else { return };
    let _heavy = support::heavy();
    let (spans, t0) = leader_race(|lead| lead.validity() > Duration::ZERO);
    let found = violations(&spans, t0);
    assert!(
        found.iter().any(|v| v.contains("two holders of e")),
        "no second leader in {} leaderships: {found:?}",
        spans.len()
    );
    let (spans, t0) = leader_race(Leadership::is_leader);
    let found = violations(&spans, t0);
    assert!(found.is_empty(), "{}", found.join("\n"));
    assert!(spans.len() >= 3, "only {} leaderships", spans.len());
}

/// Two plain nodes and a Redis Cluster member (three masters), whose
/// slots move while the workers run.
#[test]
fn no_schedule_breaks_the_promise_with_a_cluster_member() {
    if let Some(why) = support::redis_cluster::unsupported() {
        eprintln!("{why}");
        return;
    }
    check(seed(), seconds(8), true);
}

/// The long run: `SCHEDULE_SECONDS` (default 600) split over several seeds.
#[test]
#[ignore = "a soak: SCHEDULE_SECONDS=600 cargo test --release --all-features --test it schedule:: -- --ignored"]
fn no_schedule_breaks_the_promise_long() {
    let total = seconds(600);
    let each = Duration::from_secs(60).min(total);
    let start = Instant::now();
    let mut cluster = false;
    while start.elapsed() + each <= total + Duration::from_secs(1) {
        if !(cluster && support::redis_cluster::unsupported().is_some()) {
            check(seed(), each, cluster);
        }
        cluster = !cluster;
    }
}

#[test]
fn the_checker_finds_overlaps_backward_tokens_and_too_many_permits() {
    // The checker itself, on made-up spans: it must be able to fail.
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let span = |holds: Vec<Hold>, token, a, b| Span {
        worker: 0,
        what: "lock a",
        holds,
        token,
        start: ms(a),
        end: ms(b),
    };
    let ex = |c: &str| vec![Hold::Exclusive(vec![c.into()])];
    assert!(
        violations(
            &[
                span(ex("a"), Some(1), 0, 10),
                span(ex("a"), Some(2), 11, 20)
            ],
            t0
        )
        .is_empty()
    );
    assert_eq!(
        violations(
            &[
                span(ex("a"), Some(1), 0, 10),
                span(ex("a"), Some(2), 10, 20)
            ],
            t0
        )
        .len(),
        1
    );
    assert_eq!(
        violations(
            &[
                span(ex("a"), Some(3), 0, 10),
                span(ex("a"), Some(2), 11, 20)
            ],
            t0
        )
        .len(),
        1
    );
    let read = vec![Hold::Read("rw".into())];
    assert_eq!(
        violations(
            &[
                span(ex("rw"), Some(1), 0, 10),
                span(read.clone(), None, 5, 20)
            ],
            t0
        )
        .len(),
        1
    );
    assert!(
        violations(
            &[span(read.clone(), None, 0, 10), span(read, None, 5, 20)],
            t0
        )
        .is_empty()
    );
    let permit = |slot: &str| {
        vec![
            Hold::Permit("sem".into()),
            Hold::Exclusive(vec![slot.into()]),
        ]
    };
    let three = [
        span(permit("s0"), Some(1), 0, 10),
        span(permit("s1"), Some(1), 0, 10),
        span(permit("s2"), Some(1), 5, 10),
    ];
    assert_eq!(violations(&three, t0).len(), 1);
    // Exactly K (2) permits at once is allowed.
    assert!(violations(&three[..2], t0).is_empty());
    // A set against a single lock of one of its resources.
    let set = vec![Hold::Exclusive(vec!["a".into(), "b".into()])];
    assert_eq!(
        violations(
            &[
                span(set.clone(), Some(1), 0, 10),
                span(ex("b"), Some(2), 5, 20)
            ],
            t0
        )
        .len(),
        1
    );
    assert!(
        violations(
            &[span(set, Some(1), 0, 10), span(ex("b"), Some(2), 11, 20)],
            t0
        )
        .is_empty()
    );
    // Two leaderships at once, and a later leader with the same term.
    let lead = |term, a, b| Span {
        what: "lead e",
        ..span(ex("e"), Some(term), a, b)
    };
    assert_eq!(violations(&[lead(4, 0, 10), lead(5, 8, 20)], t0).len(), 1);
    let equal = violations(&[lead(4, 0, 10), lead(4, 11, 20)], t0);
    assert_eq!(equal.len(), 1, "{equal:?}");
    assert!(equal[0].contains("fencing ran backwards"), "{equal:?}");
}

/// The lockrun run's checker, on made-up runs: commands on one resource
/// whose beats overlap are found; back to back, or on two resources,
/// they are not.
#[test]
fn the_lockrun_checker_finds_commands_that_ran_at_once() {
    let run = |resource, beats: Option<(u64, u64, usize)>| LrRun {
        worker: 0,
        n: 0,
        resource,
        ttl: Duration::from_secs(1),
        run_ms: 100,
        ignores_term: false,
        wrapped: false,
        exit: Some(0),
        said: String::new(),
        path: PathBuf::new(),
        beats,
    };
    let (a, b) = (LR_RESOURCES[0], LR_RESOURCES[1]);
    let found = lr_overlaps(
        &[run(a, Some((0, 100, 20))), run(a, Some((90, 200, 20)))],
        0,
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        lr_overlaps(
            &[run(a, Some((0, 100, 20))), run(a, Some((101, 200, 20)))],
            0
        )
        .is_empty()
    );
    assert!(
        lr_overlaps(
            &[run(a, Some((0, 100, 20))), run(b, Some((50, 200, 20)))],
            0
        )
        .is_empty()
    );
    // A command that never beat cannot overlap.
    assert!(lr_overlaps(&[run(a, Some((0, 100, 20))), run(a, None)], 0).is_empty());
}

// The lockrun run: real `lockrun` processes around commands that record
// their spans (see the module docs).

const LR_NODES: usize = 3;
const LR_WORKERS: usize = 3;
/// The resources the lockruns contend for (each run takes one).
const LR_RESOURCES: [&str; 2] = ["sched:lr-a", "sched:lr-b"];
/// A lockrun's TTL is drawn from this range (ms).
const LR_TTL_MS: (u64, u64) = (500, 1500);
/// How long a command runs, unless stopped (ms).
const LR_RUN_MS: (u64, u64) = (100, 3000);

/// The command under lockrun: `beat.py BEATS MS IGNORE STOP` appends
/// CLOCK_MONOTONIC in ns (`time.monotonic_ns()`, comparable across the
/// processes of one machine) as a line to BEATS every 5 ms for MS ms,
/// one write(2) per line; with IGNORE `1` it ignores SIGTERM (only
/// SIGKILL stops it early), with `0` SIGTERM ends it (the default
/// action). It also stops once the file STOP exists: the test's end, so
/// that no command outlives the test, not even one orphaned by a shell
/// that lockrun killed.
const BEAT_PY: &str = r#"import os, signal, sys, time
beats, ms, ignore, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
if ignore:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
fd = os.open(beats, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
end = time.monotonic_ns() + ms * 1000000
while True:
    now = time.monotonic_ns()
    os.write(fd, b"%d\n" % now)
    if now >= end or os.path.exists(stop):
        break
    time.sleep(0.005)
"#;

/// Now on CLOCK_MONOTONIC, in ns: the clock the commands beat with.
fn monotonic_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// One lockrun of a worker and what its command recorded.
struct LrRun {
    worker: usize,
    n: usize,
    resource: &'static str,
    ttl: Duration,
    run_ms: u64,
    ignores_term: bool,
    /// Under `sh -c 'python3 ...; :'`: only a signal to the process group
    /// reaches the python.
    wrapped: bool,
    /// lockrun's exit status (`None`: ended by a signal).
    exit: Option<i32>,
    /// lockrun's stderr (`-q`: errors only).
    said: String,
    /// The command's beats file.
    path: PathBuf,
    /// The command's first and last beats (CLOCK_MONOTONIC ns) and their
    /// count, if it beat at all: read once every command has stopped (a
    /// python orphaned by a killed shell beats on after lockrun exits).
    beats: Option<(u64, u64, usize)>,
}

impl LrRun {
    fn show(&self, mono0: u64) -> String {
        let at = |ns: u64| (ns as f64 - mono0 as f64) / 1e6;
        let span = match self.beats {
            Some((first, last, count)) => {
                format!("[{:.1}ms, {:.1}ms] ({count} beats)", at(first), at(last))
            }
            None => "(no beat)".into(),
        };
        format!(
            "worker {} run {} {span}: ttl {:?}, runs {}ms, {} SIGTERM, {}; lockrun exit {:?}{}",
            self.worker,
            self.n,
            self.ttl,
            self.run_ms,
            if self.ignores_term {
                "ignores"
            } else {
                "dies of"
            },
            if self.wrapped { "under sh" } else { "direct" },
            self.exit,
            if self.said.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.said.trim().replace('\n', "; "))
            }
        )
    }
}

/// The first and last beats of a beats file (complete lines only) and
/// their count.
fn read_beats(path: &Path) -> Option<(u64, u64, usize)> {
    let text = std::fs::read_to_string(path).ok()?;
    let complete = &text[..text.rfind('\n')? + 1];
    let beats: Vec<u64> = complete.lines().filter_map(|l| l.parse().ok()).collect();
    Some((*beats.first()?, *beats.last()?, beats.len()))
}

/// A lockrun child: killed (SIGKILL; its parent-death signal takes its
/// command along) and reaped if it is dropped still running.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

/// Creates its file when dropped: every command stops within a beat when
/// the run ends, and also when it fails.
struct StopFile<'a>(&'a Path);

impl Drop for StopFile<'_> {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0, b"stop");
    }
}

/// The lockrun run's scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The lockrun run's nodes, each reached by each worker through a
/// forwarder of its own, and the nemesis's bookkeeping.
struct LrRig {
    servers: Vec<Server>,
    /// `proxies[i][w]`: worker `w`'s way to node `i`.
    proxies: Vec<Vec<Proxy>>,
    /// `cut[w][i]`: until when worker `w` cannot reach node `i`.
    cut: Vec<Vec<Instant>>,
    /// Until when each node is paused.
    paused: Vec<Instant>,
    /// The worker cut off a majority, and until when: one at a time.
    majority: Option<(usize, Instant)>,
}

impl LrRig {
    fn start() -> LrRig {
        let servers: Vec<Server> = (0..LR_NODES).map(|_| Server::start().unwrap()).collect();
        let proxies = servers
            .iter()
            .map(|s| {
                (0..LR_WORKERS)
                    .map(|_| Proxy::start(addr(s)).unwrap())
                    .collect()
            })
            .collect();
        let now = Instant::now();
        LrRig {
            servers,
            proxies,
            cut: vec![vec![now; LR_NODES]; LR_WORKERS],
            paused: vec![now; LR_NODES],
            majority: None,
        }
    }

    /// Worker `w`'s `--nodes`.
    fn urls(&self, w: usize) -> String {
        self.proxies
            .iter()
            .map(|p| p[w].url())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// How many nodes worker `w` cannot reach at `now`, with node `also`
    /// disturbed too.
    fn down(&self, w: usize, also: Option<usize>, now: Instant) -> usize {
        (0..LR_NODES)
            .filter(|&i| also == Some(i) || self.paused[i] > now || self.cut[w][i] > now)
            .count()
    }

    /// The worker cut off a majority at `now`, if any.
    fn cut_off(&self, now: Instant) -> Option<usize> {
        self.majority.filter(|m| m.1 > now).map(|m| m.0)
    }

    fn undo(&mut self, undo: Undo) {
        match undo {
            Undo::Resume(i) => self.servers[i].resume(),
            Undo::Heal(i, w) => self.proxies[i][w].set(Mode::Pass),
        }
    }
}

/// What a worker's lockrun is at: its command's beats file, its
/// resource, how long the command runs unless stopped (ms) and the TTL
/// (`None` between lockruns).
type Running = Mutex<Option<(PathBuf, &'static str, u64, Duration)>>;

/// A cut of a worker off a majority of nodes: the worker, from, to.
type MajorityCut = (usize, Instant, Instant);

/// The lockrun run's nemesis for `length` from `t0`: every 100-400 ms,
/// cuts a worker off a majority of nodes for 1-4 s (its renewals fail;
/// one such worker at a time, preferably one whose command has longer
/// left than its TTL and whose resource another worker waits for, as
/// `running` says), cuts a worker off one node for 50 ms-1.5 s, or
/// pauses a node for 50-500 ms, always leaving every other worker a
/// majority; all undone at the end. It runs on past `length` (up to
/// twice it) until a majority cut was aimed at a command that had more
/// left than its TTL. Returns the majority cuts.
fn lr_nemesis(
    rig: &mut LrRig,
    seed: u64,
    length: Duration,
    t0: Instant,
    running: &[Running],
    log: &mut Vec<String>,
) -> Vec<MajorityCut> {
    let mut rng = Rng(seed);
    let mut pending: Vec<(Instant, Undo)> = Vec::new();
    let mut cuts = Vec::new();
    // Whether a majority cut was aimed at a running command with more
    // left than its TTL: until one is, the run goes on (up to twice its
    // length), so that a schedule whose commands all happened to be short
    // when a cut came still exposes a lockrun.
    let mut aimed = false;
    while t0.elapsed() < length || (!aimed && t0.elapsed() < 2 * length) {
        thread::sleep(rng.ms(100, 400));
        let now = Instant::now();
        for undo in take_due(&mut pending, now) {
            rig.undo(undo);
        }
        let entry = format!("{:.0}ms: ", t0.elapsed().as_secs_f64() * 1000.0);
        let roll = rng.below(10);
        if roll < 5 {
            if rig.cut_off(now).is_some() {
                continue;
            }
            let free: Vec<usize> = (0..LR_WORKERS)
                .filter(|&w| rig.cut[w].iter().all(|&c| c <= now))
                .collect();
            // Preferably a worker whose command has more left to run than
            // its lockrun's TTL and a margin (it runs on past the lock's
            // loss unless lockrun stops it), on a resource another
            // worker's lockrun waits for (which takes it once the keys
            // expire); now and then one whose lockrun waits.
            let at = monotonic_ns();
            // Per worker: its resource, and if its command started, the ms
            // it has left beyond its TTL and a margin.
            let state: Vec<Option<(&str, Option<i64>)>> = running
                .iter()
                .map(|r| {
                    let (path, resource, run_ms, ttl) = r.lock().clone()?;
                    let left = read_beats(&path).map(|b| {
                        (b.0 / 1_000_000 + run_ms) as i64
                            - (at / 1_000_000) as i64
                            - ttl.as_millis() as i64
                            - 300
                    });
                    Some((resource, left))
                })
                .collect();
            let contended = |w: usize| {
                let mine = state[w].map(|s| s.0);
                (0..LR_WORKERS)
                    .any(|v| v != w && state[v].is_some_and(|s| s.1.is_none() && Some(s.0) == mine))
            };
            let left = |w: usize| state[w].and_then(|s| s.1);
            let long: Vec<usize> = free
                .iter()
                .copied()
                .filter(|&w| left(w).is_some_and(|l| l >= 0))
                .collect();
            let best: Vec<usize> = long.iter().copied().filter(|&w| contended(w)).collect();
            let from = if best.is_empty() { &long } else { &best };
            let w = match from.len() {
                0 if free.is_empty() || rng.below(6) != 0 => continue,
                0 => free[rng.below(free.len() as u64) as usize],
                n => from[rng.below(n as u64) as usize],
            };
            let what = match left(w) {
                Some(l) => format!(
                    "its command runs {l}ms past its TTL and 300ms{}",
                    if contended(w) {
                        ", another lockrun waits"
                    } else {
                        ""
                    }
                ),
                None => "no command running".into(),
            };
            let keep = rng.below(LR_NODES as u64) as usize;
            let d = rng.ms(1000, 4000);
            for i in (0..LR_NODES).filter(|&i| i != keep) {
                rig.proxies[i][w].set(Mode::Blackhole);
                rig.cut[w][i] = now + d;
                pending.push((now + d, Undo::Heal(i, w)));
            }
            rig.majority = Some((w, now + d));
            cuts.push((w, now, now + d));
            aimed |= left(w).is_some_and(|l| l >= 0);
            log.push(format!(
                "{entry}cut worker {w} off every node but {keep} for {d:?} ({what})"
            ));
        } else if roll < 8 {
            let w = rng.below(LR_WORKERS as u64) as usize;
            let i = rng.below(LR_NODES as u64) as usize;
            if rig.cut_off(now) == Some(w) || rig.down(w, Some(i), now) > 1 || rig.cut[w][i] > now {
                continue;
            }
            let d = rng.ms(50, 1500);
            rig.proxies[i][w].set(Mode::Blackhole);
            rig.cut[w][i] = now + d;
            pending.push((now + d, Undo::Heal(i, w)));
            log.push(format!("{entry}cut worker {w} off node {i} for {d:?}"));
        } else {
            let i = rng.below(LR_NODES as u64) as usize;
            let cut_off = rig.cut_off(now);
            if rig.paused[i] > now
                || (0..LR_WORKERS)
                    .filter(|&w| Some(w) != cut_off)
                    .any(|w| rig.down(w, Some(i), now) > 1)
            {
                continue;
            }
            let d = rng.ms(50, 500);
            rig.servers[i].pause();
            rig.paused[i] = now + d;
            pending.push((now + d, Undo::Resume(i)));
            log.push(format!("{entry}pause node {i} for {d:?}"));
        }
    }
    for (_, undo) in pending {
        rig.undo(undo);
    }
    cuts
}

/// A worker of the lockrun run: lockrun after lockrun until `stop`, each
/// on a random resource and TTL around a command of random length, kind
/// (ignoring SIGTERM or not) and shape (direct or under `sh`); while its
/// command may run, `running` names the command's beats file, its
/// resource, its length and the TTL.
fn lr_worker(
    w: usize,
    seed: u64,
    urls: &str,
    dir: &Path,
    stop_file: &Path,
    stop: &AtomicBool,
    running: &Running,
) -> Vec<LrRun> {
    let mut rng = Rng(seed ^ (w as u64 + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
    let beat = dir.join("beat.py");
    let mut runs = Vec::new();
    for n in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let resource = LR_RESOURCES[rng.below(LR_RESOURCES.len() as u64) as usize];
        let ttl = rng.ms(LR_TTL_MS.0, LR_TTL_MS.1);
        let run_ms = rng.between(LR_RUN_MS.0, LR_RUN_MS.1);
        let ignores_term = rng.below(2) == 0;
        let wrapped = rng.below(2) == 0;
        let beats = dir.join(format!("w{w}-{n}.beats"));
        let err = dir.join(format!("w{w}-{n}.err"));
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockrun"));
        cmd.args(["--nodes", urls, "--node-timeout", "100ms", "--ttl"])
            .arg(format!("{}ms", ttl.as_millis()))
            .args(["--wait", "3s", "-q", resource, "--"]);
        if wrapped {
            cmd.args(["sh", "-c", "python3 \"$@\"; :", "sh"]);
        } else {
            cmd.arg("python3");
        }
        cmd.arg(&beat)
            .arg(&beats)
            .arg(run_ms.to_string())
            .arg(if ignores_term { "1" } else { "0" })
            .arg(stop_file)
            .env_remove("REDLOCK_NODES")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap());
        let mut child = Reaped(cmd.spawn().expect("lockrun starts"));
        *running.lock() = Some((beats.clone(), resource, run_ms, ttl));
        // Every lockrun ends by itself soon after `stop` (its command
        // sees the stop file, its wait is 3 s): one that does not is
        // killed, and shows as exit None.
        let mut stopped: Option<Instant> = None;
        let status = loop {
            if let Some(status) = child.0.try_wait().unwrap() {
                break Some(status);
            }
            if stop.load(Ordering::Relaxed) {
                let since = *stopped.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(20) {
                    break None;
                }
            }
            thread::sleep(Duration::from_millis(10));
        };
        drop(child);
        *running.lock() = None;
        runs.push(LrRun {
            worker: w,
            n,
            resource,
            ttl,
            run_ms,
            ignores_term,
            wrapped,
            exit: status.and_then(|s| s.code()),
            said: std::fs::read_to_string(&err).unwrap_or_default(),
            path: beats,
            beats: None,
        });
        thread::sleep(rng.ms(1, 20));
    }
    runs
}

/// Every two commands on one resource whose spans (first beat to last)
/// overlap, as readable lines.
fn lr_overlaps(runs: &[LrRun], mono0: u64) -> Vec<String> {
    let mut found = Vec::new();
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            let (Some(sa), Some(sb)) = (a.beats, b.beats) else {
                continue;
            };
            if a.resource == b.resource && sa.0 <= sb.1 && sb.0 <= sa.1 {
                let both = (sa.1.min(sb.1) - sa.0.max(sb.0)) as f64 / 1e6;
                found.push(format!(
                    "two commands on {} at once for {both:.1}ms: {} and {}",
                    a.resource,
                    a.show(mono0),
                    b.show(mono0)
                ));
            }
        }
    }
    found
}

/// The lockrun run for `length`: three workers, each running lockrun
/// after lockrun through forwarders of its own to three nodes, while
/// [`lr_nemesis`] disturbs them; asserts that no two commands on one
/// resource ever ran at once, and that the run checked something.
fn check_lockrun(seed: u64, length: Duration) {
    let _heavy = support::heavy();
    assert!(
        Command::new("python3")
            .args(["-c", ""])
            .status()
            .is_ok_and(|s| s.success()),
        "the lockrun run needs python3 (its commands record their spans)"
    );
    eprintln!(
        "lockrun schedule seed {seed} (replay with SCHEDULE_SEED={seed}), {length:?} on 3 nodes"
    );
    let scratch = Scratch(std::env::temp_dir().join(format!(
        "redlock-sync-schedule-lockrun-{}-{seed}",
        std::process::id()
    )));
    let _ = std::fs::remove_dir_all(&scratch.0);
    std::fs::create_dir_all(&scratch.0).unwrap();
    std::fs::write(scratch.0.join("beat.py"), BEAT_PY).unwrap();
    let stop_file = scratch.0.join("stop");
    let mut rig = LrRig::start();
    let urls: Vec<String> = (0..LR_WORKERS).map(|w| rig.urls(w)).collect();
    let running: Vec<Running> = (0..LR_WORKERS).map(|_| Mutex::new(None)).collect();
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let mono0 = monotonic_ns();
    let mono = |i: Instant| mono0 + i.duration_since(t0).as_nanos() as u64;
    let mut log = Vec::new();
    let mut cuts = Vec::new();
    let mut runs: Vec<LrRun> = thread::scope(|scope| {
        let workers: Vec<_> = (0..LR_WORKERS)
            .map(|w| {
                let (urls, dir, stop_file) = (&urls[w], &scratch.0, &stop_file);
                let (stop, running) = (&stop, &running[w]);
                scope.spawn(move || lr_worker(w, seed, urls, dir, stop_file, stop, running))
            })
            .collect();
        {
            // The workers stop, and every command within a beat, when the
            // nemesis is done, and also when it fails.
            let _stop = Stop(&stop);
            let _stop_file = StopFile(&stop_file);
            cuts = lr_nemesis(&mut rig, seed, length, t0, &running, &mut log);
        }
        workers
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    // Every command stopped within a beat of the stop file, orphans too;
    // a margin for a loaded machine, then the spans.
    thread::sleep(Duration::from_millis(300));
    for r in &mut runs {
        r.beats = read_beats(&r.path);
    }
    let ran: Vec<&LrRun> = runs.iter().filter(|r| r.beats.is_some()).collect();
    let mut exits: BTreeMap<Option<i32>, usize> = BTreeMap::new();
    for r in &runs {
        *exits.entry(r.exit).or_default() += 1;
    }
    // Majority cuts during which the cut worker's command beat, and of
    // those the ones that expose a lockrun which lets its command run on
    // past the lock: the command had started and would have run for
    // longer than the TTL after the cut began, and the cut outlasted the
    // TTL (so no renewal could succeed in time).
    let during = |&(w, from, to): &MajorityCut| -> Vec<&LrRun> {
        ran.iter()
            .copied()
            .filter(|r| {
                let (first, last, _) = r.beats.unwrap();
                r.worker == w && first <= mono(to) && mono(from) <= last
            })
            .collect()
    };
    let effective = cuts.iter().filter(|c| !during(c).is_empty()).count();
    let exposing = cuts
        .iter()
        .filter(|c| {
            let (from, to) = (c.1, c.2);
            during(c).iter().any(|r| {
                let first = r.beats.unwrap().0;
                let ttl = r.ttl.as_nanos() as u64;
                first <= mono(from)
                    && first + r.run_ms * 1_000_000 > mono(from) + ttl
                    && to.duration_since(from) > r.ttl
            })
        })
        .count();
    eprintln!(
        "{} lockruns, {} commands ran; lockrun exits {exits:?}; {} faults, {} majority cuts, \
         {effective} of them while the cut worker's command ran, {exposing} long enough to \
         expose it; {:.1}s in all",
        runs.len(),
        ran.len(),
        log.len(),
        cuts.len(),
        t0.elapsed().as_secs_f64()
    );
    let found = lr_overlaps(&runs, mono0);
    assert!(
        found.is_empty(),
        "seed {seed} (replay with SCHEDULE_SEED={seed}): {} overlaps:\n{}\nnemesis:\n{}\n\
         every lockrun, by its command's first beat:\n{}",
        found.len(),
        found
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
        log.join("\n"),
        {
            let mut all: Vec<&LrRun> = runs.iter().collect();
            all.sort_by_key(|r| r.beats.map(|b| b.0));
            all.iter()
                .map(|r| format!("{} {}", r.resource, r.show(mono0)))
                .collect::<Vec<_>>()
                .join("\n")
        }
    );
    // A run that ran few commands, or never cut a running command's
    // lockrun off a majority long enough to lose its lock while the
    // command would run on, checked little.
    assert!(ran.len() >= 8, "only {} commands ran", ran.len());
    assert!(
        exposing >= 1,
        "no majority cut long enough while the cut worker's command would run on past \
         its TTL:\n{}",
        log.join("\n")
    );
}

/// lockrun: no two commands under one resource ever run at once, while
/// lockruns are cut off a majority of nodes (their renewals fail) and
/// their commands ignore SIGTERM or run under a shell (see the module
/// docs).
#[test]
fn lockruns_never_run_two_commands_at_once() {
    check_lockrun(seed(), seconds(15));
}
