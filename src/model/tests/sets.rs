//! Sets beside locks: no deadlock (live), one holder (safe), the one-key
//! and late-claim rules.

use super::fair::fair_run;
use super::*;

/// Sets and locks, live: client 0 wants the set {b, a} (a first attempt
/// by `set/lock.lua`, then claims), client 1 holds `a` throughout and
/// wants `b` too; `b` holds the token of a client that died until 10 ms
/// (nobody releases it), so both are refused at first and wait in line;
/// both ask once a tick, no faults but one client's crash, 80 ms; the
/// holder acquires `b` twice. Managers that do not wake waiters on
/// release: no claim hands a key on, and where the set waits in line is
/// all that keeps it from standing in the holder's way. The bound is a
/// ticket's life and a reservation (the manual's "What a dead waiter
/// costs", without the wake on release): no claim reserves a free key
/// for a dead waiter first in line, which keeps it until its ticket
/// lapses, and a set handed a key it cannot use yet (a holder keeps its
/// other) holds the reservation to its end.
const SETS_LIVE: FairSize = FairSize {
    acquisitions: [1, 2],
    crashes: 1,
    wait_bound: (LENGTHS.ticket + LENGTHS.reserve) as u8,
    horizon: 12,
    masks: ALL_AT_ONCE,
    attempts: 10,
    synchronous: true,
    wants: [On::Set([1, 0]), On::Key(1)],
    holds_a: true,
    handing: false,
    b_dead_until: Some(1),
    ..LOCK_OF_A
};

/// The sizes of sets and locks checked live: as [`SETS_LIVE`]; with
/// the wake on release and claims that hand keys on; and so with both
/// acquisitions claiming from their first attempt (their managers'
/// threads waited lately), `b` free from the start. With the wake on
/// release the bound is two reservations (the manual's limit of "about
/// one reservation" for a waiter that claimed just before it died: a
/// set's claim that takes its reservation while a holder keeps its other
/// key clears its offer, and keeps the reservation when nobody else is in
/// line).
const SETS_LIVE_SIZES: [FairSize; 4] = [
    SETS_LIVE,
    FairSize {
        handing: true,
        wait_bound: 2 * WAIT_BOUND,
        ..SETS_LIVE
    },
    FairSize {
        handing: true,
        claims_first: [true, true],
        b_dead_until: None,
        wait_bound: 2 * WAIT_BOUND,
        ..SETS_LIVE
    },
    // Nobody holds `a`: the set is granted, the lock of `b` waits behind
    // it or goes first.
    FairSize {
        handing: true,
        holds_a: false,
        wait_bound: 2 * WAIT_BOUND,
        ..SETS_LIVE
    },
];

/// No deadlock between sets and locks: a holder of `a` that asks for
/// `b` never waits for a set {a, b} in line before it, which cannot take
/// `a` until the holder lets go.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn a_set_in_line_never_keeps_a_holder_of_one_of_its_keys_from_the_other() {
    for size in SETS_LIVE_SIZES {
        let outcome = fair_run(size, FairRules::ALL, 200, bound("MODEL_STATES", 3_000_000));
        assert!(outcome.counterexample.is_none(), "{size:?} broke");
        assert!(outcome.complete, "checked to {} steps only", outcome.depth);
    }
}

/// Without the rule that a set waits in line at one key (queued at every
/// key of it, as before issue 38), the set is first in line for `b` and
/// the holder of `a` waits for it: a deadlock.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_one_key_a_set_in_line_and_a_holder_of_one_of_its_keys_wait_for_each_other() {
    let rules = FairRules {
        sets: SetRules { one_key: false },
        ..FairRules::ALL
    };
    // Nobody crashes: the set is alive, asking, throughout.
    let size = FairSize {
        crashes: 0,
        ..SETS_LIVE
    };
    let states = bound("MODEL_STATES", 3_000_000);
    flaw(
        fair_run(size, rules, 200, states),
        |depth| fair_run(size, FairRules::ALL, depth, states),
        "can take it",
    );
}

/// Sets and locks, safe: client 0 wants the set {b, a}, client 1 the
/// lock of `a`, two acquisitions each, requests at once on none or all
/// servers, 30 ms; and from there with a request lost and one run twice.
const SETS: FairSize = FairSize {
    acquisitions: [2, 2],
    masks: NONE_OR_ALL,
    wants: [On::Set([1, 0]), On::Key(0)],
    ..LOCK_OF_A
};

const SETS_SIZES: [FairSize; 2] = [
    SETS,
    FairSize {
        acquisitions: [1, 1],
        losses: 1,
        duplicates: 1,
        ..SETS
    },
];

/// From a held lock of `a` and a set {b, a} queued for it.
const SETS_CONTENDED: FairSize = FairSize {
    acquisitions: [2, 1],
    horizon: 1,
    contended: true,
    wants: [On::Key(0), On::Set([1, 0])],
    ..SETS
};

/// The late-claim rule for sets (claim.lua's check runs over every key
/// of the call): off, a set's claim held back past its round finds a
/// later attempt's value on `a`, takes it as free and reserves `a` for
/// the waiter ahead of it, which takes it: two holders in 9 steps. (60
/// s and 7.5 GB: beside the fair lock's own run of the rule, not in CI.)
#[test]
#[ignore = "deep: cargo test --release --lib model::tests::without_the_late_claim_rule_a_sets -- --ignored"]
fn without_the_late_claim_rule_a_sets_late_claim_gives_away_a_later_grants_key() {
    let rules = FairRules {
        scripts: ScriptRules {
            late_claims: false,
            ..ScriptRules::ALL
        },
        ..FairRules::ALL
    };
    let states = bound("MODEL_STATES", 12_000_000);
    flaw(
        fair_run(SETS_CONTENDED, rules, 40, states),
        |depth| fair_run(SETS_CONTENDED, FairRules::ALL, depth, states),
        "both hold",
    );
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn sets_and_locks_hold_in_every_interleaving_of_three_servers_and_two_clients() {
    for size in SETS_SIZES {
        holds(
            fair_run(
                size,
                FairRules::ALL,
                bound("MODEL_DEPTH", 30),
                bound("MODEL_STATES", 1_000_000),
            ),
            7,
            size,
        );
    }
}

/// Restarts no client saw (issue 66), on sets beside locks: as the fair
/// lock's run (see `FAIR_UNSEEN`), client 0 wanting the set {b, a} and
/// client 1 the lock of `a`.
const SETS_UNSEEN: FairSize = FairSize {
    restarts: 1,
    snapshots: true,
    patient: true,
    ..SETS
};

/// With the default settings a set's refusal names the value holding
/// its busy key, and no restart gives a second holder.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn with_default_settings_a_restart_no_client_saw_gives_no_second_holder_beside_a_set() {
    let outcome = fair_run(
        SETS_UNSEEN,
        FairRules::ALL,
        bound("MODEL_DEPTH", 30),
        bound("MODEL_STATES", 600_000),
    );
    holds(outcome, 6, "sets, restarts unseen");
}

/// Without the servers a grant names, a restarted server's yes grants a
/// set beside the lock its server forgot (or the lock beside the set).
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_named_servers_a_restart_no_client_saw_gives_a_set_a_held_key() {
    let rules = FairRules {
        names_servers: false,
        ..FairRules::ALL
    };
    let states = bound("MODEL_STATES", 3_000_000);
    flaw(
        fair_run(SETS_UNSEEN, rules, 12, states),
        |depth| fair_run(SETS_UNSEEN, FairRules::ALL, depth, states),
        "both hold",
    );
}
