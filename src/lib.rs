//! A distributed lock over several independent Redis masters (the
//! [Redlock algorithm](https://redis.io/docs/latest/develop/use/patterns/distributed-locks/)),
//! for ordinary blocking code.
//!
//! A [`LockManager`] knows the nodes. [`LockManager::lock`] sends
//! `SET resource token NX PX ttl` to every node at once and succeeds when a
//! majority agrees within the TTL; it returns a [`LockGuard`] that releases
//! the lock on every node when dropped. A minority of nodes may be down,
//! hung or restarting: each costs at most the node timeout and counts as a
//! vote against, never a hang.
//!
//! ```no_run
//! use std::time::Duration;
//! use redlock_sync::{Error, LockManager};
//!
//! fn main() -> redlock_sync::Result<()> {
//!     let dlm = LockManager::new([
//!         "redis://10.0.0.1:6379",
//!         "redis://10.0.0.2:6379",
//!         "redis://10.0.0.3:6379",
//!     ])?;
//!
//!     match dlm.lock("jobs/nightly-report", Duration::from_secs(30)) {
//!         Ok(guard) => {
//!             // Safe to act while the lock is valid.
//!             assert!(guard.is_valid());
//!             println!("locked for {:?}", guard.validity());
//!             // ... the work ...
//!             guard.release()?; // or just let it drop
//!         }
//!         Err(Error::Taken { .. }) => println!("another worker has it"),
//!         Err(e) => return Err(e),
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # Waiting, and giving up
//!
//! `lock` makes its first attempt at once and, while the resource is
//! taken, waits up to its retry budget: `count - 1` pauses, each a random
//! time between half the maximum delay and all of it
//! ([`LockManager::set_retry`], [`Builder::retry`]). The default is 3
//! attempts' worth with pauses of 100-200 ms, so `lock` gives up with
//! [`Error::Taken`] after 200-400 ms on a lock that is not released;
//! raise the count for locks held longer. A release ends a pause early,
//! and a thread beaten to the lock then waits out the rest of that pause:
//! being woken never shortens the wait. [`LockManager::try_lock`] makes
//! one attempt; [`LockManager::try_lock_for`] waits until a deadline.
//!
//! Locks are not re-entrant: a thread that locks a resource it already
//! holds waits for itself, and its [`Error::Taken`] says the lock is held
//! by a guard of this same manager (`held_here`).
//!
//! # Restarts
//!
//! A server whose `run_id` changed since this manager last connected (a
//! restart, or another server behind a name or address that moved) does
//! not vote until the longest TTL this manager used has passed since the
//! change was seen, whatever its uptime or persistence. With
//! [`Builder::restart_quarantine`], any server started within the
//! quarantine is kept out too, except one that syncs every write
//! (`appendfsync always`, `no-appendfsync-on-rewrite no`).
//! [`LockManager::check`] reports on every server: verdicts and what to
//! change.
//!
//! # Semaphores
//!
//! [`LockManager::semaphore`] gives at most K [`Permit`]s at once: K slots,
//! each a Redlock mutex, so never more than K valid permits whatever
//! members each client reaches (proof in [`Semaphore`]'s module).
//!
//! # Sets and read-write locks
//!
//! [`LockManager::lock_all`] locks several resources at once, all or
//! nothing on every member, with one guard; crossing sets never deadlock
//! (proof in the `set` module's docs). [`LockManager::rwlock`] gives a
//! [`RwLock`]: readers share, a writer excludes readers and writers, its
//! write side is the ordinary lock on the name, and waiting writers go
//! before new readers (proof in its module docs).
//!
//! # Redis Cluster
//!
//! [`Builder::cluster`] adds one quorum member that is a whole Redis
//! Cluster: locks go to the master of the resource's hash slot, and
//! every key and channel of a lock shares that slot ([`fence_key`],
//! [`release_channel`]).
//!
//! # What the lock promises
//!
//! While [`LockGuard::is_valid`] is true, no other client can have taken
//! the same resource through a quorum of the same nodes, provided the
//! nodes' clocks run at about the same rate (the drift factor bounds the
//! difference) and a node that restarts either keeps its data or does not
//! vote for longer than the longest TTL (enforced: see Restarts). Outside
//! those assumptions, and when the holder pauses past its validity, two
//! holders can overlap: protect the resource itself, too, when that
//! matters.
//!
//! # Long work and fencing
//!
//! [`LockGuard::extend`] resets the TTL on every node that still holds the
//! token. Whatever an extend returns, the guard's validity afterwards is
//! at most the new TTL less the drift, counted from the round's start: a
//! node that applied a shorter TTL may let the key go that early even when
//! the round as a whole failed (too slow, or too few answers), so no
//! outcome keeps a validity the nodes no longer grant. This one rule
//! serves every shape (locks, sets, permits, read locks).
//! [`LockGuard::keep_alive`] renews the lock every TTL/3 in a background
//! thread until the guard is dropped; [`LockGuard::ensure_held`] fails
//! closed (no network call) once the validity has run out or a renewal
//! missed the quorum; [`LockManager::with_lock`] wraps all of it around a
//! closure. [`LockGuard::fencing_token`] is a number strictly greater than
//! every earlier one for the same resource: pass it with every write and
//! have the storage reject a lower one than it has seen. Each node keeps a
//! counter at the resource's name followed by [`FENCE_SUFFIX`] (so an ACL
//! key pattern covering the resources covers it too), incremented in the
//! same write that sets the lock key; the granting nodes are raised to the
//! largest value before the guard is returned, so every later quorum
//! counts past it. Counters expire after an idle period
//! ([`Builder::fencing_expiry`], 10 minutes by default); one created anew
//! starts from the clock in microseconds, so tokens keep growing across an
//! expiry or a node restarted empty, as long as the clocks of the machines
//! taking the lock do not disagree by more than the time since the lost
//! counter was created. [`Builder::fencing`]`(false)` turns all of it off:
//! an acquisition then writes only the lock key.
//!
//! # Waiting for a busy lock
//!
//! [`LockManager::lock`] and [`LockManager::try_lock_for`] pause a random
//! time between attempts, and a release ends the pause: every release
//! publishes on a channel named after the resource (followed by
//! [`RELEASE_SUFFIX`]), and while threads of a manager wait, the manager
//! (shared by its clones) keeps one listening connection per node,
//! subscribed once to each resource waited on. Threads of one manager are
//! served in arrival order: when the lock is released, the longest waiter
//! asks first, and a thread that releases and asks again at once queues
//! behind it. A message that never comes (a holder that died, a node or
//! connection lost, a server or ACL user refusing pub/sub) costs one
//! pause, as before. A failed attempt announces a release only where it
//! had set the key and deleted it again, and never wakes its own thread.
//! [`LockManager::try_lock`] stays one attempt, `lock` keeps its budget,
//! `try_lock_for` its deadline. Nothing listens while nobody waits;
//! [`Builder::wake_on_release`]`(false)` turns it off.
//!
//! # TLS
//!
//! With the `tls` feature, `rediss://` URLs connect over TLS (rustls, its
//! `ring` provider passed explicitly; Mozilla's roots unless
//! `Builder::tls_root_cert` gives others; client certificates with
//! `Builder::tls_client_cert`; `#insecure` skips verification, for
//! development only). Failures are [`NodeErrorKind::Tls`].
//!
//! # Logging
//!
//! With the `log` feature, the crate logs through the [`log`
//! facade](https://docs.rs/log) (choose any backend):
//!
//! | target | level | what |
//! | --- | --- | --- |
//! | `redlock_sync::keepalive` | `warn` | a renewal missed the quorum (each node and cause) |
//! | `redlock_sync::keepalive` | `error` | a kept-alive lock was lost (taken over, or its validity ran out) |
//! | `redlock_sync::keepalive` | `info` | renewals succeed again after a miss |
//! | `redlock_sync::node` | `debug` | each node failure in a round; each new connection, and a pooled one found closed |
//! | `redlock_sync::wait` | `debug` | a listening connection that cannot connect, was refused `SUBSCRIBE`, or was lost |
//! | `redlock_sync::restart` | `warn` | a restart witnessed (new `run_id`), and whether the server keeps its vote; `INFO` refused (once per server) |
//!
//! # Errors
//!
//! Every call returns [`Error`], which says whether the resource was
//! [taken](Error::Taken) by someone else, the nodes
//! [failed](Error::NoQuorum), or the lock is [no longer
//! held](Error::NotHeld) (expired, or taken over). Its `Display` is one
//! line that names every failing node with its cause, as
//! `no quorum for "r": 1 of 3 nodes agreed, 2 needed (failed:
//! 10.0.0.2:6379: connection refused; 10.0.0.3:6379: wrong user name or
//! password (WRONGPASS ...))`; [`Error::failures`] gives them as
//! [`NodeError`]s, with a [`NodeErrorKind`] each.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// Logs through the `log` facade with the `log` feature; compiles to
/// nothing (the arguments are not evaluated) without it.
macro_rules! log {
    ($level:ident, $target:expr, $($arg:tt)+) => {{
        #[cfg(feature = "log")]
        ::log::$level!(target: $target, $($arg)+);
        #[cfg(not(feature = "log"))]
        if false {
            let _ = ($target, format_args!($($arg)+));
        }
    }};
}
pub(crate) use log;

mod builder;
mod check;
mod conn;
mod error;
mod guard;
mod keys;
mod lock;
mod manager;
mod member;
mod node;
mod pipeline;
mod quorum;
mod redis_cluster;
mod request;
mod resolve;
mod restart;
mod rwlock;
mod script;
mod semaphore;
mod set;
#[cfg(feature = "tls")]
mod tls;
mod url;
mod wait;

pub use builder::Builder;
pub use check::{NodeReport, Problem, Verdict};
pub use error::{Error, NodeError, NodeErrorKind, NodeFailures, Result};
pub use guard::{Guard, LockGuard, Permit, ReadGuard, mode};
pub use keys::{FENCE_SUFFIX, RELEASE_SUFFIX, fence_key, release_channel};
pub use manager::{LockManager, Wait};
pub use pipeline::MAX_TTL;
pub use rwlock::RwLock;
pub use semaphore::{MAX_PERMITS, Semaphore};
pub use set::MAX_SET;

// The README's examples compile as doctests (they are `no_run`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
