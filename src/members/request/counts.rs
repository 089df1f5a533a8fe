//! What one connection knows of the fencing counters it counted
//! ([`Counts`]), so that an acquisition counts by `INCR` where that is
//! as safe as the count script, and the script's cost (a Lua call, about
//! ten times an `INCR`'s on the server) is paid about once per counter,
//! connection and [`WINDOW`].
//!
//! # Why an `INCR` counts as the script would
//!
//! The count script (`lock/count.lua`) counts to one more than the
//! larger of the counter and the attempt's clock reading, so that a
//! counter that went back (its server restarted from an older copy, a
//! lagging replica was promoted) or was created anew counts on from the
//! clock, above every count before it (see the crate docs, "Fencing
//! tokens"). An `INCR` counts one more than the counter. The two agree
//! wherever the counter did not go back since some count the script
//! made, and this connection sends `INCR` only there:
//!
//! - **Same run.** A connection speaks to one run of its server: a
//!   restart closes it, and the new connection starts knowing nothing.
//!   So every `INCR` this connection sends follows, in the same run, a
//!   count by the script on it, whose value it saw.
//! - **Alive since.** The script leaves the counter at least `keep` to
//!   live (an expiry is only ever raised, by every client). This
//!   connection sends `INCR` only within half that keep of the moment
//!   before it sent the script, and never more than [`WINDOW`] after it
//!   (its request's own instant, so that both reads of the request's form
//!   agree), so the counter it counts is the one the script counted, or
//!   one counted since.
//! - **Checked.** An `INCR` answer not above the last count this
//!   connection saw on the counter (the key deleted, flushed or evicted)
//!   is counted again by the script at once, on the same connection, in
//!   the same attempt.
//!
//! Within one run every count is above every earlier one (an `INCR`
//! counts on, and so does the script), and the first count of a run, or
//! of a counter created anew, is the script's, from the clock.
//!
//! **What it does not cover**: a server whose data goes back while a
//! connection to it stays open, and no restart closes it: a proxy that
//! keeps the client's connection through a failover to a replica that
//! lagged, or a master demoted (`REPLICAOF`, a Redis Cluster failover)
//! and promoted again with its clients still connected. The check above
//! catches a counter that went back below this connection's own last
//! count, not below another client's. So the memory is forgotten, on
//! this connection and the node's idle ones, at every sign of such a
//! change (`READONLY`, `MASTERDOWN`, `LOADING`, `MOVED`, `ASK`,
//! `CLUSTERDOWN` replies: see `Node::role_changed`), and lasts [`WINDOW`]
//! at most. With `restart_quarantine` (strict mode, for servers that may
//! lose data without a visible restart) the script counts every time.
//!
//! What this connection learns from a request's replies takes effect
//! when it goes back to its pool ([`settle`](Counts::settle)), so that
//! one request's form reads the same when it is written and when its
//! reply is read, in a pipeline of several too.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How many counters one connection remembers; past that it forgets them
/// all (each is counted by the script once more, which is always safe).
const REMEMBERED: usize = 64;

/// The longest a connection counts a counter by `INCR` after a count by
/// the script (less when half the keep is less).
pub(crate) const WINDOW: Duration = Duration::from_secs(10);

/// A counter this connection counted by the script.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Known {
    /// Until when an `INCR` counts it (half its keep after the script's
    /// request, [`WINDOW`] at most).
    until: Instant,
    /// The last count this connection saw on it.
    last: u64,
}

/// The counters one connection counted, and what its last request taught
/// it, pending until it goes back to its pool.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    known: HashMap<Vec<u8>, Known>,
    learned: Vec<(Vec<u8>, Option<Known>)>,
    /// Its user was refused `INCR` (an ACL rule from before it was
    /// needed): the script counts every time on this connection.
    refused: bool,
    refused_now: bool,
    /// Forget every counter when it goes back to its pool.
    forget: bool,
}

/// One acquisition's fencing counter, as its request names it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Counter<'a> {
    /// The counter's key.
    pub(crate) key: &'a [u8],
    /// How long the count keeps it at least.
    pub(crate) keep: Duration,
    /// An instant before the request was first written.
    pub(crate) at: Instant,
    /// This form counts by `INCR` (else by the script).
    pub(crate) by_incr: bool,
}

impl Counts {
    /// An `INCR` may count `counter` on this connection (see the module
    /// docs).
    pub(crate) fn knows(&self, counter: &Counter<'_>) -> bool {
        !self.refused
            && self
                .known
                .get(counter.key)
                .is_some_and(|k| counter.at < k.until)
    }

    /// Reads the count `n` a request's reply gave on `counter`: `Err`
    /// with the last count seen when an `INCR` counted no higher than
    /// that (the counter went back: no count; it is counted by the
    /// script from the next request).
    pub(crate) fn read(&mut self, counter: &Counter<'_>, n: u64) -> Result<(), u64> {
        let key = counter.key.to_vec();
        if !counter.by_incr {
            let until = counter.at + (counter.keep / 2).min(WINDOW);
            self.learned.push((key, Some(Known { until, last: n })));
            return Ok(());
        }
        match self.known.get(counter.key) {
            Some(k) if n > k.last => {
                self.learned.push((key, Some(Known { last: n, ..*k })));
                Ok(())
            }
            known => {
                self.learned.push((key, None));
                Err(known.map_or(0, |k| k.last))
            }
        }
    }

    /// An `INCR` on `counter` was refused: by an ACL rule (`noperm`; no
    /// `INCR` on this connection again), or for what the counter holds
    /// (it is counted by the script from the next request).
    pub(crate) fn refused(&mut self, counter: &Counter<'_>, noperm: bool) {
        self.refused_now |= noperm;
        self.learned.push((counter.key.to_vec(), None));
    }

    /// Its server may have changed role, or its data gone back (see the
    /// module docs): every counter is counted by the script again.
    pub(crate) fn forget(&mut self) {
        self.forget = true;
    }

    /// What the requests since the last use taught, in their order: the
    /// connection goes back to its pool.
    pub(crate) fn settle(&mut self) {
        self.refused |= std::mem::take(&mut self.refused_now);
        if std::mem::take(&mut self.forget) {
            self.known.clear();
            self.learned.clear();
            return;
        }
        for (key, learned) in std::mem::take(&mut self.learned) {
            match learned {
                Some(k) => {
                    if self.known.len() >= REMEMBERED && !self.known.contains_key(&key) {
                        self.known.clear();
                    }
                    self.known.insert(key, k);
                }
                None => {
                    self.known.remove(&key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(key: &[u8], at: Instant, by_incr: bool) -> Counter<'_> {
        Counter {
            key,
            keep: Duration::from_secs(600),
            at,
            by_incr,
        }
    }

    #[test]
    fn an_incr_counts_only_after_a_script_count_within_the_window() {
        let t0 = Instant::now();
        let mut counts = Counts::default();
        assert!(
            !counts.knows(&counter(b"f", t0, true)),
            "nothing counted yet"
        );
        counts.read(&counter(b"f", t0, false), 10).unwrap();
        assert!(
            !counts.knows(&counter(b"f", t0, true)),
            "learned only when the connection goes back to its pool"
        );
        counts.settle();
        let before = WINDOW - Duration::from_millis(1);
        assert!(counts.knows(&counter(b"f", t0 + before, true)));
        assert!(!counts.knows(&counter(b"f", t0 + WINDOW, true)));
        assert!(!counts.knows(&counter(b"g", t0, true)), "another counter");
        // Half a keep shorter than the window bounds it.
        let short = Counter {
            keep: Duration::from_secs(2),
            ..counter(b"h", t0, false)
        };
        counts.read(&short, 10).unwrap();
        counts.settle();
        assert!(counts.knows(&counter(b"h", t0 + Duration::from_millis(999), true)));
        assert!(!counts.knows(&counter(b"h", t0 + Duration::from_secs(1), true)));
        // A sign that the server changed: all forgotten.
        counts.forget();
        assert!(
            counts.knows(&counter(b"f", t0, true)),
            "until back in the pool"
        );
        counts.settle();
        assert!(!counts.knows(&counter(b"f", t0, true)));
    }

    #[test]
    fn an_incr_that_counts_no_higher_than_the_last_count_is_no_count() {
        let t0 = Instant::now();
        let mut counts = Counts::default();
        counts.read(&counter(b"f", t0, false), 10).unwrap();
        counts.settle();
        counts.read(&counter(b"f", t0, true), 11).unwrap();
        counts.settle();
        assert_eq!(counts.read(&counter(b"f", t0, true), 11), Err(11));
        counts.settle();
        assert!(
            !counts.knows(&counter(b"f", t0, true)),
            "counted by the script again"
        );
        // An INCR on a counter this connection forgot reads as gone back.
        assert_eq!(counts.read(&counter(b"f", t0, true), 12), Err(0));
    }

    #[test]
    fn a_connection_refused_incr_counts_by_script_from_then_on() {
        let t0 = Instant::now();
        let mut counts = Counts::default();
        counts.read(&counter(b"f", t0, false), 10).unwrap();
        counts.read(&counter(b"g", t0, false), 10).unwrap();
        counts.settle();
        counts.refused(&counter(b"f", t0, true), false);
        counts.settle();
        assert!(!counts.knows(&counter(b"f", t0, true)), "not an integer");
        assert!(counts.knows(&counter(b"g", t0, true)));
        counts.refused(&counter(b"g", t0, true), true);
        assert!(
            counts.knows(&counter(b"g", t0, true)),
            "until back in the pool"
        );
        counts.settle();
        counts.read(&counter(b"g", t0, false), 11).unwrap();
        counts.settle();
        assert!(
            !counts.knows(&counter(b"g", t0, true)),
            "NOPERM: never again"
        );
    }

    #[test]
    fn a_full_memory_forgets_all_and_stays_bounded() {
        let t0 = Instant::now();
        let mut counts = Counts::default();
        let keys: Vec<Vec<u8>> = (0..=REMEMBERED)
            .map(|i| i.to_string().into_bytes())
            .collect();
        for key in &keys {
            counts.read(&counter(key, t0, false), 1).unwrap();
            counts.settle();
            assert!(counts.known.len() <= REMEMBERED);
        }
        assert!(counts.knows(&counter(keys.last().unwrap(), t0, true)));
        assert!(!counts.knows(&counter(&keys[0], t0, true)));
    }
}
