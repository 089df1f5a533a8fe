//! Yields: clients that do not queue (unfair managers, other Redlock
//! clients) get turns beside fair waiters, and the yield costs nothing
//! when nobody else is there.

use super::*;

/// A manager of this library that cannot queue (`fair(false)`), waiting
/// beside fair waiters that never let the key go, says so (it listens on
/// the name's yield channel): a chain yields once it is `fair_yield` old,
/// not `8 × fair_yield`, and the manager, woken by the yield, takes the
/// key within about `fair_yield` and a reservation of its first attempt
/// (asked: generous, 4 s for a 1 s `fair_yield`; without it saying so,
/// the first yield comes after 8 s).
#[test]
fn a_manager_that_cannot_queue_gets_a_turn_within_about_the_yield_period() {
    let _heavy = support::heavy();
    let nodes = Nodes::start(3).unwrap();
    let name = resource("yield-unfair");
    let unfair = LockManager::builder()
        .nodes(nodes.urls())
        .fair(false)
        .build()
        .unwrap();
    let mut waited = Vec::new();
    let (ours, yields) = beside_fair_waiters(&nodes, &name, Some(Duration::from_secs(1)), || {
        for _ in 0..3 {
            let started = Instant::now();
            let guard = unfair
                .try_lock_for(&name, TTL, Duration::from_secs(20))
                .expect("a turn");
            waited.push(started.elapsed());
            thread::sleep(Duration::from_millis(1));
            guard.release().unwrap();
        }
    });
    eprintln!("waited {waited:?}, ours {ours:?}, yields {yields}");
    for w in &waited {
        assert!(*w < Duration::from_secs(4), "waited {waited:?}");
    }
    assert!(ours.iter().all(|&n| n > 0), "{ours:?}");
}

/// What [`mixed_run`] counted.
#[derive(Debug)]
struct Mixed {
    /// Sections of each fair manager.
    ours: Vec<usize>,
    /// Sections of the other client.
    theirs: usize,
    /// Yields the first node announced.
    yields: usize,
}

/// Members decide to yield by their own clocks, so one may yield a key at
/// a release at which the others hand it on. That member keeps the key
/// free under its yield's mark, also from the waiter the others told,
/// which holds the lock on them only (taken there too, it began that
/// member's next chain a release early, and the yields of the members
/// never met again: CI saw a client that does not queue get no turn in
/// 30 s). That waiter's release then yields on the others (their chains
/// are as old), and a client that does not queue finds a majority free.
/// The next waiter gets the lock once that client lets go.
#[test]
fn a_key_one_member_yielded_alone_stays_free_there_and_the_next_release_yields_on_the_others() {
    let nodes = Nodes::start(3).unwrap();
    let servers: Vec<&Server> = (0..3).map(|i| &nodes[i]).collect();
    let name = resource("yield-alone");
    // A reservation, and a yield's mark, last a second (two node
    // timeouts); fair_yield is its default (a second).
    let manager = || {
        LockManager::builder()
            .nodes(nodes.urls())
            .node_timeout(Duration::from_millis(500))
            .build()
            .unwrap()
    };
    let (a, b, c) = (manager(), manager(), manager());
    // A client that cannot queue says it waits, as a `fair(false)`
    // manager does (a listener on the name's `:-` channel on every
    // server): chains yield a second old, not eight.
    let says = [&redlock_sync::release_channel(&name)[..], b":-"].concat();
    let _listeners: Vec<redis::Connection> = (0..3)
        .map(|i| {
            let mut listener = admin(&nodes[i]);
            redis::cmd("SUBSCRIBE")
                .arg(&says)
                .exec(&mut listener)
                .unwrap();
            listener
        })
        .collect();
    let held = a.lock(&name, TTL).unwrap();
    thread::scope(|s| {
        let waiting_b = s.spawn(|| b.try_lock_for(&name, TTL, Duration::from_secs(30)));
        until_queued(&servers, &name, 1);
        let waiting_c = s.spawn(|| c.try_lock_for(&name, TTL, Duration::from_secs(30)));
        until_queued(&servers, &name, 2);
        // Server 0's chain is due: it began 5 s ago by its clock.
        let tickets = beside(&nodes[0], &name, "tickets").unwrap();
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut admin(&nodes[0])).unwrap();
        let _: () = redis::cmd("HSET")
            .arg(&tickets)
            .arg("chain")
            .arg(secs * 1000 + micros / 1000 - 5000)
            .query(&mut admin(&nodes[0]))
            .unwrap();
        held.release().unwrap();
        let guard_b = waiting_b.join().unwrap().unwrap();
        assert_eq!(
            guard_b.agreed(),
            2,
            "the waiter took the key server 0 yielded"
        );
        // The others' chains began at that hand-off: a second on, the
        // waiter's release yields there.
        thread::sleep(Duration::from_millis(1100));
        guard_b.release().unwrap();
        for i in [1, 2] {
            let set: Option<String> = redis::cmd("SET")
                .arg(&name)
                .arg("another client")
                .arg("NX")
                .arg("PX")
                .arg(10_000)
                .query(&mut admin(&nodes[i]))
                .unwrap();
            assert_eq!(
                set.as_deref(),
                Some("OK"),
                "server {i} did not yield the key"
            );
        }
        for i in [1, 2] {
            let _: () = redis::cmd("DEL")
                .arg(&name)
                .query(&mut admin(&nodes[i]))
                .unwrap();
        }
        let guard_c = waiting_c.join().unwrap().unwrap();
        assert!(guard_c.agreed() >= 2);
        guard_c.release().unwrap();
    });
}

/// Another Redlock client (the `redlock` crate) on a resource that fair
/// waiters of this library keep contended gets turns: it cannot say it
/// waits, so a key handed on for 8 × `fair_yield` is yielded once, and
/// for two node timeouts no fair waiter takes it; the fair waiters keep
/// going too. (With the default 1 s, a yield every 8 s, each a chance
/// the other client takes about half the time with its random pauses of
/// up to 200 ms; run here with 250 ms, a yield every 2 s, so that 30 s
/// show several turns.) With `fair_yield(None)` the other client gets
/// none (the queue is never empty, so every release hands the key on).
#[test]
fn another_redlock_client_gets_turns_beside_fair_waiters() {
    let _heavy = support::heavy();
    let nodes = Nodes::start(3).unwrap();
    let name = resource("mixed-clients");
    let run = mixed_run(
        &nodes,
        &name,
        Some(Duration::from_millis(250)),
        Duration::from_secs(30),
        3,
    );
    eprintln!("yielding: {run:?}");
    assert!(
        run.theirs >= 3,
        "the other client made {} sections in 30 s: {run:?}",
        run.theirs
    );
    assert!(run.ours.iter().all(|&n| n > 0), "{run:?}");
}

/// What yielding costs and gives, measured: the sections of each client
/// in 20 s beside three fair managers, with `fair_yield` at its default
/// (1 s) and off, for a client of the `redlock` crate (which cannot say
/// it waits) and a manager of this library with `fair(false)` (which
/// can), two runs each (a measurement, not a test: its figures are in
/// the manual's "Mixing clients").
///
/// ```text
/// cargo test --release --all-features --test it fair::yields::mixed_clients_measured -- --ignored --nocapture
/// ```
#[test]
#[ignore = "a measurement: see its docs for the command"]
fn mixed_clients_measured() {
    let nodes = Nodes::start(3).unwrap();
    let length = Duration::from_secs(20);
    for run in 0..2 {
        for (label, every) in [
            ("default (1 s)", Some(Duration::from_secs(1))),
            ("off", None),
        ] {
            let name = resource(&format!("mixed-measured-{run}-{label}"));
            let Mixed {
                ours,
                theirs,
                yields,
            } = mixed_run(&nodes, &name, every, length, usize::MAX);
            let total: usize = ours.iter().sum();
            eprintln!(
                "run {run}, fair_yield {label}: ours {ours:?} = {total}, the redlock crate {theirs}, yields {yields}"
            );
            let name = resource(&format!("mixed-measured-unfair-{run}-{label}"));
            let unfair = LockManager::builder()
                .nodes(nodes.urls())
                .fair(false)
                .build()
                .unwrap();
            let mut theirs = 0;
            let (ours, yields) = beside_fair_waiters(&nodes, &name, every, || {
                let started = Instant::now();
                while started.elapsed() < length {
                    if let Ok(guard) = unfair.try_lock_for(&name, TTL, Duration::from_secs(1)) {
                        thread::sleep(Duration::from_millis(1));
                        let _ = guard.release();
                        theirs += 1;
                    }
                }
            });
            let total: usize = ours.iter().sum();
            eprintln!(
                "run {run}, fair_yield {label}: ours {ours:?} = {total}, a fair(false) manager {theirs}, yields {yields}"
            );
        }
    }
}

/// The regression guard of the yield's cost: 8 threads of one manager on
/// one resource, 1 ms sections, 0.2 ms between, `try_lock_for(2 s TTL,
/// 10 s)`, 3 nodes on loopback, with the default settings against
/// `fair_yield(None)`, two 5 s runs each, alternating. With nobody else
/// there the default must cost nothing measurable: asked here (generous,
/// for shared CI machines, and a debug build) at least 0.9× the
/// acquisitions and at most 2× the p99 wait of `fair_yield(None)`, and
/// no more than a yield per 5 s run (the first node's announcements).
/// A yield every second, the default before 2026-12-06, made here 0.93×
/// the acquisitions, a p99 within noise (in a debug build its yields held
/// few waiters up), and four yields a run: the count is what catches it.
/// (BENCHMARKS.md has the figures of release builds, 0.81× and 7× there.)
#[test]
fn the_yield_costs_nothing_measurable_when_nobody_else_is_there() {
    let _heavy = support::heavy();
    let nodes = Nodes::start(3).unwrap();
    let mut runs: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut yields = [0, 0];
    for round in 0..2 {
        for (at, every) in [Some(Duration::from_secs(1)), None].into_iter().enumerate() {
            let name = resource(&format!("yield-guard-{round}-{at}"));
            let dlm = LockManager::builder()
                .nodes(nodes.urls())
                .fair_yield(every)
                .build()
                .unwrap();
            let end = Instant::now() + Duration::from_secs(5);
            let mut waits = Vec::new();
            yields[at] += count_yields(&nodes, &name, || waits = contend(&dlm, &name, end));
            runs[at].extend(waits);
        }
    }
    let p99 = |waits: &mut Vec<Duration>| {
        waits.sort_unstable();
        waits[waits.len() * 99 / 100]
    };
    let (default_count, none_count) = (runs[0].len(), runs[1].len());
    let [mut default, mut none] = runs;
    let (default_p99, none_p99) = (p99(&mut default), p99(&mut none));
    eprintln!(
        "default: {default_count} acquisitions, p99 {default_p99:?}, {} yields; \
         fair_yield(None): {none_count}, p99 {none_p99:?}, {} yields",
        yields[0], yields[1]
    );
    // Runs of 5 s, a yield per 8 s at most: none; one a run, were a
    // chain to begin before the run (it cannot: every run has its name).
    assert!(
        yields[0] <= 2,
        "{} yields in 10 s with nobody else there (fair_yield(None): {})",
        yields[0],
        yields[1]
    );
    assert!(
        default_count as f64 >= 0.9 * none_count as f64,
        "the default made {default_count} acquisitions, fair_yield(None) {none_count}"
    );
    // A few ms of slack: a p99 of a few ms moves by that much on its own.
    assert!(
        default_p99 <= none_p99 * 2 + Duration::from_millis(5),
        "p99 wait {default_p99:?} with the default, {none_p99:?} with fair_yield(None)"
    );
}

/// Sections each client made on one resource in `length`: three fair
/// managers of this library with default settings (but `fair_yield`), and
/// one client of the `redlock` crate, which cannot queue (plain `SET NX`,
/// a random retry pause of up to 200 ms), each holding for about 1 ms.
/// The other client starts once the fair waiters made 30 sections (their
/// queue formed), and its `length` counts from then; the run ends early
/// once it made `enough`.
fn mixed_run(
    nodes: &Nodes,
    name: &str,
    fair_yield: Option<Duration>,
    length: Duration,
    enough: usize,
) -> Mixed {
    let mut theirs = 0;
    let (ours, yields) = beside_fair_waiters(nodes, name, fair_yield, || {
        let rival = redlock::RedLock::new(nodes.urls());
        let started = Instant::now();
        while started.elapsed() < length && theirs < enough {
            if let Ok(Some(lock)) = rival.lock(name.as_bytes(), TTL.as_millis() as usize) {
                thread::sleep(Duration::from_millis(1));
                rival.unlock(&lock);
                theirs += 1;
            }
        }
    });
    Mixed {
        ours,
        theirs,
        yields,
    }
}

/// Runs `during` while three fair managers of this library with default
/// settings (but `fair_yield`) keep `name` contended, each section about
/// 1 ms, from once they made 30 sections (their queue formed) until it
/// returns. Answers each fair manager's sections and the yields the
/// first node announced (":-" on the release channel).
fn beside_fair_waiters(
    nodes: &Nodes,
    name: &str,
    fair_yield: Option<Duration>,
    during: impl FnOnce(),
) -> (Vec<usize>, usize) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let stop = AtomicBool::new(false);
    let ours: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
    let yields = count_yields(nodes, name, || {
        thread::scope(|s| {
            let stop = &stop;
            for count in &ours {
                let dlm = LockManager::builder()
                    .nodes(nodes.urls())
                    .fair_yield(fair_yield)
                    .build()
                    .unwrap();
                s.spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        if let Ok(guard) = dlm.try_lock_for(name, TTL, Duration::from_secs(5)) {
                            thread::sleep(Duration::from_millis(1));
                            let _ = guard.release();
                            count.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
            // From the fair waiters' steady state on (their queue formed).
            let warm = Instant::now();
            while ours
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .sum::<usize>()
                < 30
                && warm.elapsed() < Duration::from_secs(30)
            {
                thread::sleep(Duration::from_millis(5));
            }
            during();
            stop.store(true, Ordering::Relaxed);
        })
    });
    (
        ours.iter().map(|c| c.load(Ordering::Relaxed)).collect(),
        yields,
    )
}

/// Runs `during`, and answers how many yields of `name` the first node
/// announced meanwhile (":-" on the release channel).
fn count_yields(nodes: &Nodes, name: &str, during: impl FnOnce()) -> usize {
    let channel = redlock_sync::release_channel(name);
    let mut sub = admin(&nodes[0]);
    // Should the run's end not be heard, the count ends (and the test
    // with it) within a minute.
    sub.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut sub = sub.as_pubsub();
    sub.subscribe(&channel).unwrap();
    thread::scope(|s| {
        let counting = s.spawn(move || {
            let mut yields = 0;
            while let Ok(msg) = sub.get_message() {
                let payload = msg.get_payload_bytes();
                if payload == b"end of the run" {
                    break;
                }
                yields += usize::from(payload.ends_with(b":-"));
            }
            yields
        });
        during();
        let _: () = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg("end of the run")
            .query(&mut admin(&nodes[0]))
            .unwrap();
        counting.join().unwrap()
    })
}

/// Eight threads of `dlm` contending for `name` until `end`: each asks
/// with `try_lock_for(2 s TTL, 10 s)`, holds 1 ms, pauses 0.2 ms; every
/// wait.
fn contend(dlm: &LockManager, name: &str, end: Instant) -> Vec<Duration> {
    thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                s.spawn(move || {
                    let mut waits = Vec::new();
                    while Instant::now() < end {
                        let asked = Instant::now();
                        let guard = dlm
                            .try_lock_for(name, Duration::from_secs(2), Duration::from_secs(10))
                            .expect("a turn within 10 s");
                        waits.push(asked.elapsed());
                        thread::sleep(Duration::from_millis(1));
                        guard.release().unwrap();
                        thread::sleep(Duration::from_micros(200));
                    }
                    waits
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}
