//! The checker's runs: the library's rules hold in every interleaving of
//! a small system, and with a past fix turned off the checker finds the
//! flaw it fixed (its schedule is printed: the best account of why the
//! rule exists).
//!
//! They run optimized, in CI as `cargo test --release --lib model::`
//! (ignored in a debug build, where a state costs about ten times as
//! much). `MODEL_DEPTH` and `MODEL_STATES` bound a run; the deeper run is
//! `the_lock_holds_deeper` (see TESTING.md, "Model checking").

use super::el_server::ElRules;
use super::election::{ElModel, ElSize};
use super::explore::{Model, Outcome, check};
use super::fair::{
    ALL_AT_ONCE, FairModel, FairRules, FairSize, LENGTHS, LOCK_OF_A, NONE_OR_ALL, WAIT_BOUND,
};
use super::fair_server::ScriptRules;
use super::lock::{Answer, EVERY_MASK, LockModel, Request, Rules, Server, Size, Value};
use super::rw_server::RwRules;
use super::rwlock::{RW, RwModel, RwModelRules, RwSize};
use super::sem_server::SemRules;
use super::semaphore::{SemModel, SemSize};
use super::set_server::{On, SetRules};

/// A bound from the environment variable `name`, or `default`.
fn bound(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(default)
}

fn run(size: Size, rules: Rules, depth: usize, states: usize) -> Outcome {
    explore(
        &LockModel::new(size, rules),
        format!("{rules:?}, {size:?}"),
        depth,
        states,
    )
}

/// Checks `model` (`what` names it for people) and prints what it found.
fn explore<M: Model>(model: &M, what: String, depth: usize, states: usize) -> Outcome {
    let outcome = check(model, depth, states);
    eprintln!(
        "{what}: {} states, every schedule of {} steps{}",
        outcome.states,
        outcome.depth,
        if outcome.complete {
            " (all there are)"
        } else {
            ""
        }
    );
    if let Some((why, steps)) = &outcome.counterexample {
        eprintln!("counterexample: {why}");
        for (i, step) in steps.iter().enumerate() {
            eprintln!("{:>3}. {step}", i + 1);
        }
    }
    outcome
}

/// Expects the checker to find a flaw with `rules` within `depth` steps:
/// its words contain `what`. With `sound` rules, every schedule as long
/// finds none: the rule turned off is what stops it.
fn finds(size: Size, rules: Rules, sound: Rules, depth: usize, what: &str) {
    flaw(
        run(size, rules, depth, 3_000_000),
        |depth| run(size, sound, depth, bound("MODEL_STATES", 3_000_000)),
        what,
    );
}

/// Expects `flawed` (a run with a rule off) to have found a flaw whose
/// words contain `what`, and `sound` (the library's rules, checked to a
/// depth) to find none in every schedule as long: the rule turned off is
/// what stops it.
fn flaw(flawed: Outcome, sound: impl FnOnce(usize) -> Outcome, what: &str) {
    let (why, steps) = flawed
        .counterexample
        .unwrap_or_else(|| panic!("no counterexample in {} states", flawed.states));
    eprintln!("{why}: {} steps, {} states", steps.len(), flawed.states);
    assert!(why.contains(what), "{why}");
    let safe = sound(steps.len());
    assert!(
        safe.counterexample.is_none(),
        "the library's rules broke too"
    );
    assert!(
        safe.depth >= steps.len() || safe.complete,
        "the sound rules were checked to {} steps only, not {}",
        safe.depth,
        steps.len()
    );
}

/// Expects `outcome` (a run with the library's rules) to find no flaw,
/// and to have checked every schedule of at least `min` steps (the
/// figures TESTING.md gives) or every state there is.
fn holds(outcome: Outcome, min: usize, what: impl std::fmt::Debug) {
    assert!(outcome.counterexample.is_none(), "{what:?} broke");
    assert!(
        outcome.depth >= min || outcome.complete,
        "{what:?} checked to {} steps only",
        outcome.depth
    );
}

/// Three servers (server 0's clock fast by the drift), two clients of
/// one acquisition of up to two attempts each, 30 ms of time, a TTL of
/// 40 ms; no extends, no restart, every request delivered once.
const PLAIN: Size = Size {
    acquisitions: 1,
    fenced: false,
    restarts: 0,
    duplicates: 0,
    losses: 0,
    horizon: 3,
    fast: true,
    extends: false,
    writes: false,
    masks: EVERY_MASK,
    moves: false,
    counters: [None; 3],
    snapshots: false,
    patient: false,
    failover: false,
};

/// The sizes the rules are checked at: plain, with a restart (empty or
/// with its data), fenced, with extends and 50 ms, with a request lost
/// or delivered twice.
const SIZES: [Size; 5] = [
    PLAIN,
    Size {
        restarts: 1,
        ..PLAIN
    },
    Size {
        fenced: true,
        ..PLAIN
    },
    Size {
        extends: true,
        horizon: 5,
        ..PLAIN
    },
    Size {
        losses: 1,
        duplicates: 1,
        ..PLAIN
    },
];

/// The library's rules, with strict mode where a server restarts (its
/// default leaves a restart before a client's first contact unseen: see
/// `with_default_settings_…`).
fn sound(size: Size) -> Rules {
    Rules {
        strict: size.restarts > 0,
        ..Rules::ALL
    }
}

fn every_size(depth: usize, states: usize) {
    for size in SIZES {
        let outcome = run(size, sound(size), depth, states);
        assert!(outcome.counterexample.is_none());
    }
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn the_lock_holds_in_every_interleaving_of_three_servers_and_two_clients() {
    every_size(bound("MODEL_DEPTH", 20), bound("MODEL_STATES", 1_000_000));
}

/// The deeper run: 5 million states a size, every schedule of 6 steps on
/// each, 218 s and 3.7 GB here (`MODEL_STATES` raises it, at about 0.75
/// KB a state).
#[test]
#[ignore = "deep: cargo test --release --lib model::tests::the_lock_holds_deeper -- --ignored"]
fn the_lock_holds_deeper() {
    every_size(bound("MODEL_DEPTH", 40), bound("MODEL_STATES", 5_000_000));
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_per_attempt_values_a_late_clean_up_deletes_a_later_grant() {
    let rules = Rules {
        per_attempt_values: false,
        ..Rules::ALL
    };
    finds(PLAIN, rules, Rules::ALL, 8, "both hold");
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_raise_only_extends_a_shorter_extend_cuts_what_the_holder_counts_on() {
    let rules = Rules {
        raise_only_extends: false,
        ..Rules::ALL
    };
    finds(SIZES[3], rules, Rules::ALL, 8, "both hold");
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_the_restart_quarantine_an_empty_server_votes_twice() {
    let rules = Rules {
        quarantine: false,
        ..sound(SIZES[1])
    };
    finds(SIZES[1], rules, sound(SIZES[1]), 8, "both hold");
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_the_raise_a_later_grant_counts_a_lower_fencing_token() {
    let rules = Rules {
        raise: false,
        ..Rules::ALL
    };
    finds(SIZES[2], rules, Rules::ALL, 8, "fencing token");
}

/// Restarts no client saw (issue 66): a server that restarted, empty or
/// from an older copy of itself, before a client first reached it. A
/// round waits for every server that can answer (`patient`: the restart
/// is the only fault); fenced, so that the older copy's counter went
/// back too.
const UNSEEN: Size = Size {
    restarts: 1,
    snapshots: true,
    patient: true,
    fenced: true,
    ..PLAIN
};

/// With the default settings (no strict mode), a restart no client saw
/// gives no second holder and no token that runs backwards, empty or
/// from an older copy: the servers a grant names keep the yes of a
/// server that forgot it from counting, and counts go on from the clock.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn with_default_settings_a_restart_no_client_saw_gives_no_second_holder_nor_a_smaller_token() {
    let outcome = run(UNSEEN, Rules::ALL, 20, bound("MODEL_STATES", 1_000_000));
    holds(outcome, 6, "the default rules, restarts unseen");
}

/// Without the servers a grant names, that restart lets an empty server
/// vote a second holder in.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_named_servers_a_restart_no_client_saw_lets_an_empty_server_vote() {
    let rules = Rules {
        names_servers: false,
        ..Rules::ALL
    };
    finds(UNSEEN, rules, Rules::ALL, 8, "both hold");
}

/// The older-copy schedule of issue 66, on the servers' model (each tied
/// to its Lua by `scripts.rs`): the first grant on A, B and C; C is
/// snapshotted; A is cut off while B and C grant twice (Q's grant the
/// second); C restarts from its snapshot; once Q's lock has lapsed, A and
/// C grant R. With counting from the clock R's token is above Q's;
/// without it, both counters count from the first grant's, and R's token
/// is below. (The exhaustive runs reach this only beside a second fault,
/// a member that misses two grants, where a second holder comes first:
/// `with_default_settings_a_restart_and_a_member_that_does_not_answer_let_an_empty_server_vote`.)
#[test]
fn without_counting_from_the_clock_an_older_copy_gives_a_smaller_token() {
    let off = Rules {
        count_from_clock: false,
        ..Rules::ALL
    };
    for (rules, grows) in [(Rules::ALL, true), (off, false)] {
        let (r, q) = older_copy_tokens(rules, None);
        assert_eq!(r > q, grows, "R's token {r}, Q's {q} ({rules:?})");
    }
}

/// Counting by `INCR` (`members::request::Counts`), on the same schedule:
/// R's connection to A counts by `INCR` (A's run is the one R counted in
/// by the script, the first grant). Its connection to C died with C's
/// run: the new one counts by the script, from the clock, and R's token
/// is above Q's. Were `INCR` sent wherever the client once counted by
/// the script (a memory kept across connections), C would count on from
/// its snapshot too, and R's token would be below Q's.
#[test]
fn an_incr_counts_as_the_script_only_in_the_run_the_script_counted_in() {
    for (tied, grows) in [(true, true), (false, false)] {
        let (r, q) = older_copy_tokens(Rules::ALL, Some(tied));
        assert_eq!(
            r > q,
            grows,
            "R's token {r}, Q's {q} (tied to runs: {tied})"
        );
    }
}

/// The older-copy schedule on the servers' model: R (client 1) is
/// granted by A, B and C; C is snapshotted; B and C grant Q (client 0)
/// twice; C restarts from its snapshot; A and C grant R. Answers R's
/// token and Q's. `incr`: R counts by `INCR` where it counted by the
/// script, in the same run only (`Some(true)`), or in any run
/// (`Some(false)`); never (`None`).
fn older_copy_tokens(rules: Rules, incr: Option<bool>) -> (u64, u64) {
    let mut servers: [Server; 3] = Default::default();
    // Where R counted by the script: the run of each server.
    let mut counted: [Option<u8>; 3] = [None; 3];
    // A fenced take by `client` at `now` on the servers `on`: its token
    // (every key lapses within a tick: a grant each time).
    let mut grant = |servers: &mut [Server; 3], on: &[usize], now: u16, client: u8| {
        on.iter()
            .map(|&n| {
                let by_incr = client == 1
                    && match incr {
                        Some(true) => counted[n] == Some(servers[n].run),
                        Some(false) => counted[n].is_some(),
                        None => false,
                    };
                if client == 1 && !by_incr {
                    counted[n] = Some(servers[n].run);
                }
                let take = Request::Take {
                    value: Value {
                        client,
                        acquisition: 0,
                        attempt: 1,
                    },
                    ttl: 1,
                    fenced: true,
                    names: [0; 3],
                    by_incr,
                };
                match servers[n].run(take, now, rules) {
                    Answer::Took {
                        set: true, count, ..
                    } => count,
                    other => panic!("{other:?}"),
                }
            })
            .max()
            .unwrap()
    };
    grant(&mut servers, &[0, 1, 2], 0, 1);
    let snapshot = servers[2].clone();
    grant(&mut servers, &[1, 2], 2, 0);
    let q = grant(&mut servers, &[1, 2], 4, 0);
    servers[2] = Server {
        run: servers[2].run + 1,
        ..snapshot
    };
    (grant(&mut servers, &[0, 2], 8, 1), q)
}

/// What the default settings leave to strict mode, shown: a restart no
/// client saw, and a server that kept the grant but does not answer in
/// time (a second fault among three), let an empty server vote: nothing
/// the client can see says the server forgot. Strict mode
/// ([`Builder::restart_quarantine`](crate::Builder::restart_quarantine))
/// closes it; with it the same bounds find nothing.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn with_default_settings_a_restart_and_a_member_that_does_not_answer_let_an_empty_server_vote() {
    finds(SIZES[1], Rules::ALL, sound(SIZES[1]), 8, "both hold");
}

/// Fenced writes: each holder writes to the store with its token once a
/// grant (`fence::Fence`), the write in flight until delivered, in any
/// order, late, after the writer's validity or release; two
/// acquisitions each, requests at once on none or all servers, 30 ms.
/// The store must never take a write of an earlier grant after one of a
/// later grant.
const WRITES: Size = Size {
    fenced: true,
    writes: true,
    acquisitions: 2,
    masks: &[0, 7],
    ..PLAIN
};

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn the_store_never_takes_a_stale_write_in_every_interleaving() {
    holds(
        run(
            WRITES,
            Rules::ALL,
            bound("MODEL_DEPTH", 30),
            bound("MODEL_STATES", 1_000_000),
        ),
        7,
        WRITES,
    );
}

/// Without the store's comparison (`fence/set.lua` writing whatever the
/// token), a holder's write held back in the network lands after the
/// next holder's.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_the_fences_comparison_the_store_takes_a_stale_write() {
    let rules = Rules {
        fence_compares: false,
        ..Rules::ALL
    };
    finds(WRITES, rules, Rules::ALL, 12, "the store took grant");
}

/// A moved address: a client's connection to a server re-pointed to an
/// empty spare once its takes were answered (a forwarder's, right after
/// the acquisition's reply), so that its raise, extends, release and
/// clean-ups reach a server that never voted. Fenced, from counters
/// that lag on servers 0 and 2 (5000 on server 1), one acquisition each,
/// holders extending, requests at once on none, all or any two servers,
/// 40 ms. Checked
/// besides the two holders and the tokens that run backwards: every
/// fenced grant leaves a quorum of the servers with a counter at least
/// its token (what the raise is for: a later grant then counts above
/// it).
const MOVED: Size = Size {
    fenced: true,
    extends: true,
    moves: true,
    counters: [Some(1000), Some(5000), Some(1000)],
    horizon: 4,
    masks: &[0, 3, 5, 6, 7],
    ..PLAIN
};

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn a_guards_requests_reaching_a_server_that_never_voted_change_nothing() {
    holds(
        run(
            MOVED,
            Rules::ALL,
            bound("MODEL_DEPTH", 30),
            bound("MODEL_STATES", 1_000_000),
        ),
        6,
        MOVED,
    );
}

/// Without the raise's value check (`lock/raise.lua` raising whatever
/// the key holds), a raise answered by the spare counts as a yes: the
/// token is granted while only one server holds it.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_the_raises_value_check_a_raise_answered_by_a_server_that_never_voted_counts() {
    let rules = Rules {
        raise_checks_value: false,
        ..Rules::ALL
    };
    finds(MOVED, rules, Rules::ALL, 14, "fencing token");
}

/// A Sentinel group's failover (issue 69): member 0's address leads new
/// connections to a replica promoted with a snapshot of the master's
/// state taken at any earlier moment (a lagging replica, up for long:
/// strict mode does not see it), while the old master stays up and
/// writable for the connections still open to it. Rounds wait for every
/// answer that can come (`patient`: the failover is the only fault);
/// fenced.
const FAILOVER: Size = Size {
    failover: true,
    patient: true,
    fenced: true,
    ..PLAIN
};

/// With the default settings, a failover to a lagging replica, the old
/// master writable beside the new one, gives no second holder and no
/// smaller token: a client that reaches the new master after it reached
/// the old one sees another run (the witnessed quarantine), and one that
/// never reached it does not count the new master's yes beside a refusal
/// whose value names the old one.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn with_default_settings_a_failover_to_a_lagging_replica_gives_no_second_holder() {
    let outcome = run(FAILOVER, Rules::ALL, 20, bound("MODEL_STATES", 1_000_000));
    holds(outcome, 6, "the default rules, a failover");
}

/// Without the servers a grant names, that failover gives two holders: a
/// client that never reached the old master counts the new master's yes
/// beside a member that has not answered the holder yet.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_named_servers_a_failover_to_a_lagging_replica_gives_two_holders() {
    let rules = Rules {
        names_servers: false,
        ..Rules::ALL
    };
    finds(FAILOVER, rules, Rules::ALL, 10, "both hold");
}

mod election;
mod fair;
mod rwlock;
mod semaphore;
mod sets;
