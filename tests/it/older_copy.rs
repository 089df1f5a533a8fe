//! A server restarted from an older copy of its data (an RDB snapshot,
//! Redis's default persistence; an append-only file that lost its last
//! second; a lagging replica promoted) has fencing counters that went
//! back. The next grant through it must still give a larger token than
//! every earlier one: counts go on from the larger of a counter and the
//! attempt's clock (issue 66).
//!
//! The schedule, on three servers A, B and C (node timeout 100 ms, TTL
//! 1 s): a first lock on all three (token t1), released; C snapshots
//! (`SAVE`, what `save 3600 1 ...` does on its schedule); A is cut off
//! (a proxy in front of it refuses every connection: nothing reaches it,
//! not even late) while two grants go through on B and C: t2, released, then
//! Q's t3, which Q keeps and, paused, writes nothing with yet; A is back,
//! Q's lock expires; C is killed and started from its snapshot (its
//! counter is t1 again); B is out of R's reach, so R's manager, which saw
//! C restart and waited out its quarantine, is granted by A and C. Both
//! counted t1 before: R's token was t1 + 1, below Q's t3, and the store
//! took paused Q's write after R's.

use crate::support;

use std::thread;
use std::time::Duration;

use redis::Commands;
use redlock_sync::fence::Fence;
use redlock_sync::{LockGuard, LockManager};
use support::proxy::{Mode, Proxy};
use support::{Nodes, admin, resource};

const TTL: Duration = Duration::from_secs(1);

/// A manager of A (through `cut`), B (through `b`, if given) and C.
fn manager(cluster: &Nodes, cut: &Proxy, b: Option<&Proxy>) -> LockManager {
    let mut urls = cluster.urls();
    urls[0] = cut.url();
    if let Some(b) = b {
        urls[1] = b.url();
    }
    support::manager_over(urls, Duration::from_millis(100))
}

/// The schedule above, up to R's grant: the tokens of the first lock
/// (t1), the second (t2), Q's (t3) and R's (t4), with Q's guard.
fn schedule(key: &str) -> ([u64; 4], LockGuard) {
    let mut cluster = Nodes::start(3).unwrap();
    let cut = Proxy::start(cluster.servers[0].addr()).unwrap();
    let b_for_r = Proxy::start(cluster.servers[1].addr()).unwrap();
    let manager = |cluster: &Nodes| manager(cluster, &cut, None);
    let fence = redlock_sync::fence_key(key);
    let (t1, _) = lock(&manager(&cluster), key);
    let _: () = redis::cmd("SAVE")
        .query(&mut admin(&cluster.servers[2]))
        .unwrap();
    cut.set(Mode::Refuse);
    let (t2, _) = lock(&manager(&cluster), key);
    // R's manager meets the servers before C's restart, so that it sees
    // it (a new run_id) and keeps C out for its quarantine (its grant is
    // one more through B and C, released).
    let r = self::manager(&cluster, &cut, Some(&b_for_r));
    drop(lock(&r, key));
    let q = manager(&cluster);
    let (t3, held) = lock(&q, key);
    cut.set(Mode::Pass);
    // Q's lock lapses (Q is paused: it holds its guard, and writes later).
    thread::sleep(TTL + Duration::from_millis(200));
    cluster.servers[2].kill();
    cluster.servers[2].start_again().unwrap();
    let back: Option<u64> = admin(&cluster.servers[2]).get(&fence).unwrap();
    assert_eq!(
        back,
        Some(t1),
        "C's counter is back at t1 after its restart"
    );
    b_for_r.set(Mode::Refuse);
    // R's first attempt meets C's new run_id and fails (C is kept out, B
    // out of reach); once C's quarantine is over (R's longest TTL, and
    // the drift factor), A and C grant R.
    r.lock(key, TTL).unwrap_err();
    thread::sleep(TTL + Duration::from_millis(300));
    let (t4, _) = lock(&r, key);
    ([t1, t2, t3, t4], held)
}

/// Takes `key` through `dlm`, once.
fn lock(dlm: &LockManager, key: &str) -> (u64, LockGuard) {
    let guard = dlm
        .lock(key, TTL)
        .unwrap_or_else(|e| panic!("lock {key}: {e}"));
    (guard.fencing_token().expect("fencing is on"), guard)
}

#[test]
fn a_server_restarted_from_an_older_snapshot_never_gives_a_smaller_token() {
    let key = resource("older-copy-lock");
    let ([t1, t2, t3, t4], _q) = schedule(&key);
    assert!(t1 < t2 && t2 < t3, "{t1} {t2} {t3}");
    assert!(t4 > t3, "R's token {t4} is not above paused Q's {t3}");
    // The store refuses paused Q's write after R's.
    let store = Nodes::start(1).unwrap();
    let mut con = admin(&store.servers[0]);
    let fence = Fence::new(&key);
    fence.set(&mut con, "data", b"R", t4).unwrap();
    let stale = fence.set(&mut con, "data", b"Q", t3).unwrap_err();
    assert!(stale.is_stale(), "{stale}");
    let data: Vec<u8> = con.get("data").unwrap();
    assert_eq!(data, b"R");
}
