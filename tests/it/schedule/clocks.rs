//! The clock nemesis: servers whose clocks run fast or slow, inside
//! and past the drift factor.

use super::*;

/// The drift factor the managers of these runs use (the default).
const DRIFT: f64 = 0.01;

/// The clock nemesis (issue 41): every server's clock runs fast or slow
/// by a rate the seed draws, up to 0.9 of the managers' drift factor
/// (1%) either way, while the nemesis of [`check`] pauses, cuts, restarts
/// and moves nodes: every shape keeps every promise, fair waiting and
/// elections included. The servers are Valkey's under libfaketime
/// (`REDLOCK_CLOCK_SERVER_BIN`, see `support::server::clock_server`).
#[test]
fn no_schedule_breaks_the_promise_with_clocks_inside_the_drift_factor() {
    let Some(()) = clocks_here() else { return };
    check_clocked(seed(), seconds(10));
}

/// The clock nemesis's long run: `SCHEDULE_SECONDS` (default 600) split
/// over seeds of a minute each:
///
/// ```text
/// REDLOCK_CLOCK_SERVER_BIN=/path/to/valkey-server SCHEDULE_SECONDS=600 \
///     cargo test --release --all-features --test it schedule::clocks::clocks_long -- --ignored
/// ```
#[test]
#[ignore = "a soak: see its docs for the command"]
fn clocks_long_inside_the_drift_factor() {
    let Some(()) = clocks_here() else { return };
    let total = seconds(600);
    let start = Instant::now();
    while start.elapsed() < total {
        check_clocked(seed(), Duration::from_secs(60).min(total));
    }
}

/// [`check`] on 5 nodes (and 2 spares) whose clocks run at rates the
/// seed draws, each within 0.9 of [`DRIFT`] of the real clock.
fn check_clocked(seed: u64, length: Duration) {
    let _heavy = support::heavy();
    let mut rng = Rng(seed ^ 0xC10C);
    let rates: Vec<f64> = (0..NODES + 2)
        .map(|_| 1.0 + (rng.between(0, 1800) as f64 - 900.0) / 1000.0 * DRIFT)
        .collect();
    eprintln!(
        "schedule seed {seed} (replay with SCHEDULE_SEED={seed}), {length:?} on 5 nodes at \
         clock rates {rates:?}"
    );
    let (spans, log, t0) = run_clocked(seed, length, false, &rates);
    judge(seed, &spans, &log, t0);
}

/// Whether servers with fast or slow clocks can run here (a skip, with
/// `REDLOCK_REQUIRE_ALL=1` a failure, otherwise).
fn clocks_here() -> Option<()> {
    match support::server::clock_server() {
        Ok(_) => Some(()),
        Err(why) => {
            eprintln!("{}", support::server::skip(why));
            None
        }
    }
}

/// A manager of the clock races over `urls`, with drift factor `drift`:
/// fair waiting off and pauses of at most 4 ms, so that a waiter asks
/// about every 4 ms and takes a key that expired early on a majority
/// within milliseconds.
fn racer(urls: Vec<String>, drift: f64) -> LockManager {
    LockManager::builder()
        .nodes(urls)
        .node_timeout(NODE_TIMEOUT)
        .drift_factor(drift)
        .fair(false)
        .retry(100_000, Duration::from_millis(4))
        .build()
        .unwrap()
}

/// Workers that take the lock `a` over nodes whose clocks run at `rates`,
/// with managers of drift factor `drift`, and each hold it for as long as
/// they may: until `is_valid` says no (checked every 2 ms: the span runs
/// to the last yes), for `length`. Fair waiting off and short pauses, so
/// that a waiter asks about every 4 ms: a key that expires early on a
/// majority is taken within milliseconds.
fn clocked_race(rates: &[f64], drift: f64, length: Duration) -> (Vec<Span>, Instant) {
    let servers: Vec<Server> = rates
        .iter()
        .map(|&r| Server::start_clocked(r).unwrap())
        .collect();
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let spans = Mutex::new(Vec::new());
    let t0 = Instant::now();
    thread::scope(|scope| {
        for worker in 0..3 {
            let dlm = racer(urls.clone(), drift);
            let spans = &spans;
            scope.spawn(move || {
                while t0.elapsed() < length {
                    let Ok(guard) = dlm.try_lock_for(
                        "clock:a",
                        Duration::from_millis(300),
                        Duration::from_secs(1),
                    ) else {
                        continue;
                    };
                    let start = Instant::now();
                    let mut end = start;
                    while guard.is_valid() {
                        end = Instant::now();
                        thread::sleep(Duration::from_millis(2));
                    }
                    spans.lock().push(Span {
                        worker,
                        what: "lock a",
                        holds: vec![Hold::Exclusive(vec!["a".into()])],
                        token: guard.fencing_token(),
                        start,
                        end,
                    });
                }
            });
        }
    });
    (spans.into_inner(), t0)
}

/// Proof of power: a majority of nodes whose clocks run 25% fast (their
/// keys expire at 240 ms of a 300 ms TTL), against the default 1% drift
/// factor (a holder believes it holds the lock for about 290 ms): the
/// checker finds two holders at once. With a drift factor of 0.3, which
/// covers the rate, it finds none (the holder gives up at about 205 ms).
#[test]
fn clocks_past_the_drift_factor_make_two_holders_and_a_covering_drift_factor_none() {
    let Some(()) = clocks_here() else { return };
    let _heavy = support::heavy();
    let rates = [1.25, 1.25, 1.25, 1.0, 1.0];
    let (spans, t0) = clocked_race(&rates, DRIFT, Duration::from_secs(2));
    let found = violations(&spans, t0);
    assert!(
        !found.is_empty() && spans.len() >= 3,
        "no violation in {} holders with a majority 25% fast and a 1% drift factor",
        spans.len()
    );
    assert!(found.iter().any(|v| v.contains("two holders")), "{found:?}");
    let (spans, t0) = clocked_race(&rates, 0.3, Duration::from_secs(2));
    let found = violations(&spans, t0);
    assert!(
        found.is_empty(),
        "{} violations with a drift factor covering the clocks:\n{}",
        found.len(),
        found.join("\n")
    );
    assert!(spans.len() >= 3, "only {} holders", spans.len());
}

/// Leaderships over the same clocks (a majority 25% fast, the 1% drift
/// factor), each leader cut off from every node as soon as it is elected,
/// and leading for as long as `leads` says (checked every 2 ms), for 3 s.
fn leader_race(leads: fn(&Leadership) -> bool) -> (Vec<Span>, Instant) {
    let servers: Vec<Server> = [1.25, 1.25, 1.25, 1.0, 1.0]
        .iter()
        .map(|&r| Server::start_clocked(r).unwrap())
        .collect();
    let spans = Mutex::new(Vec::new());
    let t0 = Instant::now();
    let length = Duration::from_secs(3);
    thread::scope(|scope| {
        for worker in 0..3 {
            let proxies: Vec<Proxy> = servers
                .iter()
                .map(|s| Proxy::start(addr(s)).unwrap())
                .collect();
            let dlm = racer(proxies.iter().map(Proxy::url).collect(), DRIFT);
            let spans = &spans;
            scope.spawn(move || {
                let election = dlm.election("clock:e").unwrap();
                while t0.elapsed() < length {
                    let ttl = Duration::from_millis(300);
                    let Ok(lead) = election.try_campaign_for(ttl, Duration::from_secs(1)) else {
                        continue;
                    };
                    let start = Instant::now();
                    for p in &proxies {
                        p.set(Mode::Blackhole);
                    }
                    let mut end = start;
                    while leads(&lead) {
                        end = Instant::now();
                        thread::sleep(Duration::from_millis(2));
                    }
                    spans.lock().push(Span {
                        worker,
                        what: "lead e",
                        holds: vec![Hold::Exclusive(vec!["e".into()])],
                        token: Some(lead.term()),
                        start,
                        end,
                    });
                    for p in &proxies {
                        p.set(Mode::Pass);
                    }
                    drop(lead);
                }
            });
        }
    });
    (spans.into_inner(), t0)
}

/// A second leader: over a majority 25% fast, a cut-off leader that
/// trusts its validity alone (the clock, with the 1% drift factor) leads
/// on after its keys expired on the fast majority (at 0.8 of the TTL), and
/// the checker finds another elected meanwhile. `is_leader` does not let
/// that happen: it fails closed at the first missed renewal (TTL/3 and a
/// round after the last one), before the keys expire, so the renewal
/// cadence, not the drift factor, protects a leadership from clocks up to
/// about 2x fast; a lock that is not kept alive has only the drift factor
/// (above).
#[test]
fn a_leader_that_trusts_its_clock_alone_meets_a_second_leader_and_is_leader_none() {
    let Some(()) = clocks_here() else { return };
    let _heavy = support::heavy();
    let (spans, t0) = leader_race(|lead| lead.validity() > Duration::ZERO);
    let found = violations(&spans, t0);
    assert!(
        found.iter().any(|v| v.contains("two holders of e")),
        "no second leader in {} leaderships: {found:?}",
        spans.len()
    );
    let (spans, t0) = leader_race(Leadership::is_leader);
    let found = violations(&spans, t0);
    assert!(found.is_empty(), "{}", found.join("\n"));
    assert!(spans.len() >= 3, "only {} leaderships", spans.len());
}
