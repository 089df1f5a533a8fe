//! [`Cancel`]: a switch that stops waiting for locks, for a clean
//! shutdown of threads blocked in `lock()`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// How often a thread waiting in a resource's queue looks at its switch
/// (a release wakes it at once; a cancel is seen within this).
pub(crate) const LOOK: Duration = Duration::from_millis(20);

/// A switch that stops waiting: a manager bound to it with
/// [`LockManager::cancel_on`](crate::LockManager::cancel_on) stops every
/// acquisition that waits (`lock`, `try_lock_for`, a read or write lock,
/// a permit, a campaign) once [`cancel`](Self::cancel) is called, and
/// those calls return [`Error::Cancelled`](crate::Error::Cancelled).
///
/// An attempt under way when the switch is thrown runs to its end (at
/// most the node timeout): if it took the lock, the call returns the
/// guard, and the caller decides (drop it to release); if not, what it
/// wrote is removed first, as after any failed attempt. A waiting call
/// sees the switch within about 20 ms. The switch stays thrown: later
/// calls that would wait return `Cancelled` after their first attempt.
/// Clones share the switch.
///
/// ```no_run
/// # use std::time::Duration;
/// # fn main() -> redlock_sync::Result<()> {
/// use redlock_sync::{Cancel, LockManager};
///
/// let shutdown = Cancel::new();
/// let dlm = LockManager::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?
///     .cancel_on(&shutdown);
/// let worker = {
///     let dlm = dlm.clone();
///     std::thread::spawn(move || dlm.lock("jobs:nightly", Duration::from_secs(30)))
/// };
/// // ... on SIGTERM:
/// shutdown.cancel();
/// match worker.join().unwrap() {
///     Err(e) if e.is_cancelled() => {} // it was waiting: nothing is held
///     Ok(guard) => drop(guard),       // it got the lock just before
///     Err(e) => return Err(e),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct Cancel(Arc<Inner>);

#[derive(Default)]
struct Inner {
    thrown: AtomicBool,
    lock: Mutex<()>,
    changed: Condvar,
}

impl Cancel {
    /// A switch not thrown yet.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Throws the switch: every waiting acquisition of the managers bound
    /// to it stops and returns [`Error::Cancelled`](crate::Error::Cancelled).
    pub fn cancel(&self) {
        let _held = self.0.lock.lock();
        self.0.thrown.store(true, Ordering::SeqCst);
        self.0.changed.notify_all();
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.thrown.load(Ordering::SeqCst)
    }

    /// Sleeps for `pause`, or less if the switch is thrown meanwhile.
    /// True when it was thrown.
    pub(crate) fn sleep(&self, pause: Duration) -> bool {
        let deadline = Instant::now().checked_add(pause);
        let mut held = self.0.lock.lock();
        while !self.is_cancelled() {
            match deadline {
                Some(deadline) => {
                    if self.0.changed.wait_until(&mut held, deadline).timed_out() {
                        break;
                    }
                }
                None => self.0.changed.wait(&mut held),
            }
        }
        self.is_cancelled()
    }
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancel")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleep_ends_when_the_switch_is_thrown_and_stays_thrown() {
        let cancel = Cancel::new();
        assert!(!cancel.sleep(Duration::from_millis(1)));
        let other = cancel.clone();
        let thrower = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            other.cancel();
        });
        let started = Instant::now();
        assert!(cancel.sleep(Duration::from_secs(30)));
        assert!(started.elapsed() < Duration::from_secs(10));
        thrower.join().unwrap();
        assert!(cancel.is_cancelled() && cancel.sleep(Duration::MAX));
    }
}
