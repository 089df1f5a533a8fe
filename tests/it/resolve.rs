//! Nodes given by host name: resolution is bounded by the node timeout,
//! and every new connection resolves again, so a name that moves to
//! another address (a failover) is followed.

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use redlock_sync::{LockManager, NodeErrorKind};
use support::{Nodes, Server, get, resource, timed};

const TIMEOUT: Duration = Duration::from_millis(100);

#[test]
fn a_hung_resolver_costs_one_node_timeout_and_the_rest_still_lock() {
    let cluster = Nodes::start(3).unwrap();
    let asked = Arc::new(AtomicUsize::new(0));
    let counted = asked.clone();
    let dlm = LockManager::builder()
        .node(cluster.servers[0].url())
        .node(cluster.servers[1].url())
        .node("redis://stuck.test:6379")
        .node_timeout(TIMEOUT)
        .retry(1, Duration::ZERO)
        .resolver(move |host, port| {
            counted.fetch_add(1, Ordering::SeqCst);
            assert_eq!(host, "stuck.test");
            // A resolver that takes 3 s (a DNS server that does not answer).
            thread::sleep(Duration::from_secs(3));
            Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))])
        })
        .build()
        .unwrap();
    let mut took_max = Duration::ZERO;
    for i in 0..5 {
        let (guard, took) =
            timed(|| dlm.lock(resource(&format!("dns-{i}")), Duration::from_secs(5)));
        took_max = took_max.max(took);
        guard.unwrap().release().unwrap();
    }
    println!(
        "lock with a resolver hung for 3 s, node timeout {TIMEOUT:?}: slowest of 5 took {took_max:?}"
    );
    // Generous: the precision is measured in the bench.
    assert!(
        took_max < TIMEOUT * 2 + Duration::from_millis(400),
        "{took_max:?}"
    );
    // One resolution under way at a time, however many calls wait for it.
    assert_eq!(asked.load(Ordering::SeqCst), 1);
    // The failure says which node and that it got no connection in time.
    let err = LockManager::builder()
        .node("redis://stuck.test:6379")
        .node_timeout(TIMEOUT)
        .retry(1, Duration::ZERO)
        .resolver(|_, _| {
            thread::sleep(Duration::from_secs(3));
            Ok(Vec::new())
        })
        .build()
        .unwrap()
        .lock("x", Duration::from_secs(5))
        .unwrap_err();
    let f = &err.failures()[0];
    assert_eq!(f.kind(), NodeErrorKind::Timeout, "{f}");
    assert!(
        f.to_string()
            .starts_with("stuck.test:6379: no connection within"),
        "{f}"
    );
}

#[test]
fn a_name_that_moves_to_another_server_is_followed() {
    let mut old = Server::start().unwrap();
    let target = Arc::new(AtomicU16::new(old.port()));
    let lookup = target.clone();
    let dlm = LockManager::builder()
        .node("redis://primary.test:6379")
        .node_timeout(TIMEOUT)
        .retry(1, Duration::ZERO)
        .resolver(move |_, _| {
            Ok(vec![SocketAddr::from((
                [127, 0, 0, 1],
                lookup.load(Ordering::SeqCst),
            ))])
        })
        .build()
        .unwrap();
    let key = resource("moved");
    // The longest TTL this manager uses: how long a new server behind the
    // name is kept out.
    let ttl = Duration::from_secs(3);
    let guard = dlm.lock(&key, ttl).unwrap();
    assert_eq!(get(&old, key.as_bytes()).as_deref(), Some(guard.token()));
    guard.release().unwrap();
    // Failover: the old server dies, the name now points at a new one.
    let new = Server::start().unwrap();
    let started = std::time::Instant::now();
    old.kill();
    target.store(new.port(), Ordering::SeqCst);
    // Another server behind the name (a new run_id) may lack what the
    // old one granted: it votes once up longer than the longest TTL used.
    let err = dlm.lock(&key, ttl).unwrap_err();
    assert!(
        err.to_string()
            .contains("another server behind its address"),
        "{err}"
    );
    // Uptime is whole seconds: the start is known within a second.
    std::thread::sleep((ttl + Duration::from_millis(1100)).saturating_sub(started.elapsed()));
    let guard = dlm.lock(&key, ttl).unwrap();
    assert_eq!(get(&new, key.as_bytes()).as_deref(), Some(guard.token()));
}

#[test]
fn the_system_resolver_finds_localhost() {
    let cluster = Nodes::start(1).unwrap();
    let dlm = LockManager::builder()
        .node(format!("redis://localhost:{}", cluster.servers[0].port()))
        .retry(1, Duration::ZERO)
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    assert_eq!(
        dlm.nodes().next(),
        Some(&*format!("localhost:{}", cluster.servers[0].port()))
    );
    dlm.lock(resource("localhost"), Duration::from_secs(5))
        .unwrap()
        .release()
        .unwrap();
}
