//! The lock's room: its entry points on [`LockManager`]. The lock is one
//! key per resource, taken with `SET NX PX` on every member: the engine's
//! [`FairKey`] (a [`OneKey`] with its place in the fair queues, which
//! leaderships wrap too) is the lock's shape itself, so that an
//! acquisition goes down the layers and back without returning here. A
//! lock waits as the writer of the read-write lock of its name (the writer's rule is in `rwlock.rs`). The
//! safety argument is in the crate docs, [Why the lock is
//! safe](crate#why-the-lock-is-safe).

use std::time::Duration;

use crate::base::error::Result;
use crate::base::keys;
use crate::engine::fair::{Fair, FairKey};
use crate::engine::guard::LockGuard;
use crate::engine::single::OneKey;
use crate::engine::stage::{Budget, WaitOn};
use crate::shapes::manager::{LockManager, Wait, waiting_family};
use crate::shapes::rwlock::Writer;

impl LockManager {
    waiting_family! {
        /// Takes the lock on `resource` for `ttl`, waiting for it as the retry
        /// settings allow (see [`set_retry`](Self::set_retry)).
        ///
        /// The first attempt is made at once. After a failed one, the thread
        /// pauses (a random pause between half the retry delay and all of it)
        /// and asks again; `count - 1` pauses in all, so a lock that is never
        /// released is given up after between `(count - 1) × max_delay / 2`
        /// and `(count - 1) × max_delay` (by default 3 attempts and 200-400 ms
        /// of pauses). A release of the resource ends a pause early (see
        /// [`Builder::wake_on_release`](crate::Builder::wake_on_release)) and the thread asks at once; if it is
        /// beaten to the lock, it waits out the rest of the interrupted pause,
        /// so being woken never shortens the time `lock` waits. Threads of this
        /// manager waiting for the same resource are served in arrival order: a
        /// thread that finds others waiting queues behind them, and its time
        /// behind them counts as pausing.
        ///
        /// Locks are not re-entrant: a thread that calls `lock` on a resource
        /// it already holds waits for its own release, and gets
        /// [`Error::Taken`](crate::Error::Taken) with `held_here` set.
        ///
        /// `lock` is the write side of [`rwlock`](Self::rwlock)`(resource)`:
        /// it waits for readers to leave, and while it waits behind readers,
        /// new readers wait behind it.
        ///
        /// The returned guard releases the lock when dropped. The lock is safe
        /// to rely on only for [`LockGuard::validity`]: the TTL less the time
        /// the acquisition took and a clock drift allowance.
        ///
        /// # Errors
        ///
        /// The last attempt's error: [`Error::Taken`](crate::Error::Taken) when another owner holds
        /// the resource, [`Error::NoQuorum`](crate::Error::NoQuorum) when too many nodes failed,
        /// [`Error::NoValidity`](crate::Error::NoValidity) when the round was too slow for the TTL.
        /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for an empty resource or a TTL that is 0,
        /// larger than [`MAX_TTL`](crate::MAX_TTL), or too small to leave any validity.
        /// Waiting stops at once, before the retries are spent, when an
        /// attempt's failures rule out a quorum for good
        /// ([`Error::is_misconfigured`](crate::Error::is_misconfigured): too many members refuse
        /// the credentials or permissions, fail TLS, or are not Redis); a
        /// passing cause (a timeout, a node down, a restart) keeps it waiting.
        fn lock, try_lock, try_lock_for, try_lock_until => lock_with
        (resource: impl AsRef<[u8]>) -> LockGuard
    }

    /// Takes the lock on `resource` for `ttl`, waiting as `wait` says: the
    /// one call behind [`lock`](Self::lock) ([`Wait::Retries`]),
    /// [`try_lock`](Self::try_lock) ([`Wait::No`]),
    /// [`try_lock_for`](Self::try_lock_for) ([`Wait::For`]) and
    /// [`try_lock_until`](Self::try_lock_until) ([`Wait::Until`]).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), from the last attempt.
    pub fn lock_with(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        wait: Wait,
    ) -> Result<LockGuard> {
        self.acquire(resource.as_ref(), ttl, self.budget(wait))
    }

    /// The lock's acquisition: its shape through the pipeline, in the
    /// engine's waiting stage. A plain lock waits as the writer of the
    /// read-write lock of the same name.
    fn acquire(&self, resource: &[u8], ttl: Duration, budget: Budget) -> Result<LockGuard> {
        keys::check_resource(resource)?;
        let engine = self.engine();
        let ttl_ms = engine.acquisition_ttl(ttl)?;
        let writer = Writer(resource);
        let names = [resource];
        let wait = WaitOn::names(&names).writer(&writer);
        let fair = Fair::waiting(engine, budget.waits(), resource, self.retry().1);
        let shape = std::sync::Arc::new(FairKey::new(OneKey::new(resource, resource), fair));
        self.stage()
            .acquire_shape(shape, wait, budget, ttl_ms, |guard, _| Ok(guard))
    }
}
