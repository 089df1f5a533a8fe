//! The checker's runs: the library's rules hold in every interleaving of
//! a small system, and with a past fix turned off the checker finds the
//! flaw it fixed (its schedule is printed: the best account of why the
//! rule exists). Work in progress (issue 57): the restart quarantine is
//! the first rule shown so; per-attempt values and raise-only extends
//! need schedules deeper than a breadth-first search of this model
//! reaches yet (no counterexample by depth 10, about a million states).
//! They run optimized (`cargo test --release --lib model::`), ignored in
//! a debug build.

use super::explore::{Outcome, check};
use super::lock::{LockModel, Rules, Size};

/// How deep to explore: `MODEL_DEPTH`, or 9 steps.
fn depth() -> usize {
    std::env::var("MODEL_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(9)
}

const MAX_STATES: usize = 3_000_000;

fn run(size: Size, rules: Rules, depth: usize) -> Outcome {
    let outcome = check(&LockModel::new(size, rules), depth, MAX_STATES);
    eprintln!(
        "{rules:?}, {size:?}: {} states, depth {}{}",
        outcome.states,
        outcome.depth,
        if outcome.complete { " (all)" } else { "" }
    );
    if let Some((why, steps)) = &outcome.counterexample {
        eprintln!("counterexample: {why}");
        for (i, step) in steps.iter().enumerate() {
            eprintln!("{:>3}. {step}", i + 1);
        }
    }
    outcome
}

/// Expects the checker to find a flaw with `rules`: its words contain
/// `what`.
fn finds(size: Size, rules: Rules, depth: usize, what: &str) {
    let outcome = run(size, rules, depth);
    let (why, _) = outcome.counterexample.unwrap_or_else(|| {
        panic!(
            "no counterexample with {rules:?} in {} states",
            outcome.states
        )
    });
    assert!(why.contains(what), "{why}");
    // The same schedule is no flaw with every rule on: the rule is what
    // stops it.
    let safe = run(size, Rules::ALL, depth);
    assert!(
        safe.counterexample.is_none(),
        "the library's rules broke too"
    );
}

const PLAIN: Size = Size {
    acquisitions: 1,
    fenced: false,
    restarts: 0,
    duplicates: 0,
    losses: 0,
    horizon: 3,
    fast: true,
    extends: false,
};

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn the_lock_holds_in_every_interleaving_of_three_servers_and_two_clients() {
    let d = depth();
    for size in [
        PLAIN,
        Size {
            restarts: 1,
            ..PLAIN
        },
        Size {
            fenced: true,
            ..PLAIN
        },
    ] {
        let outcome = run(size, Rules::ALL, d);
        assert!(outcome.counterexample.is_none());
    }
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_the_restart_quarantine_an_empty_server_votes_twice() {
    let rules = Rules {
        quarantine: false,
        ..Rules::ALL
    };
    finds(
        Size {
            restarts: 1,
            ..PLAIN
        },
        rules,
        depth() + 1,
        "both hold",
    );
}
