//! Fair waiting for sets (`Builder::fair` with `lock_all`): set waiters
//! and lock waiters of separate managers served in arrival order, on
//! nodes and on a Redis Cluster member whose set spans slots; a set first
//! in line keeps a key it cannot use yet from later waiters; a key that
//! expired is handed to the first set by a later set's claim.

use crate::fair::{a_dead_holder, fair, queued, the_first_is_told};
use crate::support;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

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
/// managers one after the other (each queued everywhere before the next
/// starts): 0 and 2 want both (sets), 1 wants `b`, 3 wants `a` (locks);
/// releases, and
/// returns the order in which they acquired. In arrival order: 0 (both
/// handed to it), 1 (`b` from 0), 2 (`a` from 0, `b` from 1: it waited
/// first in `b`'s queue while 1 held it), then 3 (`a` from 2). Racing,
/// 3 takes `a` as soon as 0 lets it go, before 2.
fn set_order(
    holder: &LockManager,
    waiters: Vec<LockManager>,
    a: (&str, &[&Server]),
    b: (&str, &[&Server]),
) -> Vec<usize> {
    let guard = holder.lock_all([a.0, b.0], TTL).unwrap();
    let wants: [&[&str]; 4] = [&[a.0, b.0], &[b.0], &[a.0, b.0], &[a.0]];
    let won = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    let (mut in_a, mut in_b) = (0, 0);
    for (i, dlm) in waiters.into_iter().enumerate() {
        let won = won.clone();
        let set: Vec<String> = wants[i].iter().map(|s| s.to_string()).collect();
        in_a += usize::from(set.iter().any(|r| r == a.0));
        in_b += usize::from(set.iter().any(|r| r == b.0));
        threads.push(thread::spawn(move || {
            let wait = Duration::from_secs(30);
            // One resource: a plain lock, which queues with the sets.
            let g = match &set[..] {
                [one] => dlm.try_lock_for(one, TTL, wait),
                _ => dlm.try_lock_all_for(&set, TTL, wait),
            }
            .unwrap();
            won.lock().unwrap().push(i);
            thread::sleep(Duration::from_millis(20));
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
    let got = set_order(&holder, waiters, (&a, &servers), (&b, &servers));
    assert_eq!(got, [0, 1, 2, 3], "served out of arrival order");
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
    let got = set_order(&holder, waiters, (&a, &[owner_a]), (&b, &[owner_b]));
    assert_eq!(got, [0, 1, 2, 3], "served out of arrival order");
}

/// A set waits first in line for `<prefix>-a` and `<prefix>-b` on
/// `nodes` (every manager from `manager`, each acquisition waiting at
/// most `budget`); `b` is released while `a` is still held, and `a`
/// stays held for `hold` more. A later waiter for `b` alone must still be
/// waiting then, and go after the set.
fn a_set_keeps_its_place(
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
    until_queued(&[(&a, &servers, 1), (&b, &servers, 1)]);
    let later = spawn("later", vec![b.clone()]);
    until_queued(&[(&b, &servers, 2)]);
    guard_b.release().unwrap();
    thread::sleep(hold);
    assert!(won.lock().unwrap().is_empty(), "{:?}", won.lock().unwrap());
    guard_a.release().unwrap();
    set.join().unwrap();
    later.join().unwrap();
    assert_eq!(
        *won.lock().unwrap(),
        ["set", "later"],
        "the later waiter went first"
    );
}

/// A set waiting first in line for `a` and `b`, `b` released while `a`
/// is still held: a later waiter for `b` alone waits for the set (the
/// set's claims keep its place in `b`'s queue), instead of taking `b` the
/// moment it is free (the later waiter keeps asking and is refused for
/// the 1.5 s that `a` stays held).
#[test]
fn a_set_first_in_line_keeps_a_free_key_from_later_waiters() {
    let nodes = Nodes::start(3).unwrap();
    let manager = || fair(nodes.urls());
    let (budget, hold) = (Duration::from_secs(30), Duration::from_millis(1500));
    a_set_keeps_its_place(&nodes, "fair-first", manager, budget, hold);
}

/// A set waits here in the queue of the name that refused it (`a`), and
/// is handed the other (`b`) while `a` is still held, with pauses far
/// longer than a reservation: the hand-off wakes it (it watches `b`), its
/// claim is refused but puts it back first in `b`'s queue, so a later
/// waiter for `b` still waits for it past the set's reservation of `b`
/// (200 ms) and the later waiter's next pause (at most 3 s). (Not woken,
/// the set slept through its reservation; `b`'s queue no longer held it,
/// and the later waiter took `b` at its next pause.)
#[test]
fn a_set_handed_one_key_while_it_waits_for_another_keeps_its_place() {
    let nodes = Nodes::start(3).unwrap();
    let manager = || {
        LockManager::builder()
            .nodes(nodes.urls())
            .node_timeout(Duration::from_millis(100))
            .retry(3, Duration::from_secs(3))
            .fair(true)
            .build()
            .unwrap()
    };
    let (budget, hold) = (Duration::from_secs(40), Duration::from_millis(3500));
    a_set_keeps_its_place(&nodes, "fair-handed", manager, budget, hold);
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
        1 => until_queued(&[(&a, &servers, 1), (&b, &servers, 1)]),
        _ => until_queued(&[(&a, &servers, n)]),
    });
}
