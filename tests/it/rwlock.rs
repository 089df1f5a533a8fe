//! Read-write locks over several nodes: readers share, a writer excludes
//! readers and writers (and is the ordinary lock on the name), a writer
//! behind a stream of readers gets in, a crashed reader expires, releases
//! wake waiters, and nothing is left without an expiry.

use crate::support;
use support::occupancy::Occupancy;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlock_sync::{Error, LockManager};
use support::{Nodes, Server, admin, calls, resource};

const TTL: Duration = Duration::from_secs(10);

fn manager(cluster: &Nodes) -> LockManager {
    support::manager(cluster, Duration::from_millis(500))
}

/// Every key on `server` whose name starts with `prefix`, with its PTTL,
/// but the fencing counter (kept for the fencing expiry, with its TTL).
fn keys_with_ttl(server: &Server, prefix: &str) -> Vec<(String, i64)> {
    let fence = String::from_utf8(redlock_sync::fence_key(prefix)).unwrap();
    all_keys_with_ttl(server, prefix)
        .into_iter()
        .filter(|(k, _)| *k != fence)
        .collect()
}

/// Every key on `server` whose name starts with `prefix`, with its PTTL.
fn all_keys_with_ttl(server: &Server, prefix: &str) -> Vec<(String, i64)> {
    let mut con = admin(server);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(&mut con)
        .unwrap();
    keys.into_iter()
        .map(|k| {
            let ttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut con).unwrap();
            (k, ttl)
        })
        .collect()
}

#[test]
fn readers_share_and_a_writer_excludes_readers_and_writers() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let name = resource("rw:share");
    let rw = dlm.rwlock(&name).unwrap();
    let r1 = rw.try_read(TTL).unwrap();
    let r2 = rw.try_read(TTL).unwrap();
    assert!(r1.is_shared() && r2.is_shared());
    // A read guard has no fencing token (readers do not write): it is a
    // `ReadGuard`, which has no such method.
    let _: &redlock_sync::ReadGuard = &r1;
    // The write side and the plain lock on the name are refused.
    assert!(matches!(rw.try_write(TTL), Err(Error::Taken { .. })));
    assert!(matches!(dlm.try_lock(&name, TTL), Err(Error::Taken { .. })));
    assert!(matches!(
        dlm.try_lock_all([&name], TTL),
        Err(Error::Taken { .. })
    ));
    r1.release().unwrap();
    assert!(matches!(rw.try_write(TTL), Err(Error::Taken { .. })));
    r2.release().unwrap();
    // The last reader out freed the key.
    for server in &cluster.servers {
        assert_eq!(support::get(server, name.as_bytes()), None);
    }
    let w = rw.try_write(TTL).unwrap();
    assert!(!w.is_shared());
    assert!(w.fencing_token().is_some());
    assert!(matches!(rw.try_read(TTL), Err(Error::Taken { .. })));
    assert!(matches!(rw.try_write(TTL), Err(Error::Taken { .. })));
    drop(w);
    // A plain lock on the name is the write side.
    let plain = dlm.try_lock(&name, TTL).unwrap();
    assert!(matches!(rw.try_read(TTL), Err(Error::Taken { .. })));
    drop(plain);
    let r = rw.try_read(TTL).unwrap();
    drop(r);
    for server in &cluster.servers {
        assert!(keys_with_ttl(server, &name).is_empty());
    }
}

#[test]
fn readers_and_writers_never_overlap_under_contention() {
    never_overlap(false);
}

#[test]
fn readers_and_writers_never_overlap_when_a_node_dies_midway() {
    never_overlap(true);
}

/// Six threads, two writing and four reading, six rounds each; with
/// `kill`, one of the three nodes is killed while they run.
fn never_overlap(kill: bool) {
    let mut cluster = Nodes::start(3).unwrap();
    let name = resource("rw:contend");
    let inside = Arc::new(Occupancy::read_write());
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let mut dlm = manager(&cluster);
            dlm.set_retry(2000, Duration::from_millis(20)).unwrap();
            let (name, inside) = (name.clone(), inside.clone());
            // A holder that took its lock on 2 nodes, one of them the
            // killed one, cannot release on a majority: NoQuorum then.
            let released = move |r: redlock_sync::Result<()>| match r {
                Err(Error::NoQuorum { .. }) if kill => {}
                r => r.unwrap(),
            };
            thread::spawn(move || {
                let rw = dlm.rwlock(&name).unwrap();
                for _ in 0..6 {
                    if t % 3 == 0 {
                        let g = rw.write(Duration::from_secs(5)).unwrap();
                        let writer = inside.enter_writer();
                        thread::sleep(Duration::from_millis(5));
                        drop(writer);
                        released(g.release());
                    } else {
                        let g = rw.read(Duration::from_secs(5)).unwrap();
                        let reader = inside.enter();
                        thread::sleep(Duration::from_millis(20));
                        drop(reader);
                        released(g.release());
                    }
                }
            })
        })
        .collect();
    if kill {
        thread::sleep(Duration::from_millis(150));
        cluster.servers[0].kill();
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        inside.violations(),
        0,
        "a writer beside a reader or a writer"
    );
    assert!(inside.most() >= 2, "readers never shared");
}

#[test]
fn a_writer_behind_a_stream_of_overlapping_readers_gets_in() {
    let cluster = Nodes::start(3).unwrap();
    let name = resource("rw:stream");
    let hold = Duration::from_millis(200);
    let stop = Arc::new(AtomicBool::new(false));
    // Four readers, staggered, each re-reading at once: the lock is never
    // free of readers unless new readers hold back.
    let readers: Vec<_> = (0..4)
        .map(|i| {
            let mut dlm = manager(&cluster);
            dlm.set_retry(1000, Duration::from_millis(50)).unwrap();
            let (name, stop) = (name.clone(), stop.clone());
            thread::spawn(move || {
                thread::sleep(hold / 4 * i);
                let rw = dlm.rwlock(&name).unwrap();
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(g) = rw.try_read_for(Duration::from_secs(5), Duration::from_secs(30))
                    {
                        thread::sleep(hold);
                        drop(g);
                    }
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_secs(1));
    let mut dlm = manager(&cluster);
    dlm.set_retry(1000, Duration::from_millis(50)).unwrap();
    let start = Instant::now();
    let got = dlm
        .rwlock(&name)
        .unwrap()
        .try_write_for(TTL, Duration::from_secs(20));
    let waited = start.elapsed();
    eprintln!("the writer waited {waited:?}");
    stop.store(true, Ordering::SeqCst);
    let w = got.unwrap_or_else(|e| panic!("writer starved for {waited:?}: {e}"));
    drop(w);
    for r in readers {
        r.join().unwrap();
    }
    // A few reader hold times (200 ms each), with room for a slow machine.
    assert!(waited < Duration::from_secs(5), "writer waited {waited:?}");
}

#[test]
fn a_crashed_reader_holds_writers_off_only_until_its_ttl() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let name = resource("rw:crash");
    let rw = dlm.rwlock(&name).unwrap();
    // A second reader with a long TTL that leaves: the crashed one's
    // short TTL is what the key keeps.
    let crashed = rw.try_read(Duration::from_secs(2)).unwrap();
    let other = rw.try_read(Duration::from_secs(60)).unwrap();
    std::mem::forget(crashed);
    other.release().unwrap();
    assert!(matches!(rw.try_write(TTL), Err(Error::Taken { .. })));
    for server in &cluster.servers {
        let left = support::pttl(server, name.as_bytes());
        assert!(left > 0 && left <= 2_000, "key expiry {left} ms");
    }
    let start = Instant::now();
    let w = rw
        .try_write_for(TTL, Duration::from_secs(10))
        .expect("the crashed reader expired");
    assert!(start.elapsed() < Duration::from_secs(8));
    drop(w);
}

#[test]
fn the_last_readers_release_wakes_a_waiting_writer_and_its_release_wakes_readers() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let name = resource("rw:wake");
    let mut waiter = manager(&cluster);
    // One pause of a minute: in within a second means woken.
    waiter.set_retry(2, Duration::from_secs(60)).unwrap();
    let rw = waiter.rwlock(&name).unwrap();
    let (r1, r2) = (
        dlm.rwlock(&name).unwrap().try_read(TTL).unwrap(),
        dlm.rwlock(&name).unwrap().try_read(TTL).unwrap(),
    );
    let writer = support::assert_woken(
        || rw.write(TTL),
        || {
            support::until_listening(&cluster, &name);
            // Not the last reader: the writer keeps waiting.
            r1.release().unwrap();
        },
        || r2.release().unwrap(),
    );
    let writer = writer.unwrap();
    assert!(!writer.is_shared());
    let reader = support::assert_woken(
        || rw.read(TTL),
        || support::until_listening(&cluster, &name),
        || {
            // The writer's guard is the waiter's own manager's: its
            // release wakes the reader directly; a plain lock of another
            // manager wakes it through the servers.
            drop(writer);
        },
    );
    assert!(reader.unwrap().is_shared());
    let plain = dlm.try_lock(&name, TTL).unwrap();
    let reader = support::assert_woken(
        || rw.read(TTL),
        || support::until_listening(&cluster, &name),
        || plain.release().unwrap(),
    );
    assert!(reader.unwrap().is_shared());
}

#[test]
fn read_locks_extend_and_leave_nothing_without_an_expiry() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let name = resource("rw:extend");
    let rw = dlm.rwlock(&name).unwrap();
    let mut r = rw.try_read(Duration::from_secs(2)).unwrap();
    r.extend(Duration::from_secs(30)).unwrap();
    assert!(r.validity() > Duration::from_secs(20));
    for server in &cluster.servers {
        let keys = keys_with_ttl(server, &name);
        assert!(!keys.is_empty());
        for (k, ttl) in keys {
            assert!(ttl > 20_000, "{k}: {ttl}");
        }
    }
    // A waiting writer's flag expires too.
    let mut writer = manager(&cluster);
    writer.set_retry(3, Duration::from_millis(100)).unwrap();
    assert!(matches!(
        writer.rwlock(&name).unwrap().write(TTL),
        Err(Error::Taken { .. })
    ));
    for server in &cluster.servers {
        let keys = all_keys_with_ttl(server, &name);
        assert!(keys.len() >= 3, "{keys:?}");
        for (k, ttl) in keys {
            assert!(ttl > 0, "{k} has no expiry ({ttl})");
        }
    }
    drop(r);
    for server in &cluster.servers {
        assert!(keys_with_ttl(server, &name).is_empty());
    }
}

#[test]
fn new_readers_wait_behind_a_writer_only_while_it_waits() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster);
    let name = resource("rw:flag");
    let rw = dlm.rwlock(&name).unwrap();
    let reader = rw.try_read(TTL).unwrap();
    let mut writer = manager(&cluster);
    writer.set_retry(1000, Duration::from_millis(100)).unwrap();
    let flag_left = thread::scope(|s| {
        let waiting = s.spawn(|| {
            writer
                .rwlock(&name)
                .unwrap()
                .try_write_for(TTL, Duration::from_secs(2))
        });
        thread::sleep(Duration::from_millis(700));
        // The writer waits: a new reader queues behind it.
        assert!(matches!(rw.try_read(TTL), Err(Error::Taken { .. })));
        // It gives up (the reader still holds), and takes its flag down.
        assert!(matches!(waiting.join().unwrap(), Err(Error::Taken { .. })));
        cluster
            .servers
            .iter()
            .map(|s| keys_with_ttl(s, &name).len())
            .collect::<Vec<_>>()
    });
    // The key and the readers' set: no flag.
    assert_eq!(flag_left, [2, 2, 2]);
    // Readers get in again at once.
    let again = rw.try_read(TTL).unwrap();
    drop(again);
    // A writer that gets in takes its flag down too: once it is done,
    // readers get in at once, not when the flag would have expired.
    let w = thread::scope(|s| {
        let waiting = s.spawn(|| {
            writer
                .rwlock(&name)
                .unwrap()
                .try_write_for(TTL, Duration::from_secs(20))
        });
        thread::sleep(Duration::from_millis(500));
        assert!(matches!(rw.try_read(TTL), Err(Error::Taken { .. })));
        drop(reader);
        waiting.join().unwrap().unwrap()
    });
    w.release().unwrap();
    drop(rw.try_read(TTL).unwrap());
}

#[test]
fn a_read_write_lock_name_is_checked_as_a_resource_is() {
    let cluster = Nodes::start(1).unwrap();
    let dlm = manager(&cluster);
    for bad in [&b""[..], b"orders:redlock-fence", b"orders:redlock-readers"] {
        match dlm.rwlock(bad) {
            Err(Error::InvalidArgument { .. }) => {}
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bad)),
        }
    }
    assert!(dlm.rwlock("orders").is_ok());
}

/// The scripts `cluster`'s servers have run (`EVALSHA` and `EVAL`).
fn scripts_run(cluster: &Nodes) -> u64 {
    cluster
        .servers
        .iter()
        .map(|s| calls(s, "evalsha") + calls(s, "eval"))
        .sum()
}

/// A plain lock refused by another plain lock sends nothing for
/// read-write locks while it waits (its refusal, `SET NX GET`, says who
/// holds the key); refused by readers, it asks them to queue behind it.
/// A server without `NX GET` (before Redis 7.0) cannot say, so there the
/// waiting lock asks at every pause, as it always did.
#[test]
fn a_waiting_plain_lock_pays_for_readers_only_where_readers_hold_it() {
    let cluster = Nodes::start(3).unwrap();
    // Counted by the scripts the servers ran: a fair waiter runs its
    // queue's (join, claims, leave), so this one races.
    // Fencing off: each fenced attempt runs the count script too.
    let mut dlm = LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::ZERO)
        .fair(false)
        .fencing(false)
        .build()
        .unwrap();
    dlm.set_retry(4, Duration::from_millis(40)).unwrap();
    let holder = manager(&cluster);
    let name = resource("rw:plain-pays");

    let held = holder.lock(&name, TTL).unwrap();
    let before = scripts_run(&cluster);
    assert!(matches!(dlm.lock(&name, TTL), Err(Error::Taken { .. })));
    let ran = scripts_run(&cluster) - before;
    if support::server::server_at_least(7, 0) {
        assert_eq!(ran, 0, "a lock refused by a lock ran {ran} scripts");
    } else {
        assert!(ran > 0, "without NX GET every pause asks readers to queue");
    }
    drop(held);

    let reader = holder.rwlock(&name).unwrap().read(TTL).unwrap();
    let before = scripts_run(&cluster);
    assert!(matches!(dlm.lock(&name, TTL), Err(Error::Taken { .. })));
    // One writer-waits script per member and pause (3 pauses), and the
    // flag taken down at the end.
    let ran = scripts_run(&cluster) - before;
    assert!(
        ran >= 3 * 3,
        "a lock waiting behind readers ran {ran} scripts"
    );
    drop(reader);
}

/// A writer whose manager pauses up to `Duration::MAX` between attempts
/// (before: an overflow panic when it found readers and set its flag)
/// waits out its deadline and says the lock is taken.
#[test]
fn a_writer_with_the_longest_pauses_finds_readers_without_a_panic() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("rw-max-delay");
    let reader = support::manager(&cluster, Duration::from_millis(500))
        .rwlock(&r)
        .unwrap()
        .read(Duration::from_secs(30))
        .unwrap();
    let writer = LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .retry(3, Duration::MAX)
        .build()
        .unwrap();
    let (result, took) = support::timed(|| {
        writer
            .rwlock(&r)
            .unwrap()
            .try_write_for(Duration::from_secs(5), Duration::from_millis(500))
    });
    assert!(matches!(result, Err(Error::Taken { .. })), "{result:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    reader.release().unwrap();
}
