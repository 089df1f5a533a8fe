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
use super::lock::{EVERY_MASK, LockModel, Rules, Size};
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

/// Assumption 3 ("restarts keep keys, or do not vote"), shown: with the
/// default settings a client quarantines only a restart it saw, so a
/// server that restarted empty before a client first reached it votes
/// for that client at once. Persistence or strict mode
/// ([`Builder::restart_quarantine`](crate::Builder::restart_quarantine))
/// is what the promise then needs; with strict mode the same bounds find
/// nothing.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn with_default_settings_a_restart_before_a_clients_first_contact_lets_an_empty_server_vote() {
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

fn fair_run(size: FairSize, rules: FairRules, depth: usize, states: usize) -> Outcome {
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

fn sem_run(size: SemSize, rules: SemRules, depth: usize, states: usize) -> Outcome {
    explore(
        &SemModel::new(size, rules),
        format!("semaphore {rules:?}, {size:?}"),
        depth,
        states,
    )
}

/// The semaphore: a client made with one permit and one made with two,
/// each taking its own slot (so that only the stored count keeps them
/// apart), one acquisition each, holders extending, requests at once on
/// none or all servers, 60 ms (a count kept alive by an extend outlives
/// its first TTL).
const SEM: SemSize = SemSize {
    permits: [1, 2],
    slots: [0, 1],
    acquisitions: [1, 1],
    extends: true,
    duplicates: 0,
    losses: 0,
    horizon: 6,
    masks: NONE_OR_ALL,
};

/// The semaphore's sizes: as [`SEM`]; with a request lost and one run
/// twice, 30 ms.
const SEM_SIZES: [SemSize; 2] = [
    SEM,
    SemSize {
        losses: 1,
        duplicates: 1,
        horizon: 3,
        ..SEM
    },
];

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn a_semaphore_never_has_more_valid_permits_than_a_holders_count() {
    for size in SEM_SIZES {
        holds(
            sem_run(
                size,
                SemRules::ALL,
                bound("MODEL_DEPTH", 30),
                bound("MODEL_STATES", 1_000_000),
            ),
            6,
            size,
        );
    }
}

/// Without the stored count's check, a client made with one permit and
/// one made with two hold at once.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_the_stored_count_two_hold_a_semaphore_of_one() {
    let rules = SemRules {
        count_checked: false,
        ..SemRules::ALL
    };
    let states = bound("MODEL_STATES", 3_000_000);
    flaw(
        sem_run(SEM, rules, 40, states),
        |depth| sem_run(SEM, SemRules::ALL, depth, states),
        "valid permits",
    );
}

/// Without the extend keeping the count alive, the count lapses under a
/// permit it extended, and a client of another count takes its slot.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_the_count_kept_by_extends_it_lapses_under_a_valid_permit() {
    let rules = SemRules {
        count_kept: false,
        ..SemRules::ALL
    };
    let states = bound("MODEL_STATES", 3_000_000);
    flaw(
        sem_run(SEM, rules, 40, states),
        |depth| sem_run(SEM, SemRules::ALL, depth, states),
        "valid permits",
    );
}

fn rw_run(size: RwSize, rules: RwModelRules, depth: usize, states: usize) -> Outcome {
    explore(
        &RwModel::new(size, rules),
        format!("rwlock {rules:?}, {size:?}"),
        depth,
        states,
    )
}

/// The read-write lock's sizes: a reader of two acquisitions and a
/// writer, requests at once on none or all servers, 30 ms; with a
/// request lost and one run twice; and 50 ms.
const RW_SIZES: [RwSize; 3] = [
    RwSize {
        masks: NONE_OR_ALL,
        ..RW
    },
    RwSize {
        losses: 1,
        duplicates: 1,
        masks: NONE_OR_ALL,
        ..RW
    },
    // Past the TTL (keys lapse on every server): the mark's raise, an
    // abandoned guard's keys expiring, unread dropping expired readers.
    RwSize {
        horizon: 5,
        masks: NONE_OR_ALL,
        ..RW
    },
];

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn the_rwlock_holds_in_every_interleaving_of_three_servers_a_reader_and_a_writer() {
    rw_sizes(bound("MODEL_DEPTH", 30), bound("MODEL_STATES", 1_000_000));
}

fn rw_sizes(depth: usize, states: usize) {
    for size in RW_SIZES {
        holds(rw_run(size, RwModelRules::ALL, depth, states), 7, size);
    }
}

/// The read-write lock's deeper run: 8 million states a size.
#[test]
#[ignore = "deep: cargo test --release --lib model::tests::the_rwlock_holds_deeper -- --ignored"]
fn the_rwlock_holds_deeper() {
    rw_sizes(bound("MODEL_DEPTH", 40), bound("MODEL_STATES", 8_000_000));
}

/// A reader's failed attempt, cleaned up late: without per-attempt
/// values its `unread` removes the reader a later attempt added, and, the
/// last reader gone, deletes the key under it.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_per_attempt_values_a_late_unread_lets_a_writer_in_under_a_reader() {
    let rules = RwModelRules {
        per_attempt_values: false,
        ..RwModelRules::ALL
    };
    let states = bound("MODEL_STATES", 3_000_000);
    flaw(
        rw_run(RW, rules, 30, states),
        |depth| rw_run(RW, RwModelRules::ALL, depth, states),
        "writer(s) and 1 reader(s)",
    );
}

/// A read that finds the readers' mark expiring before its own TTL: the
/// key must last as long as the new reader, or a writer's `SET NX` gets
/// in when it expires.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_the_key_covering_each_reader_a_writer_gets_in_under_a_later_reader() {
    let rules = RwModelRules {
        scripts: RwRules {
            key_covers_readers: false,
        },
        ..RwModelRules::ALL
    };
    // Two acquisitions 20 ms apart, a writer after the TTL: 50 ms.
    let size = RwSize {
        horizon: 5,
        masks: NONE_OR_ALL,
        ..RW
    };
    let states = bound("MODEL_STATES", 3_000_000);
    flaw(
        rw_run(size, rules, 30, states),
        |depth| rw_run(size, RwModelRules::ALL, depth, states),
        "writer(s) and 1 reader(s)",
    );
}

fn el_run(size: ElSize, rules: ElRules, depth: usize, states: usize) -> Outcome {
    explore(
        &ElModel::new(size, rules),
        format!("election {rules:?}, {size:?}"),
        depth,
        states,
    )
}

/// Two candidates of one campaign each, a leader's two proclaims, two
/// reads, requests at once on none or all servers, 30 ms.
const ELECTION: ElSize = ElSize {
    campaigns: [1, 1],
    proclaims: 2,
    reads: 2,
    duplicates: 0,
    losses: 0,
    horizon: 3,
    masks: NONE_OR_ALL,
    drift: true,
};

/// The election's sizes: as above, with a request lost and one run
/// twice, and 50 ms.
const EL_SIZES: [ElSize; 3] = [
    ELECTION,
    ElSize {
        losses: 1,
        duplicates: 1,
        ..ELECTION
    },
    // Past the TTL: a leadership lapses on every server, the other
    // candidate may be elected.
    ElSize {
        horizon: 5,
        ..ELECTION
    },
];

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn the_election_holds_in_every_interleaving_of_three_servers_two_candidates_and_a_reader() {
    el_sizes(bound("MODEL_DEPTH", 30), bound("MODEL_STATES", 1_000_000));
}

fn el_sizes(depth: usize, states: usize) {
    for size in EL_SIZES {
        holds(el_run(size, ElRules::ALL, depth, states), 6, size);
    }
}

/// The election's deeper run: 8 million states a size.
#[test]
#[ignore = "deep: cargo test --release --lib model::tests::the_election_holds_deeper -- --ignored"]
fn the_election_holds_deeper() {
    el_sizes(bound("MODEL_DEPTH", 40), bound("MODEL_STATES", 8_000_000));
}

/// A proclaim given up on (its round ended short of a quorum) and
/// delivered after the next one succeeded: without the claim's order
/// (term, then number) it replaces the newer value on two members, and a
/// read names the older one.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_the_claims_order_a_late_proclaim_takes_a_newer_value_back() {
    let rules = ElRules {
        newer_claims_kept: false,
    };
    // One candidate, one read.
    let size = ElSize {
        campaigns: [1, 0],
        reads: 1,
        ..ELECTION
    };
    let states = bound("MODEL_STATES", 3_000_000);
    flaw(
        el_run(size, rules, 30, states),
        |depth| el_run(size, ElRules::ALL, depth, states),
        "a read names",
    );
}

/// Validity that does not allow for drift: a leader counts on its key
/// past the tick the fast server lets it go, and the other candidate is
/// elected there meanwhile.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_the_drift_allowance_two_candidates_lead_at_once() {
    let size = ElSize {
        horizon: 5,
        proclaims: 0,
        reads: 0,
        ..ELECTION
    };
    let states = bound("MODEL_STATES", 3_000_000);
    flaw(
        el_run(
            ElSize {
                drift: false,
                ..size
            },
            ElRules::ALL,
            30,
            states,
        ),
        |depth| el_run(size, ElRules::ALL, depth, states),
        "both lead",
    );
}
