//! One Redis node: its address, a small pool of idle connections, the node
//! timeout, and the three commands the algorithm sends.

use std::io;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{ConnectionAddr, ConnectionLike, IntoConnectionInfo, RedisError, RedisResult, Value};

use crate::error::{Error, NodeError};

/// Deletes the key only while it still holds our token.
const UNLOCK_SRC: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
end
return 0
"#;

/// Resets the key's expiry only while it still holds our token.
const EXTEND_SRC: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
"#;

/// A Lua script: its source, and its SHA1 computed once by
/// [`redis::Script`].
pub(crate) struct Lua {
    src: &'static str,
    sha: String,
}

impl Lua {
    fn new(src: &'static str) -> Lua {
        Lua {
            src,
            sha: redis::Script::new(src).get_hash().to_owned(),
        }
    }

    /// `EVALSHA` (or, with `load`, `EVAL` of the source) with one key.
    fn packed(&self, load: bool, key: &[u8], args: &[&[u8]]) -> Vec<u8> {
        let mut cmd = if load {
            redis::cmd("EVAL").arg(self.src).to_owned()
        } else {
            redis::cmd("EVALSHA").arg(&self.sha).to_owned()
        };
        cmd.arg(1).arg(key);
        for arg in args {
            cmd.arg(*arg);
        }
        cmd.get_packed_command()
    }
}

static UNLOCK: LazyLock<Lua> = LazyLock::new(|| Lua::new(UNLOCK_SRC));
static EXTEND: LazyLock<Lua> = LazyLock::new(|| Lua::new(EXTEND_SRC));

/// Socket timeouts are lowered to what is left of a call's deadline only
/// when they exceed it by more than this; spares a system call per command
/// on the common path.
const TIMEOUT_SLACK: Duration = Duration::from_millis(1);

/// A connection and the read/write timeout currently set on its socket.
struct Pooled {
    con: redis::Connection,
    timeout: Duration,
}

impl Pooled {
    /// Sends one packed command and reads its reply, by `deadline`.
    fn request(&mut self, packed: &[u8], deadline: Instant) -> RedisResult<Value> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out());
        }
        if self.timeout > left + TIMEOUT_SLACK {
            self.set_timeout(left)?;
        }
        // An error reply arrives as a value: make it the error it is.
        self.con.req_packed_command(packed)?.extract_error()
    }

    fn set_timeout(&mut self, timeout: Duration) -> RedisResult<()> {
        self.con.set_read_timeout(Some(timeout))?;
        self.con.set_write_timeout(Some(timeout))?;
        self.timeout = timeout;
        Ok(())
    }

    /// Runs a script by its hash, sending the source once more if the
    /// server has not cached it (restart, `SCRIPT FLUSH`).
    fn script(
        &mut self,
        lua: &Lua,
        key: &[u8],
        args: &[&[u8]],
        deadline: Instant,
    ) -> RedisResult<i64> {
        let reply = match self.request(&lua.packed(false, key, args), deadline) {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.request(&lua.packed(true, key, args), deadline)?
            }
            other => other?,
        };
        match reply {
            Value::Int(n) => Ok(n),
            other => Err(unexpected("the lock script", &other)),
        }
    }
}

/// One independent Redis master.
pub(crate) struct Node {
    name: Arc<str>,
    addr: ConnectionAddr,
    client: redis::Client,
    timeout: Duration,
    max_idle: usize,
    idle: Mutex<Vec<Pooled>>,
}

impl Node {
    /// Parses `url` and prepares the node; connects lazily.
    pub(crate) fn open(url: &str, timeout: Duration, max_idle: usize) -> Result<Node, Error> {
        let scheme = url.split("://").next().unwrap_or_default();
        if url.contains("://") && matches!(scheme, "rediss" | "valkeys") {
            return Err(Error::invalid_config(format!(
                "node URL {:?} asks for TLS, which this version of redlock-sync does not \
                 support yet (no tls feature); use a TLS tunnel or a trusted network",
                redact(url)
            )));
        }
        let info = url
            .into_connection_info()
            .map_err(|source| Error::InvalidConfig {
                reason: format!("cannot read node URL {:?}", redact(url)),
                source: Some(source),
            })?;
        if !info.addr().is_supported() {
            return Err(Error::invalid_config(format!(
                "node URL {:?} names an address this platform cannot connect to",
                redact(url)
            )));
        }
        let db = info.redis_settings().db();
        let addr = info.addr().clone();
        let name: Arc<str> = match (&addr, db) {
            (ConnectionAddr::Unix(path), 0) => format!("unix:{}", path.display()).into(),
            (ConnectionAddr::Unix(path), db) => format!("unix:{}/{db}", path.display()).into(),
            (addr, 0) => addr.to_string().into(),
            (addr, db) => format!("{addr}/{db}").into(),
        };
        let redis_settings = info
            .redis_settings()
            .clone()
            .set_lib_name("redlock-sync", env!("CARGO_PKG_VERSION"));
        let info = info
            .set_redis_settings(redis_settings)
            .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
        let client = redis::Client::open(info).map_err(|source| Error::InvalidConfig {
            reason: format!("cannot use node URL {:?}", redact(url)),
            source: Some(source),
        })?;
        Ok(Node {
            name,
            addr,
            client,
            timeout,
            max_idle,
            idle: Mutex::new(Vec::with_capacity(max_idle)),
        })
    }

    /// The node's display name: `host:port`, or `unix:path`, with `/db`
    /// when a database other than 0 is selected.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The server address, for spotting the same server given twice.
    pub(crate) fn addr(&self) -> &ConnectionAddr {
        &self.addr
    }

    /// `SET key token NX PX ttl`, already packed: `true` if we set the key,
    /// `false` if the key exists.
    ///
    /// If the node does not answer in time, the SET may still be executed
    /// later (a paused or overloaded node works through its socket buffer
    /// when it resumes). So before the connection is dropped, the
    /// check-and-delete is queued behind the SET on the same connection,
    /// where the node must execute it right after; the error is then marked
    /// settled, needing no further cleanup.
    pub(crate) fn set_nx(
        &self,
        packed: &[u8],
        key: &[u8],
        token: &[u8],
    ) -> Result<bool, NodeError> {
        let cleanup = || UNLOCK.packed(true, key, &[token]);
        self.call(
            |con, deadline| match con.request(packed, deadline)? {
                Value::Okay => Ok(true),
                Value::Nil => Ok(false),
                other => Err(unexpected("SET NX PX", &other)),
            },
            Some(&cleanup),
        )
    }

    /// Deletes the key if it holds `token`: `true` if deleted.
    pub(crate) fn unlock(&self, key: &[u8], token: &[u8]) -> Result<bool, NodeError> {
        self.call(
            |con, deadline| Ok(con.script(&UNLOCK, key, &[token], deadline)? == 1),
            None,
        )
    }

    /// Sets the key's expiry to `ttl_ms` if it holds `token`: `true` if set.
    pub(crate) fn extend(&self, key: &[u8], token: &[u8], ttl_ms: u64) -> Result<bool, NodeError> {
        let ttl = ttl_ms.to_string();
        self.call(
            |con, deadline| Ok(con.script(&EXTEND, key, &[token, ttl.as_bytes()], deadline)? == 1),
            None,
        )
    }

    /// Runs `op` on a pooled or new connection; everything, connecting
    /// included, ends by one deadline a node timeout from now.
    ///
    /// A connection comes back to the pool only after a complete reply (a
    /// value or an error reply); after a timeout or an I/O error it is
    /// dropped, so a late reply can never be read as the answer to a later
    /// command. A pooled connection found closed (the server restarted
    /// since it was last used) empties the pool and the command is tried
    /// once more on a new connection, by the same deadline.
    ///
    /// When `op` times out after sending, `on_timeout` (if any) is written
    /// to the same connection before it is dropped.
    fn call<T>(
        &self,
        op: impl Fn(&mut Pooled, Instant) -> RedisResult<T>,
        on_timeout: Option<&dyn Fn() -> Vec<u8>>,
    ) -> Result<T, NodeError> {
        let deadline = Instant::now() + self.timeout;
        let pooled = self.idle.lock().pop();
        let mut pooled = match pooled {
            Some(mut pooled) => match op(&mut pooled, deadline) {
                Ok(v) => {
                    self.checkin(pooled);
                    return Ok(v);
                }
                Err(e) if is_reply(&e) && pooled.con.is_open() => {
                    self.checkin(pooled);
                    return Err(self.error(e, false));
                }
                Err(e) if is_stale(&e) => {
                    self.idle.lock().clear();
                    drop(pooled);
                    self.connect(deadline)?
                }
                Err(e) => return Err(self.failed(pooled, e, on_timeout)),
            },
            None => self.connect(deadline)?,
        };
        match op(&mut pooled, deadline) {
            Ok(v) => {
                self.checkin(pooled);
                Ok(v)
            }
            Err(e) if is_reply(&e) && pooled.con.is_open() => {
                self.checkin(pooled);
                Err(self.error(e, false))
            }
            Err(e) => Err(self.failed(pooled, e, on_timeout)),
        }
    }

    /// The error for a command that failed without a complete reply; the
    /// connection is dropped, after queueing `on_timeout` on it if the
    /// command timed out.
    fn failed(
        &self,
        mut pooled: Pooled,
        e: RedisError,
        on_timeout: Option<&dyn Fn() -> Vec<u8>>,
    ) -> NodeError {
        let mut error = self.error(e, false);
        if let (true, Some(follow_up)) = (error.redis_error().is_timeout(), on_timeout) {
            error.settled = pooled.con.send_packed_command(&follow_up()).is_ok();
        }
        error
    }

    /// Opens a connection by `deadline`, its socket timeouts set to what
    /// then remains.
    fn connect(&self, deadline: Instant) -> Result<Pooled, NodeError> {
        let left = |connecting| match deadline.saturating_duration_since(Instant::now()) {
            left if left.is_zero() => Err(self.error(timed_out(), connecting)),
            left => Ok(left),
        };
        let con = self
            .client
            .get_connection_with_timeout(left(true)?)
            .map_err(|e| self.error(e, true))?;
        let mut pooled = Pooled {
            con,
            timeout: Duration::ZERO,
        };
        pooled
            .set_timeout(left(true)?)
            .map_err(|e| self.error(e, true))?;
        Ok(pooled)
    }

    /// Returns a healthy connection to the pool, its socket timeouts reset
    /// to the full node timeout.
    fn checkin(&self, mut pooled: Pooled) {
        if pooled.timeout != self.timeout && pooled.set_timeout(self.timeout).is_err() {
            return;
        }
        let mut idle = self.idle.lock();
        if idle.len() < self.max_idle {
            idle.push(pooled);
        }
    }

    /// The failure reported for a node whose call panicked (a bug, never
    /// expected): counted as a failed node instead of unwinding.
    pub(crate) fn panicked(&self) -> NodeError {
        let e = RedisError::from((redis::ErrorKind::Client, "the call to this node panicked"));
        self.error(e, false)
    }

    fn error(&self, e: RedisError, connecting: bool) -> NodeError {
        NodeError::classify(self.name.clone(), e, connecting, self.timeout)
    }

    /// Connections currently idle in the pool (for tests).
    #[cfg(test)]
    pub(crate) fn idle_len(&self) -> usize {
        self.idle.lock().len()
    }
}

/// The node sent a complete error reply: the connection is still in step.
fn is_reply(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    )
}

/// The connection was found closed by the peer: nothing was answered.
fn is_stale(e: &RedisError) -> bool {
    e.is_connection_dropped() && !e.is_timeout()
}

fn timed_out() -> RedisError {
    RedisError::from(io::Error::new(
        io::ErrorKind::TimedOut,
        "node timeout elapsed",
    ))
}

fn unexpected(command: &'static str, value: &Value) -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected reply",
        format!("{command} answered {value:?}"),
    ))
}

/// The URL with any credentials replaced by `***`, for error messages.
pub(crate) fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..scheme_end + 3], &rest[at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_credentials_only() {
        assert_eq!(
            redact("redis://user:secret@host:6379/2"),
            "redis://***@host:6379/2"
        );
        assert_eq!(redact("redis://:pw@host"), "redis://***@host");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn names_carry_address_and_database_but_no_password() {
        let t = Duration::from_millis(50);
        let n = Node::open("redis://:pw@127.0.0.1:7000/3", t, 1).unwrap();
        assert_eq!(n.name(), "127.0.0.1:7000/3");
        let n = Node::open("redis://localhost:7001", t, 1).unwrap();
        assert_eq!(n.name(), "localhost:7001");
        let n = Node::open("unix:///tmp/r.sock", t, 1).unwrap();
        assert_eq!(n.name(), "unix:/tmp/r.sock");
        assert_eq!(n.idle_len(), 0);
    }
}
