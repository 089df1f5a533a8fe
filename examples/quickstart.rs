//! Several threads take turns on one distributed lock.
//!
//! Uses the nodes in `REDLOCK_NODES` (comma-separated URLs) if set;
//! otherwise starts three temporary `redis-server` processes on free local
//! ports and stops them on exit.
//!
//! ```text
//! cargo run --example quickstart
//! REDLOCK_NODES=redis://10.0.0.1,redis://10.0.0.2,redis://10.0.0.3 cargo run --example quickstart
//! ```

#[path = "../tests/it/support/server.rs"]
mod server;

use std::thread;
use std::time::{Duration, Instant};

use redlock_sync::{Error, LockManager};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Keep the servers (if we start any) alive until the end of main.
    let (urls, _servers) = match std::env::var("REDLOCK_NODES") {
        Ok(list) => (list.split(',').map(str::to_owned).collect(), None),
        Err(_) => {
            let cluster = server::Nodes::start(3)
                .map_err(|e| format!("could not start local redis-server processes: {e}"))?;
            println!("started 3 local redis-server nodes");
            (cluster.urls(), Some(cluster))
        }
    };
    println!("nodes: {}", urls.join(", "));

    let mut dlm = LockManager::builder()
        .nodes(&urls)
        .node_timeout(Duration::from_millis(50))
        .build()?;
    // Waiters are woken by each release and served in turn; a lock that is
    // never released is given up after 50 attempts' worth of waiting: 49
    // pauses of 10-20 ms, about 0.5-1 s, whatever wakes them early.
    dlm.set_retry(50, Duration::from_millis(20))?;
    println!("quorum: {} of {}", dlm.quorum(), urls.len());

    let ttl = Duration::from_secs(5);
    let started = Instant::now();
    thread::scope(|scope| {
        for worker in 1..=4 {
            let dlm = &dlm;
            scope.spawn(move || {
                for round in 1..=3 {
                    match dlm.lock("quickstart:report", ttl) {
                        Ok(guard) => {
                            println!(
                                "{:>7.1?}  worker {worker} holds the lock (round {round}, valid for {:.2?})",
                                started.elapsed(),
                                guard.validity()
                            );
                            thread::sleep(Duration::from_millis(30)); // the work
                            // Dropping the guard releases the lock on every node.
                        }
                        Err(e @ Error::Taken { .. }) => {
                            println!("worker {worker}: still taken, gave up: {e}")
                        }
                        // The message names each failing node and why.
                        Err(e) => eprintln!("worker {worker}: {e}"),
                    }
                }
            });
        }
    });

    // One uncontended lock+release cycle, timed a few hundred times.
    let mut cycles: Vec<Duration> = (0..300)
        .map(|_| {
            let start = Instant::now();
            dlm.lock("quickstart:cycle", ttl)
                .and_then(|guard| guard.release())
                .map(|()| start.elapsed())
        })
        .collect::<Result<_, _>>()?;
    cycles.sort();
    println!(
        "uncontended lock+release on {} nodes: median {:?}, p99 {:?}",
        urls.len(),
        cycles[cycles.len() / 2],
        cycles[cycles.len() * 99 / 100]
    );
    Ok(())
}
