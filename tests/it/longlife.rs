//! Long life: a child process locks, waits on and releases many distinct
//! resource names (fencing on, waiters woken by releases, keep-alive
//! guards made and dropped) while the parent restarts a node midway and
//! samples the child's memory, open file descriptors and threads. After
//! warm-up they stay flat, and nothing is left on the nodes without an
//! expiry.
//!
//! The suite runs a short version (20,000 names). The long one:
//! `SOAK_NAMES=1000000 cargo test --release --all-features --test it
//! longlife::soak -- --ignored --nocapture`.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlock_sync::LockManager;
use support::{Nodes, admin};

/// What /proc says of a process: resident memory (kB), open file
/// descriptors, threads.
#[derive(Clone, Copy, Debug)]
struct Sample {
    rss_kb: u64,
    fds: usize,
    threads: u64,
}

fn sample(pid: u32) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some(Sample {
        rss_kb: field("VmRSS:")?,
        threads: field("Threads:")?,
        fds: std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count(),
    })
}

/// Every key on `server` that has no expiry.
fn keys_without_expiry(server: &support::Server) -> Vec<String> {
    let mut con = admin(server);
    let mut cursor = 0u64;
    let mut found = Vec::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query(&mut con)
            .unwrap();
        for key in keys {
            let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
            if ttl == -1 {
                found.push(key);
            }
        }
        if next == 0 {
            return found;
        }
        cursor = next;
    }
}

/// Runs the workload in a child process and watches it; `names` distinct
/// resources, `every` between samples.
fn run(names: usize, every: Duration) {
    let mut nodes = Nodes::start(3).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "longlife::workload",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("SOAK_URLS", nodes.urls().join(","))
        .env("SOAK_NAMES", names.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // The child says how far it got, a line per 1% of the names.
    let progress = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (progress, stdout) = (progress.clone(), child.stdout.take().unwrap());
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(done) = line.strip_prefix("DONE ") {
                    progress.store(done.trim().parse().unwrap_or(0), Ordering::SeqCst);
                }
            }
        })
    };
    let started = Instant::now();
    let mut samples: Vec<(usize, Sample)> = Vec::new();
    let mut restarted = false;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "the workload failed: {status}");
            break;
        }
        let done = progress.load(Ordering::SeqCst);
        if !restarted && done >= names / 2 {
            nodes.servers[1].restart().unwrap();
            restarted = true;
        }
        if let Some(s) = sample(pid) {
            samples.push((done, s));
        }
        assert!(
            started.elapsed() < Duration::from_secs(6 * 3600),
            "the workload runs too long"
        );
        thread::sleep(every);
    }
    reader.join().unwrap();
    let took = started.elapsed();
    eprintln!(
        "{names} names in {took:.1?} ({:.0}/s); samples (done, rss kB, fds, threads):",
        names as f64 / took.as_secs_f64()
    );
    for (done, s) in &samples {
        eprintln!("  {done:>9} {:>8} {:>4} {:>4}", s.rss_kb, s.fds, s.threads);
    }
    assert!(restarted, "the workload ended before its midpoint was seen");
    // After warm-up (the first quarter of the names): flat. Memory may
    // grow by allocator noise only; descriptors and threads by the
    // restart's reconnections at most.
    let warm: Vec<&Sample> = samples
        .iter()
        .filter(|(d, _)| *d <= names / 4)
        .map(|(_, s)| s)
        .collect();
    let late: Vec<&Sample> = samples
        .iter()
        .filter(|(d, _)| *d > names / 4)
        .map(|(_, s)| s)
        .collect();
    // Without samples on both sides, nothing was checked.
    assert!(
        !warm.is_empty() && late.len() >= 2,
        "{} warm-up samples and {} later ones: sample more often",
        warm.len(),
        late.len()
    );
    let rss = warm.iter().map(|s| s.rss_kb).max().unwrap_or(0);
    let fds = warm.iter().map(|s| s.fds).max().unwrap_or(0);
    let threads = warm.iter().map(|s| s.threads).max().unwrap_or(0);
    // 2 MB over the last three quarters of the names: a leak of 2 MB
    // divided by them (about 140 bytes a name in the suite's 15,000)
    // fails; allocator noise stays far below (the suite: +28 kB; the
    // soak: +168 kB over a million names).
    for s in &late {
        assert!(
            s.rss_kb <= rss + 2 * 1024,
            "memory grew: {s:?} after {rss} kB"
        );
        assert!(s.fds <= fds + 8, "descriptors grew: {s:?} after {fds}");
        assert!(
            s.threads <= threads + 8,
            "threads grew: {s:?} after {threads}"
        );
    }
    for server in &nodes.servers {
        let left = keys_without_expiry(server);
        assert!(left.is_empty(), "keys without an expiry: {left:?}");
    }
}

/// The suite's short version.
#[test]
fn twenty_thousand_names_leave_memory_descriptors_and_threads_flat() {
    let _heavy = support::heavy();
    run(20_000, Duration::from_millis(100));
}

/// The long version (a million names by default).
#[test]
#[ignore = "a soak: SOAK_NAMES=1000000 cargo test --release --all-features --test it longlife::soak -- --ignored --nocapture"]
fn soak() {
    let names = std::env::var("SOAK_NAMES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    run(names, Duration::from_secs(5));
}

/// Child process entry: the workload.
#[test]
#[ignore = "the child process of the long-life tests, run by them"]
fn workload() {
    let (Ok(urls), Ok(names)) = (std::env::var("SOAK_URLS"), std::env::var("SOAK_NAMES")) else {
        return;
    };
    let names: usize = names.parse().unwrap();
    let dlm = LockManager::builder()
        .nodes(urls.split(','))
        .node_timeout(Duration::from_millis(500))
        .retry(3, Duration::from_millis(200))
        .build()
        .unwrap();
    let ttl = Duration::from_secs(30);
    let workers = 4;
    let done = AtomicUsize::new(0);
    let step = (names / 100).max(1);
    thread::scope(|s| {
        for w in 0..workers {
            let (dlm, done) = (&dlm, &done);
            s.spawn(move || {
                for i in (w..names).step_by(workers) {
                    let name = format!("soak:{i}");
                    if i % 1000 == 0 {
                        // A waiter woken by the release.
                        let guard = dlm.lock(&name, ttl).unwrap();
                        thread::scope(|inner| {
                            let waiting = inner
                                .spawn(|| dlm.try_lock_for(&name, ttl, Duration::from_secs(20)));
                            thread::sleep(Duration::from_millis(5));
                            drop(guard);
                            // Through a restart the waiter may miss; it
                            // must never hang or fail for long.
                            let _ = waiting.join().unwrap();
                        });
                    } else if i % 500 == 0 {
                        // A keep-alive guard, made and dropped.
                        let guard = dlm.lock(&name, ttl).unwrap().keep_alive();
                        drop(guard);
                    } else {
                        // A node restarting (kept out for the TTL) may
                        // cost a few attempts; never a failure for good.
                        let guard = loop {
                            match dlm.lock(&name, ttl) {
                                Ok(g) => break g,
                                Err(e) if e.is_retryable() => {
                                    thread::sleep(Duration::from_millis(20))
                                }
                                Err(e) => panic!("{e}"),
                            }
                        };
                        assert!(guard.fencing_token().is_some());
                        guard.release().unwrap_or(());
                    }
                    let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                    if n % step == 0 {
                        println!();
                        println!("DONE {n}");
                    }
                }
            });
        }
    });
}
