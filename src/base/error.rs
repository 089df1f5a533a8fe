//! The crate's error type, [`Error`]; each node's failure is in
//! `node_error.rs`.

use std::time::Duration;

use crate::base::node_error::{NodeError, NodeFailures};

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when taking, extending or releasing a lock.
///
/// Variants that come from a round of calls to the nodes name the resource
/// and the nodes involved; the cause on each failing node is in the
/// message, and in [`Error::failures`] as [`NodeError`]s. Each cause is
/// printed once: one in the message is not also a `source()` (so that a
/// reporter that walks the chain, as `anyhow` and `eyre` do, prints it
/// once); a wrapped error that is not in the message is (`InvalidConfig`'s
/// parser error, `Entropy`'s generator error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Other owners hold the resource on so many nodes that a quorum cannot
    /// be reached. Retrying later may succeed.
    ///
    /// When a guard of this same manager (or a clone) for the resource is
    /// still alive, `held_here` is true and the message says so: locks are
    /// not re-entrant, so a second `lock` of a resource one already holds
    /// waits for its own release.
    #[error(
        "{resource:?} is locked by {} on {held_elsewhere} of {nodes} nodes, \
         so no quorum of {quorum} is possible{}",
        match (held_here, holder) {
            (true, _) => "a guard of this same manager that is still alive (locks are not \
                          re-entrant)"
                .to_owned(),
            (false, Some(holder)) => format!("another owner ({holder})"),
            (false, None) => "another owner".to_owned(),
        },
        failed_suffix(failures.as_ref())
    )]
    #[non_exhaustive]
    Taken {
        /// The resource name, lossily decoded as UTF-8.
        resource: String,
        /// Nodes that answered that another owner holds the resource.
        held_elsewhere: usize,
        /// Number of nodes in the manager.
        nodes: usize,
        /// Nodes that must agree.
        quorum: usize,
        /// A guard of this manager (or one of its clones) for the resource
        /// was alive when the attempt failed.
        held_here: bool,
        /// Who holds it, as a member that refused named it: the holder's
        /// name and the start of its token (`web-3 pid 4121, token
        /// 3f2a9c01…`; see [`HolderName`](crate::HolderName)), or another
        /// client's value (cut and escaped). `None` where no member said:
        /// servers before Redis 7.0, whose `SET NX` names nobody; sets,
        /// permits and read-write locks; a fair waiter keeps what its
        /// last ordinary attempt found (its claims name nobody).
        holder: Option<String>,
        /// Nodes that did not answer usefully during the same round, each
        /// with its cause; `None` when every node answered.
        failures: Option<NodeFailures>,
    },

    /// Too many nodes failed or did not answer in time for a quorum to be
    /// reached (or confirmed, for release and extend).
    #[error(
        "no quorum for {resource:?}: {agreed} of {nodes} nodes agreed, {quorum} needed{}",
        failed_suffix(failures.as_ref())
    )]
    #[non_exhaustive]
    NoQuorum {
        /// The resource name, lossily decoded as UTF-8.
        resource: String,
        /// Nodes that did what was asked (granted, extended or released).
        agreed: usize,
        /// Number of nodes in the manager.
        nodes: usize,
        /// Nodes that must agree.
        quorum: usize,
        /// Each failing node with its cause; `None` when every node
        /// answered (and too few agreed).
        failures: Option<NodeFailures>,
    },

    /// A quorum granted (or, for extend, confirmed) the lock, but the round
    /// took so long that no validity was left of the TTL. After a failed
    /// acquisition the keys were removed again.
    #[error(
        "{resource:?} was confirmed by a quorum, but the round took {elapsed:?} of the \
         {ttl:?} TTL and left no validity{}",
        match shortest {
            Some(shortest) => format!(
                " (the TTL is too short for the node timeout: a member that takes it all \
                 leaves nothing; give a TTL of at least {shortest:?})"
            ),
            None => String::new(),
        }
    )]
    #[non_exhaustive]
    NoValidity {
        /// The resource name, lossily decoded as UTF-8.
        resource: String,
        /// How long the round took.
        elapsed: Duration,
        /// The TTL that was asked for.
        ttl: Duration,
        /// When `ttl` is too short to leave validity after a round in
        /// which one member takes the whole node timeout: the shortest
        /// TTL that does (see "TTLs" in the crate docs). `None` otherwise.
        shortest: Option<Duration>,
    },

    /// The lock is no longer ours: its validity ran out (`lost_on` is 0
    /// and `renewal` is `None`), a quorum of nodes no longer holds our
    /// token (`lost_on` nodes: of them, `taken_over` hold another owner's
    /// token and the rest no key at all, as after an expiry or a removal;
    /// `removed` tells which where it can be told), or (from
    /// [`LockGuard::ensure_held`](crate::LockGuard::ensure_held)) the
    /// latest keep-alive renewal did not reach a quorum (`renewal`).
    /// Nothing belonging to another owner was touched.
    #[error(
        "the lock on {resource:?} is no longer held: {}",
        not_held_reason(*lost_on, *taken_over, *removed, *nodes, renewal.as_deref())
    )]
    #[non_exhaustive]
    NotHeld {
        /// The resource name, lossily decoded as UTF-8.
        resource: String,
        /// Nodes that answered that they no longer hold our token; 0 when
        /// the local validity ran out or a renewal failed.
        lost_on: usize,
        /// Of `lost_on`, the nodes that hold another owner's token: the
        /// lock was taken over there. 0 when the keys merely expired (or
        /// were deleted).
        taken_over: usize,
        /// The nodes found without the key while the guard's validity
        /// still ran, when a quorum's keys cannot have expired yet: the key
        /// was removed (a force unlock, a `DEL`, an eviction, a flush, a
        /// node restarted without its data, or its clock jumped ahead).
        /// False where it may have expired (a release or renewal after the
        /// validity, an election's rounds): the message then says "expired
        /// or was removed".
        removed: bool,
        /// Number of nodes in the manager.
        nodes: usize,
        /// When the latest keep-alive renewal did not reach a quorum (and
        /// validity remains): that renewal's error, as text.
        renewal: Option<String>,
    },

    /// Waiting for the lock was stopped by the manager's [`Cancel`]
    /// switch (see [`LockManager::cancel_on`]): nothing is held.
    ///
    /// [`Cancel`]: crate::Cancel
    /// [`LockManager::cancel_on`]: crate::LockManager::cancel_on
    #[error("waiting for {resource:?} was cancelled")]
    #[non_exhaustive]
    Cancelled {
        /// The resource name, as messages show it.
        resource: String,
    },

    /// The manager's configuration is unusable.
    #[error("invalid configuration: {reason}")]
    #[non_exhaustive]
    InvalidConfig {
        /// What is wrong.
        reason: String,
        /// The parser's error, for a node URL that could not be read
        /// (its words are not in `reason`: this is its `source()`).
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },

    /// An argument of a call is unusable (empty resource, zero TTL, ...).
    #[error("invalid argument: {reason}")]
    #[non_exhaustive]
    InvalidArgument {
        /// What is wrong.
        reason: String,
    },

    /// The operating system's random number generator failed, so no token
    /// could be made.
    #[error("could not draw random bytes for a lock token")]
    #[non_exhaustive]
    Entropy {
        /// The generator's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl Error {
    /// Each failing node with its cause, for the variants that carry them.
    pub fn failures(&self) -> &[NodeError] {
        match self {
            Error::Taken {
                failures: Some(failures),
                ..
            }
            | Error::NoQuorum {
                failures: Some(failures),
                ..
            } => failures,
            _ => &[],
        }
    }

    /// Another owner holds the resource ([`Error::Taken`]): wait, or do
    /// something else.
    pub fn is_taken(&self) -> bool {
        matches!(self, Error::Taken { .. })
    }

    /// The lock is no longer held ([`Error::NotHeld`]): stop the protected
    /// work.
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }

    /// Whether the same call may succeed if made again later, unchanged:
    /// the resource was taken, too few nodes answered in time, or the
    /// round was too slow for the TTL ([`Error::Taken`],
    /// [`Error::NoQuorum`], [`Error::NoValidity`]). False for a lock no
    /// longer held, bad arguments or configuration, and a failed random
    /// generator.
    ///
    /// Also false when [`is_misconfigured`](Self::is_misconfigured): a
    /// quorum is ruled out by failures that waiting does not clear.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Taken { .. } | Error::NoQuorum { .. } | Error::NoValidity { .. }
        ) && !self.is_misconfigured()
    }

    /// So many members failed with a cause that waiting does not clear
    /// (refused credentials or permissions, TLS, a peer that is not a
    /// Redis server: see [`NodeError::is_misconfigured`]) that the rest
    /// cannot make a quorum, whatever they answer: a setting to fix, named
    /// in the message. [`LockManager::lock`](crate::LockManager::lock)
    /// and the other waiting calls stop at once with it. False while
    /// enough members failed for a passing cause only (a timeout, a
    /// refused connection, a restart) or answered.
    pub fn is_misconfigured(&self) -> bool {
        self.failed_past_quorum(NodeError::is_misconfigured)
    }

    /// Whether the members whose failure is `such` are more than a quorum
    /// can spare, so that the rest cannot make one whatever they answer
    /// (`Taken` and `NoQuorum`; false for the others).
    pub(crate) fn failed_past_quorum(&self, such: impl Fn(&NodeError) -> bool) -> bool {
        let nodes = match self {
            Error::Taken { nodes, .. } | Error::NoQuorum { nodes, .. } => *nodes,
            _ => return false,
        };
        let failed = self.failures().iter().filter(|f| such(f)).count();
        crate::base::majority::ruled_out(failed, nodes)
    }

    /// Waiting was stopped by a [`Cancel`](crate::Cancel) switch
    /// ([`Error::Cancelled`]).
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Error::Cancelled { .. })
    }

    /// An argument or the configuration is unusable
    /// ([`Error::InvalidArgument`], [`Error::InvalidConfig`]): a bug to
    /// fix, not a state to wait out.
    pub fn is_invalid(&self) -> bool {
        matches!(
            self,
            Error::InvalidArgument { .. } | Error::InvalidConfig { .. }
        )
    }

    #[cold]
    pub(crate) fn invalid_argument(reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            reason: reason.into(),
        }
    }

    #[cold]
    pub(crate) fn invalid_config(reason: impl Into<String>) -> Self {
        Error::InvalidConfig {
            reason: reason.into(),
            source: None,
        }
    }
}

/// The failing nodes and their causes, for the one-line message:
/// ` (failed: a:1: connection refused; b:2: authentication failed (...))`.
fn failed_suffix(failures: Option<&NodeFailures>) -> String {
    match failures {
        Some(failures) if !failures.is_empty() => format!(" (failed: {failures})"),
        _ => String::new(),
    }
}

fn not_held_reason(
    lost_on: usize,
    taken_over: usize,
    removed: bool,
    nodes: usize,
    renewal: Option<&str>,
) -> String {
    if let Some(renewal) = renewal {
        format!("its latest renewal did not reach a quorum ({renewal})")
    } else if lost_on == 0 {
        "its validity ran out".to_owned()
    } else if taken_over == 0 && removed {
        format!(
            "its key was removed before it could expire: {lost_on} of {nodes} nodes no \
             longer have it while its validity ran, so at least one lost it to a removal (a \
             force unlock, a DEL, an eviction, a flush, or a node restarted without its \
             data; none holds another owner's token)"
        )
    } else if taken_over == 0 {
        format!(
            "it expired or was removed: {lost_on} of {nodes} nodes no longer have its key \
             (none holds another owner's token)"
        )
    } else {
        let gone = lost_on - taken_over;
        let also = if gone > 0 {
            format!(", and {gone} more no longer have its key")
        } else {
            String::new()
        };
        format!("it was taken over: {taken_over} of {nodes} nodes hold another owner's token{also}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicates_sort_errors_by_what_to_do() {
        let taken = Error::Taken {
            resource: "r".into(),
            held_elsewhere: 2,
            nodes: 3,
            quorum: 2,
            held_here: false,
            holder: None,
            failures: None,
        };
        assert!(taken.is_taken() && taken.is_retryable() && !taken.is_invalid());
        let lost = Error::NotHeld {
            resource: "r".into(),
            lost_on: 2,
            taken_over: 2,
            removed: false,
            nodes: 3,
            renewal: None,
        };
        assert!(lost.is_not_held() && !lost.is_retryable() && !lost.is_taken());
        let bad = Error::invalid_argument("x");
        assert!(bad.is_invalid() && !bad.is_retryable());
        assert!(Error::invalid_config("x").is_invalid());
    }
}
