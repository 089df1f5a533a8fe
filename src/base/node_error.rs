//! One node's failure: [`NodeError`], its [`NodeErrorKind`], the
//! failures of a round ([`NodeFailures`]), and the crate-internal cause
//! each carries (the Redis client's error, or one of the crate's own).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

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

/// A reply no Redis server sends (see `resp.rs`), carried inside an
/// `io::Error` from the reply reader: what was wrong and what came.
#[derive(Debug)]
pub(crate) struct Malformed(pub(crate) String);

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Malformed {}

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

/// How far a call got before it failed: for messages that point the right
/// way (a silent peer after a TCP connect is not a network problem).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Resolving the name and opening the TCP connection (or the socket).
    Connect,
    /// The TLS handshake, on an open TCP connection.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    Tls,
    /// Our handshake (`AUTH`, `INFO`, ...) on an open connection.
    Hello,
    /// A command on an established connection.
    Call,
}

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
    /// The peer answered, but not in RESP: its first bytes, as text.
    Foreign(String),
    /// A reply no Redis server sends: what was wrong with it.
    Malformed(String),
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
            if let Some(Malformed(why)) = inner.downcast_ref::<Malformed>() {
                return Cause::Malformed(why.clone());
            }
        }
        Cause::Redis(e)
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
    stage: Stage,
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
            Cause::Foreign(_) | Cause::Malformed(_) => NodeErrorKind::Protocol,
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
            stage: if connecting {
                Stage::Connect
            } else {
                Stage::Call
            },
            timeout,
            cause,
            command: None,
            settled: connecting,
        }
    }

    /// A failure while opening a connection, at `stage` (before any
    /// command of a lock was sent: nothing can be left behind).
    pub(crate) fn opening(
        node: Arc<str>,
        cause: impl Into<Cause>,
        stage: Stage,
        timeout: Duration,
    ) -> Self {
        let mut e = NodeError::classify(node, cause, true, timeout);
        e.stage = stage;
        e
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
            // The peer accepted the connection (a proxy whose server is
            // down, a server at its limit) but closed it unanswered.
            NodeErrorKind::Connect
                if self.stage == Stage::Hello
                    && self.redis().is_some_and(|e| {
                        io_error(e).is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof)
                            || e.is_connection_dropped()
                    }) =>
            {
                write!(f, "{node}: connected, then closed without an answer")
            }
            NodeErrorKind::Connect => match self.redis().and_then(io_detail) {
                Some(detail) => write!(f, "{node}: could not connect ({detail})"),
                None => write!(f, "{node}: could not connect ({})", self.cause),
            },
            NodeErrorKind::Resolve => write!(f, "{node}: name resolution failed ({})", self.cause),
            NodeErrorKind::Timeout => match self.stage {
                Stage::Connect => write!(f, "{node}: no connection within {:?}", self.timeout),
                Stage::Tls => write!(
                    f,
                    "{node}: connected, but no TLS answer within {:?} (a server without TLS \
                     on this port? rediss:// needs one that speaks TLS)",
                    self.timeout
                ),
                Stage::Hello => {
                    write!(f, "{node}: connected, no answer within {:?}", self.timeout)
                }
                Stage::Call => write!(f, "{node}: no answer within {:?}", self.timeout),
            },
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
            NodeErrorKind::Protocol => match &self.cause {
                Cause::Foreign(said) => {
                    write!(f, "{node}: not a Redis server: it answered {said:?}")
                }
                Cause::Malformed(why) => write!(f, "{node}: bad reply: {why}"),
                cause => write!(f, "{node}: unexpected reply ({cause})"),
            },
            NodeErrorKind::Cluster | NodeErrorKind::Restarted | NodeErrorKind::Replication => {
                write!(f, "{node}: {}", self.cause)
            }
        }
    }
}

impl NodeError {
    /// A few words for a summary line, without the node's name: the code
    /// of an error reply (`error reply READONLY`), else the message, cut
    /// at about 100 characters.
    pub(crate) fn short(&self) -> String {
        match (self.kind, self.code()) {
            (NodeErrorKind::Server, Some(code)) => format!("error reply {code}"),
            (NodeErrorKind::Permission, _) => "permission denied".to_owned(),
            _ => {
                let text = self.to_string();
                let text = text
                    .strip_prefix(&*self.node)
                    .map_or(&*text, |rest| rest.trim_start_matches(':').trim_start());
                crate::base::text::shorten(text.as_bytes(), crate::base::text::SHOWN)
            }
        }
    }

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
            | Cause::Cluster(why)
            | Cause::Foreign(why)
            | Cause::Malformed(why) => f.write_str(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
