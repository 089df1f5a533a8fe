//! What `check()` adds for a Sentinel group's member: its Sentinels (how
//! many answer, whether they agree, whether all of them were given), the
//! master's replicas and `min-replicas-to-write`, and what each means for
//! the lock. The master itself is checked as any node is (persistence
//! included).

use std::time::Instant;

use crate::members::conn::pack;
use crate::members::node::Node;
use crate::members::restart::{field, text};
use crate::members::sentinel::{Seen, Sentinels, counted, counts};

use super::{NodeReport, SentinelReport, Verdict, config_of, setting};

/// Adds the group's findings to its master's `report`.
pub(super) fn check_group(node: &Node, sentinels: &Sentinels, report: &mut NodeReport) {
    let said = sentinels.survey();
    let seen: Vec<&Seen> = said.iter().filter_map(|(_, s)| s.as_ref().ok()).collect();
    let failed: Vec<&String> = said.iter().filter_map(|(_, s)| s.as_ref().err()).collect();
    let known: Vec<u32> = seen.iter().filter_map(|s| s.sentinels).collect();
    let mut group = SentinelReport {
        given: said.len(),
        answered: seen.len(),
        known: known.iter().copied().max(),
        quorum: seen.iter().filter_map(|s| s.quorum).max(),
        replicas: None,
        min_replicas_to_write: None,
        min_replicas_max_lag: None,
    };
    sentinels_found(&group, &seen, &failed, known.iter().copied().min(), report);
    if report.reachable {
        master_replication(node, &mut group, report);
    }
    report.sentinels = Some(group);
    report
        .problems
        .sort_by_key(|p| std::cmp::Reverse(p.verdict));
}

/// What the Sentinels' answers mean: too few, disagreeing, or not all of
/// the group's given.
fn sentinels_found(
    group: &SentinelReport,
    seen: &[&Seen],
    failed: &[&String],
    least_known: Option<u32>,
    report: &mut NodeReport,
) {
    let given = group.given;
    let detail = (!failed.is_empty()).then(|| {
        failed
            .iter()
            .map(|e| e.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    });
    if seen.len() <= given / 2 {
        report.problem_with(
            Verdict::Unsafe,
            format!(
                "{} of {given} Sentinels answer, no majority: new connections fail and \
                 failovers go unfollowed",
                seen.len()
            ),
            detail,
        );
    } else if !failed.is_empty() {
        report.problem_with(
            Verdict::Warning,
            format!(
                "{} of {given} Sentinels do not answer: one more and the member is down",
                failed.len()
            ),
            detail,
        );
    }
    let addrs = counts(seen.iter().map(|s| &s.addr));
    if addrs.len() > 1 {
        let said = counted(&addrs);
        report.problem(
            Verdict::Warning,
            format!(
                "the Sentinels disagree on the master ({}): a failover under way, or a \
                 Sentinel cut off",
                said.join(", ")
            ),
        );
    }
    let given_u32 = u32::try_from(given).unwrap_or(u32::MAX);
    if let Some(known) = group.known.filter(|k| *k > given_u32) {
        report.problem(
            Verdict::Warning,
            format!(
                "{given} of the group's {known} Sentinels given: a majority of those may be \
                 a minority of the group, agreeing on an old master; give them all"
            ),
        );
    }
    if let Some(least) = least_known.filter(|k| *k < given_u32) {
        report.problem(
            Verdict::Warning,
            format!(
                "a Sentinel given knows {least} of the {given} given: not one group, or \
                 one cut off"
            ),
        );
    }
}

/// The master's replicas and `min-replicas-*`, and what they mean.
fn master_replication(node: &Node, group: &mut SentinelReport, report: &mut NodeReport) {
    let deadline = || Instant::now() + node.timeout() * 2;
    let info = node
        .query(&pack(&[b"INFO", b"replication"]), deadline())
        .ok()
        .and_then(|v| text(&v));
    group.replicas = info
        .as_deref()
        .and_then(|i| field(i, "connected_slaves"))
        .and_then(|n| n.parse().ok());
    let config = config_of(node, b"min-replicas-*", deadline());
    let number = |name: &str| setting(&config, name).and_then(|v| v.parse().ok());
    group.min_replicas_to_write = number("min-replicas-to-write");
    group.min_replicas_max_lag = number("min-replicas-max-lag");
    if group.replicas == Some(0) {
        report.problem(
            Verdict::Warning,
            "no replica linked: no failover can bring this member back while its master \
             is down",
        );
    }
    if group.min_replicas_to_write == Some(0) && group.replicas.is_some_and(|n| n > 0) {
        report.problem(
            Verdict::Warning,
            "min-replicas-to-write 0: a master cut off by a failover takes writes until \
             it is demoted (set 1, with min-replicas-max-lag 10)",
        );
    }
}
