//! Metrics (feature `metrics`, through the [`metrics`] facade) and
//! spans (feature `tracing`): their names, and the crate's hooks, which
//! compile to nothing without the features.
//!
//! | metric | kind | labels | what |
//! | --- | --- | --- | --- |
//! | [`ACQUIRES`] | counter | `outcome` | acquisition calls (`lock`, `try_lock_for`, a read lock, a permit, a campaign) by how they ended |
//! | [`ATTEMPTS`] | counter | `outcome` | attempts (rounds) within those calls |
//! | [`WAIT`] | histogram (s) | `outcome` | how long each call took, waiting included |
//! | [`HOLD`] | histogram (s) | | how long each guard held its lock, to its release or drop |
//! | [`EXTENDS`] | counter | `outcome` | extend rounds, manual and keep-alive |
//! | [`LOST`] | counter | | guards whose round found their lock lost on a quorum (taken over, or expired) |
//! | [`NODE_FAILURES`] | counter | `node`, `kind` | each member's failure in any round (`kind`: [`NodeErrorKind`] in snake case) |
//! | [`MARGIN`] | histogram | | members that agreed beyond the quorum, per acquisition: 0 means one more failure stops locks |
//!
//! `outcome` is one of `acquired`, `extended`, `released`, `taken`, `no_quorum`,
//! `no_validity`, `not_held`, `cancelled`, `invalid`, `error`. No metric
//! has a per-resource label: resource names are unbounded. Nothing is
//! exported until the application installs a recorder.
//!
//! Spans (feature `tracing`, level `INFO`, target `redlock_sync`):
//! `redlock.acquire` (fields `resource`, `outcome`, `attempts`,
//! `agreed`, `token`), `redlock.extend` and `redlock.release` (`resource`,
//! `outcome`, `agreed`). Node failures are `DEBUG` events inside them.

use std::time::Instant;

use crate::base::error::Error;
use crate::base::node_error::{NodeError, NodeErrorKind};

/// Counter: acquisition calls by outcome.
pub const ACQUIRES: &str = "redlock_acquires_total";
/// Counter: acquisition attempts (rounds) by outcome.
pub const ATTEMPTS: &str = "redlock_acquire_attempts_total";
/// Histogram, seconds: how long an acquisition call took, by outcome.
pub const WAIT: &str = "redlock_acquire_wait_seconds";
/// Histogram, seconds: how long a guard held its lock.
pub const HOLD: &str = "redlock_hold_seconds";
/// Counter: extend rounds by outcome.
pub const EXTENDS: &str = "redlock_extends_total";
/// Counter: guards that found their lock lost.
pub const LOST: &str = "redlock_locks_lost_total";
/// Counter: member failures, by node and kind.
pub const NODE_FAILURES: &str = "redlock_node_failures_total";
/// Histogram: members that agreed beyond the quorum, per acquisition.
pub const MARGIN: &str = "redlock_quorum_margin";

/// An error's `outcome` label.
pub(crate) fn outcome(e: &Error) -> &'static str {
    match e {
        Error::Taken { .. } => "taken",
        Error::NoQuorum { .. } => "no_quorum",
        Error::NoValidity { .. } => "no_validity",
        Error::NotHeld { .. } => "not_held",
        Error::Cancelled { .. } => "cancelled",
        Error::InvalidArgument { .. } | Error::InvalidConfig { .. } => "invalid",
        _ => "error",
    }
}

/// A result's `outcome` label (`ok` names a success).
pub(crate) fn outcome_of<T>(result: &Result<T, Error>, ok: &'static str) -> &'static str {
    result.as_ref().map_or_else(outcome, |_| ok)
}

fn kind(kind: NodeErrorKind) -> &'static str {
    match kind {
        NodeErrorKind::Connect => "connect",
        NodeErrorKind::Resolve => "resolve",
        NodeErrorKind::Timeout => "timeout",
        NodeErrorKind::Disconnected => "disconnected",
        NodeErrorKind::Auth => "auth",
        NodeErrorKind::Permission => "permission",
        NodeErrorKind::Server => "server",
        NodeErrorKind::Protocol => "protocol",
        NodeErrorKind::Tls => "tls",
        NodeErrorKind::Restarted => "restarted",
        NodeErrorKind::Replication => "replication",
        NodeErrorKind::Cluster => "cluster",
    }
}

/// An acquisition call ended, `took` after it began.
pub(crate) fn acquired(outcome: &'static str, started: Option<Instant>) {
    #[cfg(feature = "metrics")]
    {
        let took = started.map(|s| s.elapsed()).unwrap_or_default();
        metrics::counter!(ACQUIRES, "outcome" => outcome).increment(1);
        metrics::histogram!(WAIT, "outcome" => outcome).record(took.as_secs_f64());
    }
    #[cfg(feature = "tracing")]
    tracing::Span::current().record("outcome", outcome);
    let _ = (outcome, started);
}

/// The time now where metrics are kept (they time acquisitions), and no
/// clock read otherwise: every acquisition passes here.
pub(crate) fn start() -> Option<Instant> {
    cfg!(feature = "metrics").then(Instant::now)
}

/// One attempt of an acquisition ended.
pub(crate) fn attempt(outcome: &'static str, attempts: u32) {
    #[cfg(feature = "metrics")]
    metrics::counter!(ATTEMPTS, "outcome" => outcome).increment(1);
    #[cfg(feature = "tracing")]
    tracing::Span::current().record("attempts", attempts);
    let _ = (outcome, attempts);
}

/// An acquisition round reached its quorum: `agreed` of `members`.
pub(crate) fn granted(agreed: usize, quorum: usize, token: Option<u64>) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(MARGIN).record(agreed.saturating_sub(quorum) as f64);
    #[cfg(feature = "tracing")]
    {
        let span = tracing::Span::current();
        span.record("agreed", agreed);
        if let Some(token) = token {
            span.record("token", token);
        }
    }
    let _ = (agreed, quorum, token);
}

/// An extend round ended.
pub(crate) fn extended(outcome: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(EXTENDS, "outcome" => outcome).increment(1);
    let _ = outcome;
}

/// A guard found its lock lost.
pub(crate) fn lost() {
    #[cfg(feature = "metrics")]
    metrics::counter!(LOST).increment(1);
}

/// A guard let its lock go after holding it for `held`.
pub(crate) fn released(acquired: Instant) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(HOLD).record(acquired.elapsed().as_secs_f64());
    let _ = acquired;
}

/// A member failed in a round.
pub(crate) fn node_failed(e: &NodeError) {
    #[cfg(feature = "metrics")]
    metrics::counter!(NODE_FAILURES, "node" => e.node().to_owned(), "kind" => kind(e.kind()))
        .increment(1);
    #[cfg(feature = "tracing")]
    tracing::debug!(target: "redlock_sync", node = e.node(), kind = kind(e.kind()), "{e}");
    let _ = (e, kind);
}

/// A span around one operation, entered while it lives (a no-op without
/// the `tracing` feature).
pub(crate) struct Span {
    #[cfg(feature = "tracing")]
    _entered: tracing::span::EnteredSpan,
}

impl Span {
    /// `redlock.acquire` on `resource` (asked for only when spans are
    /// made).
    pub(crate) fn acquire(resource: impl FnOnce() -> String) -> Span {
        #[cfg(feature = "tracing")]
        return Span {
            _entered: tracing::info_span!(
                target: "redlock_sync",
                "redlock.acquire",
                resource = resource(),
                outcome = tracing::field::Empty,
                attempts = tracing::field::Empty,
                agreed = tracing::field::Empty,
                token = tracing::field::Empty,
            )
            .entered(),
        };
        #[cfg(not(feature = "tracing"))]
        {
            let _ = resource;
            Span {}
        }
    }

    /// `redlock.extend` (`release`: `redlock.release`) on `resource`.
    pub(crate) fn round(release: bool, resource: impl FnOnce() -> String) -> Span {
        #[cfg(feature = "tracing")]
        return Span {
            _entered: if release {
                tracing::info_span!(
                    target: "redlock_sync",
                    "redlock.release",
                    resource = resource(),
                    outcome = tracing::field::Empty,
                    agreed = tracing::field::Empty,
                )
            } else {
                tracing::info_span!(
                    target: "redlock_sync",
                    "redlock.extend",
                    resource = resource(),
                    outcome = tracing::field::Empty,
                    agreed = tracing::field::Empty,
                )
            }
            .entered(),
        };
        #[cfg(not(feature = "tracing"))]
        {
            let _ = (release, resource);
            Span {}
        }
    }

    /// Records how the round ended, and how many members agreed when
    /// known.
    pub(crate) fn ended(&self, outcome: &'static str, agreed: Option<usize>) {
        #[cfg(feature = "tracing")]
        {
            let span = tracing::Span::current();
            span.record("outcome", outcome);
            if let Some(agreed) = agreed {
                span.record("agreed", agreed);
            }
        }
        let _ = (outcome, agreed);
    }
}
