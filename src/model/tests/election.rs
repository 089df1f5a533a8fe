//! The election's runs: one leader, claims in order, drift.

use super::*;

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
    restarts: 0,
    snapshots: false,
    patient: false,
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
        ..ElRules::ALL
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

/// Restarts no client saw (issue 66), on the election: a server that
/// restarts, empty or from a snapshot of itself (key, record and term
/// counter as they were), beside two candidates, a leader's proclaim and
/// a reader; patient rounds (the restart the only fault).
const EL_UNSEEN: ElSize = ElSize {
    proclaims: 1,
    reads: 1,
    restarts: 1,
    snapshots: true,
    patient: true,
    ..ELECTION
};

/// With the default settings, no restart gives two leaders at once, nor
/// a read that names another leader than a valid one whose claim came
/// before the read (an older copy's record included).
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn with_default_settings_a_restart_no_client_saw_gives_no_second_leader_nor_a_misread() {
    holds(
        el_run(
            EL_UNSEEN,
            ElRules::ALL,
            bound("MODEL_DEPTH", 30),
            bound("MODEL_STATES", 600_000),
        ),
        6,
        "the election, restarts unseen",
    );
}

/// Without the servers a grant names, a restarted server's yes elects a
/// second leader.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_named_servers_a_restart_no_client_saw_elects_a_second_leader() {
    let rules = ElRules {
        names_servers: false,
        ..ElRules::ALL
    };
    let size = ElSize {
        proclaims: 0,
        reads: 0,
        ..EL_UNSEEN
    };
    let states = bound("MODEL_STATES", 3_000_000);
    flaw(
        el_run(size, rules, 12, states),
        |depth| el_run(size, ElRules::ALL, depth, states),
        "both lead",
    );
}

/// Without the rule on reads, a reader that never saw the restart counts
/// the restarted server's empty view beside the other member that shows
/// no leader (a candidate's failed take) and reads "nobody leads" while
/// the leader elected before the read is valid.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "run optimized: cargo test --release --lib model::"
)]
fn without_named_servers_on_reads_a_restart_no_client_saw_hides_a_valid_leader() {
    let rules = ElRules {
        reads_name_servers: false,
        ..ElRules::ALL
    };
    let states = bound("MODEL_STATES", 3_000_000);
    flaw(
        el_run(EL_UNSEEN, rules, 12, states),
        |depth| el_run(EL_UNSEEN, ElRules::ALL, depth, states),
        "a read names",
    );
}
