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

/// How a TLS failure's detail starts in the Redis error that carries it.
pub(crate) const TLS_DETAIL_PREFIX: &str = "TLS: ";

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
    InvalidConfig {
        /// What is wrong.
        reason: String,
        /// The parser's error, for a node URL that could not be read.
        #[source]
        source: Option<redis::RedisError>,
    },

    /// An argument of a call is unusable (empty resource, zero TTL, ...).
    #[error("invalid argument: {reason}")]
    InvalidArgument {
        /// What is wrong.
        reason: String,
    },

    /// The operating system's random number generator failed, so no token
    /// could be made.
    #[error("could not draw random bytes for a lock token")]
    Entropy {
        /// The generator's error.
        #[source]
        source: getrandom::Error,
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
/// and cause on one line; its `source()` is the first node's underlying
/// Redis error.
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
        self.0.first().map(|e| &e.source as _)
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

/// One node's failure: which node, what kind of failure, and the Redis
/// client's error as the `source()`.
pub struct NodeError {
    node: Arc<str>,
    kind: NodeErrorKind,
    connecting: bool,
    timeout: Duration,
    source: redis::RedisError,
    /// The command (and key) an error reply answered.
    command: Option<String>,
    /// Nothing of ours can be left on the node because of this call: no
    /// command was sent, or the cleanup is queued behind it.
    pub(crate) settled: bool,
}

impl NodeError {
    /// Classifies a Redis client error from the connect step (`connecting`)
    /// or from a command.
    pub(crate) fn classify(
        node: Arc<str>,
        source: redis::RedisError,
        connecting: bool,
        timeout: Duration,
    ) -> Self {
        let kind = if source.is_timeout() {
            NodeErrorKind::Timeout
        } else if tls_detail(&source).is_some() {
            NodeErrorKind::Tls
        } else if resolve_detail(&source).is_some() {
            NodeErrorKind::Resolve
        } else if detail_after(&source, REPLICATION_DETAIL_PREFIX).is_some() {
            NodeErrorKind::Replication
        } else if detail_after(&source, RESTART_DETAIL_PREFIX).is_some() {
            NodeErrorKind::Restarted
        } else if is_permission(&source) {
            NodeErrorKind::Permission
        } else if source.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(source.code(), Some("NOAUTH" | "WRONGPASS"))
            || is_auth_without_password(&source)
        {
            NodeErrorKind::Auth
        } else if matches!(
            source.kind(),
            redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
        ) {
            NodeErrorKind::Server
        } else if connecting {
            NodeErrorKind::Connect
        } else if source.is_io_error() || source.is_connection_dropped() {
            NodeErrorKind::Disconnected
        } else {
            NodeErrorKind::Protocol
        };
        NodeError {
            node,
            kind,
            connecting,
            timeout,
            source,
            command: None,
            settled: connecting,
        }
    }

    /// A Redis Cluster member's routing failure, on `node` (the member, or
    /// the server whose answer was unusable).
    pub(crate) fn cluster(node: Arc<str>, why: String, timeout: Duration) -> Self {
        NodeError {
            node,
            kind: NodeErrorKind::Cluster,
            connecting: false,
            timeout,
            source: redis::RedisError::from((
                redis::ErrorKind::Client,
                "Redis Cluster routing failed",
                why,
            )),
            command: None,
            settled: true,
        }
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
        self.source.code()
    }

    /// The Redis client's error.
    pub fn redis_error(&self) -> &redis::RedisError {
        &self.source
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let node = &self.node;
        match self.kind {
            NodeErrorKind::Connect if self.source.is_connection_refusal() => {
                write!(f, "{node}: connection refused")
            }
            NodeErrorKind::Connect => match io_detail(&self.source) {
                Some(detail) => write!(f, "{node}: could not connect ({detail})"),
                None => write!(f, "{node}: could not connect ({})", self.source),
            },
            NodeErrorKind::Resolve => write!(
                f,
                "{node}: name resolution failed ({})",
                resolve_detail(&self.source).unwrap_or("unknown")
            ),
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
            NodeErrorKind::Tls => write!(
                f,
                "{node}: TLS failed: {}",
                tls_detail(&self.source).unwrap_or("unknown")
            ),
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
                if let Some(detail) = self.source.detail() {
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
            NodeErrorKind::Protocol => write!(f, "{node}: unexpected reply ({})", self.source),
            NodeErrorKind::Cluster => write!(f, "{node}: {}", self.detail()),
            NodeErrorKind::Restarted => write!(
                f,
                "{node}: {}",
                detail_after(&self.source, RESTART_DETAIL_PREFIX).unwrap_or("restarted")
            ),
            NodeErrorKind::Replication => write!(
                f,
                "{node}: {}",
                detail_after(&self.source, REPLICATION_DETAIL_PREFIX).unwrap_or("not replicated")
            ),
        }
    }
}

impl NodeError {
    /// The server's error text, if any.
    fn detail(&self) -> &str {
        self.source.detail().unwrap_or("")
    }

    /// ` (CODE detail)`: the server's own words.
    fn write_reply(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code(), self.source.detail()) {
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
        d.field("cause", &self.source.to_string()).finish()
    }
}

/// The operating system's words for an I/O failure, if this is one.
fn io_detail(e: &redis::RedisError) -> Option<String> {
    use std::error::Error as _;
    let mut cause = e.source();
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            return Some(io.to_string());
        }
        cause = c.source();
    }
    e.is_io_error().then(|| e.to_string())
}

/// The detail of a failed name resolution.
fn resolve_detail(e: &redis::RedisError) -> Option<&str> {
    if e.kind() != redis::ErrorKind::Client {
        return None;
    }
    e.detail()?.strip_prefix(RESOLVE_DETAIL_PREFIX)
}

/// How a failed name resolution's detail starts in the Redis error that
/// carries it.
pub(crate) const RESOLVE_DETAIL_PREFIX: &str = "resolve: ";

/// How a server kept out after a restart says so in the Redis error that
/// carries it.
pub(crate) const RESTART_DETAIL_PREFIX: &str = "restart: ";

/// How a write not acknowledged by enough replicas says so in the Redis
/// error that carries it.
pub(crate) const REPLICATION_DETAIL_PREFIX: &str = "replication: ";

/// The detail of a client-side error, after `prefix`.
fn detail_after<'a>(e: &'a redis::RedisError, prefix: &str) -> Option<&'a str> {
    if e.kind() != redis::ErrorKind::Client {
        return None;
    }
    e.detail()?.strip_prefix(prefix)
}

/// The detail of a TLS failure.
fn tls_detail(e: &redis::RedisError) -> Option<&str> {
    if e.kind() != redis::ErrorKind::Client {
        return None;
    }
    e.detail()?.strip_prefix(TLS_DETAIL_PREFIX)
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
        Some(&self.source)
    }
}
