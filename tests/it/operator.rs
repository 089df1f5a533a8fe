//! What an operator does from outside a lock's holders:
//! `LockManager::inspect` and `LockManager::force_unlock`.

use crate::support;

use std::thread;
use std::time::{Duration, Instant};

use redlock_sync::Error;
use support::{Nodes, resource, wait_for};

const TTL: Duration = Duration::from_secs(20);

/// A free lock, a held one (its holder's token, the majority's time left,
/// a counter at least its fencing token), a read-held one, and with one
/// and then two of three members down.
#[test]
fn inspect_says_who_holds_a_lock_and_for_how_long() {
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = support::manager(&cluster, Duration::from_millis(500));
    let r = resource("inspect");
    let free = dlm.inspect(&r).unwrap();
    assert!(
        !free.held && free.holder.is_none() && free.left.is_none(),
        "{free:?}"
    );
    assert_eq!(free.members.len(), 3);
    assert!(
        free.members
            .iter()
            .all(|m| m.holder.is_none() && m.failure.is_none())
    );

    let guard = dlm.lock(&r, TTL).unwrap();
    let info = dlm.inspect(&r).unwrap();
    let token = String::from_utf8(guard.token().to_vec()).unwrap();
    assert!(info.held && !info.shared, "{info:?}");
    assert_eq!(info.holder.as_deref(), Some(token.as_str()));
    let left = info.left.unwrap();
    assert!(
        left <= TTL && left > TTL - Duration::from_secs(10),
        "{left:?}"
    );
    let counter = info.fencing_counter.unwrap();
    assert!(counter >= guard.fencing_token().unwrap(), "{counter}");
    // The holder names itself (issue 42): this process, on this host.
    let name = info.holder_name().expect("the token names its holder");
    assert_eq!(name.pid, std::process::id());
    for m in &info.members {
        assert_eq!(m.holder.as_deref(), Some(token.as_str()), "{m}");
        assert_eq!(m.holder_name().as_ref(), Some(&name));
        assert!(
            m.to_string()
                .contains(&format!("held by {name}, token {}… for ", &token[..8])),
            "{m}"
        );
    }
    guard.release().unwrap();
    assert!(!dlm.inspect(&r).unwrap().held);

    let rw = resource("inspect-rw");
    let reader = dlm.rwlock(&rw).unwrap().read(TTL).unwrap();
    let info = dlm.inspect(&rw).unwrap();
    assert!(info.held && info.shared, "{info:?}");
    assert!(info.members[0].to_string().contains("held by readers"));
    reader.release().unwrap();

    let guard = dlm.lock(&r, TTL).unwrap();
    cluster.servers[0].kill();
    let info = dlm.inspect(&r).unwrap();
    assert!(info.held, "{info:?}");
    assert!(info.members[0].failure.is_some(), "{info:?}");
    cluster.servers[1].kill();
    match dlm.inspect(&r) {
        Err(e @ Error::NoQuorum { .. }) => assert_eq!(e.failures().len(), 2, "{e}"),
        other => panic!("{other:?}"),
    }
    drop(guard);
}

/// Force-unlock takes a lock away from a live holder: every member's key
/// goes, a waiter gets the lock at once with a higher fencing token, and
/// the old holder learns it lost the lock at its next renewal.
#[test]
fn force_unlock_takes_a_lock_away_and_tokens_keep_growing() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = support::manager(&cluster, Duration::from_millis(500));
    // A waiter that would pause 5 to 10 s between attempts (and does not
    // queue, whose pause is shorter): only the removal's announcement
    // wakes it within the bound below.
    let waiter = redlock_sync::LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::from_secs(10))
        .fair(false)
        .build()
        .unwrap();
    let r = resource("force");
    let old = dlm.lock(&r, Duration::from_secs(3)).unwrap().keep_alive();
    let old_token = old.fencing_token().unwrap();
    let waiting = {
        let (waiter, r) = (waiter.clone(), r.clone());
        thread::spawn(move || {
            let got = waiter.try_lock_for(&r, TTL, Duration::from_secs(60));
            (got, Instant::now())
        })
    };
    thread::sleep(Duration::from_millis(500));
    let forced_at = Instant::now();
    let forced = dlm.force_unlock(&r).unwrap();
    assert_eq!(forced.removed, 3, "{forced:?}");
    for m in &forced.members {
        let removed = m.holder.as_deref().unwrap();
        assert_eq!(removed.as_bytes(), old.token(), "{m:?}");
        assert!(m.counter.unwrap() > old_token, "{m:?}");
    }
    let (got, at) = waiting.join().unwrap();
    let new = got.unwrap();
    assert!(new.fencing_token().unwrap() > old_token);
    // Woken by the removal, not by the holder's TTL or a pause.
    assert!(
        at.duration_since(forced_at) < Duration::from_secs(2),
        "{:?}",
        at.duration_since(forced_at)
    );
    // The old holder's next renewal (every second) finds the lock gone.
    assert!(
        old.wait_lost(Duration::from_secs(10)),
        "the old holder never learned"
    );
    assert!(old.ensure_held().is_err());
    drop(old);
    // The new holder is untouched by the old one's end.
    assert!(new.ensure_held().is_ok());
    new.release().unwrap();
    // A free lock: nothing removed, counters still advance.
    let forced = dlm.force_unlock(&r).unwrap();
    assert_eq!(forced.removed, 0);
    assert!(wait_for(Duration::from_secs(1), || !dlm.inspect(&r).unwrap().held).is_some());
    assert!(matches!(
        dlm.force_unlock(""),
        Err(Error::InvalidArgument { .. })
    ));
}

/// On a Redis Cluster member: the read and the removal reach the
/// resource's slot, for names with a hash tag or a stray brace too.
#[test]
fn inspect_and_force_unlock_work_on_a_cluster_member() {
    if let Some(why) = support::redis_cluster::unsupported() {
        eprintln!("{why}");
        return;
    }
    let cluster = support::redis_cluster::RedisCluster::start(3, 0).unwrap();
    let dlm = redlock_sync::LockManager::builder()
        .cluster(cluster.seeds())
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    for r in [
        resource("op-cluster"),
        "{op}tagged".to_owned(),
        "op{b".to_owned(),
    ] {
        let guard = dlm.lock(&r, TTL).unwrap();
        let info = dlm.inspect(&r).unwrap();
        assert!(info.held, "{r}: {info:?}");
        assert_eq!(
            info.holder.as_deref().map(str::as_bytes),
            Some(guard.token())
        );
        let forced = dlm.force_unlock(&r).unwrap();
        assert_eq!(forced.removed, 1, "{r}: {forced:?}");
        assert!(!dlm.inspect(&r).unwrap().held);
        let next = dlm.try_lock(&r, TTL).unwrap();
        assert!(next.fencing_token() > guard.fencing_token());
    }
}

/// A key a fair release handed to a waiter that has not taken it yet
/// (`redlock:next:` and the waiter's token, as the release script writes
/// it) on a majority: nobody holds the lock, and `inspect` says it is
/// reserved, for whom and for how long (before, it read as held by
/// `redlock:next:...`).
#[test]
fn inspect_tells_a_fair_reservation_from_a_holder() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = support::manager(&cluster, Duration::from_millis(500));
    let r = resource("inspect-reserved");
    let waiter = "0123456789abcdef0123456789abcdef";
    for s in &cluster.servers[..2] {
        let _: () = redis::cmd("SET")
            .arg(&r)
            .arg(format!("redlock:next:{waiter}"))
            .arg("PX")
            .arg(5000)
            .query(&mut support::admin(s))
            .unwrap();
    }
    let info = dlm.inspect(&r).unwrap();
    assert!(!info.held && info.holder.is_none(), "{info:?}");
    assert_eq!(info.reserved_for.as_deref(), Some(waiter), "{info:?}");
    let left = info.left.unwrap();
    assert!(left <= Duration::from_secs(5), "{left:?}");
    assert_eq!(info.fencing_counter, None);
    assert_eq!(info.members[0].reserved_for(), Some(waiter));
    let shown = info.members[0].to_string();
    assert!(
        shown.contains(&format!("reserved for waiter {waiter} for ")),
        "{shown}"
    );
    assert_eq!(info.members[2].reserved_for(), None);
}
