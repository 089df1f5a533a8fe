//! Locking on a healthy cluster: what is stored on the nodes, taken vs
//! free, release, extend, retries, connection reuse, URL forms.

use crate::support;

use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redlock_sync::{Error, LockGuard, LockManager, Wait};
use support::{Nodes, Server, admin, calls, get, manager, pttl, resource};

const SLOW_OK: Duration = Duration::from_millis(500);

#[test]
fn lock_sets_the_token_with_the_ttl_on_every_node_and_drop_deletes_it() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, SLOW_OK);
    let key = resource("set-and-drop");
    let ttl = Duration::from_secs(10);
    let guard = dlm.lock(&key, ttl).unwrap();
    assert_eq!(guard.resource(), key.as_bytes());
    // 32 random hex digits, then the holder's name (`@host/pid`).
    let (random, name) = guard.token().split_at(32);
    assert!(random.iter().all(u8::is_ascii_hexdigit), "{random:?}");
    assert!(name.starts_with(b"@"), "{name:?}");
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()).as_deref(), Some(guard.token()));
        let left = pttl(server, key.as_bytes());
        assert!(left > 8_000 && left <= 10_000, "PTTL {left}");
    }
    // validity: the TTL less the round and the 1% + 2 ms drift
    let validity = guard.validity();
    assert!(validity <= Duration::from_millis(9_898), "{validity:?}");
    assert!(validity > Duration::from_millis(8_000), "{validity:?}");
    assert!(guard.is_valid());
    drop(guard);
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()), None);
    }
}

#[test]
fn every_acquisition_gets_a_new_token() {
    let cluster = Nodes::start(1).unwrap();
    let dlm = manager(&cluster, SLOW_OK);
    let a = dlm.lock("k", Duration::from_secs(5)).unwrap();
    let ta = a.token().to_vec();
    a.release().unwrap();
    let b = dlm.lock("k", Duration::from_secs(5)).unwrap();
    assert_ne!(ta, b.token());
}

#[test]
fn a_held_lock_is_taken_for_others_and_free_again_after_release() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, SLOW_OK);
    let key = resource("taken");
    let guard = dlm.try_lock(&key, Duration::from_secs(10)).unwrap();

    // Another manager: taken by another owner, every node answered.
    let other = manager(&cluster, SLOW_OK);
    match other.try_lock(&key, Duration::from_secs(10)) {
        Err(err @ Error::Taken { .. }) => {
            let msg = err.to_string();
            let Error::Taken {
                held_elsewhere,
                nodes,
                quorum,
                held_here,
                failures,
                ..
            } = err
            else {
                unreachable!()
            };
            assert_eq!((held_elsewhere, nodes, quorum), (3, 3, 2));
            assert!(failures.is_none());
            assert!(!held_here);
            assert!(
                msg.contains("another owner") && !msg.contains("failed"),
                "{msg}"
            );
        }
        other => panic!("expected Taken, got {other:?}"),
    }
    // The same manager (a clone, too) says the lock is its own: locks are
    // not re-entrant.
    for dlm in [&dlm, &dlm.clone()] {
        match dlm.try_lock(&key, Duration::from_secs(10)) {
            Err(
                err @ Error::Taken {
                    held_here: true, ..
                },
            ) => assert!(
                err.to_string()
                    .contains("this same manager that is still alive (locks are not re-entrant)"),
                "{err}"
            ),
            other => panic!("expected Taken held here, got {other:?}"),
        }
    }
    // The failed attempt must not have touched the holder's keys.
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()).as_deref(), Some(guard.token()));
    }
    // Another resource is independent.
    let other = dlm.try_lock(resource("taken-other"), Duration::from_secs(10));
    assert!(other.is_ok());

    guard.release().unwrap();
    let again = dlm.try_lock(&key, Duration::from_secs(10)).unwrap();
    assert!(again.is_valid());
}

#[test]
fn a_clone_shares_the_nodes_and_sees_the_same_locks() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, SLOW_OK);
    let clone = dlm.clone();
    let _held = dlm.lock("shared", Duration::from_secs(5)).unwrap();
    assert!(matches!(
        clone.try_lock("shared", Duration::from_secs(5)),
        Err(Error::Taken { .. })
    ));
}

#[test]
fn release_removes_the_keys_and_reports_ok() {
    let cluster = Nodes::start(5).unwrap();
    let dlm = manager(&cluster, SLOW_OK);
    assert_eq!(dlm.quorum(), 3);
    let key = resource("release");
    let guard = dlm.lock(&key, Duration::from_secs(10)).unwrap();
    guard.release().unwrap();
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()), None);
    }
}

#[test]
fn extend_resets_the_expiry_on_every_node_and_the_validity() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, SLOW_OK);
    let key = resource("extend");
    let mut guard = dlm.lock(&key, Duration::from_secs(2)).unwrap();
    assert!(guard.validity() < Duration::from_secs(2));
    guard.extend(Duration::from_secs(60)).unwrap();
    assert!(guard.validity() > Duration::from_secs(50), "{guard:?}");
    for server in &cluster.servers {
        let left = pttl(server, key.as_bytes());
        assert!(left > 50_000 && left <= 60_000, "PTTL {left}");
        assert_eq!(get(server, key.as_bytes()).as_deref(), Some(guard.token()));
    }
    // A shorter TTL shortens the validity; the keys keep the longer
    // expiry (an extend never lowers it: one delivered late would cut a
    // later, longer one).
    guard.extend(Duration::from_secs(3)).unwrap();
    assert!(guard.validity() <= Duration::from_secs(3));
    for server in &cluster.servers {
        assert!(pttl(server, key.as_bytes()) > 50_000);
    }
}

#[test]
fn an_expired_lock_cannot_release_or_extend_the_next_owners_key() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, SLOW_OK);
    let key = resource("expired");
    let mut old = dlm.lock(&key, Duration::from_millis(150)).unwrap();
    thread::sleep(Duration::from_millis(400));
    assert!(!old.is_valid());
    assert_eq!(old.validity(), Duration::ZERO);

    let new = dlm.lock(&key, Duration::from_secs(30)).unwrap();

    // Local validity has run out: extend refuses without touching anything.
    match old.extend(Duration::from_secs(30)) {
        Err(Error::NotHeld { lost_on: 0, .. }) => {}
        other => panic!("expected NotHeld, got {other:?}"),
    }
    match old.release() {
        Err(Error::NotHeld {
            lost_on: 3,
            nodes: 3,
            ..
        }) => {}
        other => panic!("expected NotHeld on 3 nodes, got {other:?}"),
    }
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()).as_deref(), Some(new.token()));
        assert!(pttl(server, key.as_bytes()) > 25_000);
    }
}

#[test]
fn extend_of_a_lock_taken_over_while_still_locally_valid_is_not_held() {
    // Another client deletes our keys and takes the resource (as an
    // operator or a buggy client might): our extend must not touch theirs.
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, SLOW_OK);
    let key = resource("taken-over");
    let mut ours = dlm.lock(&key, Duration::from_secs(30)).unwrap();
    for server in &cluster.servers {
        let _: () = admin(server).set(&key, "someone-else").unwrap();
    }
    match ours.extend(Duration::from_secs(60)) {
        Err(Error::NotHeld { lost_on: 3, .. }) => {}
        other => panic!("expected NotHeld, got {other:?}"),
    }
    drop(ours);
    for server in &cluster.servers {
        assert_eq!(
            get(server, key.as_bytes()).as_deref(),
            Some(&b"someone-else"[..])
        );
        assert_eq!(pttl(server, key.as_bytes()), -1, "expiry must be untouched");
    }
}

#[test]
fn try_lock_for_waits_until_the_holder_releases() {
    let cluster = Nodes::start(3).unwrap();
    let mut dlm = manager(&cluster, SLOW_OK);
    dlm.set_retry(1, Duration::from_millis(20)).unwrap();
    let key = resource("wait");
    let held = dlm.lock(&key, Duration::from_secs(30)).unwrap();
    let releaser = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        held.release().unwrap();
    });
    let start = Instant::now();
    let guard = dlm
        .try_lock_for(&key, Duration::from_secs(30), Duration::from_secs(20))
        .unwrap();
    assert!(start.elapsed() >= Duration::from_millis(250));
    assert!(guard.is_valid());
    releaser.join().unwrap();
}

#[test]
fn try_lock_for_gives_up_after_the_timeout() {
    let cluster = Nodes::start(3).unwrap();
    let mut dlm = manager(&cluster, SLOW_OK);
    dlm.set_retry(1, Duration::from_millis(20)).unwrap();
    let key = resource("give-up");
    let _held = dlm.lock(&key, Duration::from_secs(30)).unwrap();
    let start = Instant::now();
    let result = dlm.try_lock_for(&key, Duration::from_secs(30), Duration::from_millis(300));
    let took = start.elapsed();
    assert!(matches!(result, Err(Error::Taken { .. })), "{result:?}");
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn every_shape_waits_until_a_deadline_and_no_longer() {
    let cluster = Nodes::start(3).unwrap();
    let mut dlm = manager(&cluster, SLOW_OK);
    dlm.set_retry(1, Duration::from_millis(20)).unwrap();
    let ttl = Duration::from_secs(30);
    let (key, set, sem, rw) = (
        resource("until"),
        resource("until-set"),
        resource("until-sem"),
        resource("until-rw"),
    );
    let _held = dlm.lock(&key, ttl).unwrap();
    let _held_set = dlm.lock(&set, ttl).unwrap();
    let semaphore = dlm.semaphore(&sem, 1).unwrap();
    let _permit = semaphore.acquire(ttl).unwrap();
    let rwlock = dlm.rwlock(&rw).unwrap();
    let _reader = rwlock.read(ttl).unwrap();
    type Attempt<'a> = Box<dyn Fn(Instant) -> Result<(), Error> + 'a>;
    let waits: [(&str, Attempt); 5] = [
        (
            "lock",
            Box::new(|d| dlm.try_lock_until(&key, ttl, d).map(drop)),
        ),
        (
            "set",
            Box::new(|d| dlm.try_lock_all_until([&key, &set], ttl, d).map(drop)),
        ),
        (
            "permit",
            Box::new(|d| semaphore.try_acquire_until(ttl, d).map(drop)),
        ),
        (
            "write",
            Box::new(|d| rwlock.try_write_until(ttl, d).map(drop)),
        ),
        (
            "lock_with",
            Box::new(|d| dlm.lock_with(&key, ttl, Wait::Until(d)).map(drop)),
        ),
    ];
    for (what, wait) in waits {
        let start = Instant::now();
        let result = wait(start + Duration::from_millis(300));
        let took = start.elapsed();
        assert!(
            matches!(result, Err(Error::Taken { .. })),
            "{what}: {result:?}"
        );
        assert!(took >= Duration::from_millis(300), "{what}: {took:?}");
        assert!(took < Duration::from_secs(5), "{what}: {took:?}");
    }
    // A deadline already past still makes one attempt.
    let free = resource("until-free");
    let guard = dlm.try_lock_until(&free, ttl, Instant::now()).unwrap();
    assert!(guard.is_valid());
    let reader = rwlock.try_read_until(ttl, Instant::now()).unwrap();
    assert!(reader.is_shared());
}

/// `lock` makes `count` attempts when nothing wakes it (one more when
/// the subscription it makes once waiting wakes it to ask again, in case
/// a release came before it listened).
#[test]
fn lock_makes_the_configured_number_of_attempts() {
    let cluster = Nodes::start(3).unwrap();
    // Counted by the fencing counter's count, which every attempt of an
    // unfair waiter sends (a fair waiter's claims count only when
    // granted): by `INCR` on a connection that counted it by the script,
    // else by the script's one `PTTL` (commandstats count a script's
    // commands; before Redis 7.0 a refused attempt's pause also runs the
    // waiting writer's script, which reads no expiry).
    let counts = |server: &Server| calls(server, "pttl") + calls(server, "incr");
    let mut dlm = one_try_unfair(&cluster);
    let key = resource("attempts");
    let _held = dlm.lock(&key, Duration::from_secs(30)).unwrap();
    // Each attempt counts the fencing counter once.
    let before = counts(&cluster[0]);
    dlm.set_retry(4, Duration::from_millis(10)).unwrap();
    assert!(matches!(
        dlm.lock(&key, Duration::from_secs(30)),
        Err(Error::Taken { .. })
    ));
    let attempts = counts(&cluster[0]) - before;
    assert!((4..=5).contains(&attempts), "{attempts} attempts");
    let before = counts(&cluster[0]);
    assert!(dlm.try_lock(&key, Duration::from_secs(30)).is_err());
    assert_eq!(counts(&cluster[0]) - before, 1);
}

/// Connections from clients other than the one asking, from CLIENT LIST.
fn client_connections(server: &Server) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut admin(server))
        .unwrap();
    list.lines().count() - 1
}

#[test]
fn connections_are_kept_and_reused() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, SLOW_OK);
    let key = resource("reuse");
    for _ in 0..50 {
        dlm.lock(&key, Duration::from_secs(5))
            .unwrap()
            .release()
            .unwrap();
    }
    for server in &cluster.servers {
        let open = client_connections(server);
        assert!((1..=2).contains(&open), "{open} connections open");
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query(&mut admin(server))
            .unwrap();
        let received: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // 100 commands; a handful of connections (ours and the admin's).
        assert!(received < 15, "{received} connections for 100 commands");
    }
}

#[test]
fn guards_move_to_other_threads_and_release_there() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, SLOW_OK);
    let guard: LockGuard = dlm.lock("moved", Duration::from_secs(5)).unwrap();
    thread::spawn(move || guard.release().unwrap())
        .join()
        .unwrap();
    assert!(dlm.try_lock("moved", Duration::from_secs(5)).is_ok());
}

#[test]
fn binary_resource_names_work() {
    let cluster = Nodes::start(1).unwrap();
    let dlm = manager(&cluster, SLOW_OK);
    let key: &[u8] = b"bin\x00\xff\r\nkey";
    let guard = dlm.lock(key, Duration::from_secs(5)).unwrap();
    assert_eq!(get(&cluster[0], key).as_deref(), Some(guard.token()));
    drop(guard);
    assert_eq!(get(&cluster[0], key), None);
}

#[test]
fn urls_with_password_database_and_unix_socket() {
    let secured = Server::start_with(&["--requirepass", "s3cret"]).unwrap();
    let dir = std::env::temp_dir().join(format!("redlock-sync-sock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("r.sock");
    let sock_arg = sock.to_str().unwrap().to_owned();
    let socketed =
        Server::start_with(&["--unixsocket", &sock_arg, "--unixsocketperm", "700"]).unwrap();
    let plain = Server::start().unwrap();

    let dlm = LockManager::builder()
        .node(format!("redis://:s3cret@127.0.0.1:{}", secured.port()))
        .node(format!("unix://{}", sock.display()))
        .node(format!("{}/3", plain.url()))
        .node_timeout(SLOW_OK)
        .build()
        .unwrap();
    let names: Vec<&str> = dlm.nodes().collect();
    assert_eq!(names[0], format!("127.0.0.1:{}", secured.port()));
    assert_eq!(names[1], format!("unix:{}", sock.display()));
    assert_eq!(names[2], format!("127.0.0.1:{}/3", plain.port()));

    let guard = dlm.try_lock("forms", Duration::from_secs(5)).unwrap();
    let mut con = redis::Client::open(format!("redis://:s3cret@127.0.0.1:{}", secured.port()))
        .unwrap()
        .get_connection()
        .unwrap();
    let v: Option<Vec<u8>> = con.get("forms").unwrap();
    assert_eq!(v.as_deref(), Some(guard.token()));
    assert_eq!(get(&socketed, b"forms").as_deref(), Some(guard.token()));
    // database 3, not 0
    assert_eq!(get(&plain, b"forms"), None);
    let mut db3 = redis::Client::open(format!("{}/3", plain.url()))
        .unwrap()
        .get_connection()
        .unwrap();
    let v: Option<Vec<u8>> = db3.get("forms").unwrap();
    assert_eq!(v.as_deref(), Some(guard.token()));
    guard.release().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_wrong_password_is_reported_as_auth_on_that_node() {
    let secured = Server::start_with(&["--requirepass", "s3cret"]).unwrap();
    let dlm = LockManager::builder()
        .node(format!("redis://:hunter2@127.0.0.1:{}", secured.port()))
        .node_timeout(SLOW_OK)
        .retry(1, Duration::ZERO)
        .build()
        .unwrap();
    let err = dlm.lock("auth", Duration::from_secs(5)).unwrap_err();
    let failures = err.failures();
    assert_eq!(failures.len(), 1, "{err}");
    assert_eq!(
        failures[0].kind(),
        redlock_sync::NodeErrorKind::Auth,
        "{err:?}"
    );
    assert!(
        err.to_string().contains(&secured.port().to_string()),
        "{err}"
    );
    // And the error does not leak the password.
    assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
    assert!(
        err.to_string().contains("wrong user name or password"),
        "{err}"
    );
}

/// A guard tells how many members agreed, which failed and why, and how
/// many more could have failed: what an application alerts on.
#[test]
fn a_guard_tells_which_members_agreed_and_which_failed() {
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, Duration::from_millis(300));
    let key = resource("redundancy");
    let guard = dlm.lock(&key, Duration::from_secs(5)).unwrap();
    assert_eq!(
        (guard.agreed(), guard.failures().len(), guard.margin()),
        (3, 0, 1)
    );
    guard.release().unwrap();
    cluster.servers[1].kill();
    let guard = dlm.lock(&key, Duration::from_secs(5)).unwrap();
    assert_eq!((guard.agreed(), guard.margin()), (2, 0));
    let failed = guard.failures();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(
        failed[0].node(),
        format!("127.0.0.1:{}", cluster.servers[1].port())
    );
    assert_eq!(failed[0].kind(), redlock_sync::NodeErrorKind::Connect);
    // Sets and read locks tell the same.
    guard.release().unwrap();
    let set = dlm
        .lock_all(
            &[resource("redundancy-a"), resource("redundancy-b")],
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!((set.agreed(), set.failures().len()), (2, 1));
    let read = dlm
        .rwlock(resource("redundancy-rw"))
        .unwrap()
        .read(Duration::from_secs(5))
        .unwrap();
    assert_eq!((read.agreed(), read.failures().len()), (2, 1));
}

/// An at-least hold: a guard released early leaves its keys, ours, until
/// the hold has passed since the acquisition (others find it taken), and
/// then the lock is free without anyone deleting it. A release after the
/// hold deletes as usual.
#[test]
fn a_min_hold_keeps_others_out_after_an_early_release() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, Duration::from_millis(500));
    let other = manager(&cluster, Duration::from_millis(500));
    let key = resource("min-hold");
    let hold = Duration::from_millis(1500);
    let mut guard = dlm.lock(&key, Duration::from_secs(30)).unwrap();
    guard.set_min_hold(hold);
    let guard = guard.keep_alive();
    let token = guard.token().to_vec();
    let released = Instant::now();
    guard.release().unwrap();
    // The keys stay, ours, expiring with what is left of the hold.
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()), Some(token.clone()));
        let left = pttl(server, key.as_bytes());
        assert!(left > 0 && left <= 1500, "{left}");
    }
    assert!(matches!(
        other.try_lock(&key, Duration::from_secs(5)),
        Err(Error::Taken { .. })
    ));
    let got = other
        .try_lock_for(&key, Duration::from_secs(5), Duration::from_secs(10))
        .unwrap();
    let waited = released.elapsed();
    assert!(
        waited >= Duration::from_millis(1000),
        "free after {waited:?}"
    );
    drop(got);
    // A hold already over: the release deletes.
    let mut late = dlm.lock(&key, Duration::from_secs(30)).unwrap();
    late.set_min_hold(Duration::from_millis(1));
    thread::sleep(Duration::from_millis(20));
    late.release().unwrap();
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()), None);
    }
}

/// Issue 39: an at-least hold acts only where the guard still holds. A
/// kept-alive guard cut off two of three nodes loses its lock (its
/// renewals reach the third node alone); its release then deletes that
/// node's key, which still holds its token, and extends nothing (the old
/// release kept it for the whole hold: one more fault among the other
/// two nodes would then have blocked the resource for an hour).
#[test]
fn a_min_hold_of_a_lost_guard_extends_nothing_and_deletes_its_own_keys() {
    use support::proxy::{Mode, Proxy};
    let cluster = Nodes::start(3).unwrap();
    let proxies = support::proxies(&cluster);
    let holder = support::manager_over(
        proxies.iter().map(Proxy::url).collect(),
        Duration::from_millis(200),
    );
    let key = resource("min-hold-lost");
    let ttl = Duration::from_secs(2);
    let mut guard = holder.lock(&key, ttl).unwrap();
    guard.set_min_hold(Duration::from_secs(3600));
    let guard = guard.keep_alive();
    proxies[0].set(Mode::Blackhole);
    proxies[1].set(Mode::Blackhole);
    assert!(guard.wait_lost(Duration::from_secs(10)), "never lost");
    // Node 2 still holds the token (renewed there until the end).
    assert_eq!(
        get(&cluster.servers[2], key.as_bytes()).as_deref(),
        Some(guard.token())
    );
    let err = guard.release().unwrap_err();
    assert!(matches!(err, Error::NotHeld { .. }), "{err:?}");
    assert_eq!(get(&cluster.servers[2], key.as_bytes()), None);
    // Once the other keys expire, anyone takes the lock with every node.
    let other = manager(&cluster, Duration::from_millis(500));
    let got = other
        .try_lock_for(&key, Duration::from_secs(5), Duration::from_secs(10))
        .unwrap();
    assert_eq!(got.agreed(), 3);
}

/// Issue 39: the restart quarantine counts TTLs, not holds. A manager
/// whose guards hold for an hour after a one-second TTL keeps a restarted
/// server out of its votes for about a second, not an hour.
#[test]
fn a_min_hold_is_not_a_ttl_for_the_restart_quarantine() {
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, Duration::from_millis(500));
    let key = resource("min-hold-quarantine");
    let mut guard = dlm.lock(&key, Duration::from_secs(1)).unwrap();
    guard.set_min_hold(Duration::from_secs(3600));
    guard.release().unwrap();
    let left = pttl(&cluster.servers[0], key.as_bytes());
    assert!(left > 3_000_000, "the hold is in place: PTTL {left}");
    cluster.servers[2].restart().unwrap();
    // The manager sees the restart (a new run id) and keeps the server
    // out for the longest TTL it used: one second.
    let other = resource("min-hold-quarantine-2");
    let _ = dlm.lock(&other, Duration::from_secs(1));
    thread::sleep(Duration::from_millis(1500));
    let got = dlm.lock(&other, Duration::from_secs(1)).unwrap();
    assert_eq!(got.agreed(), 3, "still kept out: {:?}", got.failures());
}

/// Issue 44: the validity a guard is handed out with is cut by the time
/// its round took, end to end: every node 200 ms of round trip away
/// (100 ms each way), a 1 s TTL leaves at most 1 s - 200 ms - the drift.
#[test]
fn a_slow_round_cuts_the_validity_handed_out() {
    use support::proxy::{Mode, Proxy};
    let cluster = Nodes::start(3).unwrap();
    let proxies = support::proxies(&cluster);
    let dlm = support::manager_over(
        proxies.iter().map(Proxy::url).collect(),
        Duration::from_secs(2),
    );
    // Connections made before the latency, so that only the round is slow.
    dlm.lock(resource("slow-round-warm"), Duration::from_secs(1))
        .unwrap()
        .release()
        .unwrap();
    for p in &proxies {
        p.set(Mode::Latency(Duration::from_millis(100)));
    }
    let ttl = Duration::from_secs(1);
    let (guard, took) = support::timed(|| dlm.lock(resource("slow-round"), ttl));
    let guard = guard.unwrap();
    let validity = guard.validity();
    eprintln!("round {took:?}, validity {validity:?}");
    assert!(took >= Duration::from_millis(200), "{took:?}");
    // TTL - round (at least 200 ms) - drift (1% + 2 ms).
    assert!(
        validity <= ttl - Duration::from_millis(200 + 12),
        "validity {validity:?} after a {took:?} round"
    );
    assert!(validity > Duration::ZERO);
}

/// Issue 44: `max_idle_per_node` bounds the connections a node keeps
/// once a burst is over. Six threads lock at once while node 0 stalls
/// (each opens its own connection there); afterwards node 0 sees as many
/// as the setting allows: 2, where the default (16) keeps all six.
#[test]
fn max_idle_per_node_bounds_the_connections_kept_after_a_burst() {
    let mut cluster = Nodes::start(3).unwrap();
    let normal_clients = |server: &Server| -> usize {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .arg("TYPE")
            .arg("normal")
            .query(&mut admin(server))
            .unwrap();
        // Less the admin connection asking.
        list.lines().count() - 1
    };
    for (idle, kept) in [(Some(2), 2), (None, 6)] {
        let mut builder = LockManager::builder()
            .nodes(cluster.urls())
            .node_timeout(Duration::from_secs(2))
            .retry(1, Duration::ZERO)
            .fair(false)
            .wake_on_release(false);
        if let Some(idle) = idle {
            builder = builder.max_idle_per_node(idle);
        }
        let dlm = builder.build().unwrap();
        cluster.servers[0].pause();
        thread::scope(|s| {
            for i in 0..6 {
                let dlm = &dlm;
                s.spawn(move || {
                    dlm.lock(resource(&format!("idle-{i}")), Duration::from_secs(10))
                        .unwrap()
                        .release()
                        .unwrap();
                });
            }
            thread::sleep(Duration::from_millis(500));
            cluster.servers[0].resume();
        });
        let seen = normal_clients(&cluster.servers[0]);
        assert_eq!(seen, kept, "max_idle_per_node {idle:?}");
        drop(dlm);
        // Dropped, the manager's connections close.
        let closed = support::wait_for(Duration::from_secs(5), || {
            normal_clients(&cluster.servers[0]) == 0
        });
        assert!(closed.is_some(), "connections outlived their manager");
    }
}

/// Issue 43: a server that says a version with its own compare-and-delete
/// but does not know the command (here renamed away; also a server that
/// claims a version it is not) answers `ERR unknown command`: the release
/// runs the unlock script in its place, in the same round, and succeeds;
/// later releases on that node send the script at once. Only where the
/// server has the command to rename.
#[test]
fn a_release_whose_compare_and_delete_is_unknown_runs_the_script() {
    let Some(command) = support::server::plain_delete() else {
        eprintln!("this server has no compare-and-delete of its own: nothing to rename");
        return;
    };
    let cluster = Nodes::start_with(3, &["--rename-command", command, ""]).unwrap();
    let dlm = one_try_unfair(&cluster);
    let key = resource("release-unknown-delete");
    let scripts = |s: &Server| calls(s, "evalsha") + calls(s, "eval");
    for round in 0..3 {
        dlm.lock(&key, Duration::from_secs(5))
            .unwrap()
            .release()
            .unwrap_or_else(|e| panic!("release {round}: {e}"));
        for server in &cluster.servers {
            assert_eq!(get(server, key.as_bytes()), None, "release {round}");
            // The first acquisition runs the count script, each release
            // the unlock script.
            assert_eq!(
                scripts(server),
                count_scripts(round + 1) + round + 1,
                "release {round}: scripts run"
            );
        }
    }
}

/// Issue 43: servers that differ in one deployment (Valkey 9.1, which has
/// `DELIFEQ`, beside two without a compare-and-delete of their own): each
/// release sends each server its own form in one round, `DELIFEQ` where
/// it is taken and the unlock script elsewhere (packed only for those),
/// and the key goes everywhere. Runs where the main server has no such
/// command, with the Valkey 9 binary the clock tests run
/// (`REDLOCK_CLOCK_SERVER_BIN`; `.ci/run` sets it).
#[test]
fn a_release_sends_each_server_its_own_form_in_a_mixed_deployment() {
    if support::server::plain_delete().is_some() {
        eprintln!("this server has a compare-and-delete of its own: no mix to make");
        return;
    }
    let valkey = std::env::var("REDLOCK_CLOCK_SERVER_BIN")
        .ok()
        .filter(|bin| matches!(support::server::version_of(bin), (name, v) if name == "Valkey" && v >= (9, 0)));
    let Some(valkey) = valkey else {
        let why = "REDLOCK_CLOCK_SERVER_BIN names no Valkey 9 binary (.ci/run sets it)";
        eprintln!("{}", support::server::skip(why.to_owned()));
        return;
    };
    let mut servers = vec![Server::start_on(&valkey).unwrap()];
    servers.extend(Nodes::start(2).unwrap().servers);
    let cluster = Nodes { servers };
    let dlm = one_try_unfair(&cluster);
    let key = resource("release-mixed");
    // Connections made, each server's form known.
    dlm.lock(&key, Duration::from_secs(5))
        .unwrap()
        .release()
        .unwrap();
    let before = release_forms_run(&cluster);
    for round in 0..3 {
        dlm.lock(&key, Duration::from_secs(5))
            .unwrap()
            .release()
            .unwrap_or_else(|e| panic!("release {round}: {e}"));
        for server in &cluster.servers {
            assert_eq!(get(server, key.as_bytes()), None, "release {round}");
        }
    }
    let after = release_forms_run(&cluster);
    for (i, ((scripts, dels), (scripts_before, dels_before))) in
        after.iter().zip(&before).enumerate()
    {
        let ran = (scripts - scripts_before, dels - dels_before);
        // After the first cycle.
        let counted = count_scripts(4) - count_scripts(1);
        let expected = if i == 0 {
            (counted, 3)
        } else {
            (counted + 3, 0)
        };
        assert_eq!(ran, expected, "server {i}: (scripts, DELIFEQ) run");
    }
}

/// Issue 43: where the server has its own compare-and-delete (`DELIFEQ`
/// on Valkey 9.0 and later, `DELEX ... IFEQ` on Redis 8.4 and later),
/// the release of a lock that hands nothing on (fairness off, or a
/// permit) is that command, no script; elsewhere the unlock script runs.
/// Either way a release deletes only our token, wakes a waiter, and says
/// what it found: taken over (another token) apart from expired (none).
#[test]
fn release_runs_without_a_script_where_the_server_has_compare_and_delete() {
    let (name, version) = support::server::server_version();
    let plain = support::server::plain_delete();
    let del = plain.is_some();
    let cluster = Nodes::start(3).unwrap();
    let dlm = one_try_unfair(&cluster);
    let key = resource("release-delifeq");
    // The first use of each connection loads nothing on demand.
    dlm.lock(&key, Duration::from_secs(5))
        .unwrap()
        .release()
        .unwrap();
    // Either compare-and-delete (none may run where the server has none).
    let before = release_forms_run(&cluster);
    for _ in 0..5 {
        dlm.lock(&key, Duration::from_secs(5))
            .unwrap()
            .release()
            .unwrap();
    }
    let after = release_forms_run(&cluster);
    for (server, ((scripts, dels), (scripts_before, dels_before))) in
        cluster.servers.iter().zip(after.iter().zip(&before))
    {
        let ran = (scripts - scripts_before, dels - dels_before);
        // After the first cycle.
        let counted = count_scripts(6) - count_scripts(1);
        let expected = if del { (counted, 5) } else { (counted + 5, 0) };
        assert_eq!(
            ran, expected,
            "{name} {version:?}: (scripts, {plain:?}) run"
        );
        assert_eq!(get(server, key.as_bytes()), None, "released");
    }
    // A waiter of another manager is woken by the release, well before
    // its 10 s pause ends.
    let guard = dlm.lock(&key, Duration::from_secs(30)).unwrap();
    let waiting = thread::spawn({
        let urls = cluster.urls();
        let key = key.clone();
        move || {
            let other = LockManager::builder()
                .nodes(urls)
                .node_timeout(SLOW_OK)
                .retry(3, Duration::from_secs(10))
                .fair(false)
                .build()
                .unwrap();
            let start = Instant::now();
            let guard = other.lock(&key, Duration::from_secs(5)).unwrap();
            let waited = start.elapsed();
            drop(guard);
            waited
        }
    });
    thread::sleep(Duration::from_millis(500));
    guard.release().unwrap();
    let waited = waiting.join().unwrap();
    assert!(waited < Duration::from_secs(4), "woken after {waited:?}");
    // Taken over on two nodes, expired on the third: NotHeld, taken
    // over on two, and the other owner's keys left alone.
    let guard = dlm.lock(&key, Duration::from_secs(5)).unwrap();
    for server in &cluster.servers[..2] {
        let _: () = admin(server).set(&key, "someone-else").unwrap();
    }
    let _: () = admin(&cluster.servers[2]).del(&key).unwrap();
    match guard.release() {
        Err(Error::NotHeld {
            lost_on,
            taken_over,
            ..
        }) => assert_eq!((lost_on, taken_over), (3, 2)),
        other => panic!("expected NotHeld, got {other:?}"),
    }
    for server in &cluster.servers[..2] {
        assert_eq!(
            get(server, key.as_bytes()).as_deref(),
            Some(&b"someone-else"[..])
        );
    }
}

/// An extend runs its script on every server (Valkey 8.1+ too: `SET ...
/// IFEQ ... PX` sets the expiry exactly, and one delivered late cut a
/// later, longer extend; see `safety::an_extend_delivered_late_cuts_no_later_extend`).
/// The script raises the key's expiry and never lowers it: a shorter
/// extend shortens the guard's validity only. Its answers: extended,
/// taken over (another token), expired (no key).
#[test]
fn an_extend_raises_the_expiry_and_never_lowers_it() {
    let (name, version) = support::server::server_version();
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, SLOW_OK);
    let key = resource("extend-raise");
    let mut guard = dlm.lock(&key, Duration::from_secs(5)).unwrap();
    let scripts = |s: &Server| calls(s, "evalsha") + calls(s, "eval");
    let before: Vec<u64> = cluster.servers.iter().map(scripts).collect();
    for _ in 0..5 {
        guard.extend(Duration::from_secs(20)).unwrap();
    }
    // Shorter: the validity follows, the keys' expiry stays.
    guard.extend(Duration::from_secs(2)).unwrap();
    assert!(guard.validity() <= Duration::from_secs(2));
    for (server, before) in cluster.servers.iter().zip(&before) {
        let ran = scripts(server) - before;
        assert_eq!(ran, 6, "{name} {version:?}: scripts run");
        let left = pttl(server, key.as_bytes());
        assert!(left > 15_000, "PTTL {left}: a shorter extend lowered it");
        // The counter lives at least as long.
        let counter: i64 = admin(server).pttl(redlock_sync::fence_key(&key)).unwrap();
        assert!(counter >= left, "counter {counter} under the lock's {left}");
    }
    // Taken over on a majority: NotHeld, taken over there.
    for server in &cluster.servers[..2] {
        let _: () = admin(server).set(&key, "someone-else").unwrap();
    }
    match guard.extend(Duration::from_secs(20)) {
        Err(Error::NotHeld {
            lost_on,
            taken_over,
            ..
        }) => assert_eq!((lost_on, taken_over), (2, 2)),
        other => panic!("expected NotHeld, got {other:?}"),
    }
    // The other owner's keys were left alone.
    for server in &cluster.servers[..2] {
        assert_eq!(
            get(server, key.as_bytes()).as_deref(),
            Some(&b"someone-else"[..])
        );
        assert!(pttl(server, key.as_bytes()) == -1);
    }
    // Expired everywhere: NotHeld, nothing taken over.
    let mut gone = dlm
        .lock(resource("extend-raise-gone"), Duration::from_secs(5))
        .unwrap();
    for server in &cluster.servers {
        let _: () = admin(server).del(resource("extend-raise-gone")).unwrap();
    }
    match gone.extend(Duration::from_secs(20)) {
        Err(Error::NotHeld {
            lost_on,
            taken_over,
            ..
        }) => assert_eq!((lost_on, taken_over), (3, 0)),
        other => panic!("expected NotHeld, got {other:?}"),
    }
}

/// Scripts (`EVALSHA`, `EVAL`) and compare-and-deletes (`DELIFEQ`,
/// `DELEX`) each server of `cluster` has run so far.
fn release_forms_run(cluster: &Nodes) -> Vec<(u64, u64)> {
    cluster
        .servers
        .iter()
        .map(|s| {
            let scripts = calls(s, "evalsha") + calls(s, "eval");
            (scripts, calls(s, "delifeq") + calls(s, "delex"))
        })
        .collect()
}

/// The count scripts `n` fenced acquisitions of one thread run per
/// server, from its connection's first on: one, the first (the
/// connection counts by `INCR` from then on, for half the keep); one
/// each on servers before Redis 7.0 (their form counts by script alone).
fn count_scripts(n: u64) -> u64 {
    match support::server::server_at_least(7, 0) {
        true => n.min(1),
        false => n,
    }
}

/// A manager of `cluster` whose `lock` makes one attempt (no pause),
/// waits unfairly, and allows slow nodes.
fn one_try_unfair(cluster: &Nodes) -> LockManager {
    LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(SLOW_OK)
        .retry(1, Duration::ZERO)
        .fair(false)
        .build()
        .unwrap()
}
