//! Waiting for a busy lock: waiters are woken by releases (from other
//! managers through the nodes' pub/sub, from their own manager directly),
//! served in arrival order within a manager, and fall back to their timed
//! pause when a message is lost (a holder that expires, a killed node or
//! connection). `try_lock` stays one attempt, `lock` keeps its count.

use crate::support;

use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use redlock_sync::{Error, LockManager};
use support::{
    Nodes, Server, admin, assert_woken, calls, release_subscribers, resource, until_listening,
    until_queued, wait_for,
};

const TTL: Duration = Duration::from_secs(10);

fn manager(cluster: &Nodes, retry: u32, delay: Duration) -> LockManager {
    LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .retry(retry, delay)
        .build()
        .unwrap()
}

/// A waiter in another manager with a 60 s retry delay is woken by the
/// release: it acquires within a fraction of a second, not after its
/// pause. With a pause drawn from 0-60 s, acquiring within 1 s of the
/// release by chance is unlikely (and a failed wake shows as seconds).
#[test]
fn a_release_wakes_a_waiter_of_another_manager() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("woken");
    let holder = manager(&cluster, 1, Duration::ZERO);
    let waiter = manager(&cluster, 1, Duration::from_secs(60));
    let guard = holder.lock(&r, TTL).unwrap();
    let got = assert_woken(
        || waiter.try_lock_for(&r, TTL, Duration::from_secs(120)),
        || until_listening(&cluster, &r),
        || guard.release().unwrap(),
    );
    assert!(got.is_ok(), "{got:?}");
}

/// Threads of one manager are woken by the manager's own release, even
/// with no pub/sub at all (wakes are local, then).
#[test]
fn a_release_wakes_a_waiting_thread_of_the_same_manager() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("woken-same");
    let dlm = manager(&cluster, 1, Duration::from_secs(60));
    // No channel can be heard: each node refuses SUBSCRIBE.
    for s in &cluster.servers {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("default")
            .arg("-subscribe")
            .query(&mut admin(s))
            .unwrap();
    }
    let guard = dlm.lock(&r, TTL).unwrap();
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = dlm.try_lock_for(&r, TTL, Duration::from_secs(120));
            (got.is_ok(), Instant::now())
        });
        until_queued(&cluster, &r, 1);
        let released = Instant::now();
        guard.release().unwrap();
        let (got, at) = waiting.join().unwrap();
        let after = at.duration_since(released);
        eprintln!("acquired {after:?} after the release");
        assert!(got);
        assert!(after < Duration::from_secs(1), "{after:?}");
    });
}

/// A holder that dies publishes nothing: its key expires and the waiter
/// gets in within its pause.
#[test]
fn an_expired_holder_lets_waiters_in_within_their_pause() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("expired");
    // A crashed holder: its keys, with 300 ms left, and nothing else.
    for s in &cluster.servers {
        let _: () = redis::cmd("SET")
            .arg(&r)
            .arg("dead-holder")
            .arg("PX")
            .arg(300)
            .query(&mut admin(s))
            .unwrap();
    }
    let waiter = manager(&cluster, 1, Duration::from_millis(200));
    let start = Instant::now();
    let guard = waiter
        .try_lock_for(&r, TTL, Duration::from_secs(20))
        .unwrap();
    let took = start.elapsed();
    eprintln!("acquired after {took:?}");
    assert!(took >= Duration::from_millis(250), "{took:?}");
    // 300 ms TTL + one 200 ms pause, with room for a loaded machine.
    assert!(took < Duration::from_secs(3), "{took:?}");
    drop(guard);
}

/// Killing the node whose listener a waiter relies on, or only that
/// connection, does not stall anyone: the other nodes' messages (or the
/// pause) still wake it, and the listener reconnects once the node is
/// back.
#[test]
fn killing_a_listening_node_or_connection_mid_wait_does_not_stall() {
    let mut cluster = Nodes::start(3).unwrap();
    let r = resource("killed");
    let holder = manager(&cluster, 1, Duration::ZERO);
    let waiter = manager(&cluster, 1, Duration::from_secs(60));

    // The connection: clients of type pubsub are killed on node 0.
    let guard = holder.lock(&r, TTL).unwrap();
    thread::scope(|s| {
        let waiting = s.spawn(|| waiter.try_lock_for(&r, TTL, Duration::from_secs(120)));
        until_listening(&cluster, &r);
        until_queued(&cluster, &r, 1);
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query(&mut admin(&cluster.servers[0]))
            .unwrap();
        let released = Instant::now();
        guard.release().unwrap();
        let got = waiting.join().unwrap();
        assert!(got.is_ok(), "{got:?}");
        let after = released.elapsed();
        assert!(after < Duration::from_secs(2), "{after:?}");
    });

    // The node: killed mid-wait, the release runs on the other two.
    let guard = holder.lock(&r, TTL).unwrap();
    thread::scope(|s| {
        let waiting = s.spawn(|| waiter.try_lock_for(&r, TTL, Duration::from_secs(120)));
        until_listening(&cluster, &r);
        until_queued(&cluster, &r, 1);
        cluster.servers[0].kill();
        let released = Instant::now();
        guard.release().unwrap();
        let got = waiting.join().unwrap();
        assert!(got.is_ok(), "{got:?}");
        let after = released.elapsed();
        assert!(after < Duration::from_secs(2), "{after:?}");
    });

    // Back: a new wait subscribes there again.
    cluster.servers[0].start_again().unwrap();
    let guard = holder.lock(&r, TTL).unwrap();
    thread::scope(|s| {
        let waiting = s.spawn(|| waiter.try_lock_for(&r, TTL, Duration::from_secs(120)));
        until_listening(&cluster, &r);
        guard.release().unwrap();
        assert!(waiting.join().unwrap().is_ok());
    });
}

/// Threads of one manager get the lock in the order they asked for it,
/// and a thread that releases and asks again at once queues behind them.
#[test]
fn threads_of_one_manager_are_served_in_arrival_order() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("fifo");
    let dlm = manager(&cluster, 1, Duration::from_secs(60));
    let order = Mutex::new(Vec::new());
    let guard = dlm.lock(&r, TTL).unwrap();
    thread::scope(|s| {
        let mut waiters = Vec::new();
        for i in 1..=5 {
            let (dlm, r, order) = (&dlm, &r, &order);
            waiters.push(s.spawn(move || {
                let g = dlm.try_lock_for(r, TTL, Duration::from_secs(120)).unwrap();
                order.lock().unwrap().push(i);
                thread::sleep(Duration::from_millis(20));
                drop(g);
            }));
            // Each thread is queued in the manager before the next asks
            // (a queue of the manager's own, which the servers do not
            // show: no event to wait for, a generous pause instead).
            thread::sleep(Duration::from_millis(300));
        }
        // The holder releases and asks again at once: it comes last.
        drop(guard);
        let again = dlm.try_lock_for(&r, TTL, Duration::from_secs(120)).unwrap();
        order.lock().unwrap().push(0);
        drop(again);
        for w in waiters {
            w.join().unwrap();
        }
    });
    assert_eq!(*order.lock().unwrap(), [1, 2, 3, 4, 5, 0]);
}

/// However many threads (and clones of the manager) wait, each node sees
/// one subscriber for the resource; and none once nobody waits.
#[test]
fn one_subscriber_per_manager_for_a_resource() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("numsub");
    let holder = manager(&cluster, 1, Duration::ZERO);
    let dlm = manager(&cluster, 1, Duration::from_millis(200));
    let guard = holder.lock(&r, TTL).unwrap();
    thread::scope(|s| {
        let waiting: Vec<_> = (0..8)
            .map(|_| {
                // Clones share the manager's waiters and listeners.
                let (dlm, r) = (dlm.clone(), &r);
                s.spawn(move || {
                    dlm.try_lock_for(r, Duration::from_secs(1), Duration::from_secs(60))
                        .unwrap()
                        .release()
                        .unwrap();
                })
            })
            .collect();
        until_listening(&cluster, &r);
        for _ in 0..10 {
            for server in &cluster.servers {
                assert_eq!(release_subscribers(server, &r), 1);
            }
            thread::sleep(Duration::from_millis(50));
        }
        guard.release().unwrap();
        for w in waiting {
            w.join().unwrap();
        }
    });
    // Nobody waits: the subscriptions and connections go (after a linger
    // of about a second).
    let gone = wait_for(Duration::from_secs(10), || {
        cluster
            .servers
            .iter()
            .all(|s| release_subscribers(s, &r) == 0)
    });
    assert!(gone.is_some(), "still subscribed long after the last wait");
}

/// An uncontended lock opens no listening connection and subscribes to
/// nothing; `try_lock` never does, even on a busy lock.
#[test]
fn nothing_listens_unless_a_thread_waits() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("quiet");
    let dlm = manager(&cluster, 3, Duration::from_millis(200));
    for _ in 0..50 {
        dlm.lock(&r, TTL).unwrap().release().unwrap();
    }
    let held = dlm.lock(&r, TTL).unwrap();
    for _ in 0..5 {
        assert!(matches!(dlm.try_lock(&r, TTL), Err(Error::Taken { .. })));
    }
    for server in &cluster.servers {
        let channels: Vec<Vec<u8>> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .query(&mut admin(server))
            .unwrap();
        assert!(channels.is_empty());
        // One pooled connection, plus this test's admin connections.
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .arg("TYPE")
            .arg("pubsub")
            .query(&mut admin(server))
            .unwrap();
        assert_eq!(clients.trim(), "");
    }
    drop(held);
}

fn sets(server: &Server) -> u64 {
    calls(server, "set")
}

/// `lock` waits its retry budget and makes its count of attempts (one
/// more if subscribing woke it); `try_lock_for` ends at its deadline.
#[test]
fn lock_keeps_its_budget_and_try_lock_for_its_deadline() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("attempts");
    let holder = manager(&cluster, 1, Duration::ZERO);
    // Counted by its `SET NX` attempts: a fair waiter's attempts after
    // the first are claims (scripts), so this one races.
    let dlm = LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .retry(4, Duration::from_millis(100))
        .fencing(false)
        .fair(false)
        .build()
        .unwrap();
    let _held = holder.lock(&r, TTL).unwrap();
    let before = sets(&cluster.servers[0]);
    let start = Instant::now();
    assert!(matches!(dlm.lock(&r, TTL), Err(Error::Taken { .. })));
    let took = start.elapsed();
    // 3 pauses of 50-100 ms, and the attempts: 4, or 5 when subscribing
    // woke it to ask once more (a release may have come before).
    let attempts = sets(&cluster.servers[0]) - before;
    assert!((4..=5).contains(&attempts), "{attempts} attempts");
    assert!(took >= Duration::from_millis(150), "{took:?}");
    assert!(took < Duration::from_millis(2000), "{took:?}");

    let before = sets(&cluster.servers[0]);
    assert!(matches!(dlm.try_lock(&r, TTL), Err(Error::Taken { .. })));
    assert_eq!(sets(&cluster.servers[0]) - before, 1);

    let start = Instant::now();
    let got = dlm.try_lock_for(&r, TTL, Duration::from_millis(700));
    let took = start.elapsed();
    assert!(matches!(got, Err(Error::Taken { .. })), "{got:?}");
    assert!(took >= Duration::from_millis(700), "{took:?}");
    assert!(took < Duration::from_millis(700 + 1500), "{took:?}");
}

/// With waking off, nothing is published or subscribed and waiters poll.
#[test]
fn wake_on_release_off_publishes_and_subscribes_nothing() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("silent");
    let dlm = LockManager::builder()
        .nodes(cluster.urls())
        .retry(1, Duration::from_millis(20))
        .wake_on_release(false)
        .build()
        .unwrap();
    let guard = dlm.lock(&r, TTL).unwrap();
    thread::scope(|s| {
        let waiting = s.spawn(|| dlm.try_lock_for(&r, TTL, Duration::from_secs(30)));
        // Waiting (queued), yet subscribed nowhere.
        until_queued(&cluster, &r, 1);
        for server in &cluster.servers {
            assert_eq!(release_subscribers(server, &r), 0);
        }
        drop(guard);
        assert!(waiting.join().unwrap().is_ok());
    });
    for server in &cluster.servers {
        assert_eq!(calls(server, "publish"), 0);
    }
}

/// Eight threads of one manager on one lock all get it, in turn (the
/// exclusion checker in `exclusion.rs` checks that they never overlap).
#[test]
fn eight_threads_of_one_manager_all_win_in_turn() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("eight");
    let dlm = manager(&cluster, 1, Duration::from_millis(200));
    let end = Instant::now() + Duration::from_secs(2);
    let wins: Vec<usize> = thread::scope(|s| {
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (dlm, r) = (&dlm, &r);
                s.spawn(move || {
                    let mut wins = 0;
                    while Instant::now() < end {
                        let g = dlm
                            .try_lock_for(r, Duration::from_secs(5), Duration::from_secs(30))
                            .unwrap();
                        wins += 1;
                        thread::sleep(Duration::from_millis(1));
                        drop(g);
                    }
                    wins
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    eprintln!("wins per thread: {wins:?}");
    let (min, max) = (*wins.iter().min().unwrap(), *wins.iter().max().unwrap());
    assert!(min >= 1);
    // Served in turn: no thread gets several times another's share (the
    // bench measures the real spread).
    assert!(max <= 3 * min + 3, "{wins:?}");
}

/// A `Cancel` switch stops a thread waiting for a busy lock: it returns
/// `Cancelled` within a moment, holds nothing, and a waiting writer's
/// flag is taken down. With waking off (sleeping pauses) too.
#[test]
fn a_cancel_switch_stops_waiting_promptly_and_leaves_nothing() {
    let cluster = Nodes::start(3).unwrap();
    let holder = support::manager(&cluster, Duration::from_millis(500));
    for wake in [true, false] {
        let r = resource(&format!("cancel-{wake}"));
        let held = holder.lock(&r, Duration::from_secs(60)).unwrap();
        let cancel = redlock_sync::Cancel::new();
        let waiter = redlock_sync::LockManager::builder()
            .nodes(cluster.urls())
            .node_timeout(Duration::from_millis(500))
            .retry(3, Duration::from_secs(10))
            .wake_on_release(wake)
            .build()
            .unwrap()
            .cancel_on(&cancel);
        let waiting = {
            let (waiter, r) = (waiter.clone(), r.clone());
            thread::spawn(move || {
                waiter.try_lock_for(&r, Duration::from_secs(60), Duration::from_secs(120))
            })
        };
        until_queued(&cluster, &r, 1);
        let thrown = Instant::now();
        cancel.cancel();
        let result = waiting.join().unwrap();
        let took = thrown.elapsed();
        match result {
            Err(e) => {
                assert!(e.is_cancelled() && !e.is_retryable(), "{e:?}");
                assert!(e.to_string().contains("cancelled"), "{e}");
            }
            Ok(_) => panic!("took a held lock"),
        }
        // The docs: at once when pausing (about 20 ms while queued), or
        // after the round under way (milliseconds on healthy nodes); 500
        // ms of slack for this machine, far below the waiter's 5 to 10 s
        // pause.
        assert!(took < Duration::from_millis(500), "wake {wake}: {took:?}");
        // The switch stays thrown: a later wait stops after one attempt.
        let (again, took) = support::timed(|| {
            waiter.try_lock_for(&r, Duration::from_secs(60), Duration::from_secs(60))
        });
        assert!(again.is_err_and(|e| e.is_cancelled()));
        assert!(took < Duration::from_millis(500), "{took:?}");
        held.release().unwrap();
    }
    // A writer waiting behind a reader sets its flag; cancelled, it
    // takes the flag down.
    let r = resource("cancel-writer");
    let reader = holder
        .rwlock(&r)
        .unwrap()
        .read(Duration::from_secs(60))
        .unwrap();
    let cancel = redlock_sync::Cancel::new();
    let writer = holder.cancel_on(&cancel);
    let waiting = {
        let (writer, r) = (writer.clone(), r.clone());
        thread::spawn(move || {
            writer.try_lock_for(&r, Duration::from_secs(60), Duration::from_secs(120))
        })
    };
    // The flag is `r:redlock-writer` with a hash tag after it.
    let pattern = format!("{r}:redlock-writer*");
    let flagged = || {
        cluster
            .servers
            .iter()
            .filter(|s| {
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(&pattern)
                    .query(&mut support::admin(s))
                    .unwrap();
                !keys.is_empty()
            })
            .count()
    };
    assert!(
        support::wait_for(Duration::from_secs(20), || flagged() >= 2).is_some(),
        "no flag set"
    );
    cancel.cancel();
    assert!(waiting.join().unwrap().is_err_and(|e| e.is_cancelled()));
    assert_eq!(flagged(), 0, "the writer's flag was left behind");
    reader.release().unwrap();
}

/// Issue 44: the cancel switch stops every shape's wait, not only a
/// lock's: a set, a permit, a reader, a campaign, each waiting behind a
/// holder with 5 to 10 s pauses, returns `is_cancelled` within 500 ms of
/// the switch, and leaves no place in a queue behind.
#[test]
fn a_cancel_switch_stops_the_wait_of_every_shape() {
    let cluster = Nodes::start(3).unwrap();
    let holder = manager(&cluster, 1, Duration::ZERO);
    let ttl = Duration::from_secs(60);
    let wait = Duration::from_secs(120);
    let r = resource("cancel-shapes");
    let e = resource("cancel-shapes-election");
    let _lock = holder.lock(&r, ttl).unwrap();
    let _permit = holder.semaphore(&r, 1).unwrap().acquire(ttl).unwrap();
    let rw = resource("cancel-shapes-rw");
    let _writer = holder.rwlock(&rw).unwrap().write(ttl).unwrap();
    let _leader = holder.election(&e).unwrap().campaign(ttl).unwrap();
    type Wait = fn(&LockManager, &str, &str, &str, Duration, Duration) -> redlock_sync::Result<()>;
    let shapes: [(&str, Wait); 4] = [
        ("a set", |dlm, r, _, _, ttl, wait| {
            dlm.try_lock_all_for([r, "cancel-shapes-other"], ttl, wait)
                .map(drop)
        }),
        ("a permit", |dlm, r, _, _, ttl, wait| {
            dlm.semaphore(r, 1)?.try_acquire_for(ttl, wait).map(drop)
        }),
        ("a reader", |dlm, _, rw, _, ttl, wait| {
            dlm.rwlock(rw)?.try_read_for(ttl, wait).map(drop)
        }),
        ("a campaign", |dlm, _, _, e, ttl, wait| {
            dlm.election(e)?.try_campaign_for(ttl, wait).map(drop)
        }),
    ];
    for (what, shape) in shapes {
        let cancel = redlock_sync::Cancel::new();
        let waiter = manager(&cluster, 3, Duration::from_secs(10)).cancel_on(&cancel);
        let (r, rw, e) = (r.clone(), rw.clone(), e.clone());
        let waiting = thread::spawn(move || shape(&waiter, &r, &rw, &e, ttl, wait));
        // Its first attempt refused (no event every shape shows: a
        // pause far longer than an attempt, far shorter than its 5 s).
        thread::sleep(Duration::from_millis(300));
        let thrown = Instant::now();
        cancel.cancel();
        let result = waiting.join().unwrap();
        let took = thrown.elapsed();
        assert!(
            result.as_ref().is_err_and(|e| e.is_cancelled()),
            "{what}: {result:?}"
        );
        assert!(took < Duration::from_millis(500), "{what}: {took:?}");
    }
    // No place left in any queue.
    for name in [&r, &e] {
        assert!(
            support::queued(&cluster, name).iter().all(|q| *q == 0),
            "{name}: {:?}",
            support::queued(&cluster, name)
        );
    }
}
