//! [`LockManager`], the handle every shape hangs off (its settings and
//! its [`Engine`](crate::engine::pipeline::Engine)), and [`Wait`], how
//! long a call waits, which the engine's waiting stage
//! (`engine/stage.rs`) spends. The builder is in `builder.rs`.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::base::cancel::Cancel;
use crate::base::error::Result;
use crate::engine::guard::LockGuard;
use crate::engine::pipeline::Engine;
use crate::engine::quorum;
use crate::engine::stage::{Budget, Retry, Stage};
use crate::members::member::Member;

/// How long an acquisition may wait for a busy lock: the last argument of
/// [`LockManager::lock_with`] and the other shapes' `_with` calls. Named
/// so that a wait cannot be passed where the TTL goes (both would be
/// `Duration`s); `lock`, `try_lock`, `try_lock_for` and `try_lock_until`
/// are the first four, and [`Wait::Forever`] has no call of its own.
///
/// ```no_run
/// # use std::time::Duration;
/// # use redlock_sync::{LockManager, Wait};
/// # fn main() -> redlock_sync::Result<()> {
/// # let dlm = LockManager::new(["redis://127.0.0.1"])?;
/// let guard = dlm.lock_with("jobs/report", Duration::from_secs(30), Wait::For(Duration::from_secs(5)))?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wait {
    /// One attempt, no waiting ([`try_lock`](LockManager::try_lock)).
    No,
    /// The manager's retry settings: `count - 1` random pauses
    /// ([`lock`](LockManager::lock), [`LockManager::set_retry`]).
    Retries,
    /// Until this much time has passed, at least one attempt
    /// ([`try_lock_for`](LockManager::try_lock_for)).
    For(Duration),
    /// Until this instant, at least one attempt
    /// ([`try_lock_until`](LockManager::try_lock_until)).
    Until(Instant),
    /// Without limit, until acquired (or [cancelled](crate::Cancel)):
    /// what a candidate that should wait for its turn passes
    /// ([`Election::campaign_with`](crate::Election::campaign_with)). No
    /// bare verb (`lock`, `campaign`, ...) waits like this: they use the
    /// manager's retry settings, so that a caller is never hung by a
    /// holder that never lets go.
    Forever,
}

/// A verb's waiting family, generated once with one doc: the bare verb
/// (`lock`: the manager's retries, documented by the shape), `try_` (one
/// attempt), `try_…_for` (until a timeout) and `try_…_until` (until a
/// deadline), each the shape's `…_with` call given its [`Wait`]. `_for`
/// always means "for this long", and the TTL always comes before the
/// wait.
macro_rules! waiting_family {
    (
        $(#[$doc:meta])*
        fn $verb:ident, $try:ident, $try_for:ident, $try_until:ident => $with:ident
        $(<$($g:ident),*>)? ($($arg:ident: $ty:ty),*) -> $out:ty
        $(where [$($bound:tt)*])?
    ) => {
        $(#[$doc])*
        pub fn $verb$(<$($g),*>)?(
            &self,
            $($arg: $ty,)*
            ttl: ::std::time::Duration,
        ) -> $crate::Result<$out>
        $(where $($bound)*)?
        {
            self.$with($($arg,)* ttl, $crate::Wait::Retries)
        }

        #[doc = concat!("As [`", stringify!($verb), "`](Self::", stringify!($verb),
            "), with exactly one attempt ([`Wait::No`](crate::Wait::No)).")]
        #[doc = ""]
        #[doc = "# Errors"]
        #[doc = ""]
        #[doc = concat!("As [`", stringify!($verb), "`](Self::", stringify!($verb),
            "), from the single attempt.")]
        pub fn $try$(<$($g),*>)?(
            &self,
            $($arg: $ty,)*
            ttl: ::std::time::Duration,
        ) -> $crate::Result<$out>
        $(where $($bound)*)?
        {
            self.$with($($arg,)* ttl, $crate::Wait::No)
        }

        #[doc = concat!("As [`", stringify!($verb), "`](Self::", stringify!($verb),
            "), trying until `timeout` has passed ([`Wait::For`](crate::Wait::For)): \
            a random pause (between half the retry delay and all of it, never past \
            the timeout) between attempts, at least one attempt, woken by releases \
            and served in arrival order as the bare verb is.")]
        #[doc = ""]
        #[doc = concat!("The TTL comes before the wait, as in every call here; to name the \
            wait, write [`", stringify!($with), "`](Self::", stringify!($with),
            ") with `Wait::For(timeout)`, or use [`", stringify!($try_until), "`](Self::",
            stringify!($try_until), "), whose deadline cannot be mistaken for the TTL.")]
        #[doc = ""]
        #[doc = "# Errors"]
        #[doc = ""]
        #[doc = concat!("As [`", stringify!($verb), "`](Self::", stringify!($verb),
            "), from the last attempt.")]
        pub fn $try_for$(<$($g),*>)?(
            &self,
            $($arg: $ty,)*
            ttl: ::std::time::Duration,
            timeout: ::std::time::Duration,
        ) -> $crate::Result<$out>
        $(where $($bound)*)?
        {
            self.$with($($arg,)* ttl, $crate::Wait::For(timeout))
        }

        #[doc = concat!("As [`", stringify!($try_for), "`](Self::", stringify!($try_for),
            "), trying until `deadline` ([`Wait::Until`](crate::Wait::Until)). At least \
            one attempt is made.")]
        #[doc = ""]
        #[doc = "# Errors"]
        #[doc = ""]
        #[doc = concat!("As [`", stringify!($verb), "`](Self::", stringify!($verb),
            "), from the last attempt.")]
        pub fn $try_until$(<$($g),*>)?(
            &self,
            $($arg: $ty,)*
            ttl: ::std::time::Duration,
            deadline: ::std::time::Instant,
        ) -> $crate::Result<$out>
        $(where $($bound)*)?
        {
            self.$with($($arg,)* ttl, $crate::Wait::Until(deadline))
        }
    };
}

pub(crate) use waiting_family;

/// Takes Redlock locks over a fixed set of independent Redis masters.
///
/// Create one with [`LockManager::new`] or [`LockManager::builder`] and
/// share it: it is `Clone`, `Send` and `Sync`, and clones share the nodes
/// and their pooled connections. Each clone has its own retry settings
/// ([`set_retry`](Self::set_retry)).
///
/// Every call asks all nodes at once and succeeds when a majority
/// ([`quorum`](Self::quorum)) agrees; a node that is down, hung or failing
/// costs at most the node timeout and counts as one vote against.
///
/// # Why it is safe
///
/// The promise: while a guard [`is_valid`](LockGuard::is_valid), no other
/// client holds the same resource through the same members. It rests on
/// seven assumptions, each enforced or checked where it can be, and a
/// proof: both in the crate docs, [Why the lock is
/// safe](crate#why-the-lock-is-safe), with every request's answer to "what
/// if this arrives late?" ([Late requests and moved
/// servers](crate#late-requests-and-moved-servers)) and what the model
/// checker covers. Sets, read-write locks, semaphores and elections rest
/// on the same argument; each shape's page says what it adds.
#[derive(Clone)]
pub struct LockManager {
    engine: Arc<Engine>,
    retry: Retry,
    /// The switch that stops this handle's waits (see `cancel_on`).
    cancel: Option<Cancel>,
}

impl LockManager {
    /// The manager of `pipeline`, with `retry` (see the builder).
    pub(crate) fn from_parts(engine: Engine, retry: Retry) -> LockManager {
        LockManager {
            engine: Arc::new(engine),
            retry,
            cancel: None,
        }
    }

    /// A handle to the same manager (members, settings, retries) whose
    /// waits stop when `cancel` is thrown: an acquisition that would
    /// pause returns [`Error::Cancelled`](crate::Error::Cancelled) instead (see [`Cancel`]). Its
    /// clones share the switch; this handle is unchanged.
    #[must_use]
    pub fn cancel_on(&self, cancel: &Cancel) -> LockManager {
        LockManager {
            cancel: Some(cancel.clone()),
            ..self.clone()
        }
    }

    /// Sets how long [`lock`](Self::lock) waits for a busy lock: `count`
    /// attempts' worth, that is the first attempt and `count - 1` pauses,
    /// each drawn uniformly from `[max_delay / 2, max_delay]`. A lock that
    /// is never released is given up after `(count - 1) × max_delay / 2`
    /// to `(count - 1) × max_delay` of pausing. A release ends a pause
    /// early and the thread asks at once; if another wins, the thread
    /// waits out the rest of that pause, so wake-ups may add attempts but
    /// never shorten the wait. [`try_lock_for`](Self::try_lock_for) uses
    /// the same pauses. Affects this handle only, not its clones.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) if `count` is 0; the settings are then
    /// left as they were.
    pub fn set_retry(&mut self, count: u32, max_delay: Duration) -> Result<()> {
        self.retry = Retry::new(count, max_delay)?;
        Ok(())
    }

    /// The engine this manager runs (for the other shapes of lock).
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The retry settings: total attempts of [`lock`](Self::lock) and the
    /// maximum random pause between attempts.
    pub fn retry(&self) -> (u32, Duration) {
        (self.retry.count, self.retry.max_delay)
    }

    /// How many members must agree: a strict majority of the members
    /// (a node, or a whole Redis Cluster given with [`Builder::cluster`](crate::Builder::cluster),
    /// is one member).
    pub fn quorum(&self) -> usize {
        quorum::quorum(self.engine.members.len())
    }

    /// Whether acquisitions carry a fencing token (see
    /// [`Builder::fencing`](crate::Builder::fencing)).
    pub fn fencing(&self) -> bool {
        self.engine.fencing
    }

    /// The members' names (`host:port`, `unix:path`, with `/db` when not
    /// 0; `cluster host:port` for a Redis Cluster, after its first seed),
    /// in the order given. Errors name nodes the same way (for a cluster,
    /// the master that failed).
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = &str> {
        self.engine.members.iter().map(Member::name)
    }

    /// The time each node gets to answer one call, connecting included.
    pub fn node_timeout(&self) -> Duration {
        self.engine.node_timeout
    }

    /// The clock drift factor.
    pub fn drift_factor(&self) -> f64 {
        self.engine.drift_factor
    }

    /// The waiting stage of this handle's acquisitions: its engine, retry
    /// settings and cancel switch.
    pub(crate) fn stage(&self) -> Stage<'_> {
        Stage {
            engine: &self.engine,
            retry: self.retry,
            cancel: self.cancel.as_ref(),
        }
    }

    /// The pauses `wait` allows, with this handle's retry settings.
    pub(crate) fn budget(&self, wait: Wait) -> Budget {
        match wait {
            Wait::No => Budget::Once,
            Wait::Retries => Budget::Pauses {
                left: self.retry.count - 1,
                rest: Duration::ZERO,
            },
            Wait::For(timeout) => Budget::Until(Instant::now().checked_add(timeout)),
            Wait::Until(deadline) => Budget::Until(Some(deadline)),
            Wait::Forever => Budget::Until(None),
        }
    }
}

impl LockManager {
    /// Takes the lock with [`lock`](Self::lock)'s retries, keeps it alive
    /// (see [`LockGuard::keep_alive`]) while `work` runs, then releases
    /// it. A panic in `work` still releases the lock (as the guard drops
    /// while unwinding).
    ///
    /// # Errors
    ///
    /// [`lock`](Self::lock)'s errors when the lock cannot be taken, and
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the lock was not held any more when `work`
    /// returned (its validity ran out, a renewal found it taken over, or
    /// the latest renewal missed the quorum; see
    /// [`LockGuard::ensure_held`]): `work` then ran at least partly
    /// unprotected, and its result is dropped. Call `ensure_held` inside
    /// `work` to stop early. A failure to
    /// release after `work` is not reported: the keys expire with their
    /// TTL.
    pub fn with_lock<T>(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        work: impl FnOnce(&LockGuard) -> T,
    ) -> Result<T> {
        let guard = self.lock(resource, ttl)?.keep_alive();
        let out = work(&guard);
        let held = guard.ensure_held();
        let _ = guard.release();
        held.map(|()| out)
    }
}

impl fmt::Debug for LockManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockManager")
            .field("nodes", &self.nodes().collect::<Vec<_>>())
            .field("quorum", &self.quorum())
            .field("node_timeout", &self.engine.node_timeout)
            .field("drift_factor", &self.engine.drift_factor)
            .field(
                "fencing_expiry_ms",
                &self.engine.fencing.then_some(self.engine.counter_expiry_ms),
            )
            .field("wake_on_release", &self.engine.wake_on_release)
            .field("retry", &self.retry)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::error::Error;
    use crate::engine::pipeline::MAX_TTL;

    fn manager(drift_factor: f64, node_timeout: Duration) -> LockManager {
        LockManager::builder()
            .node("redis://127.0.0.1:1")
            .drift_factor(drift_factor)
            .node_timeout(node_timeout)
            .build()
            .unwrap()
    }

    #[test]
    fn ttl_checks() {
        let m = manager(0.01, Duration::from_millis(50));
        let s = &m.engine;
        assert_eq!(s.check_ttl(Duration::from_millis(1500)).unwrap(), 1500);
        assert_eq!(s.check_ttl(Duration::from_micros(1_500_900)).unwrap(), 1500);
        assert!(s.check_ttl(Duration::ZERO).is_err());
        assert!(s.check_ttl(Duration::from_micros(999)).is_err());
        // Accepted, though a round with one member at the whole 50 ms
        // node timeout leaves 53 - 50 - (0.53 + 2) of 53 ms, nothing of
        // 52: an attempt that took that long says so.
        assert!(s.check_ttl(Duration::from_millis(52)).is_ok());
        assert_eq!(
            s.short_of(Duration::from_millis(52)),
            Some(Duration::from_millis(53))
        );
        assert_eq!(s.short_of(Duration::from_millis(53)), None);
        let slow = s.no_validity(
            "r".into(),
            Duration::from_millis(51),
            Duration::from_millis(52),
        );
        assert!(
            slow.to_string().ends_with("give a TTL of at least 53ms)"),
            "{slow}"
        );
        assert!(s.check_ttl(Duration::from_millis(2)).is_err());
        let tiny = s
            .check_ttl(Duration::from_millis(2))
            .unwrap_err()
            .to_string();
        assert!(tiny.ends_with("give a TTL of at least 3ms"), "{tiny}");
        assert!(s.check_ttl(Duration::from_millis(3)).is_ok());
        assert!(s.check_ttl(MAX_TTL).is_ok());
        let long = s.check_ttl(MAX_TTL + Duration::from_millis(1)).unwrap_err();
        assert!(long.to_string().contains("maximum of"), "{long}");
        assert!(s.check_ttl(Duration::MAX).is_err());
        // with a 0.5 factor, 4 ms leaves 4 - 2 - 2 = 0
        let m = manager(0.5, Duration::from_millis(1));
        assert!(m.engine.check_ttl(Duration::from_millis(4)).is_err());
        assert!(m.engine.check_ttl(Duration::from_millis(6)).is_ok());
    }

    #[test]
    fn set_retry_rejects_zero_attempts_and_keeps_old_settings() {
        let mut m = manager(0.01, Duration::from_millis(50));
        assert_eq!(m.retry(), (3, Duration::from_millis(200)));
        assert!(matches!(
            m.set_retry(0, Duration::ZERO),
            Err(Error::InvalidArgument { .. })
        ));
        assert_eq!(m.retry(), (3, Duration::from_millis(200)));
        m.set_retry(7, Duration::from_millis(5)).unwrap();
        assert_eq!(m.retry(), (7, Duration::from_millis(5)));
        // a clone keeps its own copy
        let c = m.clone();
        m.set_retry(1, Duration::ZERO).unwrap();
        assert_eq!(c.retry(), (7, Duration::from_millis(5)));
    }
}
