//! The guard core shared by every shape: [`Guard`], with a type per mode
//! ([`LockGuard`], [`ReadGuard`], [`Permit`]); validity, extend,
//! keep-alive, loss and release live here once.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::base::error::{Error, Result};
use crate::base::node_error::NodeError;
use crate::base::telemetry;
use crate::engine::pipeline::{Engine, Granted, Shape, Token};
use crate::engine::quorum;

mod keep;

use keep::{Keeper, State, Status};

/// What a guard holds, as a type parameter of [`Guard`]: it decides
/// which methods the guard has, as `lock_api` has a guard per mode.
pub mod mode {
    /// An exclusive lock: [`LockManager::lock`](crate::LockManager::lock),
    /// a set ([`LockManager::lock_all`](crate::LockManager::lock_all)), or
    /// a write lock ([`RwLock::write`](crate::RwLock::write)). It has a
    /// fencing token.
    #[derive(Debug)]
    pub enum Lock {}

    /// A read lock ([`RwLock::read`](crate::RwLock::read)), shared with
    /// other readers. It has no fencing token: readers do not write.
    #[derive(Debug)]
    pub enum Read {}

    /// A semaphore's slot ([`Semaphore::acquire`](crate::Semaphore::acquire)),
    /// the mode of a [`Permit`](crate::Permit): an exclusive lock on one
    /// of its slots, with the slot's fencing token.
    #[derive(Debug)]
    pub enum Slot {}

    /// A mode of [`Guard`](crate::Guard); implemented by this module's
    /// types only.
    pub trait Mode: sealed::Sealed + Send + Sync + 'static {}

    impl Mode for Lock {}
    impl Mode for Read {}
    impl Mode for Slot {}

    mod sealed {
        pub trait Sealed {}
        impl Sealed for super::Lock {}
        impl Sealed for super::Read {}
        impl Sealed for super::Slot {}
    }
}

use mode::Mode;

/// A held lock: an exclusive lock, a set or a write lock.
pub type LockGuard = Guard<mode::Lock>;

/// A held read lock, shared with other readers: no fencing token.
pub type ReadGuard = Guard<mode::Read>;

/// One held permit of a [`Semaphore`](crate::Semaphore): an exclusive
/// lock on one of its slots.
pub type Permit = Guard<mode::Slot>;

/// A lock held on a quorum of nodes, in mode `M` ([`LockGuard`],
/// [`ReadGuard`], [`Permit`]).
///
/// Dropping the guard releases the lock on every node, best effort and
/// within the node timeout; [`release`](Self::release) does the same and
/// reports how it went. If the holder dies, the keys expire after the TTL.
///
/// The lock protects you only while [`validity`](Self::validity) is above
/// zero: check [`is_valid`](Self::is_valid) (or
/// [`ensure_held`](Self::ensure_held)) before acting on shared state, and
/// [`extend`](Self::extend) or [`keep_alive`](Self::keep_alive) for long
/// work. Pass the fencing token ([`LockGuard::fencing_token`]) to the
/// storage you protect, so that it can reject a holder that lost the lock.
#[must_use = "bind the guard (`let guard = ...`): dropped, as by `let _ = ...`, it releases the lock at once"]
pub struct Guard<M: Mode> {
    state: Arc<State>,
    keeper: Option<Keeper>,
    /// Cleared by `release`, so that `Drop` has nothing left to do.
    armed: bool,
    /// When the acquisition's answers were in, and how long after it a
    /// release leaves the keys ([`LockGuard::set_min_hold`]).
    acquired: Instant,
    min_hold: Option<Duration>,
    mode: PhantomData<M>,
}

impl<M: Mode> Guard<M> {
    /// The guard of what `shape` holds with `token`, as `granted`.
    pub(crate) fn new(
        engine: Arc<Engine>,
        shape: Arc<dyn Shape>,
        token: Token,
        ttl: Duration,
        granted: Granted,
    ) -> Guard<M> {
        Guard::with_index(engine, shape, token, ttl, granted, None)
    }

    /// As [`new`](Self::new), for one of several interchangeable keys (a
    /// semaphore's slot): its `index` (see [`index`](Self::index)).
    pub(crate) fn with_index(
        engine: Arc<Engine>,
        shape: Arc<dyn Shape>,
        token: Token,
        ttl: Duration,
        granted: Granted,
        index: Option<u32>,
    ) -> Guard<M> {
        for &r in shape.resources().iter() {
            engine.hold(r);
        }
        Guard {
            state: Arc::new(State {
                engine,
                shape,
                token,
                ttl,
                fencing: granted.fencing,
                index,
                agreed: granted.agreed,
                failures: granted.failures,
                status: Mutex::new(Status {
                    valid_until: granted.valid_until,
                    lost: None,
                    renewal_error: None,
                }),
                extending: Mutex::new(()),
                changed: Condvar::new(),
            }),
            keeper: None,
            armed: true,
            acquired: granted.answered,
            min_hold: None,
            mode: PhantomData,
        }
    }

    /// The engine the guard's rounds run on.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.state.engine
    }

    /// The locked resource (the Redis key); for a set
    /// ([`LockManager::lock_all`](crate::LockManager::lock_all)), the first
    /// one given.
    pub fn resource(&self) -> &[u8] {
        self.state.shape.resources()[0]
    }

    /// Every locked resource: the one of a lock, or the whole of a set in
    /// the order given.
    pub fn resources(&self) -> impl ExactSizeIterator<Item = &[u8]> {
        self.state.resources().to_vec().into_iter()
    }

    /// Whether this is a read lock ([`RwLock::read`](crate::RwLock::read)),
    /// shared with other readers.
    pub fn is_shared(&self) -> bool {
        self.state.shape.shared()
    }

    /// The token stored as the key's value, new for every acquisition:
    /// 32 lowercase hex characters (128 random bits), then, unless the
    /// manager's [`name_holders`](crate::Builder::name_holders) is off,
    /// `@host/pid` and `/label` (see [`HolderName`](crate::HolderName));
    /// then `#` and the number of the attempt that was granted (each
    /// attempt writes a value of its own: see the manual's "How it
    /// works").
    pub fn token(&self) -> &[u8] {
        &self.state.token
    }

    /// How many members agreed to the acquisition (of
    /// [`LockManager::nodes`](crate::LockManager::nodes)`().len()`).
    pub fn agreed(&self) -> usize {
        self.state.agreed
    }

    /// The members that failed during the acquisition, each with its
    /// cause; empty when every member answered. The lock is held all the
    /// same (a quorum agreed), but with less redundancy: alert on it.
    /// `lockrun` prints a warning, and the `log` feature logs one
    /// (target `redlock_sync::redundancy`).
    pub fn failures(&self) -> &[NodeError] {
        &self.state.failures
    }

    /// How many more members could have failed (or refused) and still
    /// left a quorum: `agreed() - quorum`. 0 means the lock was taken
    /// with no member to spare.
    pub fn margin(&self) -> usize {
        self.state
            .agreed
            .saturating_sub(quorum::quorum(self.state.engine.members.len()))
    }

    /// How long the lock is still safe to rely on, measured on this
    /// process's monotonic clock; zero once it has run out, and from the
    /// moment an extend or a keep-alive renewal found it taken over.
    pub fn validity(&self) -> Duration {
        self.state
            .valid_until()
            .saturating_duration_since(Instant::now())
    }

    /// Whether the lock is known to be held: [`ensure_held`](Self::ensure_held)
    /// without the reason. False once the validity ran out, once the lock
    /// was found taken over, and from the first keep-alive renewal that
    /// missed the quorum (until a retry reaches it): it fails closed, as
    /// [`Leadership::is_leader`](crate::Leadership::is_leader) does. No
    /// network call. [`validity`](Self::validity) is the clock alone.
    pub fn is_valid(&self) -> bool {
        self.state.ensure_held().is_ok()
    }

    /// Fails closed: `Ok` only while the lock is known to be held, that is
    /// while validity remains and the latest keep-alive renewal (if any)
    /// reached a quorum. No network call (a flag, two uncontended locks
    /// and a clock read), so it is cheap enough to call in a loop, and it
    /// fails in time even when every node is unreachable.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] once the validity has run out (`lost_on` 0), once
    /// an extend or renewal found the lock lost (`lost_on`: the nodes that
    /// no longer hold our token; `taken_over`: those of them that hold
    /// another owner's), or from the first keep-alive
    /// renewal that did not reach a quorum (`renewal`: why). The keep-alive
    /// thread retries that renewal while validity remains, and `Ok` comes
    /// back if a retry succeeds; but treat an error as the end of the
    /// lock: stop the protected work and drop the guard. After a takeover,
    /// or once the validity ran out, it never succeeds again.
    pub fn ensure_held(&self) -> Result<()> {
        self.state.ensure_held()
    }

    /// Blocks until the lock is lost, or `timeout` has passed: true once
    /// it is lost (taken over, as an extend or a renewal found, or its
    /// validity ran out), false if it is still held at the timeout.
    ///
    /// With [`keep_alive`](Self::keep_alive), the renewal thread wakes it
    /// at once: a renewal that finds the lock taken over, and the validity
    /// running out while renewals miss the quorum, both end the wait, no
    /// later than the validity the guard can still prove. Without
    /// keep-alive, the lock is lost when its validity ends (or when an
    /// [`extend`](Self::extend) finds it taken over). A renewal that
    /// missed the quorum while validity remains is not a loss here (the
    /// next one may succeed), though [`ensure_held`](Self::ensure_held)
    /// already fails closed then. No network call: a wait on a condition
    /// the guard's own rounds update.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        self.state.wait_lost(timeout)
    }

    /// Keeps the lock alive in the background until the guard is dropped
    /// or released: a thread extends it with its TTL every TTL/3 (from one
    /// round's start to the next, and sooner when the validity would drop
    /// under two node timeouts, but at least TTL/12 apart: a slow member
    /// does not let a TTL of three node timeouts or more run out),
    /// using the same quorum and validity rules as
    /// [`extend`](Self::extend), and retries a failed round while validity
    /// remains. Watch
    /// [`ensure_held`](Self::ensure_held) for a loss.
    ///
    /// Consumes and returns the guard, so that the thread's lifetime is the
    /// guard's: dropping it stops the thread and releases the lock.
    /// Calling it on a guard that already keeps alive changes nothing.
    #[must_use = "keep_alive returns the guard: bind it (`let guard = guard.keep_alive();`); dropped, it releases the lock at once"]
    pub fn keep_alive(self) -> Self {
        self.keep_alive_with(None)
    }

    /// As [`keep_alive`](Self::keep_alive), but renewals stop once `limit`
    /// has passed, so that a stuck worker cannot hold the lock forever: the
    /// lock then expires within one TTL (or within the longest TTL an
    /// [`extend`](Self::extend) asked for lately: extends never lower a
    /// key's expiry) and `ensure_held` fails.
    #[must_use = "keep_alive_for returns the guard: bind it (`let guard = guard.keep_alive_for(limit);`); dropped, it releases the lock at once"]
    pub fn keep_alive_for(self, limit: Duration) -> Self {
        self.keep_alive_with(Some(limit))
    }

    fn keep_alive_with(mut self, limit: Option<Duration>) -> Self {
        if self.keeper.is_none() {
            match Keeper::start(self.state.clone(), limit) {
                Ok(keeper) => self.keeper = Some(keeper),
                // No thread to be had: nothing renews; ensure_held says so
                // from now on.
                Err(e) => {
                    self.state.renewed(Some(format!(
                        "the keep-alive thread could not be started: {e}"
                    )));
                }
            }
        }
        self
    }

    /// Extends the lock so that it lasts `ttl` from now.
    ///
    /// Raises the expiry of every node's key that still holds our token to
    /// `ttl` from now; it never lowers it. The extension counts only if a
    /// quorum confirms it before the current validity runs out; the
    /// validity is then `ttl` less the round's duration and the drift
    /// allowance.
    ///
    /// Whatever the outcome, the validity afterwards is at most `ttl` less
    /// the drift allowance, counted from the round's start. So an extend
    /// to a shorter TTL shortens the validity, failed or not; the nodes
    /// keep the longer expiry (should this holder die, the key outlives
    /// it by that much). An extend that lowered the expiry could, delayed
    /// in the network past its round, cut a later, longer extend on its
    /// node. A failed extend to a longer TTL leaves the validity as it
    /// was.
    ///
    /// With [`keep_alive`](Self::keep_alive) on, waits for a renewal under
    /// way (at most about one node timeout), so that the two never overlap;
    /// the next renewal extends with the guard's original TTL again.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the validity had run out (before or during
    /// the round) or a quorum of nodes no longer holds our token (taken
    /// over: from then on the guard has no validity and
    /// [`ensure_held`](Self::ensure_held) says so): the lock is lost and
    /// nothing was extended on the new owner's behalf.
    /// [`Error::NoQuorum`] when too many nodes failed; the lock may still
    /// be held until its current validity ends. [`Error::NoValidity`]
    /// when the round took the whole new TTL. [`Error::InvalidArgument`]
    /// for a TTL that `lock` would reject.
    pub fn extend(&mut self, ttl: Duration) -> Result<()> {
        self.state.extend(ttl)
    }

    /// Releases the lock on every node and reports the outcome; `Drop`
    /// does the same silently.
    ///
    /// Each node deletes the key only if it still holds our token, so a
    /// release never removes another owner's lock.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when a quorum of nodes no longer held our token
    /// (the lock had expired, and may have been taken by someone else).
    /// [`Error::NoQuorum`] when too many nodes failed: keys left behind
    /// expire with their TTL.
    pub fn release(mut self) -> Result<()> {
        self.armed = false;
        let deadline = self.state.valid_until();
        let (tally, hold_failed) = self.unlock(true);
        if let Some(err) = hold_failed {
            return Err(err);
        }
        if tally.reached() {
            Ok(())
        } else {
            // Ended within the validity: keys gone from a quorum were
            // removed, not expired (as `extend_round` counts).
            let early = Instant::now() < deadline;
            Err(tally.held_error(&self.state.shown(), early))
        }
    }

    /// Stops the keep-alive thread, runs the unlock round, then joins the
    /// thread. A renewal under way may run beside the unlock: the scripts
    /// only act on our token, so in either order the key ends deleted, and
    /// the whole takes about one node timeout, not two.
    ///
    /// With an at-least hold not over yet, the round is the hold (see
    /// [`hold_or_release`](Self::hold_or_release)): the error says why a
    /// hold was not kept, when it was not. `inline`: a failed hold's
    /// release round runs here (`release`), else on a thread of its own
    /// (`Drop`, which never blocks longer than about one node timeout).
    fn unlock(&mut self, inline: bool) -> (quorum::Tally, Option<Error>) {
        let keeper = self.keeper.take();
        if let Some(keeper) = &keeper {
            keeper.signal();
        }
        let state = &self.state;
        let engine = &state.engine;
        let left = self
            .min_hold
            .and_then(|hold| hold.checked_sub(self.acquired.elapsed()))
            .map(|left| left.as_millis() as u64)
            .filter(|ms| *ms > 0);
        let span = telemetry::Span::round(true, || state.shown());
        let (tally, hold_failed) = match left {
            Some(ms) => self.hold_or_release(ms, inline),
            None => (engine.release(&*state.shape, &state.token), None),
        };
        span.ended(
            if tally.reached() {
                "released"
            } else {
                "no_quorum"
            },
            Some(tally.yes),
        );
        telemetry::released(self.acquired);
        for &r in state.resources().iter() {
            engine.let_go(r);
        }
        if let Some(keeper) = keeper {
            let _ = keeper.thread.join();
        }
        (tally, hold_failed)
    }

    /// An at-least hold not over yet, `left_ms` more: the keys stay, ours,
    /// until it is over (an extend round to what is left, waking nobody),
    /// but only while the guard still holds the lock. A guard lost or out
    /// of validity, or a hold round that a quorum does not confirm within
    /// the validity, is released instead: its keys are deleted where they
    /// still hold our token, and never extended (a lost guard's key on a
    /// minority, kept for the hold, would stand in everyone's way), and
    /// the error says so. The hold is not a TTL for the restart
    /// quarantine (see `Engine::hold_for`).
    fn hold_or_release(&self, left_ms: u64, inline: bool) -> (quorum::Tally, Option<Error>) {
        let state = &self.state;
        let engine = &state.engine;
        let (deadline, lost) = {
            let status = state.status.lock();
            (status.valid_until, status.lost)
        };
        if lost.is_some() || Instant::now() >= deadline {
            let why = state.not_held(lost, None);
            return (engine.release(&*state.shape, &state.token), Some(why));
        }
        let tally = engine.hold_for(&*state.shape, &state.token, left_ms);
        if tally.reached() && Instant::now() < deadline {
            return (tally, None);
        }
        let why = if tally.reached() {
            state.not_held(None, None)
        } else {
            tally.held_error(&state.shown(), Instant::now() < deadline)
        };
        // The hold round took its time already: a second round from `Drop`
        // goes to a thread of its own (inline if none can be started), and
        // nothing is counted here.
        if !inline {
            let state = state.clone();
            let spawned = thread::Builder::new()
                .name("redlock-release".into())
                .spawn(move || {
                    state.engine.release(&*state.shape, &state.token);
                });
            if spawned.is_ok() {
                return (quorum::Tally::default(), Some(why));
            }
        }
        (engine.release(&*state.shape, &state.token), Some(why))
    }
}

impl<M: Mode> Drop for Guard<M> {
    fn drop(&mut self) {
        if self.armed {
            self.armed = false;
            // Best effort: every node deletes the key if it is still ours;
            // failures are left to the key's expiry.
            let _ = self.unlock(false);
        }
    }
}

impl<M: Mode> fmt::Debug for Guard<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field(
                "resources",
                &self
                    .resources()
                    .map(String::from_utf8_lossy)
                    .collect::<Vec<_>>(),
            )
            .field("shared", &self.is_shared())
            .field("token", &String::from_utf8_lossy(self.token()))
            .field("fencing_token", &self.state.fencing)
            .field("slot", &self.state.index)
            .field("validity", &self.validity())
            .field("keep_alive", &self.keeper.is_some())
            .finish()
    }
}

impl Guard<mode::Lock> {
    /// Makes the release (or drop) of this guard leave the lock's keys
    /// until `hold` has passed since the acquisition (the moment its
    /// quorum's answers were in), instead of deleting
    /// them: work that ends early still keeps others out until then. For
    /// deduplicating jobs across hosts whose clocks differ (a cron job
    /// that runs on several hosts at "the same" minute: the first takes
    /// the lock and holds it for at least the minute, so the late hosts
    /// find it taken), like ShedLock's `lockAtLeastFor`.
    ///
    /// The release then sets the keys' expiry, where they still hold our
    /// token, to what is left of `hold` (measured on this process's
    /// monotonic clock), and announces nothing: waiters find the lock free
    /// after their pause. A `hold` longer than the TTL keeps the keys past
    /// it. If a keep-alive renewal is under way at the release, or an
    /// earlier extend is delivered late, its expiry may land after ours
    /// (extends only raise it): the keys then last up to that extend's
    /// TTL. A
    /// release after `hold` has passed deletes the keys as usual.
    ///
    /// The hold acts only where the guard still holds: a guard whose lock
    /// was lost, or whose validity ran out (a keep-alive cut off from the
    /// majority, a pause), is released as usual, deleting its keys where
    /// they still hold its token, and never extends anything; so is a
    /// guard whose hold round a quorum does not confirm within its
    /// validity. [`release`](Guard::release) then fails with the reason
    /// ([`Error::NotHeld`], [`Error::NoQuorum`]).
    ///
    /// A hold is not protected against restarts as the lock is: the
    /// restart quarantine counts TTLs, not holds (a long hold would keep
    /// every restarted server out of the votes for as long). A node that
    /// restarts empty during the hold forgets its key; once a majority of
    /// the hold's keys is gone, a late host may take the lock early.
    pub fn set_min_hold(&mut self, hold: Duration) {
        self.min_hold = Some(hold);
    }

    /// The fencing token of this acquisition, `None` when the manager
    /// has fencing off ([`Builder::fencing`](crate::Builder::fencing)):
    /// strictly greater than every fencing token handed out before for the
    /// same resource, under the assumptions in the crate docs. Give it to
    /// the storage the lock protects with every write, and have the
    /// storage reject a token lower than the highest it has seen. Always
    /// below 2^53, so exact in JSON and JavaScript numbers.
    ///
    /// A set ([`LockManager::lock_all`](crate::LockManager::lock_all)) has
    /// one token, above every earlier token of each of its resources.
    pub fn fencing_token(&self) -> Option<u64> {
        self.state.fencing
    }
}

impl<M: Mode> Guard<M> {
    /// Which of several interchangeable keys the guard holds (a
    /// semaphore's slot): the `index` it was made with, 0 when none.
    pub(crate) fn index(&self) -> u32 {
        self.state.index.unwrap_or(0)
    }

    /// The fencing token of the acquisition, `None` without one.
    pub(crate) fn fencing(&self) -> Option<u64> {
        self.state.fencing
    }

    /// The same held lock as a guard of mode `N`: it stays held, and
    /// the new guard releases it (`self` is disarmed).
    pub(crate) fn into_mode<N: Mode>(mut self) -> Guard<N> {
        Guard {
            state: self.state.clone(),
            keeper: self.keeper.take(),
            armed: std::mem::replace(&mut self.armed, false),
            acquired: self.acquired,
            min_hold: self.min_hold,
            mode: PhantomData,
        }
    }
}
