//! Test support: real `redis-server` processes and helpers to look at them
//! directly, bypassing the library.

#![allow(dead_code)]

pub mod faults;
pub mod hostile;
pub mod occupancy;
pub mod proxy;
pub mod redis_cluster;
pub mod sentinel;
pub mod server;
#[cfg(feature = "tls")]
pub mod tls;

use std::time::{Duration, Instant};

use redis::Commands;
pub use server::{Nodes, Server};

/// A direct connection to `server` for inspecting or changing its data.
pub fn admin(server: &Server) -> redis::Connection {
    let client = redis::Client::open(server.url()).expect("admin url");
    let con = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("admin connection");
    con.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    con
}

/// The value of `field` in section `section` of `INFO` on the server
/// behind `con` (`None` if it has no such field).
pub fn info_field(
    con: &mut redis::Connection,
    section: &str,
    field: &str,
) -> redis::RedisResult<Option<String>> {
    let info: String = redis::cmd("INFO").arg(section).query(con)?;
    Ok(info.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name == field).then(|| value.trim().to_owned())
    }))
}

/// How many times `server` has run `command`, from `INFO commandstats`
/// ("cmdstat_set:calls=4,usec=...", absent before the first call).
pub fn calls(server: &Server, command: &str) -> u64 {
    info_field(
        &mut admin(server),
        "commandstats",
        &format!("cmdstat_{command}"),
    )
    .unwrap()
    .and_then(|stats| {
        stats
            .strip_prefix("calls=")?
            .split(',')
            .next()?
            .parse()
            .ok()
    })
    .unwrap_or(0)
}

/// How many connections `server` has subscribed to the release channel
/// of `resource` (`PUBSUB NUMSUB`).
pub fn release_subscribers(server: &Server, resource: &str) -> i64 {
    let reply: (Vec<u8>, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(redlock_sync::release_channel(resource))
        .query(&mut admin(server))
        .unwrap();
    reply.1
}

/// The value stored at `key` on `server`.
pub fn get(server: &Server, key: &[u8]) -> Option<Vec<u8>> {
    admin(server).get(key).expect("GET")
}

/// The key's remaining time to live in ms (-2: no key, -1: no expiry).
pub fn pttl(server: &Server, key: &[u8]) -> i64 {
    admin(server).pttl(key).expect("PTTL")
}

/// A lock manager over `cluster` with a node timeout and no retries.
pub fn manager(cluster: &Nodes, node_timeout: Duration) -> redlock_sync::LockManager {
    manager_over(cluster.urls(), node_timeout)
}

/// A lock manager over `urls` with a node timeout and no retries.
pub fn manager_over(urls: Vec<String>, node_timeout: Duration) -> redlock_sync::LockManager {
    redlock_sync::LockManager::builder()
        .nodes(urls)
        .node_timeout(node_timeout)
        .retry(1, Duration::ZERO)
        .build()
        .expect("manager")
}

/// Runs `f` and returns its result with how long it took.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

/// Polls `f` every 5 ms until it is true or `limit` passes; returns how
/// long it took, or `None`.
pub fn wait_for(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// Runs `waiter` (an acquisition whose pause between attempts is a minute
/// or more) on a thread, then `ready` (which waits until the waiter
/// listens, asserting that it does), lets 300 ms pass (past the attempt a
/// waiter makes once subscribed), runs `release`, and asserts that the
/// waiter got its answer within a second of the release: woken by it, not
/// by its pause. Returns what `waiter` returned.
pub fn assert_woken<T: Send>(
    waiter: impl FnOnce() -> T + Send,
    ready: impl FnOnce(),
    release: impl FnOnce(),
) -> T {
    std::thread::scope(|s| {
        let waiting = s.spawn(|| {
            let got = waiter();
            (got, Instant::now())
        });
        ready();
        std::thread::sleep(Duration::from_millis(300));
        let released = Instant::now();
        release();
        let (got, at) = waiting.join().unwrap();
        let after = at.duration_since(released);
        eprintln!("answered {after:?} after the release");
        assert!(
            after < Duration::from_secs(1),
            "answered {after:?} after the release: not woken"
        );
        got
    })
}

/// Waits until every server of `cluster` has a subscriber for the release
/// channel of `resource` (a waiter listens), asserting it happens.
pub fn until_listening(cluster: &Nodes, resource: &str) {
    assert!(
        wait_for(Duration::from_secs(10), || cluster
            .servers
            .iter()
            .all(|s| release_subscribers(s, resource) >= 1))
        .is_some(),
        "the waiter never subscribed on every node"
    );
}

/// A forwarder in front of each server of `cluster`, in order (to cut
/// one client off some of them).
pub fn proxies(cluster: &Nodes) -> Vec<proxy::Proxy> {
    cluster
        .servers
        .iter()
        .map(|s| proxy::Proxy::start(([127, 0, 0, 1], s.port()).into()).unwrap())
        .collect()
}

/// How many fair waiters each server has queued for `resource`.
pub fn queued(cluster: &Nodes, resource: &str) -> Vec<usize> {
    cluster
        .servers
        .iter()
        .map(|s| {
            let mut con = admin(s);
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{resource}:redlock-queue*"))
                .query(&mut con)
                .unwrap();
            match keys.first() {
                Some(k) => redis::cmd("ZCARD").arg(k).query(&mut con).unwrap(),
                None => 0,
            }
        })
        .collect()
}

/// Waits until every server has `n` fair waiters queued for `resource`:
/// the event that says a waiter's first attempt was refused and it
/// waits (in place of a fixed sleep).
pub fn until_queued(cluster: &Nodes, resource: &str, n: usize) {
    assert!(
        wait_for(Duration::from_secs(10), || queued(cluster, resource)
            .iter()
            .all(|q| *q == n))
        .is_some(),
        "never {n} waiters queued: {:?}",
        queued(cluster, resource)
    );
}

/// A resource name unique to the calling test.
pub fn resource(name: &str) -> String {
    format!("redlock-sync-test:{name}")
}

/// The heavy tests run one at a time, as they did when each suite was a
/// test binary of its own: the fault matrix's scenarios (each starts up to
/// six servers, some loading large datasets), the exclusion checks (a
/// dozen contending threads and child processes under chaos) and the
/// schedule checker. On a 2-core machine two at once starve each other's
/// healthy nodes past their node timeouts, and the exclusion checks' child
/// processes of any section (CI once saw 0 of them where a run alone
/// gives them about a quarter).
pub fn heavy() -> std::sync::MutexGuard<'static, ()> {
    static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A failed test poisons the lock; the next one still runs.
    HEAVY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
