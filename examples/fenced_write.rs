//! The paused holder, solved: a worker that pauses past its lock's
//! validity (a GC pause, swap, `SIGSTOP`) wakes and writes, and the
//! storage refuses its write because a later holder wrote with a higher
//! fencing token (`redlock_sync::fence`).
//!
//! 1. Worker A takes the lock (TTL 500 ms) and "pauses" for 1.5 s before
//!    it writes.
//! 2. Worker B, with a manager of its own (as another process would have),
//!    waits for the lock, gets it once A's has expired, and writes its
//!    report through the fence.
//! 3. A wakes and writes: refused, `FenceError::Stale`.
//!
//! Uses the nodes in `REDLOCK_NODES` (comma-separated URLs) and stores in
//! `REDLOCK_STORE` (a Redis URL; the first node by default) if set;
//! otherwise starts three temporary `redis-server` processes on free local
//! ports (the first is also the storage) and stops them on exit. Exits 0
//! when it went as above, 1 otherwise.
//!
//! ```text
//! cargo run --example fenced_write
//! ```

#[path = "../tests/it/support/server.rs"]
mod server;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redlock_sync::LockManager;
use redlock_sync::fence::Fence;

const RESOURCE: &str = "fenced-write-example:report";
const DATA: &str = "fenced-write-example:report:body";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (urls, _servers) = match std::env::var("REDLOCK_NODES") {
        Ok(list) => (list.split(',').map(str::to_owned).collect(), None),
        Err(_) => {
            let nodes = server::Nodes::start(3)
                .map_err(|e| format!("could not start local redis-server processes: {e}"))?;
            (nodes.urls(), Some(nodes))
        }
    };
    let urls: Vec<String> = urls;
    let store_url = std::env::var("REDLOCK_STORE").unwrap_or_else(|_| urls[0].clone());
    println!("lock nodes: {}; storage: {store_url}", urls.join(", "));
    let manager = || {
        LockManager::builder()
            .nodes(&urls)
            .node_timeout(Duration::from_millis(100))
            .build()
    };
    let (a, b) = (manager()?, manager()?);
    let store = redis::Client::open(store_url.as_str())?;
    let fence = Fence::new(RESOURCE);
    let start = Instant::now();
    let at = move || format!("{:>5} ms", start.elapsed().as_millis());

    let (a_holds, b_may_start) = mpsc::channel();
    let worker_a = {
        let (store, fence) = (store.clone(), fence.clone());
        thread::spawn(move || -> Result<bool, String> {
            let guard = a
                .lock(RESOURCE, Duration::from_millis(500))
                .map_err(|e| e.to_string())?;
            let token = guard.fencing_token().ok_or("fencing is off")?;
            println!(
                "{}  A holds the lock, fencing token {token}; pauses 1.5 s",
                at()
            );
            a_holds.send(()).map_err(|e| e.to_string())?;
            thread::sleep(Duration::from_millis(1500)); // the pause
            println!("{}  A wakes; its lock is valid: {}", at(), guard.is_valid());
            let mut con = store.get_connection().map_err(|e| e.to_string())?;
            let refused = match fence.set(&mut con, DATA, "A's report", token) {
                Ok(()) => {
                    println!("{}  A wrote its report (nobody newer had written)", at());
                    false
                }
                Err(e) if e.is_stale() => {
                    println!("{}  A's write was refused: {e}", at());
                    true
                }
                Err(e) => return Err(e.to_string()),
            };
            // Its lock is gone: releasing it deletes nothing of B's.
            let _ = guard.release();
            Ok(refused)
        })
    };
    b_may_start.recv()?;
    let guard = b.try_lock_for(RESOURCE, Duration::from_secs(10), Duration::from_secs(5))?;
    let token = guard.fencing_token().ok_or("fencing is off")?;
    println!(
        "{}  B holds the lock (A's expired), fencing token {token}",
        at()
    );
    let mut con = store.get_connection()?;
    fence.set(&mut con, DATA, "B's report", token)?;
    println!("{}  B wrote its report", at());
    let refused = worker_a.join().map_err(|_| "worker A panicked")??;
    guard.release()?;

    let body: Option<String> = redis::cmd("GET").arg(DATA).query(&mut con)?;
    let highest = fence.highest(&mut con)?;
    println!(
        "{}  the storage holds {:?}; highest token seen {:?}",
        at(),
        body.as_deref().unwrap_or("nothing"),
        highest
    );
    if refused && body.as_deref() == Some("B's report") && highest == Some(token) {
        println!("as expected: the paused holder's late write was refused");
        Ok(())
    } else {
        // An error, not `process::exit`: the servers started here stop.
        Err("NOT as expected".into())
    }
}
