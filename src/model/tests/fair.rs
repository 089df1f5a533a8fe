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
/// from there with keys yielded once handed on for a tick (20 ms) while
/// a client that cannot queue says it waits (without one, a chain yields
/// once eight ticks old, past the run's end).
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
        outsider_listens: true,
        ..CONTENDED
    },
];

/// With releases blind to a client that cannot queue and says it waits
/// (`fair/release.lua`'s `outsiders_wait` off), a release hands the key
/// on along a chain due for a yield: that client is passed over (and
/// waits eight periods, not one). The checker finds it; with the rule
/// on, the same size finds nothing (the run above).
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_heeding_listeners_a_client_that_cannot_queue_is_passed_over() {
    let rules = FairRules {
        scripts: ScriptRules {
            yields_heed_listeners: false,
            ..ScriptRules::ALL
        },
        ..FairRules::ALL
    };
    let size = FAIR_SIZES[2];
    let states = bound("MODEL_STATES", 2_000_000);
    flaw(
        fair_run(size, rules, 30, states),
        |depth| fair_run(size, FairRules::ALL, depth, states),
        "passed over",
    );
}

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

/// Restarts no client saw (issue 66), on the fair lock: a server that
/// restarts, empty or from an older copy of itself (its key, queue and
/// tickets as they were), while clients queue and claim; each attempt
/// meets the servers first, so its value names their runs. A round waits
/// for every request of it still in flight (`patient`: the restart is
/// the only fault).
pub(super) const FAIR_UNSEEN: FairSize = FairSize {
    restarts: 1,
    snapshots: true,
    patient: true,
    masks: NONE_OR_ALL,
    ..FAIR
};

/// With the default settings, the fair lock's claims and first attempts
/// give no second holder beside such a restart: a claim's refusal names
/// the holder's value, and a yes from a server it does not name is not
/// counted.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn with_default_settings_a_restart_no_client_saw_gives_no_second_fair_holder() {
    // From nothing, and from a held lock with a waiter queued (its claims
    // meet the restart sooner).
    let contended = FairSize {
        restarts: 1,
        snapshots: true,
        patient: true,
        ..CONTENDED
    };
    for (size, min) in [(FAIR_UNSEEN, 6), (contended, 6)] {
        let outcome = fair_run(
            size,
            FairRules::ALL,
            bound("MODEL_DEPTH", 30),
            bound("MODEL_STATES", 600_000),
        );
        holds(outcome, min, size);
    }
}

/// Without the servers a grant names, a restarted server's yes grants a
/// fair waiter the lock its server forgot.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_named_servers_a_restart_no_client_saw_gives_a_fair_waiter_a_held_lock() {
    let rules = FairRules {
        names_servers: false,
        ..FairRules::ALL
    };
    let states = bound("MODEL_STATES", 3_000_000);
    flaw(
        fair_run(FAIR_UNSEEN, rules, 12, states),
        |depth| fair_run(FAIR_UNSEEN, FairRules::ALL, depth, states),
        "both hold",
    );
}
