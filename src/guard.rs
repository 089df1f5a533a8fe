//! [`LockGuard`]: a held lock, released when dropped.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};
use crate::manager::Shared;
use crate::quorum;

/// Random bytes in a token: 128 bits.
const TOKEN_BYTES: usize = 16;

/// A token: the random bytes, hex encoded so that it reads well in
/// `redis-cli`.
pub(crate) type Token = [u8; 2 * TOKEN_BYTES];

/// Draws a fresh token from the operating system's generator.
pub(crate) fn new_token() -> Result<Token> {
    let mut raw = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut raw).map_err(|source| Error::Entropy { source })?;
    let mut token = [0u8; 2 * TOKEN_BYTES];
    for (pair, byte) in token.chunks_exact_mut(2).zip(raw) {
        pair[0] = HEX[usize::from(byte >> 4)];
        pair[1] = HEX[usize::from(byte & 0xf)];
    }
    Ok(token)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// What a guard and its keep-alive thread share.
struct State {
    shared: Arc<Shared>,
    resource: Box<[u8]>,
    token: Token,
    ttl: Duration,
    fencing: u64,
    valid_until: Mutex<Instant>,
    /// A renewal found the lock gone, or could not renew it in time.
    /// Final: the keep-alive thread has stopped.
    lost: AtomicBool,
    /// Why the latest renewal round did not reach a quorum; cleared when
    /// a retry does. While set, the lock is not known to be held.
    renewal_error: Mutex<Option<String>>,
    /// Held for the whole of an extend round, so that a manual `extend`
    /// and a keep-alive renewal never overlap: the validity set is always
    /// that of the round the nodes executed last.
    extending: Mutex<()>,
}

impl State {
    fn valid_until(&self) -> Instant {
        *self.valid_until.lock()
    }

    /// `NotHeld` decided locally: the validity ran out, or (with
    /// `renewal`) the latest renewal missed the quorum.
    fn not_held(&self, renewal: Option<String>) -> Error {
        Error::NotHeld {
            resource: quorum::display(&self.resource),
            lost_on: 0,
            nodes: self.shared.nodes.len(),
            renewal,
        }
    }

    /// One extend round; see [`LockGuard::extend`].
    fn extend(&self, ttl: Duration) -> Result<()> {
        let shared = &*self.shared;
        let ttl_ms = shared.check_ttl(ttl)?;
        let _one_at_a_time = self.extending.lock();
        let ttl = Duration::from_millis(ttl_ms);
        let start = Instant::now();
        let deadline = self.valid_until();
        if start >= deadline {
            return Err(self.not_held(None));
        }
        let tally = shared.extend(&self.resource, &self.token, ttl_ms);
        let end = Instant::now();
        if end >= deadline {
            return Err(self.not_held(None));
        }
        if !tally.reached() {
            return Err(tally.held_error(&self.resource));
        }
        let elapsed = end - start;
        match quorum::validity(ttl, elapsed, shared.drift_factor)
            .and_then(|validity| start.checked_add(elapsed + validity))
        {
            Some(valid_until) => {
                *self.valid_until.lock() = valid_until;
                Ok(())
            }
            None => Err(Error::NoValidity {
                resource: quorum::display(&self.resource),
                elapsed,
                ttl,
            }),
        }
    }

    fn ensure_held(&self) -> Result<()> {
        if self.lost.load(Ordering::Acquire) || Instant::now() >= self.valid_until() {
            return Err(self.not_held(None));
        }
        match self.renewal_error.lock().clone() {
            Some(why) => Err(self.not_held(Some(why))),
            None => Ok(()),
        }
    }
}

/// The keep-alive thread and the flag that stops it.
struct Keeper {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: thread::JoinHandle<()>,
}

impl Keeper {
    fn start(state: Arc<State>, limit: Option<Duration>) -> std::io::Result<Keeper> {
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
    fn signal(&self) {
        let (stopped, wake) = &*self.stop;
        *stopped.lock() = true;
        wake.notify_all();
    }
}

/// Waits `pause` or until stopped; true when stopped.
fn pause_or_stop(stop: &(Mutex<bool>, Condvar), pause: Duration) -> bool {
    let (stopped, wake) = stop;
    let mut stopped = stopped.lock();
    if !*stopped {
        let _ = wake.wait_for(&mut stopped, pause);
    }
    *stopped
}

/// The keep-alive loop: every TTL/3 an extend round with the guard's TTL.
/// A round that misses the quorum sets `renewal_error` (so `ensure_held`
/// fails closed at once) and is retried every TTL/12 while validity
/// remains; a retry that succeeds clears it. A lost lock (`NotHeld`, or
/// validity run out) sets `lost` and ends the loop; so does `limit`, after
/// which the lock is left to expire.
fn keep_alive(state: &State, stop: &(Mutex<bool>, Condvar), limit: Option<Duration>) {
    let started = Instant::now();
    let period = state.ttl / 3;
    let retry = (state.ttl / 12).max(Duration::from_millis(1));
    // The first renewal comes sooner when the guard was kept alive late,
    // with less than 2/3 of its validity left.
    let left = state
        .valid_until()
        .saturating_duration_since(Instant::now());
    let mut pause = period.min(left / 2);
    loop {
        if pause_or_stop(stop, pause) {
            return;
        }
        if limit.is_some_and(|limit| started.elapsed() >= limit) {
            return;
        }
        match state.extend(state.ttl) {
            Ok(()) => {
                *state.renewal_error.lock() = None;
                pause = period;
            }
            Err(Error::NotHeld { .. }) => {
                state.lost.store(true, Ordering::Release);
                return;
            }
            Err(err) => {
                *state.renewal_error.lock() = Some(err.to_string());
                let left = state
                    .valid_until()
                    .saturating_duration_since(Instant::now());
                if left.is_zero() {
                    state.lost.store(true, Ordering::Release);
                    return;
                }
                pause = retry.min(left / 2).max(Duration::from_millis(1));
            }
        }
    }
}

/// A lock held on a quorum of nodes.
///
/// Dropping the guard releases the lock on every node, best effort and
/// within the node timeout; [`release`](Self::release) does the same and
/// reports how it went. If the holder dies, the keys expire after the TTL.
///
/// The lock protects you only while [`validity`](Self::validity) is above
/// zero: check [`is_valid`](Self::is_valid) (or
/// [`ensure_held`](Self::ensure_held)) before acting on shared state, and
/// [`extend`](Self::extend) or [`keep_alive`](Self::keep_alive) for long
/// work. Pass [`fencing_token`](Self::fencing_token) to the storage you
/// protect, so that it can reject a holder that lost the lock.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    state: Arc<State>,
    keeper: Option<Keeper>,
    /// Cleared by `release`, so that `Drop` has nothing left to do.
    armed: bool,
}

impl LockGuard {
    pub(crate) fn new(
        shared: Arc<Shared>,
        resource: &[u8],
        token: Token,
        ttl: Duration,
        fencing: u64,
        valid_until: Instant,
    ) -> LockGuard {
        LockGuard {
            state: Arc::new(State {
                shared,
                resource: resource.into(),
                token,
                ttl,
                fencing,
                valid_until: Mutex::new(valid_until),
                lost: AtomicBool::new(false),
                renewal_error: Mutex::new(None),
                extending: Mutex::new(()),
            }),
            keeper: None,
            armed: true,
        }
    }

    /// The locked resource (the Redis key).
    pub fn resource(&self) -> &[u8] {
        &self.state.resource
    }

    /// The random token stored as the key's value: 32 lowercase hex
    /// characters, new for every acquisition.
    pub fn token(&self) -> &[u8] {
        &self.state.token
    }

    /// The fencing token of this acquisition: strictly greater than every
    /// fencing token handed out before for the same resource, as long as
    /// the nodes keep their data (see the crate docs). Give it to the
    /// storage the lock protects with every write, and have the storage
    /// reject a token lower than the highest it has seen.
    pub fn fencing_token(&self) -> u64 {
        self.state.fencing
    }

    /// How long the lock is still safe to rely on, measured on this
    /// process's monotonic clock; zero once it has run out.
    pub fn validity(&self) -> Duration {
        self.state
            .valid_until()
            .saturating_duration_since(Instant::now())
    }

    /// Whether any validity is left.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.state.valid_until()
    }

    /// Fails closed: `Ok` only while the lock is known to be held, that is
    /// while validity remains and the latest keep-alive renewal (if any)
    /// reached a quorum. No network call (a flag, two uncontended locks
    /// and a clock read), so it is cheap enough to call in a loop, and it
    /// fails in time even when every node is unreachable.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] once the validity has run out, or from the first
    /// keep-alive renewal that did not reach a quorum. The keep-alive
    /// thread retries that renewal while validity remains, and `Ok` comes
    /// back if a retry succeeds; but treat an error as the end of the
    /// lock: stop the protected work and drop the guard. After a renewal
    /// found the lock taken over, or the validity ran out, it never
    /// succeeds again.
    pub fn ensure_held(&self) -> Result<()> {
        self.state.ensure_held()
    }

    /// Keeps the lock alive in the background until the guard is dropped
    /// or released: a thread extends it with its TTL every TTL/3, using the
    /// same quorum and validity rules as [`extend`](Self::extend), and
    /// retries a failed round while validity remains. Watch
    /// [`ensure_held`](Self::ensure_held) for a loss.
    ///
    /// Consumes and returns the guard, so that the thread's lifetime is the
    /// guard's: dropping it stops the thread and releases the lock.
    /// Calling it on a guard that already keeps alive changes nothing.
    pub fn keep_alive(self) -> LockGuard {
        self.keep_alive_with(None)
    }

    /// As [`keep_alive`](Self::keep_alive), but renewals stop once `limit`
    /// has passed, so that a stuck worker cannot hold the lock forever: the
    /// lock then expires within one TTL and `ensure_held` fails.
    pub fn keep_alive_for(self, limit: Duration) -> LockGuard {
        self.keep_alive_with(Some(limit))
    }

    fn keep_alive_with(mut self, limit: Option<Duration>) -> LockGuard {
        if self.keeper.is_none() {
            match Keeper::start(self.state.clone(), limit) {
                Ok(keeper) => self.keeper = Some(keeper),
                // No thread to be had: nothing renews, ensure_held will
                // fail when the validity runs out.
                Err(_) => self.state.lost.store(true, Ordering::Release),
            }
        }
        self
    }

    /// Extends the lock so that it lasts `ttl` from now.
    ///
    /// Sets the expiry of every node's key that still holds our token. The
    /// extension counts only if a quorum confirms it before the current
    /// validity runs out; the validity is then `ttl` less the round's
    /// duration and the drift allowance. On error the validity is left as
    /// it was.
    ///
    /// With [`keep_alive`](Self::keep_alive) on, waits for a renewal under
    /// way (at most about one node timeout), so that the two never overlap;
    /// the next renewal extends with the guard's original TTL again.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the validity had run out (before or during
    /// the round) or a quorum of nodes no longer holds our token: the
    /// lock is lost and nothing was extended on the new owner's behalf.
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
        let tally = self.unlock();
        if tally.reached() {
            Ok(())
        } else {
            Err(tally.held_error(&self.state.resource))
        }
    }

    /// Stops the keep-alive thread, runs the unlock round, then joins the
    /// thread. A renewal under way may run beside the unlock: the scripts
    /// only act on our token, so in either order the key ends deleted, and
    /// the whole takes about one node timeout, not two.
    fn unlock(&mut self) -> quorum::Tally {
        let keeper = self.keeper.take();
        if let Some(keeper) = &keeper {
            keeper.signal();
        }
        let state = &self.state;
        let tally = state.shared.unlock(None, &state.resource, &state.token);
        if let Some(keeper) = keeper {
            let _ = keeper.thread.join();
        }
        tally
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.armed {
            self.armed = false;
            // Best effort: every node deletes the key if it is still ours;
            // failures are left to the key's expiry.
            let _ = self.unlock();
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("resource", &String::from_utf8_lossy(self.resource()))
            .field("token", &String::from_utf8_lossy(self.token()))
            .field("fencing_token", &self.fencing_token())
            .field("validity", &self.validity())
            .field("keep_alive", &self.keeper.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_hex_and_distinct() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_ne!(a, b);
        for t in [a, b] {
            assert!(
                t.iter()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            );
        }
    }
}
