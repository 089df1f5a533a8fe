//! Fencing tokens: strictly increasing per resource, across sequential and
//! contending acquisitions, with a minority of nodes down or lagging.

mod support;

use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use redis::Commands;
use redlock_sync::{Error, FENCE_PREFIX};
use support::{Cluster, Server, admin, manager, resource};

fn fence_key(resource: &str) -> Vec<u8> {
    [FENCE_PREFIX, resource.as_bytes()].concat()
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
    let cluster = Cluster::start(3).unwrap();
    let dlm = manager(&cluster, Duration::from_millis(500));
    let key = resource("fence-seq");
    let mut tokens = Vec::new();
    for i in 0..200 {
        let guard = dlm.lock(&key, Duration::from_secs(10)).unwrap();
        tokens.push(guard.fencing_token());
        // Alternate release and drop: both end the lock.
        if i % 2 == 0 {
            guard.release().unwrap();
        }
    }
    assert!(tokens[0] >= 1);
    assert_strictly_increasing(&tokens);
    // The counter never expires and every node holds the last token.
    for server in &cluster.servers {
        assert_eq!(counter(server, &key), tokens.last().copied());
        assert_eq!(admin(server).pttl::<_, i64>(fence_key(&key)).unwrap(), -1);
    }
    // Another resource has its own counter.
    let other = dlm
        .lock(resource("fence-seq-other"), Duration::from_secs(10))
        .unwrap();
    assert_eq!(other.fencing_token(), 1);
}

#[test]
fn contending_threads_get_tokens_increasing_in_the_order_they_held_the_lock() {
    let cluster = Cluster::start(3).unwrap();
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
                    order.lock().unwrap().push(guard.fencing_token());
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
    let mut cluster = Cluster::start(5).unwrap();
    let key = resource("fence-lagging");
    // A state a real history can leave: a quorum (nodes 0, 3, 4) saw
    // token 100; nodes 1 and 2 missed acquisitions while unreachable.
    for (server, value) in cluster.servers.iter().zip([100, 0, 0, 100, 100]) {
        if value > 0 {
            set_counter(server, &key, value);
        }
    }
    let dlm = manager(&cluster, Duration::from_millis(50));
    // Nodes 3 and 4 hang: the quorum is 0, 1, 2, and only node 0 knows 100.
    cluster.servers[3].pause();
    cluster.servers[4].pause();
    let first = dlm.lock(&key, Duration::from_secs(10)).unwrap();
    assert_eq!(first.fencing_token(), 101);
    drop(first);
    // The lagging nodes that granted the lock were raised to the token.
    for server in &cluster.servers[..3] {
        assert_eq!(counter(server, &key), Some(101));
    }
    cluster.servers[3].resume();
    cluster.servers[4].resume();
    // Now 0 and 1 hang: the quorum 2, 3, 4 shares only node 2 with the
    // last one, so node 2 must have been raised for the token to grow.
    cluster.servers[0].pause();
    cluster.servers[1].pause();
    let second = dlm.lock(&key, Duration::from_secs(10)).unwrap();
    assert_eq!(second.fencing_token(), 102);
    drop(second);
    cluster.servers[0].resume();
    cluster.servers[1].resume();

    let mut tokens = vec![101, 102];
    // Each round, a different minority hangs (its counters fall behind)
    // or dies (and comes back with its data, from an append-only file).
    for round in 0..5 {
        let down = [round, (round + 1) % 5];
        for &i in &down {
            cluster.servers[i].pause();
        }
        for _ in 0..6 {
            let guard = dlm.lock(&key, Duration::from_secs(10)).unwrap();
            tokens.push(guard.fencing_token());
        }
        for &i in &down {
            cluster.servers[i].resume();
        }
        // Counters now differ across nodes.
        let seen: Vec<_> = cluster.servers.iter().map(|s| counter(s, &key)).collect();
        assert!(seen.iter().any(|c| *c != seen[0]), "{seen:?}");
        for _ in 0..3 {
            let guard = dlm.lock(&key, Duration::from_secs(10)).unwrap();
            tokens.push(guard.fencing_token());
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
    let mut cluster = Cluster::persistent(3).unwrap();
    let key = resource("fence-restart");
    let dlm = manager(&cluster, Duration::from_millis(200));
    let take = || {
        dlm.lock(&key, Duration::from_secs(10))
            .unwrap()
            .fencing_token()
    };
    let mut tokens = Vec::new();
    for server in &mut cluster.servers {
        tokens.extend((0..5).map(|_| take()));
        server.kill();
        tokens.extend((0..5).map(|_| take()));
        server.start_again().unwrap();
    }
    tokens.push(take());
    assert_strictly_increasing(&tokens);
}

#[test]
fn fencing_counter_names_are_reserved() {
    let cluster = Cluster::start(1).unwrap();
    let dlm = manager(&cluster, Duration::from_millis(500));
    let reserved = [FENCE_PREFIX, b"orders"].concat();
    match dlm.lock(&reserved, Duration::from_secs(1)) {
        Err(Error::InvalidArgument { reason }) => assert!(reason.contains("reserved"), "{reason}"),
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
    let cluster = Cluster::start(3).unwrap();
    let dlm = manager(&cluster, Duration::from_millis(500));
    let key = resource("fence-refused");
    let held = dlm.lock(&key, Duration::from_secs(10)).unwrap();
    for _ in 0..5 {
        assert!(matches!(
            dlm.try_lock(&key, Duration::from_secs(10)),
            Err(Error::Taken { .. })
        ));
    }
    let token = held.fencing_token();
    drop(held);
    // Refusals may advance the counters (each attempt increments them), but
    // never reset or lower them, and never hand out a token.
    let next = dlm
        .lock(&key, Duration::from_secs(10))
        .unwrap()
        .fencing_token();
    assert!(next > token, "{next} after {token}");
    for server in &cluster.servers {
        assert_eq!(counter(server, &key), Some(next));
    }
}

#[test]
fn a_node_whose_counter_cannot_count_is_a_failed_node_and_keeps_no_key() {
    let cluster = Cluster::start(3).unwrap();
    let dlm = manager(&cluster, Duration::from_millis(500));
    let key = resource("fence-wrongtype");
    // Someone stored a hash where node 0 keeps the counter: INCR fails
    // there, after SET set the lock key.
    let _: () = admin(&cluster.servers[0])
        .hset(fence_key(&key), "field", "value")
        .unwrap();
    let guard = dlm.lock(&key, Duration::from_secs(10)).unwrap();
    assert!(guard.fencing_token() >= 1);
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
        Err(Error::NoQuorum { failures, .. }) => {
            assert_eq!(failures.len(), 2);
            for (failure, server) in failures.iter().zip(&cluster.servers) {
                let text = failure.to_string();
                assert!(text.contains("WRONGTYPE"), "{text}");
                assert!(text.contains(&server.port().to_string()), "{text}");
            }
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    for server in &cluster.servers {
        assert_eq!(support::get(server, key.as_bytes()), None);
    }
}
