//! The fair lock's runs: safety, the late-claim rule, liveness (a live
//! waiter's bound, the offer's lapse).

use super::*;

/// The fair lock: two fair clients, two acquisitions each (a first
/// attempt and two claims at most), 30 ms of time, every request
/// delivered once.
const FAIR: FairSize = FairSize {
    acquisitions: [2, 2],
    ..LOCK_OF_A
};

/// From a held lock with a waiter queued, requests sent to none or all
/// at once: deeper schedules.
const CONTENDED: FairSize = FairSize {
    acquisitions: [2, 1],
    horizon: 1,
    contended: true,
    masks: NONE_OR_ALL,
    ..FAIR
};

/// The fair lock's sizes: from nothing (30 ms), from a held lock with a
/// waiter queued with a request lost and one run twice (30 ms), and
/// from there with keys yielded once handed on for a tick (20 ms).
const FAIR_SIZES: [FairSize; 3] = [
    FairSize {
        masks: NONE_OR_ALL,
        ..FAIR
    },
    FairSize {
        losses: 1,
        duplicates: 1,
        horizon: 3,
        ..CONTENDED
    },
    FairSize {
        horizon: 2,
        yield_every: Some(1),
        ..CONTENDED
    },
];

pub(super) fn fair_run(size: FairSize, rules: FairRules, depth: usize, states: usize) -> Outcome {
    explore(
        &FairModel::new(size, rules),
        format!("fair {rules:?}, {size:?}"),
        depth,
        states,
    )
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn the_fair_lock_holds_in_every_interleaving_of_three_servers_and_two_clients() {
    fair_sizes(bound("MODEL_DEPTH", 30), bound("MODEL_STATES", 2_000_000));
}

fn fair_sizes(depth: usize, states: usize) {
    // A yield takes 8 steps; the figures are of 7 and more.
    for size in FAIR_SIZES {
        holds(fair_run(size, FairRules::ALL, depth, states), 7, size);
    }
}

/// The fair lock's deeper run: 8 million states a size (about 10 GB).
#[test]
#[ignore = "deep: cargo test --release --lib model::tests::the_fair_lock_holds_deeper -- --ignored"]
fn the_fair_lock_holds_deeper() {
    fair_sizes(bound("MODEL_DEPTH", 40), bound("MODEL_STATES", 8_000_000));
}

/// The late-deliveries issue's two holders: a waiter's claim held back
/// past its round, delivered after a later attempt of the same waiter was
/// granted, takes that grant's key as a free one. The schedule
/// then had the claim's clean-up, late too, delete it; the checker's
/// shortest has the claim hand it to the other waiter, queued ahead.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_the_late_claim_rule_a_late_claim_gives_away_a_later_grants_key() {
    let rules = FairRules {
        scripts: ScriptRules {
            late_claims: false,
            ..ScriptRules::ALL
        },
        ..FairRules::ALL
    };
    let states = bound("MODEL_STATES", 12_000_000);
    flaw(
        fair_run(CONTENDED, rules, 40, states),
        |depth| fair_run(CONTENDED, FairRules::ALL, depth, states),
        "both hold",
    );
}

/// The liveness run: from a held lock with a waiter queued (client 0
/// makes three acquisitions, client 1 one), no faults but one client's
/// crash, every request run on every server at once and answered within
/// its tick, every live waiter asking each tick and when woken, 80 ms
/// (twice the TTL). (Delivered one server at a time too, 8 million
/// states reach 14 steps: too many for CI.)
const LIVE: FairSize = FairSize {
    acquisitions: [3, 1],
    horizon: 8,
    contended: true,
    masks: ALL_AT_ONCE,
    attempts: 10,
    crashes: 1,
    synchronous: true,
    ..FAIR
};

/// No live waiter waits longer than a dead waiter's reservation and the
/// claim after it while the lock is free for it and nobody alive is
/// ahead of it.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn a_live_waiter_waits_for_a_free_lock_one_dead_waiters_reservation_at_most() {
    let outcome = fair_run(LIVE, FairRules::ALL, 200, bound("MODEL_STATES", 3_000_000));
    assert!(outcome.counterexample.is_none());
    assert!(outcome.complete, "checked to {} steps only", outcome.depth);
}

/// Without the offer's lapse (a waiter that let an offer of the key lapse
/// stays live until its ticket does), a dead waiter is offered the key
/// again and again while the live one behind it asks.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_the_offers_lapse_a_dead_waiter_keeps_a_free_lock_from_the_next() {
    let rules = FairRules {
        scripts: ScriptRules {
            offers_lapse: false,
            ..ScriptRules::ALL
        },
        ..FairRules::ALL
    };
    let states = bound("MODEL_STATES", 3_000_000);
    flaw(
        fair_run(LIVE, rules, 200, states),
        |depth| fair_run(LIVE, FairRules::ALL, depth, states),
        "nobody alive ahead",
    );
}
