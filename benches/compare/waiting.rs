//! Waiting: contention, fairness across threads, processes and managers,
//! a crashed waiter, the uncontended fair cost.

use crate::common::*;
use crate::costs::shape_rows;

/// The contended workload: waiters call `try_lock_for(resource, 2 s,
/// 10 s)` in a loop, hold the lock 1 ms, and pause 0.2 ms between
/// sections.
pub(crate) const SECTION: Duration = Duration::from_millis(1);
pub(crate) const BETWEEN: Duration = Duration::from_micros(200);

/// How waiters wait: the new waking, or plain polling with a retry delay.
pub(crate) const MODES: [(&str, bool, Duration); 3] = [
    ("woken on release", true, Duration::from_millis(200)),
    ("polling, 200 ms", false, Duration::from_millis(200)),
    ("polling, 10 ms", false, Duration::from_millis(10)),
];

/// Runs `threads` waiters until `end`; each thread's waits.
pub(crate) fn contend(
    dlm: &LockManager,
    resource: &str,
    threads: usize,
    end: Instant,
) -> Vec<Vec<Duration>> {
    thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut waits = Vec::new();
                    while Instant::now() < end {
                        let start = Instant::now();
                        let guard = dlm
                            .try_lock_for(resource, Duration::from_secs(2), Duration::from_secs(10))
                            .expect("a waiter waited 10 s");
                        waits.push(start.elapsed());
                        thread::sleep(SECTION);
                        drop(guard);
                        thread::sleep(BETWEEN);
                    }
                    waits
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The child side of the processes row: `--contend-child MODE THREADS
/// RESOURCE START_MS RUN_MS`, nodes in `REDLOCK_BENCH_NODES`; prints each
/// thread's waits in µs, one line per thread.
pub(crate) fn contend_child(args: &[String]) {
    let mode = MODES[args[0].parse::<usize>().unwrap()];
    let threads: usize = args[1].parse().unwrap();
    let resource = &args[2];
    let start_ms: u64 = args[3].parse().unwrap();
    let run_ms: u64 = args[4].parse().unwrap();
    let urls: Vec<String> = std::env::var("REDLOCK_BENCH_NODES")
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    let dlm = manager_fair(&urls, mode.1, mode.2, Fair::from_env());
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    thread::sleep(Duration::from_millis(start_ms.saturating_sub(now_ms)));
    let end = Instant::now() + Duration::from_millis(run_ms);
    for waits in contend(&dlm, resource, threads, end) {
        let line: Vec<String> = waits.iter().map(|w| w.as_micros().to_string()).collect();
        println!("{}", line.join(" "));
    }
}

/// Runs `procs` child processes of `threads` waiters each; each process's
/// waits.
pub(crate) fn contend_processes(
    urls: &[String],
    mode: usize,
    procs: usize,
    threads: usize,
    resource: &str,
    run: Duration,
) -> Vec<Vec<Duration>> {
    contend_processes_fair(urls, mode, procs, threads, resource, run, Fair::Off)
}

/// As [`contend_processes`], with every child's manager `fair` or not.
pub(crate) fn contend_processes_fair(
    urls: &[String],
    mode: usize,
    procs: usize,
    threads: usize,
    resource: &str,
    run: Duration,
    fair: Fair,
) -> Vec<Vec<Duration>> {
    let start_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 500;
    let children: Vec<_> = (0..procs)
        .map(|_| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--contend-child", &mode.to_string(), &threads.to_string()])
                .args([
                    resource,
                    &start_ms.to_string(),
                    &run.as_millis().to_string(),
                ])
                .env("REDLOCK_BENCH_NODES", urls.join(","))
                .env("REDLOCK_BENCH_FAIR", fair.env())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "a contending child failed");
            String::from_utf8(out.stdout)
                .unwrap()
                .split_whitespace()
                .map(|w| Duration::from_micros(w.parse().unwrap()))
                .collect()
        })
        .collect()
}

/// The contention table: 2, 8 and 32 waiting threads and 3 processes x 2
/// threads on one lock, for each way of waiting.
pub(crate) fn contention(report: &mut Report, urls: &[String], run: Duration) {
    report.line(String::new());
    report.line(format!(
        "Waiting for a busy lock on {} loopback nodes: try_lock_for(2 s TTL, 10 s) in a loop, \
         1 ms sections, 0.2 ms between, {:.0} s per row",
        urls.len(),
        run.as_secs_f64()
    ));
    report.line(String::new());
    report.line(
        "| waiters        | waiting          | acquisitions/s | wait p50 ms | wait p99 ms | wait max ms | wins min..max | max/min |"
            .into(),
    );
    report.line(
        "|----------------|------------------|---------------:|------------:|------------:|------------:|---------------|--------:|"
            .into(),
    );
    for (who, procs, threads) in [
        ("2 threads", 0, 2),
        ("8 threads", 0, 8),
        ("32 threads", 0, 32),
        ("3 procs x 2", 3, 2),
    ] {
        for (mode, (name, wake, delay)) in MODES.iter().enumerate() {
            let resource = format!("bench:contention:{who}:{mode}");
            let per: Vec<Vec<Duration>> = if procs == 0 {
                let dlm = manager_waking(urls, *wake, *delay);
                contend(&dlm, &resource, threads, Instant::now() + run)
            } else {
                contend_processes(urls, mode, procs, threads, &resource, run)
            };
            let Waits {
                rate,
                p50,
                p99,
                max_wait,
                min,
                max,
            } = Waits::of(per, run);
            report.line(format!(
                "| {who:<14} | {name:<16} | {rate:>14.0} | {:>11.2} | {:>11.1} | {:>11.1} | {:<13} | {:>7.2} |",
                p50,
                p99,
                max_wait,
                format!("{min}..{max}"),
                max as f64 / min.max(1) as f64,
            ));
            report.record(format!(
                "{{\"kind\":\"contention\",\"waiters\":\"{who}\",\"waiting\":\"{name}\",\
                 \"per_second\":{rate:.0},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3},\
                 \"min_wins\":{min},\"max_wins\":{max}}},",
                p50, p99, max_wait,
            ));
        }
    }
}

/// What a contention row reports: acquisitions per second, the waits'
/// p50, p99 and max (ms), and the fewest and most wins of one waiter.
pub(crate) struct Waits {
    pub(crate) rate: f64,
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) max_wait: f64,
    pub(crate) min: usize,
    pub(crate) max: usize,
}

impl Waits {
    /// From each waiter's waits over `run`.
    pub(crate) fn of(per: Vec<Vec<Duration>>, run: Duration) -> Waits {
        let wins: Vec<usize> = per.iter().map(Vec::len).collect();
        let mut all: Vec<Duration> = per.into_iter().flatten().collect();
        all.sort_unstable();
        let total = all.len();
        let at = |q: f64| all[((total as f64 * q) as usize).min(total - 1)].as_secs_f64() * 1e3;
        Waits {
            rate: total as f64 / run.as_secs_f64(),
            p50: at(0.5),
            p99: at(0.99),
            max_wait: at(1.0),
            min: *wins.iter().min().unwrap(),
            max: *wins.iter().max().unwrap(),
        }
    }
}

/// Eight waiters on one lock, woken on release: threads of one manager,
/// processes of one thread, managers of one thread in one process; fair
/// waiting off and on, in the same run.
pub(crate) fn fairness(report: &mut Report, urls: &[String], network: &str, run: Duration) {
    report.line(String::new());
    report.line(format!(
        "Eight waiters on one lock, {} nodes ({network}), woken on release: try_lock_for(2 s TTL, \
         10 s) in a loop, 1 ms sections, 0.2 ms between, {:.0} s per row",
        urls.len(),
        run.as_secs_f64()
    ));
    report.line(String::new());
    report.line(
        "| waiters          | fair         | acquisitions/s | × 8 threads, fair off | wait p50 ms | wait p99 ms | wait max ms | wins max/min |"
            .into(),
    );
    report.line(
        "|------------------|--------------|---------------:|----------------------:|------------:|------------:|------------:|-------------:|"
            .into(),
    );
    let mut base = None;
    for fair in [Fair::Off, Fair::On, Fair::NoYield] {
        for who in ["8 threads", "8 processes x 1", "8 managers x 1"] {
            // REDLOCK_BENCH_ROWS=on,processes: only the rows whose waiters
            // and setting contain these words (the first row, the base,
            // always runs; "yield" picks the rows without yields).
            let on = fair.label();
            let picked = std::env::var("REDLOCK_BENCH_ROWS").map_or(true, |rows| {
                rows.split(',')
                    .all(|w| who.contains(w) || on == w || (w == "yield" && fair == Fair::NoYield))
            });
            if base.is_some() && !picked {
                continue;
            }
            let resource = format!("bench:fair:{who}:{on}");
            let per: Vec<Vec<Duration>> = match who {
                "8 threads" => {
                    let dlm = manager_fair(urls, true, Duration::from_millis(200), fair);
                    contend(&dlm, &resource, 8, Instant::now() + run)
                }
                "8 processes x 1" => contend_processes_fair(urls, 0, 8, 1, &resource, run, fair),
                _ => {
                    let end = Instant::now() + run;
                    thread::scope(|s| {
                        let handles: Vec<_> = (0..8)
                            .map(|_| {
                                let resource = &resource;
                                s.spawn(move || {
                                    let dlm =
                                        manager_fair(urls, true, Duration::from_millis(200), fair);
                                    contend(&dlm, resource, 1, end).remove(0)
                                })
                            })
                            .collect();
                        handles.into_iter().map(|h| h.join().unwrap()).collect()
                    })
                }
            };
            let Waits {
                rate,
                p50,
                p99,
                max_wait,
                min,
                max,
            } = Waits::of(per, run);
            let threads = *base.get_or_insert(rate);
            report.line(format!(
                "| {who:<16} | {on:<12} | {rate:>14.0} | {:>21.2} | {:>11.2} | {:>11.1} | {:>11.1} | {:>12.2} |",
                rate / threads,
                p50,
                p99,
                max_wait,
                max as f64 / min.max(1) as f64,
            ));
            report.record(format!("{{\"kind\":\"fairness\",\"network\":\"{network}\",\"waiters\":\"{who}\",\"fair\":\"{on}\",\
                 \"per_second\":{rate:.0},\"p50_ms\":{:.3},\"p99_ms\":{:.3},\"max_ms\":{:.3},\
                 \"min_wins\":{min},\"max_wins\":{max}}},",
                p50, p99, max_wait,
            ));
        }
    }
}

/// The child side of the crashed-waiter rows: `--queue-child RESOURCE
/// FAIR`, nodes in `REDLOCK_BENCH_NODES`: waits for the lock with the
/// default settings until it is killed.
pub(crate) fn queue_child(args: &[String]) {
    let urls: Vec<String> = std::env::var("REDLOCK_BENCH_NODES")
        .unwrap()
        .split(',')
        .map(str::to_owned)
        .collect();
    let dlm = LockManager::builder()
        .nodes(urls)
        .fair(args[1] == "1")
        .build()
        .unwrap();
    let _ = dlm.try_lock_for(&args[0], TTL, Duration::from_secs(60));
}

/// A waiter killed (SIGKILL) while it waits ahead of a live one, with the
/// default settings: the time from the holder's release to the live
/// waiter's acquisition, against the same with no waiter ahead; fair
/// waiting off and on, `trials` each.
pub(crate) fn crashed_waiter(report: &mut Report, urls: &[String], trials: usize) {
    report.line(String::new());
    report.line(format!(
        "A waiter killed while it waits ahead of another, default settings, {} loopback nodes: \
         release to the live waiter's acquisition, {trials} trials per row",
        urls.len()
    ));
    report.line(String::new());
    report.line("| fair | ahead of it      | p50 ms | max ms |".into());
    report.line("|------|------------------|-------:|-------:|".into());
    let build = |fair: bool| {
        LockManager::builder()
            .nodes(urls)
            .fair(fair)
            .build()
            .unwrap()
    };
    for fair in [false, true] {
        for crashed in [false, true] {
            let mut took = Vec::new();
            for trial in 0..trials {
                let resource = format!("bench:crashed:{fair}:{crashed}:{trial}");
                let guard = build(fair).lock(&resource, TTL).unwrap();
                let child = crashed.then(|| {
                    let child = std::process::Command::new(std::env::current_exe().unwrap())
                        .args(["--queue-child", &resource, if fair { "1" } else { "0" }])
                        .env("REDLOCK_BENCH_NODES", urls.join(","))
                        .spawn()
                        .unwrap();
                    // Refused, it queues; then the live waiter comes.
                    thread::sleep(Duration::from_millis(300));
                    child
                });
                let live = build(fair);
                let mine = resource.clone();
                let waiting = thread::spawn(move || {
                    let g = live
                        .try_lock_for(&mine, TTL, Duration::from_secs(10))
                        .unwrap();
                    let at = Instant::now();
                    drop(g);
                    at
                });
                thread::sleep(Duration::from_millis(300));
                if let Some(mut child) = child {
                    child.kill().unwrap();
                    child.wait().unwrap();
                }
                let released = Instant::now();
                guard.release().unwrap();
                took.push(waiting.join().unwrap() - released);
            }
            took.sort_unstable();
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            let (p50, max) = (ms(took[took.len() / 2]), ms(took[took.len() - 1]));
            let on = if fair { "on" } else { "off" };
            let ahead = if crashed { "a killed waiter" } else { "nobody" };
            report.line(format!(
                "| {on:<4} | {ahead:<16} | {p50:>6.1} | {max:>6.1} |"
            ));
            report.record(format!(
                "{{\"kind\":\"crashed_waiter\",\"fair\":{fair},\"crashed\":{crashed},\
                 \"p50_ms\":{p50:.3},\"max_ms\":{max:.3}}},"
            ));
        }
    }
}

/// An uncontended lock + release with fair waiting off and on (raced
/// alone, 3 loopback nodes, default settings): nobody waits, so a fair
/// manager writes no queue; its release is the hand-off script, which
/// finds no queue and deletes the key.
pub(crate) fn uncontended_fair(report: &mut Report, urls: &[String], n: usize) {
    report.line(String::new());
    report.line(format!(
        "Uncontended lock + release, fair off and on, 3 loopback nodes ({n} cycles each, raced \
         alone)"
    ));
    report.line(String::new());
    report.line("| fair | median µs | p99 µs | × off  |".into());
    report.line("|------|----------:|-------:|-------:|".into());
    let build = |fair: bool| {
        LockManager::builder()
            .nodes(urls)
            .fair(fair)
            .build()
            .unwrap()
    };
    let (off, on) = (build(false), build(true));
    let mut unfair = || {
        off.lock("bench:uncontended-off", TTL)
            .unwrap()
            .release()
            .unwrap()
    };
    let mut fair = || {
        on.lock("bench:uncontended-on", TTL)
            .unwrap()
            .release()
            .unwrap()
    };
    let results = race(n, &mut [("off", &mut unfair), ("on", &mut fair)]);
    shape_rows(report, &results, 4, "\"kind\":\"uncontended_fair\"");
}
