//! What `lock` promises a waiting caller: `set_retry(count, max_delay)`
//! buys `count - 1` pauses of waiting, whatever wakes the thread early,
//! and an attempt that fails wakes nobody unless it freed something (and
//! never its own thread).

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlock_sync::{Error, LockManager};
use support::{Nodes, resource, timed};

const TTL: Duration = Duration::from_secs(10);

/// The quickstart's shape, which gave up in 4 of 5 runs: one manager,
/// 4 threads taking turns on 30 ms sections, `retry(50, 20ms)`. Each
/// thread waits behind at most 3 sections (90 ms), far less than its
/// 49 pauses of 10-20 ms: nobody ever gives up.
#[test]
fn threads_of_one_manager_taking_turns_never_give_up() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("turns");
    let mut dlm = LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    dlm.set_retry(50, Duration::from_millis(20)).unwrap();
    let sections = AtomicU32::new(0);
    thread::scope(|s| {
        for worker in 0..4 {
            let (dlm, r, sections) = (&dlm, &r, &sections);
            s.spawn(move || {
                for round in 0..5 {
                    let start = Instant::now();
                    match dlm.lock(r, TTL) {
                        Ok(_guard) => {
                            sections.fetch_add(1, Ordering::SeqCst);
                            thread::sleep(Duration::from_millis(30));
                        }
                        Err(e) => panic!(
                            "worker {worker} round {round} gave up after {:?}: {e}",
                            start.elapsed()
                        ),
                    }
                }
            });
        }
    });
    assert_eq!(sections.load(Ordering::SeqCst), 20);
}

/// One manager per thread, as separate processes have, with the default
/// settings (3 attempts, 200 ms) and 1 ms sections: every `lock` wins
/// (it gave up with `Taken` in 5 of 5 runs when a failed attempt woke its
/// own thread and burnt the attempts back to back).
#[test]
fn one_manager_per_thread_with_default_settings_all_win() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("managers");
    let counter = AtomicU32::new(0);
    thread::scope(|s| {
        for worker in 0..4 {
            let (cluster, r, counter) = (&cluster, &r, &counter);
            s.spawn(move || {
                let dlm = LockManager::builder()
                    .nodes(cluster.urls())
                    .node_timeout(Duration::from_millis(500))
                    .build()
                    .unwrap();
                for round in 0..50 {
                    let start = Instant::now();
                    match dlm.lock(r, TTL) {
                        Ok(guard) => {
                            counter.fetch_add(1, Ordering::SeqCst);
                            thread::sleep(Duration::from_millis(1));
                            drop(guard);
                        }
                        Err(e) => panic!(
                            "worker {worker} round {round} gave up after {:?} at count {}: {e}",
                            start.elapsed(),
                            counter.load(Ordering::SeqCst)
                        ),
                    }
                }
            });
        }
    });
    assert_eq!(counter.load(Ordering::SeqCst), 200);
}

/// Every attempt fails (two of three nodes dead): `retry(5, 500ms)` is 4
/// pauses of 250-500 ms, 1 to 2 s in all, not 1 ms. Each failed attempt
/// set the key on the live node and cleaned it up there (a real release,
/// announced), yet that wakes neither the thread nor shortens its pauses.
#[test]
fn every_attempt_failing_takes_the_sum_of_its_pauses() {
    let mut cluster = Nodes::start(3).unwrap();
    cluster.servers[0].kill();
    cluster.servers[1].kill();
    let r = resource("all-fail");
    let mut dlm = LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    dlm.set_retry(5, Duration::from_millis(500)).unwrap();
    let (result, took) = timed(|| dlm.lock(&r, TTL));
    assert!(matches!(result, Err(Error::NoQuorum { .. })), "{result:?}");
    eprintln!("gave up after {took:?}");
    assert!(
        took >= Duration::from_millis(1000),
        "gave up after {took:?}"
    );
    // 2 s of pauses, 5 rounds of at most 100 ms, and a loaded machine.
    assert!(took < Duration::from_millis(4500), "gave up after {took:?}");
    // The clean-ups did delete the key: nothing is left on the live node.
    assert_eq!(support::get(&cluster.servers[2], r.as_bytes()), None);
}

/// A lock held by another owner that is never released: `lock` waits its
/// pauses (4 of 100-200 ms), with the same budget with waking on or off.
#[test]
fn a_lock_never_released_is_given_up_after_the_pauses() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("never-released");
    let holder = support::manager(&cluster, Duration::from_millis(500));
    let _held = holder.lock(&r, TTL).unwrap();
    for wake in [true, false] {
        let dlm = LockManager::builder()
            .nodes(cluster.urls())
            .node_timeout(Duration::from_millis(500))
            .retry(5, Duration::from_millis(200))
            .wake_on_release(wake)
            .build()
            .unwrap();
        let (result, took) = timed(|| dlm.lock(&r, TTL));
        assert!(
            matches!(
                result,
                Err(Error::Taken {
                    held_here: false,
                    ..
                })
            ),
            "{result:?}"
        );
        assert!(
            took >= Duration::from_millis(400),
            "waking {wake}: {took:?}"
        );
        assert!(
            took < Duration::from_millis(3000),
            "waking {wake}: {took:?}"
        );
    }
}

/// A waiter woken by a release and then beaten to the lock keeps waiting:
/// release announcements every 20 ms (another owner holds the lock all
/// along) wake it over and over, and it still waits its whole budget (2
/// pauses of 250-500 ms) before giving up, instead of giving up after
/// `count` wake-ups.
#[test]
fn wake_ups_that_lose_the_race_do_not_shorten_the_wait() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("beaten");
    let waiter = LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .retry(3, Duration::from_millis(500))
        .build()
        .unwrap();
    let holder = support::manager(&cluster, Duration::from_millis(500));
    let _held = holder.lock(&r, TTL).unwrap();
    let channel = redlock_sync::release_channel(&r);
    let stop = std::sync::atomic::AtomicBool::new(false);
    thread::scope(|s| {
        let announcer = s.spawn(|| {
            let mut admins: Vec<_> = cluster.servers.iter().map(support::admin).collect();
            let mut n = 0u32;
            let mut heard = 0i64;
            while !stop.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(20));
                n += 1;
                for a in &mut admins {
                    let message = format!("someone-else:{n}");
                    let receivers: i64 = redis::cmd("PUBLISH")
                        .arg(&channel)
                        .arg(message)
                        .query(a)
                        .unwrap();
                    heard += receivers;
                }
            }
            heard
        });
        let (result, took) = timed(|| waiter.lock(&r, TTL));
        stop.store(true, Ordering::SeqCst);
        let heard = announcer.join().unwrap();
        assert!(matches!(result, Err(Error::Taken { .. })), "{result:?}");
        eprintln!("gave up after {took:?}; {heard} announcements were delivered meanwhile");
        assert!(heard >= 10, "the waiter heard only {heard} announcements");
        assert!(took >= Duration::from_millis(500), "gave up after {took:?}");
        assert!(took < Duration::from_millis(4000), "gave up after {took:?}");
    });
}
