//! Fair waiting across managers (`Builder::fair`): waiters of separate
//! managers served in arrival order, a waiter that gives up leaving the
//! queue at once, a dead waiter costing one short reservation, other
//! clients refused while a reservation stands, and a Redis Cluster member.

use crate::support;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use std::net::SocketAddr;

use redlock_sync::{Error, LockManager};
use support::proxy::{self, Proxy};
use support::redis_cluster::{RedisCluster, unsupported};
use support::{Nodes, Server, admin, resource, wait_for};

mod claims;
mod elections;
mod faults;
mod yields;

const TTL: Duration = Duration::from_secs(10);
const NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// A fair manager over `urls`.
pub(crate) fn fair(urls: Vec<String>) -> LockManager {
    LockManager::builder()
        .nodes(urls)
        .node_timeout(NODE_TIMEOUT)
        .retry(3, Duration::from_millis(200))
        .fair(true)
        .build()
        .unwrap()
}

/// A fair manager on `nodes` with `node_timeout` (a reservation lasts
/// two of them) whose waiters pause up to `max_delay`, three attempts.
pub(crate) fn fair_with(nodes: &Nodes, node_timeout: Duration, max_delay: Duration) -> LockManager {
    LockManager::builder()
        .nodes(nodes.urls())
        .node_timeout(node_timeout)
        .retry(3, max_delay)
        .fair(true)
        .build()
        .unwrap()
}

/// The key beside `name` with `suffix` on `server` (found by its name),
/// if there is one.
fn beside(server: &Server, name: &str, suffix: &str) -> Option<Vec<u8>> {
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg(format!("{name}:redlock-{suffix}*"))
        .query(&mut admin(server))
        .unwrap();
    keys.into_iter().next()
}

/// The queue key of `name` on `server`, if any.
fn queue_of(server: &Server, name: &str) -> Option<Vec<u8>> {
    beside(server, name, "queue")
}

/// How many waiters `server` has queued for `name`.
pub(crate) fn queued(server: &Server, name: &str) -> usize {
    match queue_of(server, name) {
        Some(key) => redis::cmd("ZCARD")
            .arg(key)
            .query(&mut admin(server))
            .unwrap(),
        None => 0,
    }
}

fn get(server: &Server, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut admin(server))
        .ok()
        .flatten()
}

/// Waits until every server has `n` waiters queued for `name`.
fn until_queued(servers: &[&Server], name: &str, n: usize) {
    let all = || servers.iter().all(|s| queued(s, name) == n);
    assert!(
        wait_for(Duration::from_secs(10), all).is_some(),
        "{n} waiters never queued for {name}"
    );
}

/// Holds `name` with `holder`, queues `waiters` managers one after the
/// other (each queued everywhere before the next starts), releases, and
/// returns the order in which the waiters acquired.
fn order(
    holder: &LockManager,
    waiters: Vec<LockManager>,
    servers: &[&Server],
    name: &str,
) -> Vec<usize> {
    let guard = holder.lock(name, TTL).unwrap();
    let won = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for (i, dlm) in waiters.into_iter().enumerate() {
        let (won, mine) = (won.clone(), name.to_owned());
        threads.push(thread::spawn(move || {
            let g = dlm
                .try_lock_for(&mine, TTL, Duration::from_secs(30))
                .unwrap();
            won.lock().unwrap().push(i);
            thread::sleep(Duration::from_millis(20));
            g.release().unwrap();
        }));
        until_queued(servers, name, i + 1);
    }
    guard.release().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    Arc::try_unwrap(won).unwrap().into_inner().unwrap()
}

#[test]
fn waiters_of_separate_managers_are_served_in_arrival_order() {
    let nodes = Nodes::start(3).unwrap();
    let name = resource("fair-order");
    let holder = fair(nodes.urls());
    let waiters: Vec<LockManager> = (0..5).map(|_| fair(nodes.urls())).collect();
    let servers: Vec<&Server> = nodes.servers.iter().collect();
    let got = order(&holder, waiters, &servers, &name);
    assert_eq!(got, [0, 1, 2, 3, 4], "served out of arrival order");
    // Everything the queue wrote is gone or expiring.
    for s in &nodes.servers {
        assert_eq!(queued(s, &name), 0);
    }
}

#[test]
fn a_waiter_that_gives_up_leaves_the_queue_at_once() {
    let nodes = Nodes::start(3).unwrap();
    let name = resource("fair-give-up");
    let holder = fair(nodes.urls());
    let guard = holder.lock(&name, TTL).unwrap();
    let waiter = fair(nodes.urls());
    let err = waiter
        .try_lock_for(&name, TTL, Duration::from_millis(600))
        .unwrap_err();
    assert!(matches!(err, Error::Taken { .. }), "{err}");
    for s in &nodes.servers {
        assert_eq!(queued(s, &name), 0, "a waiter that gave up is still queued");
    }
    // The release finds nobody queued: the key is deleted, not reserved.
    guard.release().unwrap();
    for s in &nodes.servers {
        assert_eq!(get(s, &name), None);
    }
}

/// Holds `name` on `nodes`, queues a live waiter of `live` (waiting at
/// most 60 s), puts a dead waiter ahead of it (a ticket that never
/// claims, valid for a minute), and releases: the release hands the lock
/// to the dead waiter. Checks that a newcomer of another client is
/// refused while that reservation stands, and returns how long after the
/// release the live waiter got the lock.
fn a_dead_waiter_ahead(nodes: &Nodes, name: &str, live: LockManager) -> Duration {
    let holder = fair(nodes.urls());
    let guard = holder.lock(name, TTL).unwrap();
    let waiting = got_at(live, name);
    until_queued(&nodes.servers.iter().collect::<Vec<_>>(), name, 1);
    a_dead_waiter_queued(nodes, name);
    let released = Instant::now();
    guard.release().unwrap();
    // The dead waiter holds a reservation: another client's attempt finds
    // the lock taken, as it would find a holder.
    let other = support::manager(nodes, NODE_TIMEOUT);
    match other.try_lock(name, TTL) {
        Err(Error::Taken { .. }) => {}
        other => panic!("a reserved lock was taken by a newcomer: {other:?}"),
    }
    assert_eq!(
        get(&nodes.servers[0], name).as_deref(),
        Some(&b"redlock:next:dead"[..])
    );
    waiting.join().unwrap() - released
}

#[test]
fn a_dead_waiter_costs_one_reservation_and_other_clients_wait_it_out() {
    let nodes = Nodes::start(3).unwrap();
    let waited = a_dead_waiter_ahead(&nodes, &resource("fair-dead"), fair(nodes.urls()));
    // Reservation 500 ms (twice the node timeout), then the live waiter's
    // next attempt (pauses of at most 200 ms), and 500 ms of slack.
    assert!(
        waited < Duration::from_millis(1200),
        "the dead waiter cost {waited:?}"
    );
}

/// The same with the live waiter pausing 10 to 20 s: a fair waiter asks
/// at least every two node timeouts (a reservation's length), so a claim
/// of its own learns when the dead waiter's reservation lapses (500 ms),
/// and it asks then, not at the end of its pause. Before, it slept
/// through its pause while the key was free (10.4 s).
#[test]
fn a_dead_waiter_costs_one_reservation_whatever_the_next_ones_pause() {
    let nodes = Nodes::start(3).unwrap();
    let live = patient(&nodes, NODE_TIMEOUT, 1000);
    let waited = a_dead_waiter_ahead(&nodes, &resource("fair-dead-long"), live);
    // The reservation (500 ms), the asking again after its lapse (up to a
    // quarter of a node timeout), one claim round, and slack for the
    // machine: far below the 10 s the shortest pause would take.
    assert!(
        waited < Duration::from_millis(1200),
        "the dead waiter cost {waited:?}"
    );
}

/// A dead waiter handed the key right after a live one (its offer made
/// while the live one held the lock, within a reservation's length of
/// the first hand-off): the waiter after it, pausing 10 to 20 s, still
/// gets the lock about one reservation after the live one's release, as
/// its own claims learn when the dead one's reservation lapses.
#[test]
fn a_dead_waiter_handed_the_key_right_after_a_live_one_costs_one_reservation() {
    let nodes = Nodes::start(3).unwrap();
    let name = resource("fair-dead-second");
    let servers: Vec<&Server> = nodes.servers.iter().collect();
    let holder = fair(nodes.urls());
    let guard = holder.lock(&name, TTL).unwrap();
    let (first, name1) = (fair(nodes.urls()), name.clone());
    let first = thread::spawn(move || {
        let g = first
            .try_lock_for(&name1, TTL, Duration::from_secs(60))
            .unwrap();
        thread::sleep(Duration::from_millis(50));
        g.release().unwrap();
        Instant::now()
    });
    until_queued(&servers, &name, 1);
    let score: Vec<(String, u64)> = redis::cmd("ZRANGE")
        .arg(queue_of(&nodes.servers[0], &name).unwrap())
        .arg(0)
        .arg(0)
        .arg("WITHSCORES")
        .query(&mut admin(&nodes.servers[0]))
        .unwrap();
    a_dead_waiter_queued_at(&nodes, &name, score[0].1 + 1);
    let last = patient(&nodes, NODE_TIMEOUT, 1000);
    let last = got_at(last, &name);
    until_queued(&servers, &name, 3);
    guard.release().unwrap();
    let released = first.join().unwrap();
    let waited = last.join().unwrap() - released;
    // The dead one's reservation (500 ms: twice the node timeout), the
    // asking again after its lapse (up to a quarter of a node timeout), a
    // claim round, and slack: far below the 10 s of its shortest pause.
    assert!(
        waited < Duration::from_millis(1200),
        "the dead waiter after a live one cost {waited:?}"
    );
}

/// A thread of `dlm` that waits for `name` (at most 60 s), lets it go at
/// once, and says when it got it.
pub(crate) fn got_at(dlm: LockManager, name: &str) -> thread::JoinHandle<Instant> {
    let name = name.to_owned();
    thread::spawn(move || {
        let g = dlm
            .try_lock_for(&name, TTL, Duration::from_secs(60))
            .unwrap();
        drop(g);
        Instant::now()
    })
}

/// A fair manager on `nodes` whose waiters pause 10 to 20 s between
/// attempts (`count` of them), with `node_timeout`: a test that it gets a
/// lock within seconds shows that something other than its pause made it
/// ask.
fn patient(nodes: &Nodes, node_timeout: Duration, count: u32) -> LockManager {
    LockManager::builder()
        .nodes(nodes.urls())
        .node_timeout(node_timeout)
        .retry(count, Duration::from_secs(20))
        .fair(true)
        .build()
        .unwrap()
}

/// A holder of `name` on `nodes` that died: another client's key on
/// every node, expiring 1.5 s from now, never released.
pub(crate) fn a_dead_holder(nodes: &Nodes, name: &str) {
    for s in &nodes.servers {
        let _: () = redis::cmd("SET")
            .arg(name)
            .arg("a-holder-that-died")
            .arg("PX")
            .arg(1500)
            .query(&mut admin(s))
            .unwrap();
    }
}

/// After [`a_dead_holder`]: a first waiter pausing long (10 to 20 s) and
/// a later one pausing briefly (0.1 to 0.2 s), each of its own fair
/// manager on `nodes`, want `first` and `later` (one name: a lock;
/// several: a set); `queued(n)` waits until the n-th is queued. They must
/// be served in arrival order, the first within 6 s of the start (the
/// key is free from 1.5 s on, and the later one asks every 0.1 to 0.2 s),
/// not after its own pause.
pub(crate) fn the_first_is_told(
    nodes: &Nodes,
    first: Vec<String>,
    later: Vec<String>,
    queued: impl Fn(usize),
) {
    let build = |pause: Duration| {
        LockManager::builder()
            .nodes(nodes.urls())
            .node_timeout(NODE_TIMEOUT)
            .retry(1000, pause)
            .fair(true)
            .build()
            .unwrap()
    };
    let started = Instant::now();
    let won = Arc::new(Mutex::new(Vec::new()));
    let spawn = |who: &'static str, names: Vec<String>, pause: Duration| {
        let (dlm, won) = (build(pause), won.clone());
        thread::spawn(move || {
            let budget = Duration::from_secs(60);
            // Held until released below, whichever guard it is.
            let release: Box<dyn FnOnce() -> redlock_sync::Result<()>> = match &names[..] {
                [name] => {
                    let g = dlm.try_lock_for(name, TTL, budget).unwrap();
                    Box::new(move || g.release())
                }
                _ => {
                    let g = dlm.try_lock_all_for(&names, TTL, budget).unwrap();
                    Box::new(move || g.release())
                }
            };
            won.lock().unwrap().push((who, started.elapsed()));
            thread::sleep(Duration::from_millis(20));
            release().unwrap();
        })
    };
    let first = spawn("first", first, Duration::from_secs(20));
    queued(1);
    let later = spawn("later", later, Duration::from_millis(200));
    queued(2);
    first.join().unwrap();
    later.join().unwrap();
    let won = won.lock().unwrap().clone();
    let order: Vec<&str> = won.iter().map(|w| w.0).collect();
    assert_eq!(order, ["first", "later"], "served out of arrival order");
    assert!(
        won[0].1 < Duration::from_secs(6),
        "the first waiter slept through its pause: it got the lock after {:?}",
        won[0].1
    );
}

/// The first waiter queued on `server` for `name`.
fn head(server: &Server, name: &str) -> Vec<u8> {
    let key = queue_of(server, name).expect("no queue");
    let first: Vec<Vec<u8>> = redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(0)
        .query(&mut admin(server))
        .unwrap();
    first.into_iter().next().expect("an empty queue")
}

/// A waiter's ticket deadline (server ms) on `server`.
fn ticket(server: &Server, name: &str, token: &[u8]) -> u64 {
    let key = beside(server, name, "tickets").expect("no tickets");
    let value: Vec<u8> = redis::cmd("HGET")
        .arg(key)
        .arg(token)
        .query(&mut admin(server))
        .unwrap();
    let value = String::from_utf8(value).unwrap();
    value.split(':').next().unwrap().parse().unwrap()
}

/// Puts a waiter that never claims (a dead one) first in `name`'s queue
/// on every node, its ticket valid for a minute.
fn a_dead_waiter_queued(nodes: &Nodes, name: &str) {
    a_dead_waiter_queued_at(nodes, name, 1);
}

/// [`a_dead_waiter_queued`] with the arrival score `score`.
fn a_dead_waiter_queued_at(nodes: &Nodes, name: &str, score: u64) {
    for s in &nodes.servers {
        let mut con = admin(s);
        let now: (String, String) = redis::cmd("TIME").query(&mut con).unwrap();
        let deadline = now.0.parse::<u64>().unwrap() * 1000 + 60_000;
        // The queue's keys are the fencing counter's companions.
        let fence = String::from_utf8(redlock_sync::fence_key(name)).unwrap();
        let queue = fence.replace(":redlock-fence", ":redlock-queue");
        let tickets = fence.replace(":redlock-fence", ":redlock-tickets");
        let _: () = redis::cmd("ZADD")
            .arg(&queue)
            .arg(score)
            .arg("dead")
            .query(&mut con)
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg(&tickets)
            .arg("dead")
            // Its manager's address: hand-offs to it go to that
            // manager's own channel.
            .arg(format!("{deadline}:gone-manager"))
            .query(&mut con)
            .unwrap();
        for key in [&queue, &tickets] {
            let _: () = redis::cmd("PEXPIRE")
                .arg(key)
                .arg(60_000)
                .query(&mut con)
                .unwrap();
        }
    }
}
