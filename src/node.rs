//! One Redis node: its address, a small pool of idle connections, the node
//! timeout, and the requests the algorithm sends.
//!
//! A request goes out in two steps so that a round can write to every node
//! before it reads any reply: [`Node::send`] writes on a pooled connection,
//! [`Node::receive`] reads the reply by the round's deadline. A node with
//! no usable pooled connection goes through [`Node::call`], which connects
//! first; only that can block for long, so only that runs on its own
//! thread (see `quorum::round`).

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{ConnectionAddr, IntoConnectionInfo, RedisError, Value};

use crate::conn::{Conn, Tls};
use crate::error::{Error, NodeError, REPLICATION_DETAIL_PREFIX, RESTART_DETAIL_PREFIX};
use crate::resolve::{ResolveFn, Resolver};
use crate::restart::{Identity, Policy, Quarantine, Seen, Watch};

/// What every node of a manager is opened with (kept by Redis Cluster
/// members, which open the masters they discover).
#[derive(Clone)]
pub(crate) struct Setup {
    pub(crate) timeout: Duration,
    pub(crate) max_idle: usize,
    pub(crate) resolve: Arc<ResolveFn>,
    #[cfg(feature = "tls")]
    pub(crate) tls: Arc<crate::tls::Configs>,
    /// When restarted servers vote again.
    pub(crate) restart: Arc<Policy>,
}

/// Splits a TLS URL (`rediss://`, `valkeys://`) into the plain URL the
/// `redis` crate reads and whether certificate checks are off
/// (`#insecure`); `None` for a plain URL.
fn tls_scheme(url: &str) -> (String, Option<bool>) {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (scheme, rest),
        None => return (url.to_owned(), None),
    };
    let plain = match scheme {
        "rediss" => "redis",
        "valkeys" => "valkey",
        _ => return (url.to_owned(), None),
    };
    let (rest, insecure) = match rest.rsplit_once('#') {
        Some((rest, "insecure")) => (rest, true),
        _ => (rest, false),
    };
    (format!("{plain}://{rest}"), Some(insecure))
}

/// Deletes the key only while it still holds our token: 1 when deleted,
/// 0 when it holds another token, -1 when there is no key.
const UNLOCK_SRC: &str = r#"
local held = redis.call("GET", KEYS[1])
if held == ARGV[1] then
    return redis.call("DEL", KEYS[1])
elseif held then
    return 0
end
return -1
"#;

/// The clean-up of a failed acquisition: as the unlock script, and only
/// when it deleted the key, announces the release (ARGV[4], `PUBLISH` or
/// `SPUBLISH`, of ARGV[3] on channel ARGV[2]), so that an attempt that
/// freed nothing wakes nobody. The publish may be refused (an ACL user
/// without channels, a server without sharded pub/sub): that never fails
/// the clean-up.
const CLEANUP_SRC: &str = r#"
if redis.call("GET", KEYS[1]) == ARGV[1] then
    redis.call("DEL", KEYS[1])
    if ARGV[2] then
        redis.pcall(ARGV[4], ARGV[2], ARGV[3])
    end
    return 1
end
return 0
"#;

/// A semaphore's survey of its permit keys (KEYS). With ARGV[1] `mask`
/// (at most 52 keys, exact in a Lua number): the sum of 2^i over the free
/// keys i. Otherwise the first free key looking from index ARGV[1] on and
/// around: its index plus one, or 0 when every permit is held here.
const FREE_SRC: &str = r#"
local n = #KEYS
if ARGV[1] == "mask" then
    local mask = 0
    for i = 1, n do
        if not redis.call("GET", KEYS[i]) then
            mask = mask + 2 ^ (i - 1)
        end
    end
    return mask
end
local start = tonumber(ARGV[1])
for j = 0, n - 1 do
    local i = (start + j) % n + 1
    if not redis.call("GET", KEYS[i]) then
        return i
    end
end
return 0
"#;

/// Resets the key's expiry (ARGV[2] ms) only while it still holds our
/// token: 1 when done, 0 when it holds another token, -1 when there is no
/// key. Further keys (the resource's fencing counter, a semaphore's
/// stored count) are kept alive longer than the lock: each that has less
/// than the new TTL left gets the expiry ARGV[3] ms (one with no expiry,
/// or none at all, is left alone). The lock's expiry is set first, so that
/// on a server whose clock moves during a script the others' end no
/// earlier.
const EXTEND_SRC: &str = r#"
local held = redis.call("GET", KEYS[1])
if held == ARGV[1] then
    local done = redis.call("PEXPIRE", KEYS[1], ARGV[2])
    for i = 2, #KEYS do
        local left = redis.call("PTTL", KEYS[i])
        if left >= 0 and left < tonumber(ARGV[2]) then
            redis.call("PEXPIRE", KEYS[i], ARGV[3])
        end
    end
    return done
elseif held then
    return 0
end
return -1
"#;

/// A semaphore's stored permit count, checked ahead of a permit's
/// acquisition in the same write. KEYS[1]: the count's key, ARGV[1]: the
/// count this client was made with, ARGV[2]: how long (ms) the count is
/// kept at least. When another count is stored, changes nothing and
/// answers it; otherwise stores ours (or keeps it alive at least ARGV[2]
/// ms) and answers 0.
const PERMITS_SRC: &str = r#"
local stored = redis.call("GET", KEYS[1])
if stored and stored ~= ARGV[1] then
    return tonumber(stored) or -1
end
if not stored then
    redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
elseif redis.call("PTTL", KEYS[1]) < tonumber(ARGV[2]) then
    redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
"#;

/// Raises each fencing counter (KEYS: one, or a set's) to at least
/// ARGV[1], keeping its expiry; a counter that expired meanwhile is
/// created with the expiry ARGV[2].
const RAISE_SRC: &str = r#"
for i = 1, #KEYS do
    local seen = redis.call("GET", KEYS[i])
    if not seen then
        redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
    elseif tonumber(seen) < tonumber(ARGV[1]) then
        redis.call("SET", KEYS[i], ARGV[1], "KEEPTTL")
    end
end
return 1
"#;

/// Takes a set of resources, all or nothing. KEYS: the n resource keys,
/// then (with fencing, ARGV[3] given) their n fencing counters. ARGV[1]:
/// the token, ARGV[2]: the TTL in ms, ARGV[3]: a new counter's start,
/// ARGV[4]: the counters' expiry in ms.
///
/// When some key exists, nothing is written and the answer is -i for the
/// first such key i (1-based). Otherwise every key is set to the token;
/// with fencing, every counter is counted up as for one lock (one more
/// than it was, or than ARGV[3] when there was none), then all are set to
/// the highest of them, which is the answer (a number that
/// every counter of the set reached, so a token above each resource's
/// earlier ones); without fencing the answer is 1.
const LOCK_SET_SRC: &str = r#"
local n = #KEYS
if ARGV[3] then
    n = n / 2
end
local held = redis.call("MGET", unpack(KEYS, 1, n))
for i = 1, n do
    if held[i] then
        return -i
    end
end
for i = 1, n do
    redis.call("SET", KEYS[i], ARGV[1], "PX", ARGV[2])
end
if not ARGV[3] then
    return 1
end
local counts = redis.call("MGET", unpack(KEYS, n + 1, 2 * n))
local top = 0
for i = 1, n do
    local count = (tonumber(counts[i]) or tonumber(ARGV[3])) + 1
    if count > top then
        top = count
    end
end
top = string.format("%d", top)
for i = n + 1, 2 * n do
    redis.call("SET", KEYS[i], top, "PX", ARGV[4])
end
return tonumber(top)
"#;

/// Releases a set (KEYS): deletes each key that holds the token ARGV[1],
/// and for each one deleted announces its release (ARGV[2], `PUBLISH` or
/// `SPUBLISH`, of message ARGV[3] on channel ARGV[3 + i]) when ARGV[2] is
/// given. Answers 1 when it deleted keys and no key holds another token,
/// 0 when some key holds another token, -1 when no key was there.
const UNLOCK_SET_SRC: &str = r#"
local held = redis.call("MGET", unpack(KEYS))
local mine, other = {}, 0
for i = 1, #KEYS do
    if held[i] == ARGV[1] then
        mine[#mine + 1] = i
    elseif held[i] then
        other = other + 1
    end
end
if #mine > 0 then
    local keys = {}
    for j, i in ipairs(mine) do
        keys[j] = KEYS[i]
    end
    redis.call("DEL", unpack(keys))
    if ARGV[2] then
        for _, i in ipairs(mine) do
            redis.pcall(ARGV[2], ARGV[3 + i], ARGV[3])
        end
    end
end
if other > 0 then
    return 0
elseif #mine > 0 then
    return 1
end
return -1
"#;

/// Extends a set: KEYS are the n resource keys, then (with ARGV[3]) their
/// n fencing counters. Only when every key holds the token ARGV[1], sets
/// their expiry to ARGV[2] ms and keeps each counter alive as the extend
/// script does (expiry ARGV[3] when it has less than the TTL left);
/// answers 1. Otherwise changes nothing and answers 0 when a key holds
/// another token, -1 when one is gone.
const EXTEND_SET_SRC: &str = r#"
local n = #KEYS
if ARGV[3] then
    n = n / 2
end
local held = redis.call("MGET", unpack(KEYS, 1, n))
for i = 1, n do
    if held[i] ~= ARGV[1] then
        if held[i] then
            return 0
        end
        return -1
    end
end
for i = 1, n do
    redis.call("PEXPIRE", KEYS[i], ARGV[2])
    if ARGV[3] then
        local left = redis.call("PTTL", KEYS[n + i])
        if left >= 0 and left < tonumber(ARGV[2]) then
            redis.call("PEXPIRE", KEYS[n + i], ARGV[3])
        end
    end
end
return 1
"#;

/// A writer waits for the lock key KEYS[1]: while readers hold it (it
/// holds the readers' mark ARGV[3]), sets the waiting-writer flag KEYS[2]
/// to the writer's token ARGV[1] for ARGV[2] ms and answers 1; otherwise
/// writes nothing and answers 0.
const WRITER_WAITS_SRC: &str = r#"
if redis.call("GET", KEYS[1]) ~= ARGV[3] then
    return 0
end
redis.call("SET", KEYS[2], ARGV[1], "PX", ARGV[2])
return 1
"#;

/// The server's clock in ms, as scripts read it (`TIME`).
const NOW_LUA: &str = r#"
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"#;

/// Takes a read lock. KEYS[1]: the lock key, KEYS[2]: the readers (a
/// sorted set of reader tokens scored by their expiry, in ms of the
/// server's clock), KEYS[3]: the waiting-writer flag. ARGV[1]: the token,
/// ARGV[2]: the TTL in ms, ARGV[3]: the readers' mark.
///
/// Refused (0) while the lock key holds anything but the mark (a writer)
/// or a writer waits (the flag exists). Otherwise adds this reader, and
/// makes sure the lock key holds the mark for at least the TTL (the key
/// lives as long as its longest reader, so a writer's `SET NX` fails until
/// every reader is gone); the readers' set always gets the key's expiry.
/// Answers 1. (Expired readers are dropped on release.)
const READ_SRC: &str = r#"
local got = redis.call("MGET", KEYS[1], KEYS[3])
local held = got[1]
if (held and held ~= ARGV[3]) or got[2] then
    return 0
end
NOW
local ttl = tonumber(ARGV[2])
redis.call("ZADD", KEYS[2], now + ttl, ARGV[1])
if not held or redis.call("PTTL", KEYS[1]) < ttl then
    redis.call("SET", KEYS[1], ARGV[3], "PX", ARGV[2])
    redis.call("PEXPIRE", KEYS[2], ARGV[2])
end
return 1
"#;

/// Releases a read lock (keys and ARGV[1] as the read script, ARGV[2]:
/// the readers' mark): removes the reader. When no valid reader is left,
/// deletes the lock key (if it holds the mark) and the readers, and
/// announces the
/// release (ARGV[5], `PUBLISH` or `SPUBLISH`, of message ARGV[4] on
/// channel ARGV[3], when given); otherwise drops the expired readers and
/// shortens the key's expiry to the longest remaining reader's. Answers 1 when the reader was there
/// and valid, -1 when it was gone or expired.
const UNREAD_SRC: &str = r#"
NOW
local mine = redis.call("ZSCORE", KEYS[2], ARGV[1])
if mine then
    redis.call("ZREM", KEYS[2], ARGV[1])
end
if redis.call("GET", KEYS[1]) == ARGV[2] then
    local last = redis.call("ZRANGE", KEYS[2], -1, -1, "WITHSCORES")
    if #last == 0 or tonumber(last[2]) <= now then
        redis.call("DEL", KEYS[1], KEYS[2])
        if ARGV[3] then
            redis.pcall(ARGV[5], ARGV[3], ARGV[4])
        end
    else
        redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", now)
        local left = tonumber(last[2]) - now
        redis.call("PEXPIRE", KEYS[1], left)
        redis.call("PEXPIRE", KEYS[2], left)
    end
end
if mine and tonumber(mine) > now then
    return 1
end
return -1
"#;

/// Extends a read lock (keys, ARGV[1] and ARGV[2] as the read script,
/// ARGV[3]: the readers' mark): only while the reader is there and not
/// expired, moves its expiry to ARGV[2] ms from now and makes sure the
/// lock key (and the readers' set) lives at least as long; answers 1.
/// Otherwise answers 0 when a writer holds the key, -1 when the reader is
/// gone.
const EXTEND_READ_SRC: &str = r#"
NOW
local mine = redis.call("ZSCORE", KEYS[2], ARGV[1])
local held = redis.call("GET", KEYS[1])
if not mine or tonumber(mine) <= now or held ~= ARGV[3] then
    if held and held ~= ARGV[3] then
        return 0
    end
    return -1
end
local ttl = tonumber(ARGV[2])
redis.call("ZADD", KEYS[2], now + ttl, ARGV[1])
if redis.call("PTTL", KEYS[1]) < ttl then
    redis.call("PEXPIRE", KEYS[1], ARGV[2])
    redis.call("PEXPIRE", KEYS[2], ARGV[2])
end
return 1
"#;

/// A Lua script: its name for messages, its source, and its SHA1 computed
/// once by [`redis::Script`].
pub(crate) struct Lua {
    name: &'static str,
    src: String,
    sha: String,
}

impl Lua {
    fn new(name: &'static str, src: &str) -> Lua {
        Lua {
            name,
            src: src.to_owned(),
            sha: redis::Script::new(src).get_hash().to_owned(),
        }
    }

    /// A script that reads the server's clock: `NOW` in `src` becomes
    /// the lines that set `now` (ms).
    fn timed(name: &'static str, src: &str) -> Lua {
        Lua::new(name, &src.replacen("NOW", NOW_LUA.trim(), 1))
    }

    /// What a failure of this script on `key` concerns, for messages.
    pub(crate) fn describe(&self, key: &[u8]) -> String {
        format!(
            "the {} script on {:?}",
            self.name,
            String::from_utf8_lossy(key)
        )
    }

    /// `EVALSHA sha numkeys keys... args...`.
    pub(crate) fn evalsha(&self, keys: &[&[u8]], args: &[&[u8]]) -> Vec<u8> {
        self.command(b"EVALSHA", self.sha.as_bytes(), keys, args)
    }

    /// `EVAL source numkeys keys... args...`: runs the script and caches it.
    pub(crate) fn eval(&self, keys: &[&[u8]], args: &[&[u8]]) -> Vec<u8> {
        self.command(b"EVAL", self.src.as_bytes(), keys, args)
    }

    fn command(&self, verb: &[u8], script: &[u8], keys: &[&[u8]], args: &[&[u8]]) -> Vec<u8> {
        let numkeys = keys.len().to_string();
        let head: [&[u8]; 3] = [verb, script, numkeys.as_bytes()];
        pack(&[&head[..], keys, args].concat())
    }
}

pub(crate) static UNLOCK: LazyLock<Lua> = LazyLock::new(|| Lua::new("unlock", UNLOCK_SRC));
pub(crate) static EXTEND: LazyLock<Lua> = LazyLock::new(|| Lua::new("extend", EXTEND_SRC));
pub(crate) static RAISE: LazyLock<Lua> = LazyLock::new(|| Lua::new("raise", RAISE_SRC));
pub(crate) static CLEANUP: LazyLock<Lua> = LazyLock::new(|| Lua::new("clean-up", CLEANUP_SRC));
pub(crate) static PERMITS: LazyLock<Lua> = LazyLock::new(|| Lua::new("permit-count", PERMITS_SRC));
pub(crate) static FREE: LazyLock<Lua> = LazyLock::new(|| Lua::new("free-permit", FREE_SRC));
pub(crate) static LOCK_SET: LazyLock<Lua> = LazyLock::new(|| Lua::new("lock-set", LOCK_SET_SRC));
pub(crate) static UNLOCK_SET: LazyLock<Lua> =
    LazyLock::new(|| Lua::new("unlock-set", UNLOCK_SET_SRC));
pub(crate) static EXTEND_SET: LazyLock<Lua> =
    LazyLock::new(|| Lua::new("extend-set", EXTEND_SET_SRC));
pub(crate) static WRITER_WAITS: LazyLock<Lua> =
    LazyLock::new(|| Lua::new("writer-waits", WRITER_WAITS_SRC));
pub(crate) static READ: LazyLock<Lua> = LazyLock::new(|| Lua::timed("read", READ_SRC));
pub(crate) static UNREAD: LazyLock<Lua> = LazyLock::new(|| Lua::timed("unread", UNREAD_SRC));
pub(crate) static EXTEND_READ: LazyLock<Lua> =
    LazyLock::new(|| Lua::timed("extend-read", EXTEND_READ_SRC));

/// An answer of the set script that names the first busy key: this bit,
/// plus the key's index (see [`Reply::Count`]).
pub(crate) const BUSY: u64 = 1 << 62;

/// An acquisition answer of a member that stores another permit count for
/// the semaphore: this bit, plus the count stored there (the acquisition
/// behind it may have written, so it is cleaned up as a yes would be).
pub(crate) const MISMATCH: u64 = 1 << 61;

/// The answer of a node whose key is gone (expired or deleted), to an
/// unlock or extend: the scripts' -1.
pub(crate) const GONE: u64 = u64::MAX;

/// Encodes one command in RESP.
pub(crate) fn pack(args: &[&[u8]]) -> Vec<u8> {
    let len = args.iter().map(|a| a.len() + 16).sum::<usize>() + 16;
    let mut out = Vec::with_capacity(len);
    out.push(b'*');
    out.extend_from_slice(args.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for arg in args {
        out.push(b'$');
        out.extend_from_slice(arg.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// What a reply means. Every answer is a number: 0 is no, [`GONE`] is
/// "no such key", anything else is yes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Reply {
    /// `1` is yes, `0` is no, `-1` is [`GONE`] (unlock, extend, raise).
    One,
    /// As `One` for the first command; a second one (the `PUBLISH` after
    /// an unlock) is read and its answer, an error reply included,
    /// ignored.
    OneThenAny,
    /// The reply of `SET ... NX` (acquire without fencing): `OK` is yes
    /// (1), nil is no.
    Set,
    /// A count (a semaphore's survey, a set's fencing token): any number
    /// of 0 or more; a negative `-i` (the set script's first busy key)
    /// reads as [`BUSY`] plus `i - 1`.
    Count,
    /// Four replies, of `SET ... NX` on the lock key, then `SET ... NX
    /// PX`, `INCR` and `PEXPIRE` on the fencing counter (acquire with
    /// fencing): nil first is no (0); `OK` first is yes, and the count.
    SetCount,
}

/// One request, the same for every node of a round.
pub(crate) struct Request<'a> {
    /// The command(s), packed.
    pub(crate) packed: &'a [u8],
    /// The key whose hash slot routes the request on a Redis Cluster
    /// member (the resource).
    pub(crate) key: &'a [u8],
    /// The request as Redis Cluster members take it, when it differs.
    pub(crate) alt: Option<&'a Request<'a>>,
    /// `packed` starts with `ASKING`, whose `OK` is read first.
    pub(crate) asking: bool,
    /// After any `ASKING`, `packed` starts with the semaphore count check
    /// (see `PERMITS_SRC`), whose answer is read next.
    pub(crate) permits: bool,
    /// A Redis Cluster member may follow an `ASK` for it: it touches one
    /// key, or is a script (for which the servers themselves refuse keys
    /// split by a migration).
    pub(crate) follow_ask: bool,
    /// The answers decide a holder (acquire, extend, raise): a server kept
    /// out after a restart (see `restart.rs`) gives none.
    pub(crate) decides: bool,
    /// `packed` (and the reload) end with `WAIT <replicas> <ms>`: a yes
    /// counts only when this many replicas acknowledged the write.
    pub(crate) wait: Option<u32>,
    /// How to read its reply.
    pub(crate) reply: Reply,
    /// Names the command (by its index among the request's commands) and
    /// key that an error reply concerns, for messages.
    pub(crate) describe: &'a (dyn Fn(usize) -> String + Sync),
    /// For a script sent by hash: the command that sends its source, for a
    /// node that answers `NOSCRIPT`.
    pub(crate) reload: Option<&'a (dyn Fn() -> Vec<u8> + Sync)>,
    /// Written behind the command on the same connection when its reply
    /// does not come in time, before the connection is dropped.
    pub(crate) on_timeout: Option<&'a (dyn Fn() -> Vec<u8> + Sync)>,
}

/// A request that got no useful answer: the error, and which of the
/// request's commands it belongs to (for an error reply).
struct Failure {
    error: RedisError,
    at: usize,
    /// The connection is still in step (the replies were all read).
    keep: bool,
}

impl From<RedisError> for Failure {
    /// The failure of one read: an error reply was read whole (the
    /// connection is in step so far); anything else breaks it.
    fn from(error: RedisError) -> Failure {
        let keep = is_reply(&error);
        Failure { error, at: 0, keep }
    }
}

/// A connection, between uses kept in a node's pool.
pub(crate) struct Pooled {
    con: Conn,
}

impl Pooled {
    /// Reads the reply to `req` (already written), sending the script's
    /// source once more after `NOSCRIPT` (`SCRIPT FLUSH`).
    ///
    /// A failure's `keep` says whether every reply of the request was read
    /// (the connection is in step and may go back to the pool); any path
    /// that leaves a reply unread returns `keep: false`, so that a later
    /// request never reads this one's reply as its own.
    fn finish(&mut self, req: &Request<'_>, deadline: Instant) -> Result<u64, Failure> {
        if req.asking {
            self.asked(deadline)?;
        }
        // The count check's reply; the acquisition behind it ran anyway.
        let check = if req.permits {
            match self.con.read(deadline) {
                Ok(Value::Int(n)) if n >= 0 => Ok(n as u64),
                Ok(other) => Err(unexpected(&other)),
                Err(e) if is_reply(&e) => Err(e),
                Err(e) => return Err(e.into()),
            }
        } else {
            Ok(0)
        };
        let answer = self.replicated(req, deadline);
        match (check, answer) {
            (Ok(0), answer) => answer,
            // Not in step: that failure is the answer.
            (_, Err(f)) if !f.keep => Err(f),
            // The check is sent by hash (loaded with the handshake): after
            // a `SCRIPT FLUSH` this attempt gets no vote here, and the
            // script is loaded again on this connection for the next one.
            (Err(error), _) if is_noscript(&error) => {
                let load = pack(&[b"SCRIPT", b"LOAD", PERMITS.src.as_bytes()]);
                self.con.write(&load, deadline)?;
                self.con.read(deadline)?;
                Err(Failure {
                    error,
                    at: 0,
                    keep: true,
                })
            }
            (Ok(stored), _) => Ok(MISMATCH | stored),
            (Err(error), _) => Err(Failure {
                error,
                at: 0,
                keep: true,
            }),
        }
    }

    /// Reads the reply to `req` past any `ASKING` and count check, then
    /// its `WAIT`: a yes counts only when enough replicas acknowledged it.
    fn replicated(&mut self, req: &Request<'_>, deadline: Instant) -> Result<u64, Failure> {
        let answer = self.finish_reply(req, deadline);
        let Some(needed) = req.wait else {
            return answer;
        };
        if let Err(f) = &answer
            && !f.keep
        {
            return answer;
        }
        let acked = match self.con.read(deadline)? {
            Value::Int(acked) => u32::try_from(acked).unwrap_or(0),
            other => {
                return Err(Failure {
                    keep: true,
                    ..unexpected(&other).into()
                });
            }
        };
        match answer {
            // Only a write waits for replicas: a no (0), a gone key and a
            // set's busy key are answers whatever the replicas saw.
            Ok(yes) if yes > 0 && yes & BUSY == 0 && acked < needed => Err(Failure {
                error: RedisError::from((
                    redis::ErrorKind::Client,
                    "not replicated",
                    format!(
                        "{REPLICATION_DETAIL_PREFIX}the write reached {acked} of {needed} \
                         replicas in time (WAIT)"
                    ),
                )),
                at: 0,
                keep: true,
            }),
            other => other,
        }
    }

    /// Reads the reply to `req` (after any `ASKING`), up to a `WAIT`.
    fn finish_reply(&mut self, req: &Request<'_>, deadline: Instant) -> Result<u64, Failure> {
        match req.reply {
            Reply::One | Reply::OneThenAny | Reply::Count => {}
            Reply::Set => {
                return match self.con.read(deadline)? {
                    Value::Okay => Ok(1),
                    Value::Nil => Ok(0),
                    other => Err(unexpected(&other).into()),
                };
            }
            Reply::SetCount => return self.finish_set_count(deadline),
        }
        let then_any = matches!(req.reply, Reply::OneThenAny);
        let reply = match (self.read_then(then_any, deadline)?, req.reload) {
            (Err(e), Some(reload)) if is_noscript(&e) => {
                if req.wait.is_some() {
                    // The WAIT sent behind the refused script.
                    self.con.read(deadline)?;
                }
                if req.asking {
                    // ASKING holds for one command: the reload needs it too.
                    self.con
                        .write(&[&pack(&[b"ASKING"])[..], &reload()].concat(), deadline)?;
                    self.asked(deadline)?;
                } else {
                    self.con.write(&reload(), deadline)?;
                }
                self.read_then(then_any, deadline)??
            }
            (reply, _) => reply?,
        };
        match (req.reply, reply) {
            (Reply::Count, Value::Int(n)) if n >= 0 => Ok(n as u64),
            (Reply::Count, Value::Int(n)) => Ok(BUSY | (n.unsigned_abs() - 1)),
            (_, Value::Int(1)) => Ok(1),
            (_, Value::Int(0)) => Ok(0),
            (_, Value::Int(-1)) => Ok(GONE),
            (_, other) => Err(unexpected(&other).into()),
        }
    }

    /// Reads the `OK` of an `ASKING` sent first. A refusal (an ACL user
    /// without `+asking`, `-BUSY`, `-LOADING`) leaves the command's
    /// replies behind it unread: the connection is out of step.
    fn asked(&mut self, deadline: Instant) -> Result<(), Failure> {
        let error = match self.con.read(deadline) {
            Ok(Value::Okay) => return Ok(()),
            Ok(other) => unexpected(&other),
            Err(e) => e,
        };
        Err(Failure {
            error,
            at: 0,
            keep: false,
        })
    }

    /// Reads a reply (an error reply as the inner `Err`), then, with
    /// `then_any`, the next one, whose answer is ignored. A connection
    /// that fails is the outer `Err`.
    fn read_then(
        &mut self,
        then_any: bool,
        deadline: Instant,
    ) -> Result<Result<Value, RedisError>, RedisError> {
        let first = match self.con.read(deadline) {
            Err(e) if !is_reply(&e) => return Err(e),
            first => first,
        };
        if then_any {
            match self.con.read(deadline) {
                Err(e) if !is_reply(&e) => return Err(e),
                _ => {}
            }
        }
        Ok(first)
    }

    /// Reads the four replies of the acquisition pipeline; the first error
    /// reply fails it.
    fn finish_set_count(&mut self, deadline: Instant) -> Result<u64, Failure> {
        let mut replies = [Value::Nil, Value::Nil, Value::Nil, Value::Nil];
        if let Some(refused) = self.read_replies(&mut replies, deadline)? {
            return Err(refused);
        }
        match replies {
            [Value::Okay, _, Value::Int(n), _] if n > 0 => Ok(n as u64),
            [Value::Nil, _, Value::Int(_), _] => Ok(0),
            [Value::Okay | Value::Nil, _, other, _] | [other, ..] => Err(unexpected(&other).into()),
        }
    }

    /// Reads one reply into each slot, whatever the earlier ones were, so
    /// that the connection stays in step after an error reply. A broken
    /// connection ends it at once (`Err`); otherwise returns the first
    /// error reply, if any (its slot is left as it was).
    fn read_replies(
        &mut self,
        slots: &mut [Value],
        deadline: Instant,
    ) -> Result<Option<Failure>, Failure> {
        let mut refused = None;
        for (at, slot) in slots.iter_mut().enumerate() {
            match self.con.read(deadline) {
                Ok(value) => *slot = value,
                Err(error) if is_reply(&error) => {
                    refused.get_or_insert(Failure {
                        error,
                        at,
                        keep: true,
                    });
                }
                Err(error) => {
                    return Err(Failure {
                        error,
                        at,
                        keep: false,
                    });
                }
            }
        }
        Ok(refused)
    }
}

/// A connection of its own, never pooled, that subscribes to channels and
/// then mostly waits for their messages.
pub(crate) struct Listener {
    con: Conn,
    node: Arc<str>,
    timeout: Duration,
}

impl Listener {
    /// Writes commands (`SUBSCRIBE`, `UNSUBSCRIBE`, `PING`) within the node
    /// timeout.
    pub(crate) fn send(&mut self, packed: &[u8]) -> Result<(), NodeError> {
        let deadline = Instant::now() + self.timeout;
        self.con.write(packed, deadline).map_err(|e| self.error(e))
    }

    /// The next push or reply, if one comes within `wait`. An error reply
    /// (a refused `SUBSCRIBE`) is an `Err` too.
    pub(crate) fn next(&mut self, wait: Duration) -> Result<Option<Value>, NodeError> {
        self.con.read_within(wait).map_err(|e| self.error(e))
    }

    /// The failure of a connection that stopped answering.
    pub(crate) fn timed_out(&self) -> NodeError {
        self.error(crate::conn::timed_out())
    }

    fn error(&self, e: RedisError) -> NodeError {
        NodeError::classify(self.node.clone(), e, false, self.timeout)
    }
}

/// What reading a reply on a pooled connection gave.
pub(crate) enum Received {
    /// An answer, or a failure of this node.
    Done(Result<u64, NodeError>),
    /// The connection was found closed before any reply (the server
    /// restarted since it was last used): try again on a new one.
    Stale,
}

/// One independent Redis master.
pub(crate) struct Node {
    name: Arc<str>,
    db: i64,
    addr: ConnectionAddr,
    /// Resolves the host for each new connection (TCP nodes).
    resolver: Option<Resolver>,
    /// For `rediss://` nodes.
    tls: Option<Tls>,

    /// Sent on every new connection: AUTH and SELECT (the first
    /// `required_names.len()`, which must succeed), then CLIENT SETINFO and
    /// SCRIPT LOAD of the scripts (which may fail).
    handshake: Vec<Vec<u8>>,
    /// The required commands' names, for messages.
    required_names: Vec<&'static str>,
    /// Where in the handshake `INFO server` and `CONFIG GET append*` are.
    identity_at: usize,
    /// What the connections told about the server over time.
    watch: Watch,
    /// Given as a node member (not a server of a Redis Cluster member).
    plain: std::sync::atomic::AtomicBool,
    restart: Arc<Policy>,
    timeout: Duration,
    max_idle: usize,
    idle: Mutex<Vec<Pooled>>,
}

impl Node {
    /// Parses `url` and prepares the node; connects lazily.
    pub(crate) fn open(url: &str, setup: &Setup) -> Result<Node, Error> {
        let (timeout, max_idle) = (setup.timeout, setup.max_idle);
        let (plain_url, tls_mode) = tls_scheme(url);
        #[cfg(not(feature = "tls"))]
        if tls_mode.is_some() {
            return Err(Error::invalid_config(format!(
                "node URL {:?} asks for TLS, which needs redlock-sync's `tls` feature \
                 (features = [\"tls\"] in Cargo.toml)",
                redact(url)
            )));
        }
        if let Err(why) = check_url(url) {
            return Err(Error::invalid_config(format!(
                "node URL {:?}: {why}",
                redact(url)
            )));
        }
        let info = plain_url
            .as_str()
            .into_connection_info()
            .map_err(|source| Error::InvalidConfig {
                reason: format!("cannot read node URL {:?}: {source}", redact(url)),
                source: Some(source),
            })?;
        if !info.addr().is_supported() {
            return Err(Error::invalid_config(format!(
                "node URL {:?} names an address this platform cannot connect to",
                redact(url)
            )));
        }
        let settings = info.redis_settings();
        let db = settings.db();
        let mut handshake = Vec::new();
        let mut required_names = Vec::new();
        match (settings.username(), settings.password()) {
            (Some(user), Some(pw)) => {
                handshake.push(pack(&[b"AUTH", user.as_bytes(), pw.as_bytes()]));
                required_names.push("AUTH");
            }
            (None, Some(pw)) => {
                handshake.push(pack(&[b"AUTH", pw.as_bytes()]));
                required_names.push("AUTH");
            }
            _ => {}
        }
        if db != 0 {
            handshake.push(pack(&[b"SELECT", db.to_string().as_bytes()]));
            required_names.push("SELECT");
        }
        // The server's identity, start and durability (see restart.rs):
        // read on every new connection, never in a lock round.
        let identity_at = handshake.len();
        handshake.push(pack(&[b"INFO", b"server"]));
        handshake.push(pack(&[b"CONFIG", b"GET", b"append*"]));
        handshake.push(pack(&[b"CONFIG", b"GET", b"no-appendfsync-on-rewrite"]));
        // Loading the scripts here saves a NOSCRIPT round trip at first use
        // after a restart, which a multiplexed round could not spare.
        for lua in [&*UNLOCK, &*EXTEND, &*RAISE, &*CLEANUP, &*PERMITS] {
            handshake.push(pack(&[b"SCRIPT", b"LOAD", lua.src.as_bytes()]));
        }
        handshake.push(pack(&[b"CLIENT", b"SETINFO", b"LIB-NAME", b"redlock-sync"]));
        handshake.push(pack(&[
            b"CLIENT",
            b"SETINFO",
            b"LIB-VER",
            env!("CARGO_PKG_VERSION").as_bytes(),
        ]));
        let addr = info.addr().clone();
        let resolver = match &addr {
            ConnectionAddr::Tcp(host, port) => {
                Some(Resolver::new(host, *port, setup.resolve.clone()))
            }
            _ => None,
        };
        let tls = match (tls_mode, &addr) {
            (None, _) => None,
            #[cfg(feature = "tls")]
            (Some(insecure), ConnectionAddr::Tcp(host, _)) => Some(Tls {
                config: setup.tls.config(insecure)?,
                name: crate::tls::server_name(host)?,
            }),
            (Some(_), _) => {
                return Err(Error::invalid_config(format!(
                    "node URL {:?}: TLS needs a TCP address",
                    redact(url)
                )));
            }
        };
        let name: Arc<str> = match (&addr, db) {
            (ConnectionAddr::Unix(path), 0) => format!("unix:{}", path.display()).into(),
            (ConnectionAddr::Unix(path), db) => format!("unix:{}/{db}", path.display()).into(),
            (addr, 0) => addr.to_string().into(),
            (addr, db) => format!("{addr}/{db}").into(),
        };
        Ok(Node {
            name,
            db,
            addr,
            resolver,
            tls,
            handshake,
            required_names,
            identity_at,
            watch: Watch::default(),
            plain: std::sync::atomic::AtomicBool::new(false),
            restart: setup.restart.clone(),
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

    /// The host of a TCP node.
    pub(crate) fn host(&self) -> Option<&str> {
        match &self.addr {
            ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => Some(host),
            _ => None,
        }
    }

    /// The database selected on each connection.
    pub(crate) fn db(&self) -> i64 {
        self.db
    }

    /// Runs `req`: on a pooled connection if there is one, else on a new
    /// one; everything by `deadline`.
    pub(crate) fn run(&self, req: &Request<'_>, deadline: Instant) -> Result<u64, NodeError> {
        match self.send(req, deadline) {
            Some(pooled) => match self.receive(pooled, req, deadline) {
                Received::Done(answer) => answer,
                Received::Stale => self.call(req, deadline),
            },
            None => self.call(req, deadline),
        }
    }

    /// Sends one command and returns its reply (an error reply as `Err`),
    /// by `deadline`: for the control plane (`CLUSTER SLOTS`, `INFO`),
    /// never on the hot path.
    pub(crate) fn query(&self, packed: &[u8], deadline: Instant) -> Result<Value, NodeError> {
        let pooled = self.idle.lock().pop();
        let mut pooled = match pooled {
            Some(pooled) => pooled,
            None => self.connect(deadline)?,
        };
        let reply = pooled
            .con
            .write(packed, deadline)
            .and_then(|()| pooled.con.read(deadline));
        match reply {
            Ok(value) => {
                self.checkin(pooled);
                Ok(value)
            }
            Err(e) if is_reply(&e) => {
                self.checkin(pooled);
                Err(self.error(e, false))
            }
            Err(e) if is_stale(&e) => {
                // Found closed: once more on a new connection.
                let mut pooled = self.connect(deadline)?;
                let value = pooled
                    .con
                    .write(packed, deadline)
                    .and_then(|()| pooled.con.read(deadline))
                    .map_err(|e| self.error(e, false))?;
                self.checkin(pooled);
                Ok(value)
            }
            Err(e) => Err(self.error(e, false)),
        }
    }

    /// Sends several commands at once and reads each one's reply (an error
    /// reply as its `Err`), by `deadline`, on a connection of its own that
    /// goes back to the pool only in step: for the control plane (`check`),
    /// where a command such as `ASKING` must be followed by another on the
    /// same connection.
    pub(crate) fn query_each(
        &self,
        commands: &[Vec<u8>],
        deadline: Instant,
    ) -> Result<Vec<Result<Value, NodeError>>, NodeError> {
        let mut pooled = self.connect(deadline)?;
        pooled
            .con
            .write(&commands.concat(), deadline)
            .map_err(|e| self.error(e, false))?;
        let mut replies = Vec::with_capacity(commands.len());
        for _ in commands {
            match pooled.con.read(deadline) {
                Ok(value) => replies.push(Ok(value)),
                Err(e) if is_reply(&e) => replies.push(Err(self.error(e, false))),
                Err(e) => return Err(self.error(e, false)),
            }
        }
        self.checkin(pooled);
        Ok(replies)
    }

    /// The node timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Writes `req` on a pooled connection. `None` when there is no pooled
    /// connection or it was found broken: then use [`call`](Self::call).
    pub(crate) fn send(&self, req: &Request<'_>, deadline: Instant) -> Option<Pooled> {
        let mut pooled = self.idle.lock().pop()?;
        match pooled.con.write(req.packed, deadline) {
            Ok(()) => Some(pooled),
            Err(_) => {
                // A write fails on a connection the server has closed; the
                // others in the pool are likely closed too.
                self.idle.lock().clear();
                None
            }
        }
    }

    /// Marks the node as given by the user as a plain node member: a
    /// cluster-mode server there is refused, whatever key is asked.
    pub(crate) fn plain_member(&self) {
        self.plain.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether this server is kept out of votes now (see `restart.rs`).
    pub(crate) fn quarantine(&self) -> Option<Quarantine> {
        self.watch.quarantine(&self.restart, Instant::now())
    }

    /// An answer as it counts: none from a cluster-mode server given as a
    /// plain node (whatever key was asked), and, for a request that decides
    /// a holder, none from a server kept out after a restart, whatever it
    /// said (a yes left a key there, so the failure is not settled).
    fn vote(&self, req: &Request<'_>, answer: Result<u64, NodeError>) -> Result<u64, NodeError> {
        if self.plain.load(std::sync::atomic::Ordering::Relaxed) && self.watch.cluster_mode() {
            let mut e = NodeError::cluster(
                self.name.clone(),
                "a Redis Cluster node (in cluster mode), given as a plain node: give the \
                 cluster with Builder::cluster([seed URLs]) or lockrun --cluster"
                    .into(),
                self.timeout,
            );
            // The request ran: a key it set must be cleaned up.
            e.settled = false;
            return Err(e);
        }
        if req.decides
            && answer.is_ok()
            && let Some(q) = self.quarantine()
        {
            return Err(self.quarantined(q));
        }
        answer
    }

    /// The failure of a server kept out after a restart.
    fn quarantined(&self, q: Quarantine) -> NodeError {
        let (seen, why) = if q.witnessed {
            (
                "restarted or replaced (run_id changed)",
                "a restart, or another server behind its address",
            )
        } else {
            ("restarted", "within the restart quarantine")
        };
        let e = RedisError::from((
            redis::ErrorKind::Client,
            "restarted",
            format!(
                "{RESTART_DETAIL_PREFIX}{seen} {:.1}s ago, not voting for {:.1}s ({why})",
                q.up.as_secs_f64(),
                q.left.as_secs_f64()
            ),
        ));
        self.error(e, false)
    }

    /// Reads the reply to `req` written by [`send`](Self::send).
    pub(crate) fn receive(
        &self,
        mut pooled: Pooled,
        req: &Request<'_>,
        deadline: Instant,
    ) -> Received {
        match pooled.finish(req, deadline) {
            Ok(v) => {
                self.checkin(pooled);
                Received::Done(self.vote(req, Ok(v)))
            }
            Err(f) if f.keep => {
                self.checkin(pooled);
                Received::Done(self.vote(req, Err(self.refused(f, req))))
            }
            // Refused with replies left unread: the connection is dropped.
            Err(f) if is_reply(&f.error) => {
                Received::Done(self.vote(req, Err(self.refused(f, req))))
            }
            Err(f) if is_stale(&f.error) => {
                self.idle.lock().clear();
                crate::log!(
                    debug,
                    "redlock_sync::node",
                    "{}: pooled connection found closed; reconnecting",
                    self.name
                );
                Received::Stale
            }
            Err(f) => Received::Done(Err(self.failed(pooled, f.error, req))),
        }
    }

    /// Runs `req` on a new connection, everything by `deadline`.
    pub(crate) fn call(&self, req: &Request<'_>, deadline: Instant) -> Result<u64, NodeError> {
        let mut pooled = self.connect(deadline)?;
        let result = match pooled.con.write(req.packed, deadline) {
            Ok(()) => pooled.finish(req, deadline),
            Err(e) => Err(e.into()),
        };
        match result {
            Ok(v) => {
                self.checkin(pooled);
                self.vote(req, Ok(v))
            }
            Err(f) if f.keep => {
                self.checkin(pooled);
                self.vote(req, Err(self.refused(f, req)))
            }
            // Refused with replies left unread: the connection is dropped.
            Err(f) if is_reply(&f.error) => self.vote(req, Err(self.refused(f, req))),
            Err(f) => Err(self.failed(pooled, f.error, req)),
        }
    }

    /// The error for an error reply, naming the command it answered.
    fn refused(&self, f: Failure, req: &Request<'_>) -> NodeError {
        self.error(f.error, false).about((req.describe)(f.at))
    }

    /// The error for a request that got no complete reply. The connection
    /// is dropped, never reused: a late reply must never be read as the
    /// answer to a later command. If the request timed out, its
    /// `on_timeout` follow-up is written on the connection first, so that
    /// the node executes it right after a late execution of the request.
    fn failed(&self, mut pooled: Pooled, e: RedisError, req: &Request<'_>) -> NodeError {
        let mut error = self.error(e, false);
        if let (true, Some(follow_up)) = (error.redis_error().is_timeout(), req.on_timeout) {
            // Sent as the request was: a request that followed an `ASK`
            // runs on the importing node only after `ASKING`, and so does
            // its clean-up.
            let follow_up = if req.asking {
                [&pack(&[b"ASKING"])[..], &follow_up()].concat()
            } else {
                follow_up()
            };
            error.settled = pooled.con.write_now(&follow_up).is_ok();
        }
        error
    }

    /// Opens a connection and runs the handshake, all by `deadline`.
    fn connect(&self, deadline: Instant) -> Result<Pooled, NodeError> {
        crate::log!(
            debug,
            "redlock_sync::node",
            "{}: opening a connection",
            self.name
        );
        let mut pooled = Conn::open(
            &self.addr,
            self.resolver.as_ref(),
            self.tls.as_ref(),
            deadline,
            self.timeout,
        )
        .map(|con| Pooled { con })
        .map_err(|e| self.error(e, true))?;
        self.handshake(&mut pooled, deadline).map_err(|f| {
            let e = self.error(f.error, true);
            match self.required_names.get(f.at) {
                Some(name) if is_reply(e.redis_error()) => e.about((*name).to_owned()),
                _ => e,
            }
        })?;
        Ok(pooled)
    }

    /// Sends the handshake at once, then reads each reply by `deadline`.
    /// AUTH or SELECT failing fails the connection; the rest may fail
    /// (CLIENT SETINFO on old servers, SCRIPT LOAD while loading or
    /// refused by an ACL) without harm.
    fn handshake(&self, pooled: &mut Pooled, deadline: Instant) -> Result<(), Failure> {
        pooled.con.write(&self.handshake.concat(), deadline)?;
        let mut replies = vec![Value::Nil; self.handshake.len()];
        // The required commands come first: the first error reply is
        // theirs if any of theirs failed.
        match pooled.read_replies(&mut replies, deadline)? {
            Some(refused) if refused.at < self.required_names.len() => return Err(refused),
            _ => {}
        }
        // A refused command leaves its slot Nil: read as unknown.
        let at = |i: usize| Some(&replies[self.identity_at + i]).filter(|v| **v != Value::Nil);
        let identity = Identity::read(at(0), at(1), at(2));
        match self.watch.observe(&identity, Instant::now()) {
            Seen::Same => {}
            Seen::Restarted => crate::log!(
                warn,
                "redlock_sync::restart",
                "{}: restarted, or another server behind its address (new run_id){}",
                self.name,
                "; it votes again once the longest TTL (or the restart quarantine) has \
                 passed since the change was seen, whatever its uptime or persistence: \
                 the server now behind the address may lack the old one's keys"
            ),
            Seen::Unreadable => crate::log!(
                warn,
                "redlock_sync::restart",
                "{}: INFO refused (give the user +info): restarts of this server cannot be \
                 detected, and it always votes",
                self.name
            ),
        }
        Ok(())
    }

    /// Opens a connection for listening (see [`Listener`]), handshake
    /// included, by `deadline`.
    pub(crate) fn listener(&self, deadline: Instant) -> Result<Listener, NodeError> {
        let pooled = self.connect(deadline)?;
        Ok(Listener {
            con: pooled.con,
            node: self.name.clone(),
            timeout: self.timeout,
        })
    }

    /// Returns a healthy connection to the pool, its socket timeouts reset
    /// to their resting value.
    fn checkin(&self, mut pooled: Pooled) {
        if pooled.con.rest().is_err() {
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

fn is_noscript(e: &RedisError) -> bool {
    e.code() == Some("NOSCRIPT")
}

/// The connection was found closed by the peer: nothing was answered.
fn is_stale(e: &RedisError) -> bool {
    e.is_connection_dropped() && !e.is_timeout()
}

fn unexpected(value: &Value) -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected reply",
        format!("{value:?}"),
    ))
}

/// The schemes a node URL may have.
const SCHEMES: [&str; 7] = [
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "unix",
    "redis+unix",
    "valkey+unix",
];

/// A node URL split around its authority:
/// `scheme://[userinfo@]host_port[rest]`, `rest` being the path, query
/// and fragment (what starts with `/`, `?` or `#`).
pub(crate) struct UrlParts<'a> {
    pub(crate) scheme: &'a str,
    /// Everything before the last `@` that comes before the first `/`: a
    /// password holding `?` or `#` stays whole, so that it is never shown.
    pub(crate) userinfo: Option<&'a str>,
    pub(crate) host_port: &'a str,
    pub(crate) rest: &'a str,
}

impl UrlParts<'_> {
    /// The fragment (after `#`), if any.
    pub(crate) fn fragment(&self) -> Option<&str> {
        self.rest.split_once('#').map(|(_, f)| f)
    }
}

/// Splits a node URL (see [`UrlParts`]); `None` without `://`.
pub(crate) fn url_parts(url: &str) -> Option<UrlParts<'_>> {
    let (scheme, rest) = url.split_once("://")?;
    let before_path = rest.find('/').unwrap_or(rest.len());
    let (userinfo, tail) = match rest[..before_path].rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let end = tail.find(['/', '?', '#']).unwrap_or(tail.len());
    Some(UrlParts {
        scheme,
        userinfo,
        host_port: &tail[..end],
        rest: &tail[end..],
    })
}

/// Says what is wrong with a node URL's form, before the `redis` crate
/// reads it: no scheme, an unknown one, no host, a bad port.
fn check_url(url: &str) -> Result<(), String> {
    let Some(parts) = url_parts(url) else {
        return Err(if url.starts_with('/') {
            format!("no scheme: write unix://{url} for a socket path")
        } else {
            format!("no scheme: write redis://{url} (or rediss:// for TLS)")
        });
    };
    let scheme = parts.scheme;
    if !SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()) {
        return Err(format!(
            "unknown scheme {scheme:?}: use redis://, rediss://, valkey://, valkeys:// or unix://"
        ));
    }
    if scheme.contains("unix") {
        return Ok(());
    }
    let host_port = parts.host_port;
    let (host, port) = match host_port.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, tail)) => (host, tail.strip_prefix(':')),
            None => return Err("an IPv6 address needs its closing ']'".into()),
        },
        None => match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        },
    };
    if host.is_empty() {
        return Err("no host".into());
    }
    match port {
        Some(port) if !port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Err(format!("bad port {port:?}: a number from 1 to 65535"))
        }
        _ => Ok(()),
    }
}

/// The URL with any credentials replaced by `***`, for error messages.
pub(crate) fn redact(url: &str) -> String {
    match url_parts(url) {
        Some(UrlParts {
            scheme,
            userinfo: Some(_),
            host_port,
            rest,
        }) => format!("{scheme}://***@{host_port}{rest}"),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_mistakes_are_named() {
        let why = |url| check_url(url).unwrap_err();
        assert!(why("127.0.0.1:7000").contains("write redis://127.0.0.1:7000"));
        assert!(why("/tmp/r.sock").contains("unix:///tmp/r.sock"));
        assert!(why("http://h:1").contains("unknown scheme \"http\""));
        assert!(why("redis://h:70000").contains("bad port \"70000\""));
        assert!(why("redis://h:x1").contains("bad port \"x1\""));
        assert!(why("redis://h:").contains("bad port \"\""));
        assert!(why("redis://:pw@").contains("no host"));
        assert!(why("redis://[::1").contains("']'"));
        for ok in [
            "redis://h",
            "redis://u:p@h:6379/2",
            "rediss://h:6380#insecure",
            "redis://[::1]:7000",
            "redis://[::1]",
            "unix:///tmp/r.sock",
            "redis+unix:///tmp/r.sock",
            "valkey://h:1",
        ] {
            assert_eq!(check_url(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn redact_hides_credentials_only() {
        assert_eq!(
            redact("redis://user:secret@host:6379/2"),
            "redis://***@host:6379/2"
        );
        assert_eq!(redact("redis://:pw@host"), "redis://***@host");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact("not a url"), "not a url");
        // A password holding `#` or `?` is hidden whole.
        assert_eq!(redact("redis://:p#w?x@host/1"), "redis://***@host/1");
        assert_eq!(
            redact("rediss://u:p@h:6380#insecure"),
            "rediss://***@h:6380#insecure"
        );
    }

    fn setup() -> Setup {
        Setup {
            timeout: Duration::from_millis(50),
            max_idle: 1,
            resolve: Arc::new(crate::resolve::system),
            #[cfg(feature = "tls")]
            tls: Default::default(),
            restart: Default::default(),
        }
    }

    #[test]
    fn tls_urls_are_read_as_plain_ones_with_a_flag() {
        assert_eq!(tls_scheme("redis://h:1"), ("redis://h:1".into(), None));
        assert_eq!(
            tls_scheme("rediss://h:1/2"),
            ("redis://h:1/2".into(), Some(false))
        );
        assert_eq!(
            tls_scheme("rediss://u:p@h:1#insecure"),
            ("redis://u:p@h:1".into(), Some(true))
        );
        assert_eq!(
            tls_scheme("valkeys://h"),
            ("valkey://h".into(), Some(false))
        );
        assert_eq!(tls_scheme("unix:///tmp/s"), ("unix:///tmp/s".into(), None));
    }

    #[test]
    fn names_carry_address_and_database_but_no_password() {
        let n = Node::open("redis://:pw@127.0.0.1:7000/3", &setup()).unwrap();
        assert_eq!(n.name(), "127.0.0.1:7000/3");
        let n = Node::open("redis://localhost:7001", &setup()).unwrap();
        assert_eq!(n.name(), "localhost:7001");
        let n = Node::open("unix:///tmp/r.sock", &setup()).unwrap();
        assert_eq!(n.name(), "unix:/tmp/r.sock");
        assert_eq!(n.idle_len(), 0);
    }

    #[test]
    fn handshake_authenticates_and_selects() {
        let n = Node::open("redis://al:pw@127.0.0.1:7000/3", &setup()).unwrap();
        assert_eq!(
            n.handshake[0],
            b"*3\r\n$4\r\nAUTH\r\n$2\r\nal\r\n$2\r\npw\r\n"
        );
        assert_eq!(n.handshake[1], b"*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n");
        assert_eq!(n.required_names, ["AUTH", "SELECT"]);
        assert_eq!(n.handshake.len(), 12);
        let n = Node::open("redis://127.0.0.1:7000", &setup()).unwrap();
        assert!(n.required_names.is_empty());
        assert_eq!(n.handshake.len(), 10);
    }

    #[test]
    fn pack_is_resp() {
        assert_eq!(
            pack(&[b"SET", b"k", b"", b"NX"]),
            b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n$2\r\nNX\r\n"
        );
    }
}
