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
    #[error(
        "{resource:?} is locked by another owner on {held_elsewhere} of {nodes} nodes, \
         so no quorum of {quorum} is possible{}",
        failed_suffix(failures)
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
        /// Nodes that did not answer usefully during the same round.
        #[source]
        failures: NodeFailures,
    },

    /// Too many nodes failed or did not answer in time for a quorum to be
    /// reached (or confirmed, for release and extend).
    #[error(
        "no quorum for {resource:?}: {agreed} of {nodes} nodes agreed, {quorum} needed{}",
        failed_suffix(failures)
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
        /// Each failing node with its cause.
        #[source]
        failures: NodeFailures,
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
    /// and `renewal` is `None`), it was taken over (`lost_on` nodes answered
    /// that they no longer hold our token: another owner's, or none), or
    /// (from [`LockGuard::ensure_held`](crate::LockGuard::ensure_held))
    /// the latest keep-alive renewal did not reach a quorum (`renewal`).
    /// Nothing belonging to another owner was touched.
    #[error(
        "the lock on {resource:?} is no longer held: {}",
        not_held_reason(*lost_on, *nodes, renewal.as_deref())
    )]
    NotHeld {
        /// The resource name, lossily decoded as UTF-8.
        resource: String,
        /// Nodes that answered that they no longer hold our token (taken
        /// over); 0 when the local validity ran out or a renewal failed.
        lost_on: usize,
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
            Error::Taken { failures, .. } | Error::NoQuorum { failures, .. } => failures,
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

fn failed_suffix(failures: &NodeFailures) -> String {
    if failures.is_empty() {
        return String::new();
    }
    let names: Vec<&str> = failures.iter().map(NodeError::node).collect();
    format!(" (failed: {})", names.join(", "))
}

fn not_held_reason(lost_on: usize, nodes: usize, renewal: Option<&str>) -> String {
    if let Some(renewal) = renewal {
        format!("its latest renewal did not reach a quorum ({renewal})")
    } else if lost_on == 0 {
        "its validity ran out".to_owned()
    } else {
        format!(
            "it was taken over: {lost_on} of {nodes} nodes no longer hold its token \
             (they hold another owner's, or none)"
        )
    }
}

/// The failing nodes of one round, each with its cause.
///
/// Dereferences to a slice of [`NodeError`]. Its `Display` lists every node
/// and cause on one line; its `source()` is the first node's underlying
/// Redis error.
#[derive(Debug, Default)]
pub struct NodeFailures(Vec<NodeError>);

impl NodeFailures {
    pub(crate) fn new(failures: Vec<NodeError>) -> Self {
        NodeFailures(failures)
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
}

/// One node's failure: which node, what kind of failure, and the Redis
/// client's error as the `source()`.
#[derive(Debug)]
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
        } else if is_permission(&source) {
            NodeErrorKind::Permission
        } else if source.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(source.code(), Some("NOAUTH" | "WRONGPASS"))
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
            NodeErrorKind::Connect => write!(f, "{node}: could not connect"),
            NodeErrorKind::Timeout if self.connecting => {
                write!(f, "{node}: no connection within {:?}", self.timeout)
            }
            NodeErrorKind::Timeout => write!(f, "{node}: no answer within {:?}", self.timeout),
            NodeErrorKind::Disconnected => write!(f, "{node}: connection lost"),
            NodeErrorKind::Auth => write!(f, "{node}: authentication failed"),
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
                let code = self.code().unwrap_or("NOPERM");
                match self.source.detail() {
                    Some(detail) => write!(f, " ({code} {detail})"),
                    None => write!(f, " ({code})"),
                }
            }
            NodeErrorKind::Server => {
                match self.code() {
                    Some(code) => write!(f, "{node}: error reply {code}")?,
                    None => write!(f, "{node}: error reply")?,
                }
                match &self.command {
                    Some(command) => write!(f, " to {command}"),
                    None => Ok(()),
                }
            }
            NodeErrorKind::Protocol => write!(f, "{node}: unexpected reply"),
        }
    }
}

/// The detail of a TLS failure.
fn tls_detail(e: &redis::RedisError) -> Option<&str> {
    if e.kind() != redis::ErrorKind::Client {
        return None;
    }
    e.detail()?.strip_prefix(TLS_DETAIL_PREFIX)
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
