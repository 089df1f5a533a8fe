//! Fencing tokens: strictly increasing per resource, across sequential and
//! contending acquisitions, with a minority of nodes down or lagging,
//! across counters that expire, are deleted or are lost with their nodes;
//! and what the library leaves on the nodes.

use crate::support;

use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::Commands;
use redlock_sync::{Error, LockGuard, LockManager};
use support::{Nodes, Server, admin, manager, resource, wait_for};

fn fence_key(resource: &str) -> Vec<u8> {
    redlock_sync::fence_key(resource)
}

/// The fencing token of a guard from a manager with fencing on.
fn token(guard: &LockGuard) -> u64 {
    guard.fencing_token().expect("fencing is on")
}

/// Microseconds since the epoch, as counters created anew start from.
fn clock_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// Every key on `server`, with its PTTL.
fn keys_with_pttl(server: &Server) -> Vec<(Vec<u8>, i64)> {
    let mut con = admin(server);
    let keys: Vec<Vec<u8>> = con.scan().unwrap().collect::<Result<_, _>>().unwrap();
    keys.into_iter()
        .map(|k| {
            let left: i64 = con.pttl(&k).unwrap();
            (k, left)
        })
        .filter(|(_, left)| *left != -2)
        .collect()
}

fn counter(server: &Server, resource: &str) -> Option<u64> {
    admin(server).get(fence_key(resource)).unwrap()
}

fn set_counter(server: &Server, resource: &str, value: u64) {
    let _: () = admin(server).set(fence_key(resource), value).unwrap();
}

fn assert_strictly_increasing(tokens: &[u64]) {
    for pair in tokens.windows(2) {
        assert!(
            pair[0] < pair[1],
            "tokens went {} then {}",
            pair[0],
            pair[1]
        );
    }
}

#[test]
fn sequential_acquisitions_get_strictly_increasing_tokens() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, Duration::from_millis(500));
    let key = resource("fence-seq");
    let mut tokens = Vec::new();
    let before = clock_us();
    for i in 0..200 {
        let guard = dlm.lock(&key, Duration::from_secs(10)).unwrap();
        tokens.push(token(&guard));
        // Alternate release and drop: both end the lock.
        if i % 2 == 0 {
            guard.release().unwrap();
        }
    }
    // A counter created anew starts from the clock in microseconds.
    assert!(
        tokens[0] > before && tokens[0] < clock_us(),
        "{}",
        tokens[0]
    );
    assert!(tokens[199] < 1 << 53);
    assert_strictly_increasing(&tokens);
    // Every node holds the last token, in a counter that expires after
    // the default idle period (10 minutes).
    for server in &cluster.servers {
        assert_eq!(counter(server, &key), tokens.last().copied());
        let left: i64 = admin(server).pttl(fence_key(&key)).unwrap();
        assert!(left > 590_000 && left <= 600_000, "PTTL {left}");
    }
    // Another resource has its own counter.
    let other_key = resource("fence-seq-other");
    let other = dlm.lock(&other_key, Duration::from_secs(10)).unwrap();
    assert_eq!(
        counter(&cluster.servers[0], &other_key),
        Some(token(&other))
    );
}

#[test]
fn contending_threads_get_tokens_increasing_in_the_order_they_held_the_lock() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("fence-contend");
    let order = Arc::new(Mutex::new(Vec::new()));
    let threads = 6;
    let per_thread = 15;
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let mut dlm = manager(&cluster, Duration::from_millis(500));
            dlm.set_retry(1, Duration::from_millis(10)).unwrap();
            let (key, order, start) = (key.clone(), order.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                for _ in 0..per_thread {
                    let guard = dlm
                        .try_lock_for(&key, Duration::from_secs(10), Duration::from_secs(60))
                        .unwrap();
                    // Recorded while holding: the record order is the
                    // order in which the lock was held.
                    order.lock().unwrap().push(token(&guard));
                    guard.release().unwrap();
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    let order = order.lock().unwrap();
    assert_eq!(order.len(), threads * per_thread);
    assert_strictly_increasing(&order);
}

#[test]
fn tokens_keep_increasing_with_lagging_counters_and_a_minority_down() {
    let mut cluster = Nodes::start(5).unwrap();
    let key = resource("fence-lagging");
    // A state a real history can leave: a quorum (nodes 0, 3, 4) saw
    // token B; nodes 1 and 2 missed acquisitions while unreachable, and
    // their counters expired. B is far ahead of the clock, so that a
    // counter created anew (from the clock) starts below it.
    let b = clock_us() + 1_000_000_000_000;
    for i in [0, 3, 4] {
        set_counter(&cluster.servers[i], &key, b);
    }
    let dlm = manager(&cluster, Duration::from_millis(50));
    // Nodes 3 and 4 hang: the quorum is 0, 1, 2, and only node 0 knows B.
    cluster.servers[3].pause();
    cluster.servers[4].pause();
    let first = dlm.lock(&key, Duration::from_secs(10)).unwrap();
    assert_eq!(token(&first), b + 1);
    drop(first);
    // The lagging nodes that granted the lock were raised to the token,
    // and their counters kept an expiry (node 0's, set by hand above,
    // had none and keeps none: expiries are only ever raised).
    for (i, server) in cluster.servers[..3].iter().enumerate() {
        assert_eq!(counter(server, &key), Some(b + 1));
        let left: i64 = admin(server).pttl(fence_key(&key)).unwrap();
        assert!(if i == 0 { left == -1 } else { left > 0 }, "PTTL {left}");
    }
    cluster.servers[3].resume();
    cluster.servers[4].resume();
    // Now 0 and 1 hang: the quorum 2, 3, 4 shares only node 2 with the
    // last one, so node 2 must have been raised for the token to grow.
    cluster.servers[0].pause();
    cluster.servers[1].pause();
    let second = dlm.lock(&key, Duration::from_secs(10)).unwrap();
    assert_eq!(token(&second), b + 2);
    drop(second);
    cluster.servers[0].resume();
    cluster.servers[1].resume();

    let mut tokens = vec![b + 1, b + 2];
    // Each round, a different minority hangs (its counters fall behind)
    // or dies (and comes back with its data, from an append-only file).
    for round in 0..5 {
        let down = [round, (round + 1) % 5];
        for &i in &down {
            cluster.servers[i].pause();
        }
        for _ in 0..6 {
            let guard = dlm.lock(&key, Duration::from_secs(10)).unwrap();
            tokens.push(token(&guard));
        }
        for &i in &down {
            cluster.servers[i].resume();
        }
        // Counters now differ across nodes.
        let seen: Vec<_> = cluster.servers.iter().map(|s| counter(s, &key)).collect();
        assert!(seen.iter().any(|c| *c != seen[0]), "{seen:?}");
        for _ in 0..3 {
            let guard = dlm.lock(&key, Duration::from_secs(10)).unwrap();
            tokens.push(token(&guard));
        }
    }
    println!(
        "{} tokens from {} to {}, strictly increasing",
        tokens.len(),
        tokens[0],
        tokens[tokens.len() - 1]
    );
    assert_strictly_increasing(&tokens);
}

#[test]
fn tokens_survive_a_minority_restart_with_persistence() {
    let mut cluster = Nodes::persistent(3).unwrap();
    let key = resource("fence-restart");
    // Each token from a manager of its own: one that saw a server's run_id
    // change keeps it out for the TTL, persistence or not (it cannot tell
    // a restart from another server behind the address), so only clients
    // that did not witness the restart can lock with one node down.
    let take = |cluster: &Nodes| {
        let dlm = manager(cluster, Duration::from_millis(200));
        token(&dlm.lock(&key, Duration::from_secs(10)).unwrap())
    };
    let mut tokens = Vec::new();
    for i in 0..cluster.servers.len() {
        tokens.extend((0..5).map(|_| take(&cluster)));
        cluster.servers[i].kill();
        tokens.extend((0..5).map(|_| take(&cluster)));
        cluster.servers[i].start_again().unwrap();
    }
    tokens.push(take(&cluster));
    assert_strictly_increasing(&tokens);
}

#[test]
fn fencing_counter_names_are_reserved() {
    let cluster = Nodes::start(1).unwrap();
    let dlm = manager(&cluster, Duration::from_millis(500));
    let reserved = fence_key("orders");
    match dlm.lock(&reserved, Duration::from_secs(1)) {
        Err(Error::InvalidArgument { reason, .. }) => {
            assert!(reason.contains("reserved"), "{reason}")
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    // Nothing was written.
    assert!(
        !admin(&cluster.servers[0])
            .exists::<_, bool>(&reserved)
            .unwrap()
    );
}

#[test]
fn refused_acquisitions_never_set_back_the_next_token() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, Duration::from_millis(500));
    let key = resource("fence-refused");
    let held = dlm.lock(&key, Duration::from_secs(10)).unwrap();
    for _ in 0..5 {
        assert!(matches!(
            dlm.try_lock(&key, Duration::from_secs(10)),
            Err(Error::Taken { .. })
        ));
    }
    let last = token(&held);
    drop(held);
    // Refusals may advance the counters (each attempt increments them), but
    // never reset or lower them, and never hand out a token.
    let next = token(&dlm.lock(&key, Duration::from_secs(10)).unwrap());
    assert!(next > last, "{next} after {last}");
    for server in &cluster.servers {
        assert_eq!(counter(server, &key), Some(next));
    }
}

#[test]
fn a_node_whose_counter_cannot_count_is_a_failed_node_and_keeps_no_key() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, Duration::from_millis(500));
    let key = resource("fence-wrongtype");
    // Someone stored a hash where node 0 keeps the counter: INCR fails
    // there, after SET set the lock key.
    let _: () = admin(&cluster.servers[0])
        .hset(fence_key(&key), "field", "value")
        .unwrap();
    let guard = dlm.lock(&key, Duration::from_secs(10)).unwrap();
    assert!(token(&guard) >= 1);
    guard.release().unwrap();
    for server in &cluster.servers {
        assert_eq!(support::get(server, key.as_bytes()), None);
    }
    // On a majority, the lock fails, naming the nodes and the cause, and
    // removes the keys it set.
    let mut node1 = admin(&cluster.servers[1]);
    let _: () = node1.del(fence_key(&key)).unwrap();
    let _: () = node1.hset(fence_key(&key), "field", "value").unwrap();
    match dlm.lock(&key, Duration::from_secs(10)) {
        Err(err @ Error::NoQuorum { .. }) => {
            let failures = err.failures();
            assert_eq!(failures.len(), 2);
            for (failure, server) in failures.iter().zip(&cluster.servers) {
                let text = failure.to_string();
                assert!(text.contains("WRONGTYPE"), "{text}");
                // The command and key refused are named.
                assert!(text.contains(":redlock-fence"), "{text}");
                assert!(text.contains(&server.port().to_string()), "{text}");
            }
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    for server in &cluster.servers {
        assert_eq!(support::get(server, key.as_bytes()), None);
    }
}

fn fencing_manager(cluster: &Nodes, expiry: Duration) -> LockManager {
    LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::ZERO)
        .fencing_expiry(expiry)
        .build()
        .unwrap()
}

#[test]
fn distinct_resources_leave_no_key_without_an_expiry() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, Duration::from_millis(500));
    for i in 0..300 {
        let guard = dlm
            .lock(resource(&format!("order:{i}")), Duration::from_secs(5))
            .unwrap();
        if i % 2 == 0 {
            guard.release().unwrap();
        }
    }
    for server in &cluster.servers {
        let keys = keys_with_pttl(server);
        // The lock keys are gone; one counter per resource is left, each
        // with an expiry.
        assert_eq!(keys.len(), 300, "{} keys", keys.len());
        for (key, left) in &keys {
            let text = String::from_utf8_lossy(key);
            assert!(text.contains(":redlock-fence"), "{key:?}");
            assert!(
                redlock_sync::LockManager::builder()
                    .node("redis://127.0.0.1:1")
                    .build()
                    .unwrap()
                    .try_lock(key, Duration::from_secs(1))
                    .is_err_and(|e| matches!(e, Error::InvalidArgument { .. }))
            );
            assert!(
                *left > 0,
                "{:?} has PTTL {left}",
                String::from_utf8_lossy(key)
            );
        }
    }
}

#[test]
fn counters_expire_after_the_idle_period_and_the_next_token_is_still_larger() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = fencing_manager(&cluster, Duration::from_secs(1));
    let names: Vec<String> = (0..20).map(|i| resource(&format!("idle:{i}"))).collect();
    let mut last = Vec::new();
    for name in &names {
        let mut t = 0;
        for _ in 0..3 {
            let guard = dlm.lock(name, Duration::from_millis(500)).unwrap();
            t = token(&guard);
        }
        last.push(t);
    }
    let last_acquisition = Instant::now();
    // The counters live 1 s after the last acquisition: 2 s after it, no
    // node holds any key of ours.
    thread::sleep(Duration::from_secs(2).saturating_sub(last_acquisition.elapsed()));
    for server in &cluster.servers {
        let left = keys_with_pttl(server);
        assert!(left.is_empty(), "{} keys left: {left:?}", left.len());
    }
    // Created anew from the clock, the counters give larger tokens.
    for (name, last) in names.iter().zip(&last) {
        let next = token(&dlm.lock(name, Duration::from_millis(500)).unwrap());
        assert!(next > *last, "{name}: {next} after {last}");
    }
}

#[test]
fn counters_deleted_or_lost_with_a_majority_restarted_empty_still_give_larger_tokens() {
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, Duration::from_millis(500));
    let key = resource("fence-lost");
    let mut tokens = Vec::new();
    for _ in 0..5 {
        tokens.push(token(&dlm.lock(&key, Duration::from_secs(5)).unwrap()));
    }
    // Deleted on every node.
    for server in &cluster.servers {
        let _: () = admin(server).del(fence_key(&key)).unwrap();
    }
    for _ in 0..5 {
        tokens.push(token(&dlm.lock(&key, Duration::from_secs(5)).unwrap()));
    }
    // A majority restarted without persistence: its counters are gone,
    // and the third node's is behind what they had seen... but not by
    // the clock.
    cluster.servers[0].restart().unwrap();
    cluster.servers[1].restart().unwrap();
    // This manager saw the restarts and keeps those nodes out for its
    // longest TTL; another process, which never saw them, locks at once.
    assert!(dlm.lock(&key, Duration::from_secs(5)).is_err());
    let dlm = manager(&cluster, Duration::from_millis(500));
    tokens.push(token(&dlm.lock(&key, Duration::from_secs(5)).unwrap()));
    // Every node restarted empty.
    for server in &mut cluster.servers {
        server.restart().unwrap();
    }
    let dlm = manager(&cluster, Duration::from_millis(500));
    for _ in 0..5 {
        tokens.push(token(&dlm.lock(&key, Duration::from_secs(5)).unwrap()));
    }
    assert_strictly_increasing(&tokens);
}

#[test]
fn counters_from_earlier_versions_keep_working() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, Duration::from_millis(500));
    let key = resource("fence-legacy");
    for server in &cluster.servers {
        // Versions before 0.2 counted from 1 under another name, with no
        // expiry; a counter at today's name with a small value and no
        // expiry (set by hand, say) is behind the clock: the count goes on
        // from the clock, above it.
        let mut con = admin(server);
        let _: () = con
            .set([b"redlock-sync:fence:", key.as_bytes()].concat(), 147)
            .unwrap();
        let _: () = con.set(fence_key(&key), 41).unwrap();
    }
    let before = clock_us();
    let first = token(&dlm.lock(&key, Duration::from_secs(5)).unwrap());
    assert!(first > before && first <= clock_us() + 1, "{first}");
    let second = token(&dlm.lock(&key, Duration::from_secs(5)).unwrap());
    assert!(second > first, "{second} after {first}");
    for server in &cluster.servers {
        // A counter's expiry is only ever raised: one without an expiry
        // (it outlives every lock) keeps none.
        let left: i64 = admin(server).pttl(fence_key(&key)).unwrap();
        assert_eq!(left, -1, "PTTL {left}");
    }
}

#[test]
fn renewals_keep_the_counter_alive_longer_than_the_lock() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = fencing_manager(&cluster, Duration::from_millis(200));
    let key = resource("fence-outlives");
    let mut guard = dlm.lock(&key, Duration::from_secs(2)).unwrap();
    // Never shorter than the lock's TTL...
    for server in &cluster.servers {
        let left: i64 = admin(server).pttl(fence_key(&key)).unwrap();
        assert!(left > 1_000 && left <= 2_000, "PTTL {left}");
    }
    // ...also after an extension past it.
    guard.extend(Duration::from_secs(5)).unwrap();
    for server in &cluster.servers {
        // Read first, so a counter expiring with the lock reads no lower.
        let counter_left: i64 = admin(server).pttl(fence_key(&key)).unwrap();
        let lock_left: i64 = admin(server).pttl(&key).unwrap();
        assert!(counter_left >= lock_left, "{counter_left} < {lock_left}");
    }
}

/// Issue 39: every attempt, refused or not, keeps the counter alive for
/// its manager's idle period; one with a short period must not cut the
/// life of a counter a long-TTL holder relies on (the counter would
/// expire under the lock, and the next token come from a client's
/// clock). Its expiry is only ever raised: `PEXPIRE ... GT`, or the keep
/// script on servers before Redis 7.0 (the CI runs this on Redis 6.2).
#[test]
fn a_refused_attempt_never_shortens_the_counter_of_a_held_lock() {
    let cluster = Nodes::start(3).unwrap();
    let long = fencing_manager(&cluster, Duration::from_secs(600));
    let short = fencing_manager(&cluster, Duration::from_millis(200));
    let key = resource("fence-never-shorter");
    let held = long.lock(&key, Duration::from_secs(60)).unwrap();
    for _ in 0..3 {
        assert!(matches!(
            short.try_lock(&key, Duration::from_millis(100)),
            Err(Error::Taken { .. })
        ));
    }
    for server in &cluster.servers {
        // Read first, so a counter expiring with the lock reads no lower.
        let counter_left: i64 = admin(server).pttl(fence_key(&key)).unwrap();
        let lock_left: i64 = admin(server).pttl(&key).unwrap();
        assert!(
            counter_left >= lock_left && lock_left > 50_000,
            "the counter has {counter_left} ms left under a lock with {lock_left} ms"
        );
    }
    // The next token is still above the held one.
    let last = token(&held);
    drop(held);
    assert!(token(&short.lock(&key, Duration::from_secs(1)).unwrap()) > last);
}

#[test]
fn fencing_off_writes_only_the_lock_key_and_gives_no_token() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .fencing(false)
        .build()
        .unwrap();
    assert!(!dlm.fencing());
    let key = resource("fence-off");
    let mut guard = dlm.lock(&key, Duration::from_secs(5)).unwrap();
    assert_eq!(guard.fencing_token(), None);
    guard.extend(Duration::from_secs(10)).unwrap();
    for server in &cluster.servers {
        let keys = keys_with_pttl(server);
        assert_eq!(keys.len(), 1, "{keys:?}");
        assert_eq!(keys[0].0, key.as_bytes());
        assert!(keys[0].1 > 5_000, "{keys:?}");
    }
    guard.release().unwrap();
    for server in &cluster.servers {
        assert!(keys_with_pttl(server).is_empty());
    }
    // Kept alive, too.
    let guard = dlm
        .lock(&key, Duration::from_millis(300))
        .unwrap()
        .keep_alive();
    thread::sleep(Duration::from_millis(700));
    guard.ensure_held().unwrap();
    drop(guard);
    let gone = wait_for(Duration::from_secs(2), || {
        cluster.servers.iter().all(|s| keys_with_pttl(s).is_empty())
    });
    assert!(gone.is_some());
}

#[test]
fn a_zero_fencing_expiry_is_refused_and_a_sub_millisecond_one_accepted() {
    let build = |expiry| {
        LockManager::builder()
            .node("redis://127.0.0.1:1")
            .fencing_expiry(expiry)
            .build()
    };
    match build(Duration::ZERO) {
        Err(Error::InvalidConfig { reason, .. }) => {
            assert!(reason.contains("fencing expiry"), "{reason}")
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert!(build(Duration::from_micros(1)).is_ok());
}

/// Keys and `used_memory` on a node.
fn footprint(server: &Server) -> (u64, u64) {
    let mut con = admin(server);
    let keys: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    let used = support::info_field(&mut con, "memory", "used_memory")
        .unwrap()
        .unwrap()
        .parse()
        .unwrap();
    (keys, used)
}

/// What 20,000 per-entity locks leave on a node. Prints figures; run with
/// `cargo test --release --test it fencing_tokens::footprint -- --ignored --nocapture`.
#[test]
#[ignore]
fn footprint_of_20000_distinct_resources() {
    let cluster = Nodes::start(3).unwrap();
    let node = &cluster.servers[0];
    let (_, empty) = footprint(node);
    println!("empty node: used_memory {empty}");
    let run = |dlm: &LockManager, prefix: &str| {
        for i in 0..20_000 {
            // 1 s TTLs: the idle period, not the TTL, decides when a
            // counter goes (it lives max(idle period, TTL)).
            dlm.lock(format!("{prefix}:{i}"), Duration::from_secs(1))
                .unwrap()
                .release()
                .unwrap();
        }
    };
    // Default settings (10 minute idle period).
    run(&manager(&cluster, Duration::from_millis(500)), "order");
    let (keys, used) = footprint(node);
    println!(
        "default settings, right after: {keys} keys, used_memory {used} (+{} B, {} B a key)",
        used - empty,
        (used - empty) / keys.max(1)
    );
    let ttl: i64 = admin(node).pttl(fence_key("order:0")).unwrap();
    println!("  counter PTTL {ttl} ms");
    for server in &cluster.servers {
        let _: () = redis::cmd("FLUSHALL").query(&mut admin(server)).unwrap();
    }
    // A 2 s idle period, to see the counters go.
    let dlm = fencing_manager(&cluster, Duration::from_secs(2));
    run(&dlm, "order");
    let (keys, used) = footprint(node);
    println!("2 s idle period, right after: {keys} keys, used_memory {used}");
    let logical = |n: &Server| {
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut admin(n)).unwrap();
        keys.len()
    };
    thread::sleep(Duration::from_millis(2100));
    println!(
        "2.1 s after the last acquisition: {} live keys (KEYS *)",
        logical(node)
    );
    let gone = wait_for(Duration::from_secs(30), || footprint(node).0 == 0);
    let (keys, used) = footprint(node);
    println!(
        "2 s idle period: memory reclaimed by active expiry {:?} later: {keys} keys, used_memory {used}",
        gone.unwrap_or_default()
    );
    assert_eq!(keys, 0);
    // Fencing off: nothing is left at all.
    let off = LockManager::builder()
        .nodes(cluster.urls())
        .fencing(false)
        .build()
        .unwrap();
    run(&off, "plain");
    let (keys, used) = footprint(node);
    println!("fencing off, right after: {keys} keys, used_memory {used}");
    assert_eq!(keys, 0);
}

/// Issue 44: a token is handed out only when a quorum holds at least it.
/// Nodes 1 and 2 lag (their counters far below node 0's) and refuse
/// scripts (an ACL without `EVAL`/`EVALSHA`), so the raise that would
/// bring them up to the token fails on both: the attempt fails, naming
/// the raise, and no guard is handed out.
#[test]
fn a_raise_that_misses_the_quorum_fails_the_attempt() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("fence-raise-refused");
    let high = clock_us() + 1_000_000_000_000;
    set_counter(&cluster.servers[0], &key, high);
    for server in &cluster.servers[1..] {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg("default")
            .arg("-eval")
            .arg("-evalsha")
            .query(&mut admin(server))
            .unwrap();
    }
    let dlm = LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::ZERO)
        .fair(false)
        .build()
        .unwrap();
    let err = dlm.try_lock(&key, Duration::from_secs(10)).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
    assert!(text.contains("raise"), "{text}");
    // Node 0 (which needed no raise) keeps no key of the failed attempt.
    assert_eq!(support::get(&cluster.servers[0], key.as_bytes()), None);
}

/// The count script's cost (a Lua call) is paid once per counter,
/// connection and half keep: in between, the same connection counts by
/// `INCR`, which counts as the script would there (see the crate docs,
/// "Fencing tokens"). Past half the keep the script counts again.
#[test]
fn a_connection_counts_by_script_once_per_half_keep_and_by_incr_between() {
    if support::server::skipped_before(7, 0, "servers before Redis 7.0 count by script alone") {
        return;
    }
    let cluster = Nodes::start(3).unwrap();
    let dlm = LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::ZERO)
        .fencing_expiry(Duration::from_secs(2))
        .build()
        .unwrap();
    let key = resource("fence-incr");
    let incrs = || -> Vec<u64> {
        cluster
            .servers
            .iter()
            .map(|s| support::calls(s, "incr"))
            .collect()
    };
    // Keep: the fencing expiry (2 s), above the TTL (1 s).
    let mut tokens = Vec::new();
    let started = Instant::now();
    for _ in 0..5 {
        tokens.push(token(&dlm.lock(&key, Duration::from_secs(1)).unwrap()));
    }
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "too slow a machine for this test's window"
    );
    // One thread: one connection per node, the first count the script's.
    assert_eq!(incrs(), vec![4; 3], "INCR counts after the first count");
    // Past half the keep (1 s): the script counts again, then INCR.
    thread::sleep(Duration::from_millis(1200).saturating_sub(started.elapsed()));
    tokens.push(token(&dlm.lock(&key, Duration::from_secs(1)).unwrap()));
    assert_eq!(incrs(), vec![4; 3], "the script counts past half the keep");
    tokens.push(token(&dlm.lock(&key, Duration::from_secs(1)).unwrap()));
    assert_eq!(incrs(), vec![5; 3]);
    assert_strictly_increasing(&tokens);
    // The counters live their keep from the last script count.
    for server in &cluster.servers {
        let left: i64 = admin(server).pttl(fence_key(&key)).unwrap();
        assert!(left > 1000, "{left} ms left");
    }
}

/// A master demoted (`REPLICAOF`: its data replaced by another's copy)
/// and promoted again keeps its clients' connections open, so no restart
/// closes them: its `READONLY` answer meanwhile makes its connections
/// forget the counters they counted, and the next count there is the
/// script's, from the clock, not an `INCR` on the copy's counter (see
/// the crate docs, "Fencing tokens").
#[test]
fn a_master_demoted_and_promoted_again_counts_by_script_after_its_readonly_answer() {
    if support::server::skipped_before(7, 0, "servers before Redis 7.0 count by script alone") {
        return;
    }
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, Duration::from_millis(500));
    let key = resource("fence-demoted");
    let scripts = |server: &Server| support::calls(server, "pttl");
    let mut tokens = Vec::new();
    for _ in 0..3 {
        tokens.push(token(&dlm.lock(&key, Duration::from_secs(1)).unwrap()));
    }
    let first = &cluster.servers[0];
    assert_eq!(support::calls(first, "incr"), 2, "counted by INCR");
    // Demoted: a replica of node 1, whose copy it takes.
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(cluster.servers[1].port())
        .query(&mut admin(first))
        .unwrap();
    wait_for(Duration::from_secs(10), || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut admin(first))
            .unwrap();
        info.contains("master_link_status:up")
    });
    // Granted by the two others; node 0 answers READONLY.
    tokens.push(token(&dlm.lock(&key, Duration::from_secs(1)).unwrap()));
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut admin(first))
        .unwrap();
    // Measured while the guard is held (its release runs a `PTTL` too).
    let before = scripts(first);
    let guard = dlm.lock(&key, Duration::from_secs(1)).unwrap();
    assert_eq!(
        scripts(first) - before,
        1,
        "node 0 counted by the script after its READONLY answer"
    );
    tokens.push(token(&guard));
    drop(guard);
    assert_strictly_increasing(&tokens);
}

/// Strict mode (`restart_quarantine`) is for servers that may lose data
/// without a visible restart: the script counts every time, never `INCR`.
#[test]
fn in_strict_mode_every_count_is_the_scripts() {
    let cluster = Nodes::start(3).unwrap();
    // Servers report their uptime in whole seconds: one started under a
    // second ago may be in even a 1 ms quarantine.
    thread::sleep(Duration::from_secs(2));
    let dlm = LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::ZERO)
        .restart_quarantine(Duration::from_millis(1))
        .build()
        .unwrap();
    let key = resource("fence-strict");
    let scripts = |server: &Server| support::calls(server, "pttl");
    for round in 0..4 {
        // Measured while the guard is held (its release runs a `PTTL`
        // too): the count script's one `PTTL`.
        let before: Vec<u64> = cluster.servers.iter().map(scripts).collect();
        let guard = dlm.lock(&key, Duration::from_secs(1)).unwrap();
        for (server, before) in cluster.servers.iter().zip(before) {
            assert_eq!(scripts(server) - before, 1, "round {round}");
            assert_eq!(support::calls(server, "incr"), 0, "round {round}");
        }
        drop(guard);
    }
}
