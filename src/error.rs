//! The crate's error type and the per-node failure detail it carries.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A TLS failure (handshake, certificate, alert), carried inside an
/// `io::Error` from the TLS stream to the connection layer.
#[derive(Debug)]
pub(crate) struct TlsFailure(pub(crate) String);

impl fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsFailure {}

/// A host name that did not resolve, carried inside an `io::Error` from
/// the connection layer.
#[derive(Debug)]
pub(crate) struct ResolveFailure(pub(crate) String);

impl fmt::Display for ResolveFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ResolveFailure {}

/// What one node's failure came from: the Redis client's error, or one of
/// the crate's own causes (which carry their detail).
#[derive(Debug)]
pub(crate) enum Cause {
    /// The Redis client's error: I/O, an error reply, a reply the protocol
    /// does not allow here.
    Redis(redis::RedisError),
    /// The host name did not resolve.
    Resolve(String),
    /// TLS failed.
    Tls(String),
    /// The server restarted and does not vote yet.
    Restarted(String),
    /// Too few replicas acknowledged the write.
    Replication(String),
    /// A Redis Cluster member could not route the request.
    Cluster(String),
}

impl Cause {
    /// The Redis client's error, when it is one.
    pub(crate) fn redis(&self) -> Option<&redis::RedisError> {
        match self {
            Cause::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<redis::RedisError> for Cause {
    /// A Redis client error; an I/O error that carries a TLS or name
    /// resolution failure becomes that cause.
    fn from(e: redis::RedisError) -> Cause {
        if let Some(inner) = io_error(&e).and_then(|io| io.get_ref()) {
            if let Some(TlsFailure(why)) = inner.downcast_ref::<TlsFailure>() {
                return Cause::Tls(why.clone());
            }
            if let Some(ResolveFailure(why)) = inner.downcast_ref::<ResolveFailure>() {
                return Cause::Resolve(why.clone());
            }
        }
        Cause::Redis(e)
    }
}

/// Everything that can go wrong when taking, extending or releasing a lock.
///
/// Variants that come from a round of calls to the nodes name the resource
/// and the nodes involved; the cause on each failing node is in
/// [`NodeFailures`], reachable through [`std::error::Error::source`].
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
        if *held_here {
            "a guard of this same manager that is still alive (locks are not re-entrant)"
        } else {
            "another owner"
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
        /// Nodes that did not answer usefully during the same round, each
        /// with its cause; `None` when every node answered.
        #[source]
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
        #[source]
        failures: Option<NodeFailures>,
    },

    /// A quorum granted (or, for extend, confirmed) the lock, but the round
    /// took so long that no validity was left of the TTL. After a failed
    /// acquisition the keys were removed again.
    #[error(
        "{resource:?} was confirmed by a quorum, but the round took {elapsed:?} of the \
         {ttl:?} TTL and left no validity"
    )]
    #[non_exhaustive]
    NoValidity {
        /// The resource name, lossily decoded as UTF-8.
        resource: String,
        /// How long the round took.
        elapsed: Duration,
        /// The TTL that was asked for.
        ttl: Duration,
    },

    /// The lock is no longer ours: its validity ran out (`lost_on` is 0
    /// and `renewal` is `None`), a quorum of nodes no longer holds our
    /// token (`lost_on` nodes: of them, `taken_over` hold another owner's
    /// token and the rest no key at all, as after an expiry), or (from
    /// [`LockGuard::ensure_held`](crate::LockGuard::ensure_held)) the
    /// latest keep-alive renewal did not reach a quorum (`renewal`).
    /// Nothing belonging to another owner was touched.
    #[error(
        "the lock on {resource:?} is no longer held: {}",
        not_held_reason(*lost_on, *taken_over, *nodes, renewal.as_deref())
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
        /// Number of nodes in the manager.
        nodes: usize,
        /// When the latest keep-alive renewal did not reach a quorum (and
        /// validity remains): that renewal's error, as text.
        renewal: Option<String>,
    },

    /// The manager's configuration is unusable.
    #[error("invalid configuration: {reason}")]
    #[non_exhaustive]
    InvalidConfig {
        /// What is wrong.
        reason: String,
        /// The parser's error, for a node URL that could not be read.
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
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Taken { .. } | Error::NoQuorum { .. } | Error::NoValidity { .. }
        )
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

    pub(crate) fn invalid_argument(reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            reason: reason.into(),
        }
    }

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
    nodes: usize,
    renewal: Option<&str>,
) -> String {
    if let Some(renewal) = renewal {
        format!("its latest renewal did not reach a quorum ({renewal})")
    } else if lost_on == 0 {
        "its validity ran out".to_owned()
    } else if taken_over == 0 {
        format!(
            "it expired: {lost_on} of {nodes} nodes no longer have its key \
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

/// The failing nodes of one round, each with its cause.
///
/// Dereferences to a slice of [`NodeError`]. Its `Display` lists every node
/// and cause on one line; its `source()` is the first node's failure.
#[derive(Default)]
pub struct NodeFailures(Vec<NodeError>);

impl NodeFailures {
    /// The failures, or `None` when there are none.
    pub(crate) fn some(failures: Vec<NodeError>) -> Option<Self> {
        (!failures.is_empty()).then_some(NodeFailures(failures))
    }
}

/// A list of the failures as their one-line messages.
impl fmt::Debug for NodeFailures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|e| e.to_string()))
            .finish()
    }
}

impl std::ops::Deref for NodeFailures {
    type Target = [NodeError];

    fn deref(&self) -> &[NodeError] {
        &self.0
    }
}

impl<'a> IntoIterator for &'a NodeFailures {
    type Item = &'a NodeError;
    type IntoIter = std::slice::Iter<'a, NodeError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl fmt::Display for NodeFailures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no node failed");
        }
        for (i, failure) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            fmt::Display::fmt(failure, f)?;
        }
        Ok(())
    }
}

impl std::error::Error for NodeFailures {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.first().map(|e| e as _)
    }
}

/// Why one node did not give a useful answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// No connection could be opened (refused, unreachable, handshake failed).
    Connect,
    /// The node's host name could not be resolved to an address.
    Resolve,
    /// The node did not answer within the node timeout.
    Timeout,
    /// The connection broke while the command was under way.
    Disconnected,
    /// The node refused our credentials, or demands credentials we lack
    /// (`WRONGPASS`, `NOAUTH`).
    Auth,
    /// The node's ACL refused a command or key to our user (`NOPERM`, or
    /// a script's command refused by the ACL); see
    /// [`NodeError::command`] for what was refused.
    Permission,
    /// The node answered with an error reply (`OOM`, `READONLY`, `LOADING`,
    /// `WRONGTYPE`, ...); see [`NodeError::code`].
    Server,
    /// The node answered something the protocol does not allow here.
    Protocol,
    /// TLS failed: the certificate could not be verified, the server
    /// demands a client certificate we lack, it does not speak TLS, or it
    /// sent a TLS alert.
    Tls,
    /// The server restarted without its data recently and does not vote
    /// yet (see [`Builder::restart_quarantine`](crate::Builder::restart_quarantine)):
    /// "restarted 0.4s ago, not voting for 9.6s".
    Restarted,
    /// The write was not acknowledged by as many replicas as
    /// [`Builder::replica_acks`](crate::Builder::replica_acks) asks, within
    /// the time `WAIT` was given: a failover could lose it, so it is no
    /// vote.
    Replication,
    /// A Redis Cluster member could not route the request: no server of
    /// the cluster gave a slot map in time, or no master serves the
    /// resource's slot. (Error replies of the cluster, `CLUSTERDOWN` or
    /// `TRYAGAIN`, are [`Server`](Self::Server) failures with their code.)
    Cluster,
}

/// One node's failure: which node, what kind of failure, and its cause.
///
/// Its `Display` is one line naming the node and the cause. Its
/// `source()`, when the Redis client reported the failure, is that error,
/// as an opaque [`std::error::Error`]; the crate's own causes (a restart,
/// too few replicas, a name that did not resolve, TLS, Redis Cluster
/// routing) are in the message and [`kind`](Self::kind).
pub struct NodeError {
    node: Arc<str>,
    kind: NodeErrorKind,
    connecting: bool,
    timeout: Duration,
    cause: Cause,
    /// The command (and key) an error reply answered.
    command: Option<String>,
    /// Nothing of ours can be left on the node because of this call: no
    /// command was sent, or the cleanup is queued behind it.
    pub(crate) settled: bool,
}

impl NodeError {
    /// Classifies a failure from the connect step (`connecting`) or from a
    /// command.
    pub(crate) fn classify(
        node: Arc<str>,
        cause: impl Into<Cause>,
        connecting: bool,
        timeout: Duration,
    ) -> Self {
        let cause = cause.into();
        let kind = match &cause {
            Cause::Resolve(_) => NodeErrorKind::Resolve,
            Cause::Tls(_) => NodeErrorKind::Tls,
            Cause::Restarted(_) => NodeErrorKind::Restarted,
            Cause::Replication(_) => NodeErrorKind::Replication,
            Cause::Cluster(_) => NodeErrorKind::Cluster,
            Cause::Redis(source) if source.is_timeout() => NodeErrorKind::Timeout,
            Cause::Redis(source) if is_permission(source) => NodeErrorKind::Permission,
            Cause::Redis(source)
                if source.kind() == redis::ErrorKind::AuthenticationFailed
                    || matches!(source.code(), Some("NOAUTH" | "WRONGPASS"))
                    || is_auth_without_password(source) =>
            {
                NodeErrorKind::Auth
            }
            Cause::Redis(source)
                if matches!(
                    source.kind(),
                    redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
                ) =>
            {
                NodeErrorKind::Server
            }
            Cause::Redis(_) if connecting => NodeErrorKind::Connect,
            Cause::Redis(source) if source.is_io_error() || source.is_connection_dropped() => {
                NodeErrorKind::Disconnected
            }
            Cause::Redis(_) => NodeErrorKind::Protocol,
        };
        NodeError {
            node,
            kind,
            connecting,
            timeout,
            cause,
            command: None,
            settled: connecting,
        }
    }

    /// A Redis Cluster member's routing failure, on `node` (the member, or
    /// the server whose answer was unusable).
    pub(crate) fn cluster(node: Arc<str>, why: String, timeout: Duration) -> Self {
        NodeError {
            settled: true,
            ..NodeError::classify(node, Cause::Cluster(why), false, timeout)
        }
    }

    /// The Redis client's error, when it reported this failure.
    pub(crate) fn redis(&self) -> Option<&redis::RedisError> {
        self.cause.redis()
    }

    /// The connection could not be opened or was lost (a server gone).
    pub(crate) fn is_connection_failure(&self) -> bool {
        matches!(
            self.kind,
            NodeErrorKind::Connect | NodeErrorKind::Disconnected | NodeErrorKind::Resolve
        )
    }

    /// Names the command (and key) that the error reply answered.
    pub(crate) fn about(mut self, command: String) -> Self {
        self.command = Some(command);
        self
    }

    /// For an error reply: the command and key it answered, as
    /// `INCR "lock:job:redlock-fence"` or `the unlock script on
    /// "lock:job"`.
    pub fn command(&self) -> Option<&str> {
        self.command.as_deref()
    }

    /// The node, as `host:port` (or the socket path), with any database
    /// number; never with credentials.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// What kind of failure this was.
    pub fn kind(&self) -> NodeErrorKind {
        self.kind
    }

    /// The error code of a server error reply (`"OOM"`, `"READONLY"`,
    /// `"LOADING"`, `"WRONGTYPE"`, ...), if the node sent one.
    pub fn code(&self) -> Option<&str> {
        self.redis()?.code()
    }

    /// Whether the same call may succeed on this node later without a
    /// change of configuration: it was unreachable, slow, lost the
    /// connection, restarted, lacked replicas in time, or answered an
    /// error reply of a passing state (`LOADING`, `BUSY`, `TRYAGAIN`,
    /// `CLUSTERDOWN`, `MASTERDOWN`, `OOM`, `READONLY` during a failover).
    /// False for refused credentials or permissions, TLS, names that do not
    /// resolve, and replies the protocol does not allow.
    pub fn is_transient(&self) -> bool {
        match self.kind {
            NodeErrorKind::Connect
            | NodeErrorKind::Timeout
            | NodeErrorKind::Disconnected
            | NodeErrorKind::Restarted
            | NodeErrorKind::Replication
            | NodeErrorKind::Cluster => true,
            NodeErrorKind::Server => matches!(
                self.code(),
                Some(
                    "LOADING"
                        | "BUSY"
                        | "TRYAGAIN"
                        | "CLUSTERDOWN"
                        | "MASTERDOWN"
                        | "OOM"
                        | "READONLY"
                        | "MOVED"
                        | "ASK"
                )
            ),
            _ => false,
        }
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let node = &self.node;
        match self.kind {
            NodeErrorKind::Connect if self.redis().is_some_and(|e| e.is_connection_refusal()) => {
                write!(f, "{node}: connection refused")
            }
            NodeErrorKind::Connect => match self.redis().and_then(io_detail) {
                Some(detail) => write!(f, "{node}: could not connect ({detail})"),
                None => write!(f, "{node}: could not connect ({})", self.cause),
            },
            NodeErrorKind::Resolve => write!(f, "{node}: name resolution failed ({})", self.cause),
            NodeErrorKind::Timeout if self.connecting => {
                write!(f, "{node}: no connection within {:?}", self.timeout)
            }
            NodeErrorKind::Timeout => write!(f, "{node}: no answer within {:?}", self.timeout),
            NodeErrorKind::Disconnected => write!(f, "{node}: connection lost"),
            NodeErrorKind::Auth => {
                let why = match self.code() {
                    Some("NOAUTH") => "the server requires a password and none was given",
                    Some("WRONGPASS") => "wrong user name or password",
                    _ if self.detail().contains("without any password configured") => {
                        "a password was given but the server has none set"
                    }
                    _ => "authentication failed",
                };
                write!(f, "{node}: {why}")?;
                self.write_reply(f)
            }
            NodeErrorKind::Tls => write!(f, "{node}: TLS failed: {}", self.cause),
            NodeErrorKind::Permission => {
                write!(f, "{node}: permission denied")?;
                if let Some(command) = &self.command {
                    write!(f, " for {command}")?;
                }
                self.write_reply(f)
            }
            NodeErrorKind::Server => {
                match self.code() {
                    Some(code) => write!(f, "{node}: error reply {code}")?,
                    None => write!(f, "{node}: error reply")?,
                }
                if let Some(command) = &self.command {
                    write!(f, " to {command}")?;
                }
                if let Some(detail) = self.redis().and_then(|e| e.detail()) {
                    write!(f, ": {detail}")?;
                }
                if matches!(self.code(), Some("MOVED" | "ASK" | "CROSSSLOT")) {
                    f.write_str(
                        " (a Redis Cluster node: give a cluster with Builder::cluster, \
                         or lockrun --cluster, not as a plain node)",
                    )?;
                }
                Ok(())
            }
            NodeErrorKind::Protocol => write!(f, "{node}: unexpected reply ({})", self.cause),
            NodeErrorKind::Cluster | NodeErrorKind::Restarted | NodeErrorKind::Replication => {
                write!(f, "{node}: {}", self.cause)
            }
        }
    }
}

impl NodeError {
    /// The server's error text, if any.
    fn detail(&self) -> &str {
        self.redis().and_then(|e| e.detail()).unwrap_or("")
    }

    /// ` (CODE detail)`: the server's own words.
    fn write_reply(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code(), self.redis().and_then(|e| e.detail())) {
            (Some(code), Some(detail)) => write!(f, " ({code} {detail})"),
            (Some(code), None) => write!(f, " ({code})"),
            (None, Some(detail)) => write!(f, " ({detail})"),
            (None, None) => Ok(()),
        }
    }
}

/// The node, the kind, what the error reply answered and the client's
/// error: no bookkeeping.
impl fmt::Debug for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("NodeError");
        d.field("node", &&*self.node).field("kind", &self.kind);
        if let Some(command) = &self.command {
            d.field("command", command);
        }
        d.field("cause", &self.cause.to_string()).finish()
    }
}

/// The operating system's words for an I/O failure, if this is one.
fn io_detail(e: &redis::RedisError) -> Option<String> {
    match io_error(e) {
        Some(io) => Some(io.to_string()),
        None => e.is_io_error().then(|| e.to_string()),
    }
}

/// The I/O error inside a Redis client error, if it carries one. The
/// client keeps it behind an `Arc<dyn Error>` (a unit test below holds it
/// to that).
fn io_error(e: &redis::RedisError) -> Option<&std::io::Error> {
    use std::error::Error as _;
    let mut cause = e.source();
    while let Some(c) = cause {
        let io = c.downcast_ref::<std::io::Error>().or_else(|| {
            c.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>()
                .and_then(|a| a.downcast_ref::<std::io::Error>())
        });
        if io.is_some() {
            return io;
        }
        cause = c.source();
    }
    None
}

/// `AUTH` with a password sent to a server that has none ("ERR AUTH
/// <password> called without any password configured for the default
/// user").
fn is_auth_without_password(e: &redis::RedisError) -> bool {
    e.code() == Some("ERR")
        && e.detail()
            .is_some_and(|d| d.contains("without any password configured"))
}

/// An ACL refusal: `NOPERM`, or, inside a script, an `ERR` saying the
/// script's user cannot run a command or access a key ("The user
/// executing the script can't ..." on Redis 6.2 and 7.0, "ACL failure in
/// script: ..." on Redis 7.2+ and Valkey).
fn is_permission(e: &redis::RedisError) -> bool {
    match e.code() {
        Some("NOPERM") => true,
        Some("ERR") => e.detail().is_some_and(|d| {
            d.contains("The user executing the script can't")
                || d.starts_with("ACL failure in script")
        }),
        _ => false,
    }
}

impl std::error::Error for NodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.redis().map(|e| e as _)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Redis(e) => fmt::Display::fmt(e, f),
            Cause::Resolve(why)
            | Cause::Tls(why)
            | Cause::Restarted(why)
            | Cause::Replication(why)
            | Cause::Cluster(why) => f.write_str(why),
        }
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
            failures: None,
        };
        assert!(taken.is_taken() && taken.is_retryable() && !taken.is_invalid());
        let lost = Error::NotHeld {
            resource: "r".into(),
            lost_on: 2,
            taken_over: 2,
            nodes: 3,
            renewal: None,
        };
        assert!(lost.is_not_held() && !lost.is_retryable() && !lost.is_taken());
        let bad = Error::invalid_argument("x");
        assert!(bad.is_invalid() && !bad.is_retryable());
        assert!(Error::invalid_config("x").is_invalid());
    }

    #[test]
    fn tls_and_resolve_failures_are_causes_of_their_own() {
        let io = |inner: Box<dyn std::error::Error + Send + Sync>| {
            redis::RedisError::from(std::io::Error::other(inner))
        };
        let tls = NodeError::classify(
            "n:1".into(),
            io(Box::new(TlsFailure("bad certificate".into()))),
            true,
            Duration::from_millis(50),
        );
        assert_eq!(tls.kind(), NodeErrorKind::Tls);
        assert_eq!(tls.to_string(), "n:1: TLS failed: bad certificate");
        assert!(std::error::Error::source(&tls).is_none());
        let resolve = NodeError::classify(
            "n:1".into(),
            io(Box::new(ResolveFailure("db.local has no address".into()))),
            true,
            Duration::from_millis(50),
        );
        assert_eq!(resolve.kind(), NodeErrorKind::Resolve);
        assert_eq!(
            resolve.to_string(),
            "n:1: name resolution failed (db.local has no address)"
        );
        let refused = NodeError::classify(
            "n:1".into(),
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
            true,
            Duration::from_millis(50),
        );
        assert_eq!(refused.kind(), NodeErrorKind::Connect);
        assert!(refused.is_transient());
        assert!(std::error::Error::source(&refused).is_some());
        assert!(!tls.is_transient() && !resolve.is_transient());
    }
}
