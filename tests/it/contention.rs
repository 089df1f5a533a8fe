//! Several threads contending for one resource never hold it at once.
//!
//! The witness is a separate Redis outside the quorum: inside each critical
//! section a thread INCRs an occupancy key (it must read 1), then updates a
//! counter by read, sleep, write. Any overlap shows up as occupancy above 1
//! or a lost update.

use crate::support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redlock_sync::Error;
use support::{Nodes, Server, admin};

#[test]
fn contending_threads_never_hold_the_lock_at_once() {
    let cluster = Nodes::start(3).unwrap();
    let witness = Server::start().unwrap();
    let mut dlm = support::manager(&cluster, Duration::from_millis(500));
    dlm.set_retry(1, Duration::from_millis(5)).unwrap();
    let sections = AtomicU64::new(0);
    let overlaps = AtomicU64::new(0);
    let run_for = Duration::from_secs(2);

    thread::scope(|scope| {
        for worker in 0..8u64 {
            let (dlm, witness, sections, overlaps) = (&dlm, &witness, &sections, &overlaps);
            scope.spawn(move || {
                let mut w = admin(witness);
                let end = Instant::now() + run_for;
                while Instant::now() < end {
                    let guard = match dlm.try_lock_for(
                        "contended",
                        Duration::from_secs(5),
                        Duration::from_secs(10),
                    ) {
                        Ok(guard) => guard,
                        Err(Error::Taken { .. }) => continue,
                        Err(e) => panic!("worker {worker}: {e}"),
                    };
                    let occupancy: i64 = w.incr("occupancy", 1).unwrap();
                    if occupancy != 1 {
                        overlaps.fetch_add(1, Ordering::Relaxed);
                    }
                    let n: i64 = w.get("counter").unwrap_or(0);
                    thread::sleep(Duration::from_millis(1 + worker % 3));
                    let _: () = w.set("counter", n + 1).unwrap();
                    let _: i64 = w.decr("occupancy", 1).unwrap();
                    assert!(guard.is_valid(), "the section outlived the lock");
                    sections.fetch_add(1, Ordering::Relaxed);
                    drop(guard);
                }
            });
        }
    });

    let sections = sections.load(Ordering::Relaxed);
    let counter: i64 = admin(&witness).get("counter").unwrap();
    eprintln!("8 threads, {sections} critical sections");
    assert_eq!(overlaps.load(Ordering::Relaxed), 0, "two holders at once");
    assert_eq!(
        counter as u64, sections,
        "lost updates mean overlapping holders"
    );
    assert!(sections >= 20, "only {sections} sections in {run_for:?}");
}
