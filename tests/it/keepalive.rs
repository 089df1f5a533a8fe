//! Keep-alive, fail-closed checks and `with_lock`, on real servers.
//!
//! Timings here are chosen so that the behaviour under test and the one it
//! must not be confused with lie seconds apart: the bounds are generous.

use crate::support;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redlock_sync::Error;
use support::{Nodes, admin, get, pttl, resource, timed, wait_for};

const NODE_TIMEOUT: Duration = Duration::from_millis(100);

fn manager(cluster: &Nodes) -> redlock_sync::LockManager {
    support::manager(cluster, NODE_TIMEOUT)
}

#[test]
fn keep_alive_holds_the_lock_far_past_its_ttl() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let key = resource("keep-alive-long");
    let ttl = Duration::from_millis(300);
    let guard = dlm.lock(&key, ttl).unwrap().keep_alive();
    let held = Duration::from_millis(2_400); // 8 TTLs
    let start = Instant::now();
    while start.elapsed() < held {
        guard.ensure_held().unwrap();
        thread::sleep(Duration::from_millis(20));
    }
    guard.ensure_held().unwrap();
    assert!(guard.validity() > Duration::ZERO);
    // Still ours on every node, with an expiry renewed recently.
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()).as_deref(), Some(guard.token()));
        let left = pttl(server, key.as_bytes());
        assert!(left > 0 && left <= 300, "PTTL {left}");
    }
    let other = manager(&cluster);
    assert!(matches!(
        other.try_lock(&key, ttl),
        Err(Error::Taken { .. })
    ));
    println!(
        "held {:?} with a TTL of {ttl:?} ({:.1} TTLs)",
        start.elapsed(),
        start.elapsed().as_secs_f64() / ttl.as_secs_f64()
    );
    // Drop stops the thread and releases at once.
    let ((), took) = timed(|| drop(guard));
    assert!(took < Duration::from_secs(1), "drop took {took:?}");
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()), None);
    }
    let _next = other.try_lock(&key, ttl).unwrap();
}

#[test]
fn losing_the_majority_is_detected_within_one_renewal_period() {
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let key = resource("keep-alive-loss");
    // Renewal every 2 s; the validity alone would last about 4 s past a
    // renewal, so detection before 3.5 s can only come from the renewal.
    let ttl = Duration::from_secs(6);
    let period = ttl / 3;
    let guard = dlm.lock(&key, ttl).unwrap().keep_alive();
    guard.ensure_held().unwrap();
    cluster.servers[0].kill();
    cluster.servers[1].kill();
    let killed = Instant::now();
    let detected =
        wait_for(ttl, || guard.ensure_held().is_err()).expect("the loss was never detected");
    println!("majority killed; ensure_held failed after {detected:?} (renewal period {period:?})");
    assert!(
        detected < period + Duration::from_millis(1_500),
        "detected after {detected:?}"
    );
    assert!(
        guard.validity() > Duration::ZERO,
        "validity was not the cause"
    );
    match guard.ensure_held() {
        Err(
            err @ Error::NotHeld {
                renewal: Some(_), ..
            },
        ) => {
            // The message names the failing nodes.
            let text = err.to_string();
            let name = |i: usize| format!("127.0.0.1:{}", cluster.servers[i].port());
            assert!(text.contains(&name(0)) && text.contains(&name(1)), "{text}");
        }
        other => panic!("expected NotHeld from a renewal, got {other:?}"),
    }
    // Fails closed until the end: stays failed while the nodes are down.
    thread::sleep(Duration::from_millis(300));
    assert!(guard.ensure_held().is_err());
    assert!(
        killed.elapsed() < ttl,
        "the test ran too slowly to mean anything"
    );
    let ((), took) = timed(|| drop(guard));
    assert!(took < Duration::from_secs(1), "drop took {took:?}");
}

#[test]
fn a_renewal_that_recovers_within_validity_makes_the_lock_held_again() {
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let key = resource("keep-alive-recover");
    let ttl = Duration::from_secs(6);
    let guard = dlm.lock(&key, ttl).unwrap().keep_alive();
    cluster.servers[1].pause();
    cluster.servers[2].pause();
    // The renewal at 2 s misses the quorum...
    wait_for(ttl, || guard.ensure_held().is_err()).expect("the failed renewal was not seen");
    // Validity is left on the clock, but the lock is not known to be held:
    // `is_valid` fails closed with `ensure_held`.
    assert!(guard.validity() > Duration::ZERO);
    assert!(!guard.is_valid());
    cluster.servers[1].resume();
    cluster.servers[2].resume();
    // ...and a retry (every 0.5 s) confirms it again, well within validity.
    let back = wait_for(Duration::from_secs(3), || guard.ensure_held().is_ok());
    assert!(back.is_some(), "the lock was not confirmed again");
    assert!(guard.is_valid());
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()).as_deref(), Some(guard.token()));
        assert!(pttl(server, key.as_bytes()) > 4_000);
    }
    guard.release().unwrap();
}

#[test]
fn a_lock_taken_over_stops_the_keep_alive_and_fails_for_good() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let key = resource("keep-alive-taken");
    let ttl = Duration::from_millis(600);
    let guard = dlm.lock(&key, ttl).unwrap().keep_alive();
    for server in &cluster.servers {
        let _: () = admin(server).set(&key, "someone-else").unwrap();
    }
    wait_for(Duration::from_secs(3), || guard.ensure_held().is_err()).expect("loss not seen");
    // Found by the first renewal (at TTL/3), long before the validity
    // would have run out: the guard says so, and has no validity left.
    match guard.ensure_held() {
        Err(e @ Error::NotHeld { renewal: None, .. }) => {
            assert!(
                matches!(
                    e,
                    Error::NotHeld {
                        lost_on: 3,
                        nodes: 3,
                        ..
                    }
                ),
                "{e:?}"
            );
            let text = e.to_string();
            assert!(text.contains("taken over"), "{text}");
            assert!(text.contains("3 of 3 nodes"), "{text}");
            assert!(!text.contains("validity ran out"), "{text}");
        }
        other => panic!("expected a final NotHeld, got {other:?}"),
    }
    assert!(!guard.is_valid());
    assert_eq!(guard.validity(), Duration::ZERO);
    // The other owner's keys were never extended nor deleted.
    drop(guard);
    for server in &cluster.servers {
        assert_eq!(
            get(server, key.as_bytes()).as_deref(),
            Some(&b"someone-else"[..])
        );
        assert_eq!(pttl(server, key.as_bytes()), -1);
    }
}

#[test]
fn keep_alive_for_stops_renewing_after_its_limit() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let key = resource("keep-alive-cap");
    let ttl = Duration::from_millis(300);
    let started = Instant::now();
    let guard = dlm
        .lock(&key, ttl)
        .unwrap()
        .keep_alive_for(Duration::from_millis(900));
    // Renewed past its TTL while under the cap...
    thread::sleep(Duration::from_millis(600));
    guard.ensure_held().unwrap();
    // ...then left to expire: within the cap plus one TTL (and slack).
    let gone = wait_for(Duration::from_secs(5), || guard.ensure_held().is_err())
        .map(|_| started.elapsed())
        .expect("the capped lock never ran out");
    println!("capped at 900 ms with a 300 ms TTL; ran out after {gone:?}");
    assert!(gone >= Duration::from_millis(900), "{gone:?}");
    // No later than the cap, one renewal period and one TTL (the last
    // renewal's), with 300 ms of slack.
    assert!(
        gone < Duration::from_millis(900 + 100 + 300 + 300),
        "{gone:?}"
    );
    let free = wait_for(Duration::from_secs(3), || {
        cluster
            .servers
            .iter()
            .all(|s| get(s, key.as_bytes()).is_none())
    });
    assert!(free.is_some(), "keys outlived the cap");
    let next = manager(&cluster).try_lock(&key, ttl).unwrap();
    assert!(next.fencing_token().unwrap() > guard.fencing_token().unwrap());
}

#[test]
fn with_lock_runs_the_work_under_the_lock_and_releases() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let key = resource("with-lock");
    let out = dlm
        .with_lock(&key, Duration::from_millis(300), |guard| {
            // Longer than the TTL: kept alive meanwhile.
            thread::sleep(Duration::from_millis(800));
            guard.ensure_held().unwrap();
            for server in &cluster.servers {
                assert_eq!(get(server, key.as_bytes()).as_deref(), Some(guard.token()));
            }
            guard.fencing_token()
        })
        .unwrap();
    assert!(out.unwrap() > 0);
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()), None);
    }
}

#[test]
fn with_lock_releases_when_the_work_panics() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let key = resource("with-lock-panic");
    let result = catch_unwind(AssertUnwindSafe(|| {
        dlm.with_lock(&key, Duration::from_secs(30), |_| panic!("worker failed"))
    }));
    assert!(result.is_err());
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()), None);
    }
    // Free at once, not after the 30 s TTL.
    let _next = dlm.try_lock(&key, Duration::from_secs(30)).unwrap();
}

#[test]
fn with_lock_reports_a_loss_during_the_work() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let key = resource("with-lock-lost");
    let result = dlm.with_lock(&key, Duration::from_millis(600), |_| {
        for server in &cluster.servers {
            let _: () = admin(server).set(&key, "someone-else").unwrap();
        }
        thread::sleep(Duration::from_millis(800));
        "done"
    });
    match result {
        Err(Error::NotHeld { .. }) => {}
        other => panic!("expected NotHeld, got {other:?}"),
    }
    for server in &cluster.servers {
        assert_eq!(
            get(server, key.as_bytes()).as_deref(),
            Some(&b"someone-else"[..])
        );
    }
}

#[test]
fn with_lock_reports_a_taken_lock_without_running_the_work() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let key = resource("with-lock-taken");
    let _held = dlm.lock(&key, Duration::from_secs(30)).unwrap();
    let mut ran = false;
    let result = dlm.with_lock(&key, Duration::from_secs(30), |_| ran = true);
    assert!(matches!(result, Err(Error::Taken { .. })), "{result:?}");
    assert!(!ran);
}

#[test]
fn dropping_a_kept_alive_guard_with_every_node_hung_is_bounded() {
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let key = resource("keep-alive-hung");
    let ttl = Duration::from_millis(300);
    let guard = dlm.lock(&key, ttl).unwrap().keep_alive();
    for server in &mut cluster.servers {
        server.pause();
    }
    // Let a renewal start against the hung nodes, then drop mid-way.
    thread::sleep(Duration::from_millis(120));
    let ((), took) = timed(|| drop(guard));
    println!("drop with 3 hung nodes and a renewal under way: {took:?}");
    assert!(took < Duration::from_secs(1), "drop took {took:?}");
    for server in &mut cluster.servers {
        server.resume();
    }
}

#[test]
fn a_guard_kept_alive_late_in_its_validity_is_renewed_in_time() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let key = resource("keep-alive-late");
    let ttl = Duration::from_millis(900);
    let guard = dlm.lock(&key, ttl).unwrap();
    // 2/3 of the TTL gone: a first renewal a full TTL/3 later would come
    // after the validity has run out.
    thread::sleep(Duration::from_millis(600));
    let guard = guard.keep_alive();
    thread::sleep(Duration::from_millis(1_200));
    guard.ensure_held().unwrap();
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()).as_deref(), Some(guard.token()));
    }
}

#[test]
fn a_manual_extend_that_finds_the_lock_taken_over_leaves_no_validity() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let key = resource("extend-taken");
    let mut guard = dlm.lock(&key, Duration::from_secs(30)).unwrap();
    // Overwritten on two of three nodes (as after a wipe and a new owner).
    for server in &cluster.servers[..2] {
        let _: () = admin(server).set(&key, "someone-else").unwrap();
    }
    assert!(guard.is_valid());
    match guard.extend(Duration::from_secs(30)) {
        Err(Error::NotHeld {
            lost_on: 2,
            nodes: 3,
            renewal: None,
            ..
        }) => {}
        other => panic!("expected NotHeld on 2 of 3 nodes, got {other:?}"),
    }
    assert!(!guard.is_valid());
    assert_eq!(guard.validity(), Duration::ZERO);
    let held = guard.ensure_held().unwrap_err();
    assert!(
        held.to_string().contains("taken over: 2 of 3 nodes"),
        "{held}"
    );
    // Final: a second extend does not try again, and says the same.
    let again = guard.extend(Duration::from_secs(30)).unwrap_err();
    assert!(
        matches!(again, Error::NotHeld { lost_on: 2, .. }),
        "{again:?}"
    );
    // Our key on the third node is still ours until released; the others'
    // are left alone.
    drop(guard);
    for server in &cluster.servers[..2] {
        assert_eq!(
            get(server, key.as_bytes()).as_deref(),
            Some(&b"someone-else"[..])
        );
    }
    assert_eq!(get(&cluster.servers[2], key.as_bytes()), None);
}

/// `wait_lost` under keep-alive: false while renewals succeed (for
/// several TTLs), true within the TTL once a majority is cut off; and
/// woken at once, not at the validity's end, when a renewal finds the lock
/// taken over.
#[test]
fn wait_lost_is_false_while_renewals_succeed_and_true_once_lost() {
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let ttl = Duration::from_millis(600);
    let guard = dlm
        .lock(resource("wait-lost-cut"), ttl)
        .unwrap()
        .keep_alive();
    assert!(!guard.wait_lost(ttl * 3), "lost while renewals succeed");
    assert!(guard.ensure_held().is_ok());
    cluster.servers[0].pause();
    cluster.servers[1].pause();
    let (lost, took) = timed(|| guard.wait_lost(Duration::from_secs(10)));
    cluster.servers[0].resume();
    cluster.servers[1].resume();
    assert!(lost);
    assert!(!guard.is_valid());
    // The validity left at the cut is at most the TTL.
    assert!(took <= ttl + Duration::from_millis(500), "{took:?}");
    drop(guard);

    let key = resource("wait-lost-taken");
    let guard = dlm
        .lock(&key, Duration::from_secs(30))
        .unwrap()
        .keep_alive();
    for server in &cluster.servers {
        let _: () = admin(server).set(&key, "someone-else").unwrap();
    }
    // Found by the first renewal, at TTL/3 = 10 s, not at 30 s.
    let (lost, took) = timed(|| guard.wait_lost(Duration::from_secs(20)));
    assert!(lost);
    assert!(took < Duration::from_secs(15), "{took:?}");
    assert!(matches!(
        guard.ensure_held(),
        Err(Error::NotHeld { renewal: None, .. })
    ));
}

/// Without keep-alive, a guard is lost when its validity ends.
#[test]
fn wait_lost_without_keep_alive_ends_with_the_validity() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let guard = dlm
        .lock(resource("wait-lost-plain"), Duration::from_millis(400))
        .unwrap();
    assert!(!guard.wait_lost(Duration::from_millis(50)));
    let validity = guard.validity();
    let (lost, took) = timed(|| guard.wait_lost(Duration::from_secs(10)));
    assert!(lost);
    assert!(
        took + Duration::from_millis(50) >= validity,
        "{took:?} < {validity:?}"
    );
    assert!(took <= validity + Duration::from_millis(500), "{took:?}");
}
