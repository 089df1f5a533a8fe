//! The `log` feature: what an operator sees. Runs with
//! `cargo test --features log` (CI runs `--all-features`).

use crate::support;

use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use log::{Level, Log, Metadata, Record};
use redis::Commands;
use support::{Nodes, admin, resource, wait_for};

/// Keeps every record from this crate.
struct Recorder(Mutex<Vec<(Level, String, String)>>);

impl Log for Recorder {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("redlock_sync")
    }
    fn log(&self, record: &Record<'_>) {
        if self.enabled(record.metadata()) {
            self.0.lock().unwrap().push((
                record.level(),
                record.target().to_owned(),
                record.args().to_string(),
            ));
        }
    }
    fn flush(&self) {}
}

static RECORDER: Recorder = Recorder(Mutex::new(Vec::new()));

/// Whether a record at `level` on `target` contains every one of
/// `needles`. The suite's other tests log to the same recorder, so each
/// check names something of this test's own (a port, the resource).
fn seen(level: Level, target: &str, needles: &[&str]) -> bool {
    count(level, target, needles) > 0
}

/// How many records [`seen`] would match.
fn count(level: Level, target: &str, needles: &[&str]) -> usize {
    RECORDER
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(l, t, m)| *l == level && t == target && needles.iter().all(|n| m.contains(n)))
        .count()
}

/// Installs the recorder, once for the suite.
fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        log::set_logger(&RECORDER).unwrap();
        log::set_max_level(log::LevelFilter::Debug);
    });
}

/// A lock taken while a member failed: one warning naming the resource,
/// the count and the failed member with its cause.
#[test]
fn a_lock_taken_with_a_member_down_logs_the_lost_redundancy() {
    install();
    let mut cluster = Nodes::start(3).unwrap();
    cluster.servers[2].kill();
    let dlm = support::manager(&cluster, Duration::from_millis(200));
    let key = resource("redundancy-logged");
    let guard = dlm.lock(&key, Duration::from_secs(5)).unwrap();
    let port = format!(":{}", cluster.servers[2].port());
    assert!(
        seen(
            Level::Warn,
            "redlock_sync::redundancy",
            &[&key, "2 of 3 members", &port, "connection refused"]
        ),
        "{:?}",
        RECORDER.0.lock().unwrap()
    );
    guard.release().unwrap();
}

#[test]
fn renewals_that_miss_the_quorum_and_lost_locks_are_logged() {
    install();
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = support::manager(&cluster, Duration::from_millis(100));
    let key = resource("logged");

    // A majority hangs under a kept-alive lock: a warning naming the nodes,
    // debug lines for each node failure.
    let guard = dlm
        .lock(&key, Duration::from_millis(900))
        .unwrap()
        .keep_alive();
    cluster.servers[0].pause();
    cluster.servers[1].pause();
    let port0 = cluster.servers[0].port().to_string();
    let port1 = cluster.servers[1].port().to_string();
    let warned = wait_for(Duration::from_secs(5), || {
        seen(Level::Warn, "redlock_sync::keepalive", &[&port0])
            && seen(Level::Warn, "redlock_sync::keepalive", &[&port1])
    });
    assert!(warned.is_some(), "{:?}", RECORDER.0.lock().unwrap());
    assert!(seen(
        Level::Debug,
        "redlock_sync::node",
        &[&port0, "no answer within"]
    ));
    cluster.servers[0].resume();
    cluster.servers[1].resume();
    drop(guard);

    // A takeover: an error.
    let guard = dlm
        .lock(&key, Duration::from_millis(600))
        .unwrap()
        .keep_alive();
    for server in &cluster.servers {
        let _: () = admin(server).set(&key, "someone-else").unwrap();
    }
    let lost = wait_for(Duration::from_secs(5), || {
        seen(
            Level::Error,
            "redlock_sync::keepalive",
            &[&key, "taken over"],
        )
    });
    assert!(lost.is_some(), "{:?}", RECORDER.0.lock().unwrap());
    drop(guard);

    // A restarted node: the pooled connection found closed is logged, and
    // a new one opened (counted from before the restart: the test's first
    // connection logged the same line).
    let port2 = cluster.servers[2].port().to_string();
    let opening = [port2.as_str(), "opening a connection"];
    let before = count(Level::Debug, "redlock_sync::node", &opening);
    cluster.servers[2].restart().unwrap();
    thread::sleep(Duration::from_millis(50));
    let _ = dlm.lock(resource("logged-2"), Duration::from_secs(1));
    let after = count(Level::Debug, "redlock_sync::node", &opening);
    assert!(after > before, "{before} then {after} connections opened");
}
