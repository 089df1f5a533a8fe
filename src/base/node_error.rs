//! One node's failure: [`NodeError`], its [`NodeErrorKind`], the
//! failures of a round ([`NodeFailures`]), and the cause each carries
//! ([`Cause`]: the crate's own type, from the socket up).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// A TLS failure (handshake, certificate, alert), carried inside an
/// `io::Error` from the TLS stream (whose `Read` and `Write` speak
/// `io::Error`) to the connection layer, which makes it [`Cause::Tls`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct TlsFailure(pub(crate) String);

/// How far a call got before it failed: for messages that point the right
/// way (a silent peer after a TCP connect is not a network problem).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallStep {
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

/// What one node's failure came from: the crate's own cause type, which
/// the transport (connection, reply reader, request) returns from the
/// socket up, and a [`NodeError`] carries. Nothing is wrapped into another
/// crate's error type on the way.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Cause {
    /// The socket failed: refused, reset, closed by the peer
    /// (`UnexpectedEof`), or out of time (`TimedOut`, `WouldBlock`: the
    /// node timeout).
    #[error("{0}")]
    Io(#[source] std::io::Error),
    /// An error reply, read whole: the server's code and its words after
    /// the code.
    #[error("{code} {detail}")]
    Reply { code: String, detail: String },
    /// A reply of a type the request does not read: what came.
    #[error("unexpected reply {0}")]
    Unexpected(String),
    /// The host name did not resolve.
    #[error("{0}")]
    Resolve(String),
    /// TLS failed.
    #[error("{0}")]
    Tls(String),
    /// The server restarted and does not vote yet.
    #[error("{0}")]
    Restarted(String),
    /// Too few replicas acknowledged the write.
    #[error("{0}")]
    Replication(String),
    /// A Redis Cluster member could not route the request.
    #[error("{0}")]
    Cluster(String),
    /// The peer answered, but not in RESP: its first bytes, as text.
    #[error("{0}")]
    Foreign(String),
    /// A reply no Redis server sends: what was wrong with it.
    #[error("{0}")]
    Malformed(String),
    /// The address is of a kind this build cannot connect to.
    #[error("{0}")]
    Unsupported(String),
    /// The call to this node panicked (a bug).
    #[error("the call to this node panicked")]
    Panicked,
}

impl Cause {
    /// The node timeout elapsed.
    #[cold]
    pub(crate) fn timed_out() -> Cause {
        Cause::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "node timeout elapsed",
        ))
    }

    /// An error reply saying the server has no such command (`ERR
    /// unknown command ...`): renamed away, or a server that claims a
    /// version it is not.
    pub(crate) fn is_unknown_command(&self) -> bool {
        matches!(self, Cause::Reply { code, detail } if code == "ERR" && detail.starts_with("unknown command"))
    }

    /// An error reply's code (`NOSCRIPT`, `MOVED`, `NOPERM`, ...).
    pub(crate) fn code(&self) -> Option<&str> {
        match self {
            Cause::Reply { code, .. } => Some(code),
            _ => None,
        }
    }

    /// An error reply's words after the code.
    pub(crate) fn detail(&self) -> Option<&str> {
        match self {
            Cause::Reply { detail, .. } => Some(detail),
            _ => None,
        }
    }

    /// The socket's failure, if this is one.
    fn io(&self) -> Option<&std::io::Error> {
        match self {
            Cause::Io(e) => Some(e),
            _ => None,
        }
    }

    /// The node sent a complete error reply: the connection is still in
    /// step.
    pub(crate) fn is_reply(&self) -> bool {
        matches!(self, Cause::Reply { .. })
    }

    /// The node timeout elapsed.
    pub(crate) fn is_timeout(&self) -> bool {
        self.io().is_some_and(|e| {
            matches!(
                e.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            )
        })
    }

    /// The connection was refused (or, for a Unix socket, the file is
    /// not there).
    fn is_refusal(&self) -> bool {
        self.io().is_some_and(|e| {
            e.kind() == std::io::ErrorKind::ConnectionRefused
                || (cfg!(unix) && e.kind() == std::io::ErrorKind::NotFound)
        })
    }

    /// The connection is gone: closed, reset, refused, aborted.
    pub(crate) fn is_dropped(&self) -> bool {
        self.io().is_some_and(|e| {
            matches!(
                e.kind(),
                std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::UnexpectedEof
                    | std::io::ErrorKind::NotConnected
                    | std::io::ErrorKind::NotFound
            )
        })
    }

    /// The connection was found closed by the peer: nothing was answered.
    pub(crate) fn is_stale(&self) -> bool {
        self.is_dropped() && !self.is_timeout()
    }
}

impl From<std::io::Error> for Cause {
    /// A socket's failure; one that carries a TLS failure (from the TLS
    /// stream) becomes that cause.
    fn from(e: std::io::Error) -> Cause {
        if let Some(TlsFailure(why)) = e.get_ref().and_then(|i| i.downcast_ref::<TlsFailure>()) {
            return Cause::Tls(why.clone());
        }
        Cause::Io(e)
    }
}

/// The failing nodes of one round, each with its cause.
///
/// Dereferences to a slice of [`NodeError`]. Its `Display` lists every node
/// and cause on one line (so it has no `source()`).
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

/// No `source()`: `Display` lists every node's cause.
impl std::error::Error for NodeFailures {}

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
    /// "restarted 0.4s ago: in restart quarantine, not voting for 9.6s".
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
/// Its `Display` is one line naming the node and the cause, and it has no
/// `source()` (the cause is printed once). Where the socket failed (or the
/// node timeout elapsed), [`io_error`](Self::io_error) is that
/// [`std::io::Error`]; every other cause (an error reply, whose code is
/// [`code`](Self::code), a reply no server sends, a restart, too few
/// replicas, a name that did not resolve, TLS, Redis Cluster routing) is
/// in the message and [`kind`](Self::kind).
pub struct NodeError {
    node: Arc<str>,
    kind: NodeErrorKind,
    step: CallStep,
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
    #[cold]
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
            cause if cause.is_timeout() => NodeErrorKind::Timeout,
            cause if is_permission(cause) => NodeErrorKind::Permission,
            cause
                if matches!(cause.code(), Some("NOAUTH" | "WRONGPASS"))
                    || is_auth_without_password(cause) =>
            {
                NodeErrorKind::Auth
            }
            Cause::Reply { .. } => NodeErrorKind::Server,
            _ if connecting => NodeErrorKind::Connect,
            Cause::Io(_) => NodeErrorKind::Disconnected,
            Cause::Unexpected(_) | Cause::Unsupported(_) | Cause::Panicked => {
                NodeErrorKind::Protocol
            }
        };
        NodeError {
            node,
            kind,
            step: if connecting {
                CallStep::Connect
            } else {
                CallStep::Call
            },
            timeout,
            cause,
            command: None,
            settled: connecting,
        }
    }

    /// A failure while opening a connection, at `step` (before any
    /// command of a lock was sent: nothing can be left behind).
    #[cold]
    pub(crate) fn opening(
        node: Arc<str>,
        cause: impl Into<Cause>,
        step: CallStep,
        timeout: Duration,
    ) -> Self {
        let mut e = NodeError::classify(node, cause, true, timeout);
        e.step = step;
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

    /// What this failure came from.
    pub(crate) fn cause(&self) -> &Cause {
        &self.cause
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

    /// The socket's failure, where the socket failed or the node timeout
    /// elapsed (its [`kind`](std::io::Error::kind) tells refused, reset,
    /// timed out...); `None` for every other cause.
    pub fn io_error(&self) -> Option<&std::io::Error> {
        self.cause.io()
    }

    /// What kind of failure this was.
    pub fn kind(&self) -> NodeErrorKind {
        self.kind
    }

    /// The error code of a server error reply (`"OOM"`, `"READONLY"`,
    /// `"LOADING"`, `"WRONGTYPE"`, ...), if the node sent one.
    pub fn code(&self) -> Option<&str> {
        self.cause.code()
    }

    /// Whether this node's failure is one that waiting does not clear, a
    /// setting to fix: it refused our credentials ([`Auth`]) or our user's
    /// permissions ([`Permission`]), TLS failed ([`Tls`]), or the peer is
    /// not a Redis server or answered what the protocol does not allow
    /// ([`Protocol`]). When such failures leave too few members for a
    /// quorum, an acquisition stops at once instead of waiting (see
    /// [`Error::is_misconfigured`](crate::Error::is_misconfigured)).
    ///
    /// A name that does not resolve is not among them (a restarting
    /// service's name can be missing from DNS for a while), nor are
    /// error replies ([`Server`]): some clear (`MISCONF` once the disk has
    /// room).
    ///
    /// [`Auth`]: NodeErrorKind::Auth
    /// [`Permission`]: NodeErrorKind::Permission
    /// [`Tls`]: NodeErrorKind::Tls
    /// [`Protocol`]: NodeErrorKind::Protocol
    /// [`Server`]: NodeErrorKind::Server
    pub fn is_misconfigured(&self) -> bool {
        // A call that panicked is a bug here, not a setting there.
        matches!(
            self.kind,
            NodeErrorKind::Auth
                | NodeErrorKind::Permission
                | NodeErrorKind::Tls
                | NodeErrorKind::Protocol
        ) && !matches!(self.cause, Cause::Panicked)
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
            NodeErrorKind::Connect if self.cause.is_refusal() => {
                write!(f, "{node}: connection refused")
            }
            // The peer accepted the connection (a proxy whose server is
            // down, a server at its limit) but closed it unanswered.
            NodeErrorKind::Connect if self.step == CallStep::Hello && self.cause.is_dropped() => {
                write!(f, "{node}: connected, then closed without an answer")
            }
            NodeErrorKind::Connect => match self.cause.io() {
                Some(detail) => write!(f, "{node}: could not connect ({detail})"),
                None => write!(f, "{node}: could not connect ({})", self.cause),
            },
            NodeErrorKind::Resolve => write!(f, "{node}: name resolution failed ({})", self.cause),
            NodeErrorKind::Timeout => match self.step {
                CallStep::Connect => write!(f, "{node}: no connection within {:?}", self.timeout),
                CallStep::Tls => write!(
                    f,
                    "{node}: connected, but no TLS answer within {:?} (a server without TLS \
                     on this port? rediss:// needs one that speaks TLS)",
                    self.timeout
                ),
                CallStep::Hello => {
                    write!(f, "{node}: connected, no answer within {:?}", self.timeout)
                }
                CallStep::Call => write!(f, "{node}: no answer within {:?}", self.timeout),
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
                if let Some(detail) = self.cause.detail() {
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
                Cause::Panicked => write!(f, "{node}: the call to this node panicked (a bug)"),
                cause => write!(f, "{node}: {cause}"),
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
        self.cause.detail().unwrap_or("")
    }

    /// ` (CODE detail)`: the server's own words.
    fn write_reply(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code(), self.cause.detail()) {
            (Some(code), Some(detail)) => write!(f, " ({code} {detail})"),
            (Some(code), None) => write!(f, " ({code})"),
            (None, Some(detail)) => write!(f, " ({detail})"),
            (None, None) => Ok(()),
        }
    }
}

/// The node, the kind, what the error reply answered and the cause: no
/// bookkeeping.
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

/// `AUTH` with a password sent to a server that has none ("ERR AUTH
/// <password> called without any password configured for the default
/// user").
fn is_auth_without_password(e: &Cause) -> bool {
    e.code() == Some("ERR")
        && e.detail()
            .is_some_and(|d| d.contains("without any password configured"))
}

/// An ACL refusal: `NOPERM`, or, inside a script, an `ERR` saying the
/// script's user cannot run a command or access a key ("The user
/// executing the script can't ..." on Redis 6.2 and 7.0, "ACL failure in
/// script: ..." on Redis 7.2+ and Valkey).
fn is_permission(e: &Cause) -> bool {
    match e.code() {
        Some("NOPERM") => true,
        Some("ERR") => e.detail().is_some_and(|d| {
            d.contains("The user executing the script can't")
                || d.starts_with("ACL failure in script")
        }),
        _ => false,
    }
}

/// No `source()`: `Display` says the cause (the socket's failure, where
/// there is one, is [`io_error`](NodeError::io_error)).
impl std::error::Error for NodeError {}

#[cfg(test)]
mod tests;
