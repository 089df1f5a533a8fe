//! Fair waiting for sets (`Builder::fair` with `lock_all`): set waiters
//! and lock waiters of separate managers served in arrival order, on
//! nodes and on a Redis Cluster member whose set spans slots; a set waits
//! in line on one key and keeps no free key it cannot use yet from anyone
//! (a holder asking for one gets it: no deadlock); a key that expired is
//! handed to the first set by a later set's claim.

use crate::fair::{a_dead_holder, fair, fair_with, got_at, queued, the_first_is_told};
use crate::support;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redlock_sync::LockManager;
use support::redis_cluster::{RedisCluster, unsupported};
use support::{Nodes, Server, resource, wait_for};

const TTL: Duration = Duration::from_secs(10);
const NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// Waits until, for each name, every server given for it has as many
/// waiters queued as said.
fn until_queued(names: &[(&str, &[&Server], usize)]) {
    let all = || {
        names
            .iter()
            .all(|(name, servers, n)| servers.iter().all(|s| queued(s, name) == *n))
    };
    assert!(
        wait_for(Duration::from_secs(10), all).is_some(),
        "waiters never queued as expected: {:?}",
        names.iter().map(|(n, _, k)| (n, k)).collect::<Vec<_>>()
    );
}

/// Holds `a` and `b` with `holder`; queues four waiters of their own
/// managers one after the other (each queued before the next starts): 0
/// and 2 want both (sets), 1 wants `b`, 3 wants `a` (locks); releases,
/// and returns the order in which they acquired, each holding for `hold`.
/// A set waits in line on the first of its keys that refused it (`a`: a
/// holder keeps both), on every member, also where its keys span a Redis
/// Cluster's masters.
fn set_order(
    holder: &LockManager,
    waiters: Vec<LockManager>,
    a: (&str, &[&Server]),
    b: (&str, &[&Server]),
    hold: Duration,
) -> Vec<usize> {
    let guard = holder.lock_all([a.0, b.0], TTL).unwrap();
    let wants: [&[&str]; 4] = [&[a.0, b.0], &[b.0], &[a.0, b.0], &[a.0]];
    let won = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    let (mut in_a, mut in_b) = (0, 0);
    for (i, dlm) in waiters.into_iter().enumerate() {
        let won = won.clone();
        let set: Vec<String> = wants[i].iter().map(|s| s.to_string()).collect();
        // A set waits in line on the first of its keys that refused it.
        let waits_on = |name: &str| set[0] == name;
        in_a += usize::from(waits_on(a.0));
        in_b += usize::from(waits_on(b.0));
        threads.push(thread::spawn(move || {
            let wait = Duration::from_secs(30);
            // One resource: a plain lock, which queues with the sets.
            let g = match &set[..] {
                [one] => dlm.try_lock_for(one, TTL, wait),
                _ => dlm.try_lock_all_for(&set, TTL, wait),
            }
            .unwrap();
            won.lock().unwrap().push(i);
            thread::sleep(hold);
            g.release().unwrap();
        }));
        until_queued(&[(a.0, a.1, in_a), (b.0, b.1, in_b)]);
    }
    guard.release().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    Arc::try_unwrap(won).unwrap().into_inner().unwrap()
}

#[test]
fn sets_and_locks_of_separate_managers_are_served_in_arrival_order() {
    let nodes = Nodes::start(3).unwrap();
    let (a, b) = (resource("fair-set-a"), resource("fair-set-b"));
    let holder = fair(nodes.urls());
    let waiters: Vec<LockManager> = (0..4).map(|_| fair(nodes.urls())).collect();
    let servers: Vec<&Server> = nodes.servers.iter().collect();
    let hold = Duration::from_secs(1);
    let got = set_order(&holder, waiters, (&a, &servers), (&b, &servers), hold);
    // In each queue's arrival order: `a`'s queue is 0, 2, 3 and `b`'s is
    // 1 (the sets wait in line on `a` alone). The release hands `a` to 0
    // and `b` to 1, which takes `b` and holds it for a second. The sets
    // cannot use `a` while 1 holds `b`: 0's claim (at once, or once its
    // pause ends should it come before 1's) gives `a` on to 2, whose claim
    // gives it on to 3, which takes it; so 3, a lock of `a` that came
    // later, goes before the sets (the documented cost of a set: it is
    // overtaken at a key it cannot use yet). Then both keys go to 0, the
    // first set, and then to 2. (Until 2026-11-26 a set held a
    // reservation it could not use until its deadline: 0 got both once 1
    // let `b` go, and the order was 1, 0, 2, 3 while 3 waited, `a` free.)
    assert_eq!(got, [1, 3, 0, 2], "served out of arrival order");
    for s in &nodes.servers {
        assert_eq!((queued(s, &a), queued(s, &b)), (0, 0));
    }
}

#[test]
fn fair_sets_spanning_slots_on_a_cluster_member_are_served_in_arrival_order() {
    if let Some(why) = unsupported() {
        eprintln!("{why}");
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let build = || {
        LockManager::builder()
            .cluster(cluster.seeds())
            .node_timeout(NODE_TIMEOUT)
            .retry(3, Duration::from_millis(200))
            .fair(true)
            .build()
            .unwrap()
    };
    // Two names on different masters: each master runs its part of the
    // set's claim.
    let a = resource("fair-cluster-set-a");
    let b = (0..)
        .map(|i| resource(&format!("fair-cluster-set-b{i}")))
        .find(|b| cluster.master_of(b.as_bytes()) != cluster.master_of(a.as_bytes()))
        .unwrap();
    let owner_a = &cluster.masters[cluster.master_of(a.as_bytes())];
    let owner_b = &cluster.masters[cluster.master_of(b.as_bytes())];
    let holder = build();
    let waiters: Vec<LockManager> = (0..4).map(|_| build()).collect();
    let hold = Duration::from_millis(20);
    let got = set_order(&holder, waiters, (&a, &[owner_a]), (&b, &[owner_b]), hold);
    // As on nodes (see above): the sets wait in line on `a` alone, on
    // both masters' parts (each member is told where, so that they agree),
    // so `b` goes to 1 first. Unlike nodes, `a` and `b` are two scripts
    // here: 0's part at `a` takes it, the part at `b` is refused, and the
    // clean-up puts 0's reservation of `a` back until its deadline (a set
    // gives a reservation on at once only where one script sees the key
    // that keeps it; see the claim script), so 0 gets both once 1 lets `b`
    // go (20 ms), before 3.
    assert_eq!(got, [1, 0, 2, 3], "served out of arrival order");
}

/// A set waits for `<prefix>-a` and `<prefix>-b` on `nodes` (every
/// manager from `manager`, each acquisition waiting at most `budget`)
/// while both are held; `b` is released while `a` is still held, and `a`
/// stays held for `hold` more. The set waits in line on `a` alone (the
/// first key that refused it): a later waiter for `b` alone gets `b` at
/// once, while `a` is still held, and the set gets both afterwards.
/// (Before, the set kept its place in `b`'s queue, and `b` stayed free
/// for its sake while `a` was held: the later waiter waited out `hold`,
/// and a holder of `a` asking for `b` waited for ever.)
fn a_set_lets_a_free_key_go(
    nodes: &Nodes,
    prefix: &str,
    manager: impl Fn() -> LockManager,
    budget: Duration,
    hold: Duration,
) {
    let (a, b) = (
        resource(&format!("{prefix}-a")),
        resource(&format!("{prefix}-b")),
    );
    let servers: Vec<&Server> = nodes.servers.iter().collect();
    let (holds_a, holds_b) = (manager(), manager());
    let guard_a = holds_a.lock(&a, TTL).unwrap();
    let guard_b = holds_b.lock(&b, TTL).unwrap();
    let won = Arc::new(Mutex::new(Vec::new()));
    let spawn = |who: &'static str, set: Vec<String>| {
        let (dlm, won) = (manager(), won.clone());
        thread::spawn(move || {
            let g = dlm.try_lock_all_for(&set, TTL, budget).unwrap();
            won.lock().unwrap().push(who);
            thread::sleep(Duration::from_millis(20));
            g.release().unwrap();
        })
    };
    let set = spawn("set", vec![a.clone(), b.clone()]);
    until_queued(&[(&a, &servers, 1), (&b, &servers, 0)]);
    let later = spawn("later", vec![b.clone()]);
    until_queued(&[(&b, &servers, 1)]);
    guard_b.release().unwrap();
    let got_b = wait_for(hold, || !won.lock().unwrap().is_empty());
    assert_eq!(
        *won.lock().unwrap(),
        ["later"],
        "a free key the set could not use was kept from a later waiter for {hold:?}"
    );
    assert!(got_b.is_some());
    guard_a.release().unwrap();
    set.join().unwrap();
    later.join().unwrap();
    assert_eq!(*won.lock().unwrap(), ["later", "set"]);
}

#[test]
fn a_set_waiting_for_a_held_key_lets_a_free_key_go_to_a_later_waiter() {
    let nodes = Nodes::start(3).unwrap();
    let manager = || fair(nodes.urls());
    let (budget, hold) = (Duration::from_secs(30), Duration::from_millis(1500));
    a_set_lets_a_free_key_go(&nodes, "fair-first", manager, budget, hold);
}

/// As above with pauses far longer than a reservation (3 s): the later
/// waiter is handed `b` by its release and told, rather than finding it
/// at the end of a pause.
#[test]
fn a_set_waiting_for_a_held_key_lets_a_free_key_go_with_long_pauses() {
    let nodes = Nodes::start(3).unwrap();
    let manager = || fair_with(&nodes, Duration::from_millis(100), Duration::from_secs(3));
    let (budget, hold) = (Duration::from_secs(40), Duration::from_millis(2000));
    a_set_lets_a_free_key_go(&nodes, "fair-handed", manager, budget, hold);
}

/// A set {a, b} waits in line at `a` while a holder keeps `b`, and a lock
/// of `a` waits behind it. When `a` is released it is offered to the set,
/// first in line, which cannot use it while `b` is held: its claim gives
/// `a` on at once to the lock behind it, and tells it. Before, the set
/// kept `a` reserved until the reservation's deadline (two node timeouts,
/// 2 s here) while the lock waited, `a` free all along; two sets offered
/// `a` in turn kept a lock of `a` from it over a second in the liveness
/// run of the schedule checker.
#[test]
fn a_set_a_holder_keeps_from_one_key_gives_a_reservation_of_another_on_at_once() {
    let nodes = Nodes::start(3).unwrap();
    let servers: Vec<&Server> = nodes.servers.iter().collect();
    let [a, b] = ["a", "b"].map(|n| resource(&format!("fair-set-gives-{n}")));
    let manager = || fair_with(&nodes, Duration::from_secs(1), Duration::from_millis(200));
    let holder = manager();
    let (guard_a, guard_b) = (holder.lock(&a, TTL).unwrap(), holder.lock(&b, TTL).unwrap());
    let set = {
        let (dlm, names) = (manager(), vec![a.clone(), b.clone()]);
        thread::spawn(move || {
            dlm.try_lock_all_for(&names, TTL, Duration::from_secs(40))
                .map(drop)
        })
    };
    until_queued(&[(&a, &servers, 1), (&b, &servers, 0)]);
    let lock = got_at(manager(), &a);
    until_queued(&[(&a, &servers, 2)]);
    let released = Instant::now();
    guard_a.release().unwrap();
    let took = lock.join().unwrap() - released;
    assert!(
        took < Duration::from_secs(1),
        "the lock behind the set got `a` {took:?} after its release"
    );
    guard_b.release().unwrap();
    set.join().unwrap().unwrap();
}

/// Issue 38's deadlock: T holds `a`; a set {a, b} of `set_manager`
/// waits (in line for `a`); T then asks for `b`, held for a moment by a
/// third manager U, so that T waits in line for it too. U lets `b` go: T
/// must get it at once (within 3 s of the release), and the set gets both
/// once T lets them go. Before, the set also waited in `b`'s queue, ahead
/// of T: every member refused T for the set's sake, the set waited for
/// T's `a`, and T's wait ran out (10 s) with `Taken`.
fn a_holder_gets_a_free_key_a_waiting_set_wants(
    servers: &[&Server],
    prefix: &str,
    holder: &LockManager,
    set_manager: LockManager,
    other: &LockManager,
) {
    let (a, b) = (
        resource(&format!("{prefix}-a")),
        resource(&format!("{prefix}-b")),
    );
    let guard_a = holder.lock(&a, TTL).unwrap();
    let guard_u = other.lock(&b, TTL).unwrap();
    let set = {
        let names = vec![a.clone(), b.clone()];
        thread::spawn(move || {
            let g = set_manager
                .try_lock_all_for(&names, TTL, Duration::from_secs(40))
                .unwrap();
            g.release().unwrap();
        })
    };
    until_queued(&[(&a, servers, 1)]);
    let before = queued(servers[0], &b);
    let asks = {
        let (holder, b) = (holder.clone(), b.clone());
        thread::spawn(move || {
            let got = holder.try_lock_for(&b, TTL, Duration::from_secs(10));
            (got, Instant::now())
        })
    };
    until_queued(&[(&b, servers, before + 1)]);
    let released = Instant::now();
    guard_u.release().unwrap();
    let (guard_b, at) = asks.join().unwrap();
    let guard_b = guard_b.unwrap_or_else(|e| panic!("the holder of a never got b: {e}"));
    let took = at - released;
    assert!(
        took < Duration::from_secs(3),
        "b took {took:?} after its release"
    );
    guard_b.release().unwrap();
    guard_a.release().unwrap();
    set.join().unwrap();
}

#[test]
fn a_holder_asking_for_a_key_a_waiting_set_wants_gets_it_across_managers() {
    let nodes = Nodes::start(3).unwrap();
    let servers: Vec<&Server> = nodes.servers.iter().collect();
    let holder = fair(nodes.urls());
    let (set, other) = (fair(nodes.urls()), fair(nodes.urls()));
    a_holder_gets_a_free_key_a_waiting_set_wants(&servers, "fair-dl-two", &holder, set, &other);
}

#[test]
fn a_holder_asking_for_a_key_a_waiting_set_wants_gets_it_in_one_manager() {
    let nodes = Nodes::start(3).unwrap();
    let servers: Vec<&Server> = nodes.servers.iter().collect();
    let dlm = fair(nodes.urls());
    let other = fair(nodes.urls());
    a_holder_gets_a_free_key_a_waiting_set_wants(
        &servers,
        "fair-dl-one",
        &dlm,
        dlm.clone(),
        &other,
    );
}

#[test]
fn a_holder_asking_for_a_key_a_waiting_set_wants_gets_it_on_a_cluster_member() {
    if let Some(why) = unsupported() {
        eprintln!("{why}");
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let build = || {
        LockManager::builder()
            .cluster(cluster.seeds())
            .node_timeout(NODE_TIMEOUT)
            .retry(3, Duration::from_millis(200))
            .fair(true)
            .build()
            .unwrap()
    };
    let servers: Vec<&Server> = cluster.masters.iter().collect();
    // One hash tag: the set is one script on one master.
    let prefix = "{fair-dl-cluster}";
    let a = resource(&format!("{prefix}-a"));
    let owner = cluster.master_of(a.as_bytes());
    a_holder_gets_a_free_key_a_waiting_set_wants(
        &servers[owner..=owner],
        prefix,
        &build(),
        build(),
        &build(),
    );
}

/// The holder of `a` dies: its key expires unreleased. The set {a, b}
/// waits first, pausing long (10 to 20 s); a later set {a, c} pauses
/// briefly. Its claim, refused for the first set's sake, finds `a` free
/// and reserves it for the first set, which is told and takes {a, b}.
/// Before, the first set slept through its pause while `a` stayed free.
#[test]
fn a_key_that_expired_is_handed_to_the_first_set_by_a_later_sets_claim() {
    let nodes = Nodes::start(3).unwrap();
    let servers: Vec<&Server> = nodes.servers.iter().collect();
    let [a, b, c] = ["a", "b", "c"].map(|n| resource(&format!("fair-set-expired-{n}")));
    a_dead_holder(&nodes, &a);
    let (first, later) = (vec![a.clone(), b.clone()], vec![a.clone(), c]);
    the_first_is_told(&nodes, first, later, |n| match n {
        1 => until_queued(&[(&a, &servers, 1), (&b, &servers, 0)]),
        _ => until_queued(&[(&a, &servers, n)]),
    });
}

/// Issue 38: a key reserved for a waiter that has left the key's queue
/// keeps it from nobody. A set waits in line on one key and leaves the
/// others' queues, keeping a reservation it was handed there; two sets
/// that each moved to the queue of a key the other's reservation held
/// kept each other waiting, swapping queues, until the reservations
/// lapsed (the schedule checker's liveness run traced a lock kept 1.3 s
/// from a free key behind two such sets). Here a set waits at `a`; `b` is
/// handed to a waiter queued after it, which then leaves `b`'s queue (as
/// a set moving to another key's queue does) and never claims; when `a`
/// is handed to the set, it takes both at once, not when that reservation
/// lapses (two node timeouts).
#[test]
fn a_reservation_for_a_waiter_no_longer_queued_does_not_keep_a_key_from_a_set() {
    later_reservation(true);
}

/// While the waiter a key is reserved for is queued for it, the
/// reservation keeps the key from a set that arrived before it, until the
/// reservation lapses (its waiter asks within a claim round, or is gone).
#[test]
fn a_reservation_for_a_queued_waiter_keeps_a_key_until_it_lapses() {
    later_reservation(false);
}

/// A set waits at `a` while `b` is handed to a waiter queued after it
/// (one that never claims; with `moved`, it then leaves `b`'s queue),
/// then `a` is handed to the set.
fn later_reservation(moved: bool) {
    let nodes = Nodes::start(3).unwrap();
    let node_timeout = Duration::from_secs(1);
    let (a, b) = (resource("fair-later-a"), resource("fair-later-b"));
    let holder = fair_with(&nodes, node_timeout, Duration::from_millis(200));
    let held_a = holder.lock(&a, TTL).unwrap();
    let held_b = holder.lock(&b, TTL).unwrap();
    let set = LockManager::builder()
        .nodes(nodes.urls())
        .node_timeout(node_timeout)
        .retry(1000, Duration::from_secs(3))
        .fair(true)
        .build()
        .unwrap();
    let servers: Vec<&Server> = nodes.servers.iter().collect();
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = set.try_lock_all_for([&a, &b], TTL, Duration::from_secs(30));
            (got.map(|g| g.release()), Instant::now())
        });
        // The set waits at `a`, the first of its keys a holder keeps.
        until_queued(&[(&a, &servers, 1)]);
        // A later waiter at `b`, as a join writes it, from a manager
        // nobody runs: it never claims.
        for server in &nodes.servers {
            a_later_waiter(server, &b);
        }
        held_b.release().unwrap();
        for server in &nodes.servers {
            let next: Option<String> = redis::cmd("GET")
                .arg(&b)
                .query(&mut support::admin(server))
                .unwrap();
            assert_eq!(next.as_deref(), Some("redlock:next:later"), "handed on");
            if moved {
                let (queue, _) = queue_keys(&b);
                let _: i64 = redis::cmd("ZREM")
                    .arg(queue)
                    .arg("later")
                    .query(&mut support::admin(server))
                    .unwrap();
            }
        }
        let released = Instant::now();
        held_a.release().unwrap();
        let (got, at) = waiting.join().unwrap();
        got.unwrap().unwrap();
        let waited = at.duration_since(released);
        eprintln!("the set got both {waited:?} after the release of `a`");
        // The later waiter's reservation of `b` lasts two node timeouts
        // from its release, just before `a`'s.
        if moved {
            assert!(
                waited < node_timeout,
                "the set got both {waited:?} after the release of `a`"
            );
        } else {
            assert!(
                waited >= node_timeout,
                "the set got both {waited:?} after the release of `a`, within the \
                 reservation of a waiter queued for `b`"
            );
        }
    });
}

/// The queue and tickets keys of `name`.
fn queue_keys(name: &str) -> (String, String) {
    let fence = String::from_utf8(redlock_sync::fence_key(name)).unwrap();
    (
        fence.replace(":redlock-fence", ":redlock-queue"),
        fence.replace(":redlock-fence", ":redlock-tickets"),
    )
}

/// A waiter queued for `name` on `server` now, with a ticket for 10 s,
/// whose manager nobody runs.
fn a_later_waiter(server: &Server, name: &str) {
    let (queue, tickets) = queue_keys(name);
    let mut con = support::admin(server);
    let (sec, micros): (u64, u64) = redis::cmd("TIME").query(&mut con).unwrap();
    let _: i64 = redis::Script::new(
        "redis.call('ZADD', KEYS[1], 'NX', ARGV[1], 'later') \
         redis.call('HSET', KEYS[2], 'later', ARGV[2]) \
         redis.call('PEXPIRE', KEYS[1], 10000) redis.call('PEXPIRE', KEYS[2], 10000) \
         return 1",
    )
    .key(&queue)
    .key(&tickets)
    .arg(sec * 1_000_000 + micros)
    .arg(format!(
        "{}:gone-manager",
        sec * 1000 + micros / 1000 + 10_000
    ))
    .invoke(&mut con)
    .unwrap();
}
