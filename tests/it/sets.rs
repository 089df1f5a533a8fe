//! Sets of resources locked at once: all or nothing on every node, each
//! resource excluded for single locks and other sets, crossing sets from
//! several threads without overlap or deadlock, one fencing token above
//! every resource's, extend and release of the whole set.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlock_sync::{Error, LockManager};
use support::{Nodes, get, pttl, resource};

const TTL: Duration = Duration::from_secs(10);

fn manager(cluster: &Nodes) -> LockManager {
    support::manager(cluster, Duration::from_millis(500))
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| resource(&format!("{prefix}:{i}"))).collect()
}

#[test]
fn a_set_is_all_or_nothing_and_each_resource_is_taken_for_others() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let [a, b, c, d]: [String; 4] = names("set", 4).try_into().unwrap();
    let held_b = dlm.try_lock(&b, TTL).unwrap();
    match dlm.try_lock_all([&a, &b, &c], TTL) {
        Err(Error::Taken { .. }) => {}
        other => panic!("expected Taken, got {other:?}"),
    }
    // Nothing of the set was left anywhere: a and c are free.
    for server in &cluster.servers {
        assert_eq!(get(server, a.as_bytes()), None);
        assert_eq!(get(server, c.as_bytes()), None);
    }
    drop(held_b);
    let set = dlm.try_lock_all([&a, &b, &c], TTL).unwrap();
    assert_eq!(
        set.resources().collect::<Vec<_>>(),
        [a.as_bytes(), b.as_bytes(), c.as_bytes()]
    );
    for server in &cluster.servers {
        for r in [&a, &b, &c] {
            assert_eq!(get(server, r.as_bytes()).as_deref(), Some(set.token()));
        }
    }
    for r in [&a, &b, &c] {
        assert!(matches!(dlm.try_lock(r, TTL), Err(Error::Taken { .. })));
    }
    assert!(matches!(
        dlm.try_lock_all([&d, &c], TTL),
        Err(Error::Taken { .. })
    ));
    // The failed set left d free.
    let held_d = dlm.try_lock(&d, TTL).unwrap();
    drop(held_d);
    set.release().unwrap();
    for server in &cluster.servers {
        for r in [&a, &b, &c] {
            assert_eq!(get(server, r.as_bytes()), None);
        }
    }
}

#[test]
fn a_split_vote_leaves_nothing_behind_on_any_node() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let [a, b, c]: [String; 3] = names("split", 3).try_into().unwrap();
    // Another owner holds a on node 0 and b on node 1: only node 2 can
    // take the whole set, which is no majority.
    let mut con0 = support::admin(&cluster.servers[0]);
    let mut con1 = support::admin(&cluster.servers[1]);
    let _: () = redis::cmd("SET")
        .arg(&a)
        .arg("other")
        .arg("PX")
        .arg(60_000)
        .query(&mut con0)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&b)
        .arg("other")
        .arg("PX")
        .arg(60_000)
        .query(&mut con1)
        .unwrap();
    match dlm.try_lock_all([&a, &b, &c], TTL) {
        Err(Error::Taken { .. }) => {}
        other => panic!("expected Taken, got {other:?}"),
    }
    for (i, server) in cluster.servers.iter().enumerate() {
        assert_eq!(get(server, c.as_bytes()), None, "node {i} kept c");
        if i != 0 {
            assert_eq!(get(server, a.as_bytes()), None, "node {i} kept a");
        }
        if i != 1 {
            assert_eq!(get(server, b.as_bytes()), None, "node {i} kept b");
        }
    }
}

#[test]
fn empty_sets_and_repeated_names_are_refused() {
    let dlm = support::manager_over(
        vec!["redis://127.0.0.1:1".into()],
        Duration::from_millis(100),
    );
    let none: [&str; 0] = [];
    assert!(matches!(
        dlm.try_lock_all(none, TTL),
        Err(Error::InvalidArgument { .. })
    ));
    match dlm.lock_all(["x", "y", "x"], TTL) {
        Err(e @ Error::InvalidArgument { .. }) => {
            assert!(e.to_string().contains("\"x\" is given twice"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        dlm.lock_all(["x", ""], TTL),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn crossing_sets_from_six_threads_never_overlap_and_all_finish() {
    let cluster = Nodes::start(3).unwrap();
    let rs = names("cross", 4);
    let held: Arc<Vec<AtomicBool>> = Arc::new((0..4).map(|_| AtomicBool::new(false)).collect());
    let done = Arc::new(AtomicU32::new(0));
    let start = Instant::now();
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let mut dlm = manager(&cluster);
            dlm.set_retry(1000, Duration::from_millis(20)).unwrap();
            let (rs, held, done) = (rs.clone(), held.clone(), done.clone());
            thread::spawn(move || {
                for round in 0..8 {
                    // Sets of two or three, in orders that cross.
                    let picks: Vec<usize> = match (t + round) % 4 {
                        0 => vec![0, 1],
                        1 => vec![1, 0],
                        2 => vec![2, 1, 3],
                        _ => vec![3, 0, 2],
                    };
                    let set: Vec<&String> = picks.iter().map(|&i| &rs[i]).collect();
                    let guard = dlm.lock_all(&set, Duration::from_secs(5)).unwrap();
                    for &i in &picks {
                        assert!(
                            !held[i].swap(true, Ordering::SeqCst),
                            "resource {i} held twice at once"
                        );
                    }
                    thread::sleep(Duration::from_millis(2));
                    for &i in &picks {
                        held[i].store(false, Ordering::SeqCst);
                    }
                    guard.release().unwrap();
                }
                done.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 6);
    assert!(start.elapsed() < Duration::from_secs(60));
}

#[test]
fn a_sets_fencing_token_is_above_each_resources_and_below_the_next() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let [a, b]: [String; 2] = names("fence", 2).try_into().unwrap();
    // Push b's counter well ahead of a's.
    let mut before_b = 0;
    for _ in 0..5 {
        before_b = dlm.try_lock(&b, TTL).unwrap().fencing_token().unwrap();
    }
    let before_a = dlm.try_lock(&a, TTL).unwrap().fencing_token().unwrap();
    let set = dlm.try_lock_all([&a, &b], TTL).unwrap();
    let token = set.fencing_token().unwrap();
    assert!(
        token > before_a && token > before_b,
        "{token} {before_a} {before_b}"
    );
    drop(set);
    for r in [&a, &b] {
        let after = dlm.try_lock(r, TTL).unwrap().fencing_token().unwrap();
        assert!(after > token, "{after} <= {token}");
    }
}

#[test]
fn a_set_extends_and_keeps_alive_as_a_whole() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let rs = names("extend", 3);
    let mut set = dlm.try_lock_all(&rs, Duration::from_secs(2)).unwrap();
    set.extend(Duration::from_secs(30)).unwrap();
    for server in &cluster.servers {
        for r in &rs {
            assert!(pttl(server, r.as_bytes()) > 20_000);
        }
    }
    assert!(set.validity() > Duration::from_secs(20));
    assert!(matches!(
        dlm.try_lock_all([&rs[0]], TTL),
        Err(Error::Taken { .. })
    ));
    // Kept alive past its TTL of 1 s.
    let other = names("alive", 2);
    let kept = dlm
        .try_lock_all(&other, Duration::from_secs(1))
        .unwrap()
        .keep_alive();
    thread::sleep(Duration::from_millis(2500));
    kept.ensure_held().unwrap();
    assert!(matches!(
        dlm.try_lock(&other[1], TTL),
        Err(Error::Taken { .. })
    ));
    drop(kept);
    drop(dlm.try_lock(&other[1], TTL).unwrap());
}

#[test]
fn a_released_resource_wakes_a_set_waiting_on_it() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let [a, b]: [String; 2] = names("wake", 2).try_into().unwrap();
    let held = dlm.try_lock(&b, TTL).unwrap();
    let mut waiter = manager(&cluster);
    // One pause of a minute: in within a second means woken by b's
    // release, which the set waits on (a is free).
    waiter.set_retry(2, Duration::from_secs(60)).unwrap();
    let got = support::assert_woken(
        || waiter.lock_all([&a, &b], TTL),
        || support::until_listening(&cluster, &b),
        || held.release().unwrap(),
    );
    assert_eq!(got.unwrap().resources().len(), 2);
}

#[test]
fn the_largest_set_allowed_is_taken_and_one_more_is_refused() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let rs = names("large", redlock_sync::MAX_SET + 1);
    assert!(matches!(
        dlm.try_lock_all(&rs, TTL),
        Err(Error::InvalidArgument { .. })
    ));
    let set = dlm.try_lock_all(&rs[..redlock_sync::MAX_SET], TTL).unwrap();
    assert_eq!(set.resources().len(), redlock_sync::MAX_SET);
    assert!(set.fencing_token().is_some());
    set.release().unwrap();
    for server in &cluster.servers {
        assert_eq!(get(server, rs[0].as_bytes()), None);
        assert_eq!(get(server, rs[redlock_sync::MAX_SET - 1].as_bytes()), None);
    }
}

/// A name that holds a key of another type (a user's hash) is taken, for
/// a set as for a lock (`SET NX` finds it): the set is refused, the hash
/// is left whole, and nothing of the set stays on any node. (`MGET`
/// reads such a key as absent: the set script once wrote its token over
/// the hash.)
#[test]
fn a_name_holding_a_key_of_another_type_refuses_the_set_and_keeps_the_key() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let set = names("set-wrongtype", 3);
    for server in &cluster.servers {
        let _: () = redis::cmd("HSET")
            .arg(&set[2])
            .arg("field")
            .arg("user data")
            .query(&mut support::admin(server))
            .unwrap();
    }
    match dlm.try_lock_all(&set, Duration::from_secs(10)) {
        Err(Error::Taken { .. }) => {}
        other => panic!("a set over a hash's name: {other:?}"),
    }
    for server in &cluster.servers {
        let field: String = redis::cmd("HGET")
            .arg(&set[2])
            .arg("field")
            .query(&mut support::admin(server))
            .unwrap();
        assert_eq!(field, "user data");
        for name in &set[..2] {
            assert_eq!(get(server, name.as_bytes()), None, "{name} stayed");
        }
    }
}
