//! The read-write lock's runs: one writer, no reader under it.

use super::*;

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
