//! The semaphore's runs: at most its count of permits, the stored count
//! and its keep.

use super::*;

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
    restarts: 0,
    snapshots: false,
    patient: false,
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

/// Restarts no client saw (issue 66), on the semaphore: two clients made
/// with one permit, both taking slot 0 (a slot's refusal is
/// `SET ... NX GET`'s, which names the holder), a server restarting
/// empty or from a snapshot, patient rounds (the restart the only fault),
/// no time passing (nothing lapses: the restart alone decides).
const SEM_UNSEEN: SemSize = SemSize {
    permits: [1, 1],
    slots: [0, 0],
    extends: false,
    horizon: 0,
    restarts: 1,
    snapshots: true,
    patient: true,
    ..SEM
};

/// With the default settings, no restart gives a semaphore of one two
/// valid permits.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn with_default_settings_a_restart_no_client_saw_gives_no_permit_past_the_count() {
    holds(
        sem_run(
            SEM_UNSEEN,
            SemRules::ALL,
            bound("MODEL_DEPTH", 30),
            bound("MODEL_STATES", 600_000),
        ),
        8,
        "the semaphore, restarts unseen",
    );
}

/// Without the servers a grant names, a restarted server's yes gives a
/// second permit of a semaphore of one.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_named_servers_a_restart_no_client_saw_gives_a_permit_past_the_count() {
    let rules = SemRules {
        names_servers: false,
        ..SemRules::ALL
    };
    let states = bound("MODEL_STATES", 3_000_000);
    flaw(
        sem_run(SEM_UNSEEN, rules, 12, states),
        |depth| sem_run(SEM_UNSEEN, SemRules::ALL, depth, states),
        "valid permits",
    );
}
