//! The pure arithmetic of the algorithm: quorum size, clock drift,
//! validity, the extend's bound, the random retry delay, and the
//! [`Tally`] of a round's answers. No socket and no thread: the round's
//! fan-out is `members::fanout`, and what an acquisition's answers decide
//! is `decide.rs`. Unit tested without a network.

use std::time::{Duration, Instant};

use crate::base::error::Error;
use crate::base::node_error::{NodeError, NodeFailures};
use crate::members::request::Tallied;

/// Extra drift added to every lock: Redis expires keys with 1 ms
/// precision, plus 1 ms for small TTLs (as the Redlock document does).
pub(crate) const BASE_DRIFT: Duration = Duration::from_millis(2);

pub(crate) use crate::base::majority::{quorum, ruled_out};

/// The clock drift allowed for a lock of `ttl`: `ttl * factor + 2 ms`.
pub(crate) fn drift(ttl: Duration, factor: f64) -> Duration {
    ttl.mul_f64(factor) + BASE_DRIFT
}

/// What is left of `ttl` after a round that took `elapsed`, minus the
/// drift; `None` when nothing is left.
pub(crate) fn validity(ttl: Duration, elapsed: Duration, factor: f64) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift(ttl, factor))
        .filter(|v| !v.is_zero())
}

/// The shortest TTL (whole milliseconds) that leaves some validity after
/// a round that took `elapsed` (see [`validity`]).
pub(crate) fn shortest_ttl(elapsed: Duration, factor: f64) -> Duration {
    // ttl - elapsed - ttl * factor - BASE_DRIFT > 0, solved, then stepped
    // up past rounding.
    let guess = (elapsed + BASE_DRIFT).as_secs_f64() / (1.0 - factor.clamp(0.0, 0.999));
    let mut ms = (guess * 1000.0) as u64;
    while validity(Duration::from_millis(ms), elapsed, factor).is_none() {
        ms += 1;
    }
    Duration::from_millis(ms)
}

/// A pause drawn uniformly from `[max / 2, max]` using 64 random bits
/// (`random`), with nanosecond resolution: random, so that contenders
/// that failed together do not ask again together, and never shorter
/// than half the maximum, so that a retry budget buys at least half the
/// waiting its maximum promises.
pub(crate) fn retry_delay(max: Duration, random: u64) -> Duration {
    let max = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    let low = max - max / 2;
    let span = max - low;
    // Multiply-shift maps the 64 random bits onto [0, span] without the
    // bias of a modulo; span + 1 may need 65 bits, hence u128.
    let nanos = (u128::from(random) * (u128::from(span) + 1)) >> 64;
    Duration::from_nanos(low + nanos as u64)
}

pub(crate) use crate::members::fanout::Answer;

/// The answers of one round, counted.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Nodes that did what was asked.
    pub(crate) yes: usize,
    /// Nodes that answered no: the key holds another owner's token.
    pub(crate) no: usize,
    /// Nodes that answered that the key is gone (expired or deleted).
    pub(crate) gone: usize,
    /// Nodes that failed, with their causes.
    pub(crate) failures: Vec<NodeError>,
}

impl Tally {
    pub(crate) fn count(answers: impl IntoIterator<Item = Answer>) -> Tally {
        let mut tally = Tally::default();
        for answer in answers.into_iter().flatten() {
            match answer {
                Ok(said) => match said.tallied() {
                    Tallied::Yes => tally.yes += 1,
                    Tallied::No => tally.no += 1,
                    Tallied::Gone => tally.gone += 1,
                },
                Err(e) => tally.failures.push(e),
            }
        }
        tally
    }

    fn nodes(&self) -> usize {
        self.yes + self.no + self.gone + self.failures.len()
    }

    /// Adds the answers of `other`, a round on other members.
    pub(crate) fn add(&mut self, other: Tally) {
        self.yes += other.yes;
        self.no += other.no;
        self.gone += other.gone;
        self.failures.extend(other.failures);
    }

    /// Whether a quorum agreed.
    pub(crate) fn reached(&self) -> bool {
        self.yes >= quorum(self.nodes())
    }

    /// The error for an acquisition round that did not reach a quorum:
    /// `Taken` when the nodes held by others alone rule a quorum out,
    /// otherwise `NoQuorum`.
    pub(crate) fn acquire_error(self, resource: &str) -> Error {
        let (nodes, quorum) = (self.nodes(), quorum(self.nodes()));
        if ruled_out(self.no, nodes) {
            Error::Taken {
                resource: resource.to_owned(),
                held_elsewhere: self.no,
                nodes,
                quorum,
                held_here: false,
                holder: None,
                failures: NodeFailures::some(self.failures),
            }
        } else {
            self.no_quorum(resource)
        }
    }

    /// The error for a release or extend round that did not confirm a
    /// quorum: `NotHeld` when the nodes that lost our token (to another
    /// owner, or because the key is gone) alone rule a quorum out,
    /// otherwise `NoQuorum`. `early`: the round ended while the holder's
    /// validity still ran, so keys gone from a quorum were removed, not
    /// expired (see `Error::NotHeld`'s `removed`).
    pub(crate) fn held_error(self, resource: &str, early: bool) -> Error {
        let nodes = self.nodes();
        let lost = self.no + self.gone;
        if ruled_out(lost, nodes) {
            Error::NotHeld {
                resource: resource.to_owned(),
                lost_on: lost,
                taken_over: self.no,
                removed: early && self.gone > 0,
                nodes,
                renewal: None,
            }
        } else {
            self.no_quorum(resource)
        }
    }

    pub(crate) fn no_quorum(self, resource: &str) -> Error {
        let nodes = self.nodes();
        Error::NoQuorum {
            resource: resource.to_owned(),
            agreed: self.yes,
            nodes,
            quorum: quorum(nodes),
            failures: NodeFailures::some(self.failures),
        }
    }
}

/// A resource name for messages: its first 100 bytes, then its length
/// when it is longer (`lock:aaaa... (1048576 bytes)`).
pub(crate) fn display(resource: &[u8]) -> String {
    crate::base::text::shorten(resource, crate::base::text::SHOWN)
}

/// Names as messages show several at once (a set): joined with `, `.
pub(crate) fn joined(names: &[&[u8]]) -> Vec<u8> {
    names.join(&b", "[..])
}

/// The end of the validity of a round that started at `start` and took
/// `elapsed`, for `ttl` (see [`validity`]); `None` when nothing is left.
pub(crate) fn valid_until(
    start: Instant,
    elapsed: Duration,
    ttl: Duration,
    factor: f64,
) -> Option<Instant> {
    validity(ttl, elapsed, factor).and_then(|validity| start.checked_add(elapsed + validity))
}

/// The end of a guard's validity after an extend round with `ttl` that
/// began at `start`, whatever the round returned. A node that applied the
/// new TTL may let the key go as early as `start + ttl - drift` (it ran
/// the script after `start`, and its clock may run faster by the drift),
/// so no outcome keeps more than that: a failed round that reached some
/// nodes with a shorter TTL shortens the validity as surely as a
/// successful one. A round a quorum confirmed (`confirmed`) in time sets
/// the validity to exactly that; any other keeps the smaller of `current`
/// and that.
///
/// This is the one rule every shape's extend goes through (lock, set,
/// permit, read lock): a guard never claims a moment a node may not
/// grant.
pub(crate) fn after_extend(
    current: Instant,
    start: Instant,
    ttl: Duration,
    factor: f64,
    confirmed: bool,
) -> Instant {
    // Nothing is left of a TTL no larger than the drift: the round's
    // start is then the latest moment the lock is known to be held.
    let bound = ttl
        .checked_sub(drift(ttl, factor))
        .and_then(|left| start.checked_add(left))
        .unwrap_or(start);
    if confirmed { bound } else { current.min(bound) }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_shortest_ttl_is_the_first_that_leaves_validity() {
        for (nt, factor) in [(50, 0.01), (500, 0.01), (2000, 0.25), (0, 0.0), (7, 0.9)] {
            let nt = Duration::from_millis(nt);
            let ttl = shortest_ttl(nt, factor);
            assert!(validity(ttl, nt, factor).is_some(), "{ttl:?}");
            let less = ttl - Duration::from_millis(1);
            assert!(validity(less, nt, factor).is_none(), "{less:?}");
        }
    }
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn an_extend_never_leaves_more_than_its_new_ttl_allows() {
        let start = Instant::now();
        let long = start + Duration::from_secs(30);
        // A shorter TTL that failed still bounds the validity.
        assert_eq!(
            after_extend(long, start, 30 * MS, 0.0, false),
            start + 28 * MS
        );
        // A failed longer TTL keeps what was there.
        let short = start + 100 * MS;
        assert_eq!(
            after_extend(short, start, Duration::from_secs(30), 0.01, false),
            short
        );
        // Confirmed: exactly the new bound, shorter or longer.
        assert_eq!(
            after_extend(long, start, 1000 * MS, 0.01, true),
            start + 988 * MS
        );
        assert_eq!(
            after_extend(short, start, 1000 * MS, 0.01, true),
            start + 988 * MS
        );
        // A TTL the drift eats leaves nothing past the start.
        assert_eq!(after_extend(long, start, 2 * MS, 0.0, false), start);
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        let expected = [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)];
        for (n, q) in expected {
            assert_eq!(quorum(n), q, "quorum({n})");
            assert!(2 * quorum(n) > n, "two quorums of {n} must intersect");
        }
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms_by_default() {
        assert_eq!(drift(1000 * MS, 0.01), 12 * MS);
        assert_eq!(drift(10 * MS, 0.0), 2 * MS);
        assert_eq!(drift(Duration::from_secs(30), 0.01), 302 * MS);
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        assert_eq!(validity(1000 * MS, 100 * MS, 0.01), Some(888 * MS));
        assert_eq!(validity(1000 * MS, Duration::ZERO, 0.0), Some(998 * MS));
        // exactly exhausted, and over-exhausted, leave nothing
        assert_eq!(validity(1000 * MS, 988 * MS, 0.01), None);
        assert_eq!(validity(1000 * MS, 5000 * MS, 0.01), None);
        // a TTL no larger than the drift never has validity
        assert_eq!(validity(2 * MS, Duration::ZERO, 0.0), None);
        assert_eq!(validity(3 * MS, Duration::ZERO, 0.0), Some(MS));
    }

    #[test]
    fn retry_delay_spans_half_max_to_max() {
        let max = 200 * MS;
        assert_eq!(retry_delay(max, 0), 100 * MS);
        assert_eq!(retry_delay(max, u64::MAX), max);
        let mid = retry_delay(max, u64::MAX / 2);
        assert!(mid > 149 * MS && mid < 151 * MS, "{mid:?}");
        assert_eq!(retry_delay(Duration::ZERO, u64::MAX), Duration::ZERO);
        assert_eq!(
            retry_delay(Duration::from_nanos(1), 0),
            Duration::from_nanos(1)
        );
        // huge maxima saturate instead of overflowing
        assert!(retry_delay(Duration::MAX, u64::MAX) >= Duration::from_secs(500 * 365 * 86400));
    }

    #[test]
    fn retry_delay_is_roughly_uniform() {
        let max = 1000 * MS;
        let mut buckets = [0u32; 10];
        // a fixed pseudo-random sequence (splitmix64) keeps the test exact
        let mut x: u64 = 0x1234_5678;
        for _ in 0..10_000 {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let d = retry_delay(max, z);
            assert!(d <= max && d >= max / 2);
            buckets[((d.as_millis() as usize - 500) / 50).min(9)] += 1;
        }
        for (i, n) in buckets.iter().enumerate() {
            assert!((850..1150).contains(n), "bucket {i} has {n} of 10000");
        }
    }

    fn tally(yes: usize, no: usize, failed: usize) -> Tally {
        let mut t = Tally {
            yes,
            no,
            gone: 0,
            failures: Vec::new(),
        };
        for i in 0..failed {
            let e = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
            t.failures.push(NodeError::classify(
                format!("n{i}").into(),
                e,
                true,
                50 * MS,
            ));
        }
        t
    }

    #[test]
    fn reached_needs_a_majority_of_all_nodes() {
        assert!(tally(2, 1, 0).reached());
        assert!(tally(2, 0, 1).reached());
        assert!(!tally(1, 1, 1).reached());
        assert!(tally(3, 2, 0).reached());
        assert!(!tally(2, 0, 3).reached());
        assert!(tally(1, 0, 0).reached());
        assert!(!tally(1, 1, 0).reached());
    }

    #[test]
    fn taken_only_when_other_owners_alone_rule_out_a_quorum() {
        assert!(matches!(
            tally(0, 2, 1).acquire_error("r"),
            Error::Taken {
                held_elsewhere: 2,
                ..
            }
        ));
        // 5 nodes: 2 held elsewhere, 2 failed: answers from the failed
        // nodes could still have made a quorum, so this is NoQuorum.
        match tally(1, 2, 2).acquire_error("r") {
            Error::NoQuorum {
                agreed: 1,
                nodes: 5,
                quorum: 3,
                failures,
                ..
            } => assert_eq!(failures.map_or(0, |f| f.len()), 2),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            tally(1, 3, 1).acquire_error("r"),
            Error::Taken { .. }
        ));
    }

    #[test]
    fn not_held_only_when_a_quorum_lost_the_token() {
        assert!(matches!(
            tally(1, 2, 0).held_error("r", false),
            Error::NotHeld {
                lost_on: 2,
                taken_over: 2,
                ..
            }
        ));
        // Keys gone on two nodes, another owner's on one: lost, and taken
        // over on one node.
        let mut t = tally(0, 1, 0);
        t.gone = 2;
        let err = t.held_error("r", false);
        assert!(matches!(
            err,
            Error::NotHeld {
                lost_on: 3,
                taken_over: 1,
                ..
            }
        ));
        assert!(err.to_string().contains("taken over"), "{err}");
        // Gone everywhere: it expired, nobody took it over.
        let mut t = tally(0, 0, 0);
        t.gone = 3;
        let msg = t.held_error("r", false).to_string();
        assert!(
            msg.contains("it expired or was removed") && !msg.contains("taken over"),
            "{msg}"
        );
        assert!(matches!(
            tally(1, 1, 1).held_error("r", false),
            Error::NoQuorum { .. }
        ));
    }

    #[test]
    fn messages_name_resource_and_nodes() {
        let msg = tally(1, 0, 2).acquire_error("jobs/nightly").to_string();
        assert!(msg.contains("\"jobs/nightly\""), "{msg}");
        assert!(msg.contains("1 of 3 nodes agreed, 2 needed"), "{msg}");
        assert!(msg.contains("n0") && msg.contains("n1"), "{msg}");
        assert!(
            msg.ends_with("(failed: n0: connection refused; n1: connection refused)"),
            "{msg}"
        );
        // The nodes' causes are in the message: not a source too (a
        // reporter walking the chain would print them twice).
        let err = tally(1, 0, 2).acquire_error("r");
        assert!(std::error::Error::source(&err).is_none());
        assert_eq!(err.failures().len(), 2);
        // Taken with every node answering: no failures, no source.
        let err = tally(0, 3, 0).acquire_error("r");
        assert!(std::error::Error::source(&err).is_none());
        assert!(!err.to_string().contains("failed"), "{err}");
        let debug = format!("{err:?}");
        assert!(
            !debug.contains("settled") && !debug.contains("connecting"),
            "{debug}"
        );
        let debug = format!("{:?}", tally(1, 0, 1).acquire_error("r"));
        assert!(debug.contains("n0: connection refused"), "{debug}");
        assert!(
            !debug.contains("settled") && !debug.contains("connecting"),
            "{debug}"
        );
    }
}
