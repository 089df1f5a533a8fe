//! What a guard shares with its keep-alive thread ([`State`]: validity,
//! loss, the extend), and that thread ([`Keeper`]).

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::base::error::{Error, Result};
use crate::base::node_error::NodeError;
use crate::base::telemetry;
use crate::engine::pipeline::{Engine, Names, Shape, Token};
use crate::engine::quorum;

/// What a guard and its keep-alive thread share.
pub(super) struct State {
    pub(super) engine: Arc<Engine>,
    /// What is held: its rounds (see `pipeline.rs`).
    pub(super) shape: Arc<dyn Shape>,
    pub(super) token: Token,
    pub(super) ttl: Duration,
    pub(super) fencing: Option<u64>,
    /// Which of several interchangeable keys it holds (a semaphore's
    /// slot), when it is one of them.
    pub(super) index: Option<u32>,
    /// How many members agreed to the acquisition.
    pub(super) agreed: usize,
    /// The members that failed during the acquisition.
    pub(super) failures: Vec<NodeError>,
    pub(super) status: Mutex<Status>,
    /// Held for the whole of an extend round, so that a manual `extend`
    /// and a keep-alive renewal never overlap: the validity set is always
    /// that of the round the nodes executed last.
    pub(super) extending: Mutex<()>,
    /// Notified whenever `status` changes (a renewal's outcome, a loss),
    /// for [`Guard::wait_lost`].
    pub(super) changed: Condvar,
}

/// A round's finding that the lock is lost: on how many nodes, taken over
/// on how many of them, and whether the others' keys were removed while
/// its validity ran (see `Error::NotHeld`).
#[derive(Clone, Copy, Default)]
pub(super) struct Lost {
    pub(super) on: usize,
    pub(super) taken_over: usize,
    pub(super) removed: bool,
}

/// What is known of the lock.
pub(super) struct Status {
    /// The end of the validity; moved to the moment of a takeover when
    /// one is found.
    pub(super) valid_until: Instant,
    /// Set (final) once a round found the lock lost: how many nodes no
    /// longer held our token, how many of them held another owner's, and
    /// whether the rest had it removed (see `Error::NotHeld`).
    pub(super) lost: Option<Lost>,
    /// Why the latest renewal round did not reach a quorum; cleared when
    /// a retry does. While set, the lock is not known to be held.
    pub(super) renewal_error: Option<String>,
}

impl State {
    pub(super) fn valid_until(&self) -> Instant {
        self.status.lock().valid_until
    }

    /// The error for a lock known to be lost or in doubt: lost (expired
    /// or taken over, as counted by the round that found it), else the
    /// validity ran out, or (with `renewal`) the latest renewal missed the
    /// quorum.
    pub(super) fn not_held(&self, lost: Option<Lost>, renewal: Option<String>) -> Error {
        let Lost {
            on,
            taken_over,
            removed,
        } = lost.unwrap_or_default();
        Error::NotHeld {
            resource: self.shown(),
            lost_on: on,
            taken_over,
            removed,
            nodes: self.engine.members.len(),
            renewal,
        }
    }

    /// Records that a round found the lock lost: no validity is left, for
    /// good.
    pub(super) fn lost(&self, lost: Lost) {
        let mut status = self.status.lock();
        if status.lost.is_none() {
            telemetry::lost();
        }
        status.lost.get_or_insert(lost);
        status.valid_until = status.valid_until.min(Instant::now());
        self.changed.notify_all();
    }

    /// One extend round; see [`LockGuard::extend`].
    pub(super) fn extend(&self, ttl: Duration) -> Result<()> {
        let span = telemetry::Span::round(false, || self.shown());
        let result = self.extend_round(ttl);
        let outcome = telemetry::outcome_of(&result, "extended");
        telemetry::extended(outcome);
        span.ended(outcome, None);
        result
    }

    pub(super) fn extend_round(&self, ttl: Duration) -> Result<()> {
        let engine = &*self.engine;
        let ttl_ms = engine.check_ttl(ttl)?;
        let _one_at_a_time = self.extending.lock();
        let ttl = Duration::from_millis(ttl_ms);
        let start = Instant::now();
        let (deadline, lost) = {
            let status = self.status.lock();
            (status.valid_until, status.lost)
        };
        if lost.is_some() || start >= deadline {
            return Err(self.not_held(lost, None));
        }
        let tally = engine.extend(&*self.shape, &self.token, ttl_ms);
        let end = Instant::now();
        // Whatever the round returns, the validity never stays past
        // `start + ttl - drift` (see `quorum::after_extend`): the TTL asked
        // for bounds it, shorter ones included. (The nodes keep a longer
        // expiry, which extends never lower: the bound is conservative.)
        let confirmed = crate::engine::decide::extend_confirmed(&tally, end, deadline);
        let valid_until = {
            let mut status = self.status.lock();
            status.valid_until = quorum::after_extend(
                status.valid_until,
                start,
                ttl,
                engine.drift_factor,
                confirmed,
            );
            self.changed.notify_all();
            status.valid_until
        };
        if end >= deadline {
            return Err(self.not_held(None, None));
        }
        if !tally.reached() {
            // Ended within the validity (`end < deadline`, checked
            // above): keys gone from a quorum were removed.
            let err = tally.held_error(&self.shown(), true);
            if let Error::NotHeld {
                lost_on,
                taken_over,
                removed,
                ..
            } = &err
            {
                self.lost(Lost {
                    on: *lost_on,
                    taken_over: *taken_over,
                    removed: *removed,
                });
            }
            return Err(err);
        }
        if end < valid_until {
            Ok(())
        } else {
            Err(engine.no_validity(self.shown(), end - start, ttl))
        }
    }

    /// What errors and logs name: the resource, or a set's resources
    /// joined with `, `.
    pub(super) fn shown(&self) -> String {
        self.shape.shown()
    }

    /// Every resource held.
    pub(super) fn resources(&self) -> Names<'_> {
        self.shape.resources()
    }

    pub(super) fn ensure_held(&self) -> Result<()> {
        let status = self.status.lock();
        if status.lost.is_some() || Instant::now() >= status.valid_until {
            return Err(self.not_held(status.lost, None));
        }
        match &status.renewal_error {
            Some(why) => Err(self.not_held(None, Some(why.clone()))),
            None => Ok(()),
        }
    }

    /// Records the outcome of a renewal round; true if the round before
    /// had missed the quorum.
    pub(super) fn renewed(&self, error: Option<String>) -> bool {
        let before = std::mem::replace(&mut self.status.lock().renewal_error, error);
        self.changed.notify_all();
        before.is_some()
    }

    /// See [`Guard::wait_lost`].
    pub(super) fn wait_lost(&self, timeout: Duration) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        let mut status = self.status.lock();
        loop {
            let now = Instant::now();
            if status.lost.is_some() || now >= status.valid_until {
                return true;
            }
            if deadline.is_some_and(|d| now >= d) {
                return false;
            }
            // Woken by a change, or at the end of the validity known now
            // (which is a loss unless a renewal moved it meanwhile).
            let until = deadline.map_or(status.valid_until, |d| d.min(status.valid_until));
            self.changed.wait_until(&mut status, until);
        }
    }
}

/// The keep-alive thread and the flag that stops it.
pub(super) struct Keeper {
    pub(super) stop: Arc<(Mutex<bool>, Condvar)>,
    pub(super) thread: thread::JoinHandle<()>,
}

impl Keeper {
    pub(super) fn start(state: Arc<State>, limit: Option<Duration>) -> std::io::Result<Keeper> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let thread = {
            let stop = stop.clone();
            thread::Builder::new()
                .name("redlock-keep-alive".into())
                .spawn(move || keep_alive(&state, &stop, limit))?
        };
        Ok(Keeper { stop, thread })
    }

    /// Tells the thread to stop; it ends after any round under way.
    pub(super) fn signal(&self) {
        let (stopped, wake) = &*self.stop;
        *stopped.lock() = true;
        wake.notify_all();
    }
}

/// Waits `pause` or until stopped; true when stopped.
pub(super) fn pause_or_stop(stop: &(Mutex<bool>, Condvar), pause: Duration) -> bool {
    let (stopped, wake) = stop;
    let mut stopped = stopped.lock();
    if !*stopped {
        let _ = wake.wait_for(&mut stopped, pause);
    }
    *stopped
}

/// The keep-alive loop: every TTL/3 (from one round's start to the next;
/// sooner when two node timeouts would not be left of the validity, but
/// never sooner than TTL/12 after the last round began) an extend round
/// with the guard's TTL.
/// A round that misses the quorum sets `renewal_error` (so `ensure_held`
/// fails closed at once) and is retried every TTL/12 while validity
/// remains; a retry that succeeds clears it. A lost lock (taken over, or
/// validity run out) ends the loop; so does `limit`, after which the lock
/// is left to expire.
pub(super) fn keep_alive(state: &State, stop: &(Mutex<bool>, Condvar), limit: Option<Duration>) {
    let started = Instant::now();
    let period = state.ttl / 3;
    let retry = (state.ttl / 12).max(Duration::from_millis(1));
    // A round may take the node timeout: a renewal is due TTL/3 after the
    // last one began, or sooner, while two node timeouts and the drift
    // are left of the validity it gave (so that a slow member never lets
    // a healthy lock run out between two rounds); but never sooner than
    // TTL/12 after the last one began (a TTL short for the node timeout
    // is renewed at that pace, not in a loop; counted from the round's
    // end, that spacing came on top of a slow member's node timeout and
    // left a 1 s TTL with a 400 ms node timeout 47 ms above lockrun's
    // kill margin: a loaded machine's late wake-up killed a healthy
    // command).
    let spare = 2 * state.engine.node_timeout + state.ttl / 50;
    let due = period.min(state.ttl.saturating_sub(spare));
    // The first renewal comes sooner when the guard was kept alive late,
    // with less than 2/3 of its validity left.
    let left = state
        .valid_until()
        .saturating_duration_since(Instant::now());
    let mut pause = period.min(left / 2).min(left.saturating_sub(spare));
    loop {
        if pause_or_stop(stop, pause) {
            return;
        }
        if limit.is_some_and(|limit| started.elapsed() >= limit) {
            return;
        }
        let round = Instant::now();
        match state.extend(state.ttl) {
            Ok(()) => {
                if state.renewed(None) {
                    crate::base::logging::log!(
                        info,
                        "redlock_sync::keepalive",
                        "lock on {:?} renewed again",
                        state.shown()
                    );
                }
                // Every TTL/3 from the start of the round: a slow round
                // (a member that takes the node timeout) does not push the
                // next one later, so a healthy lock's validity never drops
                // below TTL - TTL/3 - a round.
                let took = round.elapsed();
                pause = due.max(retry).saturating_sub(took);
            }
            Err(err @ Error::NotHeld { .. }) => {
                // Not when the guard is being released: this round may
                // have found the release's own deletion.
                if !*stop.0.lock() {
                    crate::base::logging::log!(
                        error,
                        "redlock_sync::keepalive",
                        "kept-alive lock lost: {err}"
                    );
                }
                #[cfg(not(feature = "log"))]
                let _ = err;
                return;
            }
            Err(err) => {
                let left = state
                    .valid_until()
                    .saturating_duration_since(Instant::now());
                crate::base::logging::log!(
                    warn,
                    "redlock_sync::keepalive",
                    "renewal missed the quorum, {left:?} of validity left: {err}"
                );
                state.renewed(Some(err.to_string()));
                if left.is_zero() {
                    crate::base::logging::log!(
                        error,
                        "redlock_sync::keepalive",
                        "kept-alive lock on {:?} lost: its validity ran out while renewals failed",
                        state.shown()
                    );
                    return;
                }
                pause = retry.min(left / 2).max(Duration::from_millis(1));
            }
        }
    }
}
