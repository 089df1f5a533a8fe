//! Fenced writes: the storage's half of [fencing tokens](crate#fencing-tokens),
//! for data kept in Redis.
//!
//! A holder can lose its lock and not know it (a pause past its validity:
//! GC, swap, `SIGSTOP`), then wake and write over what the next holder
//! wrote. No lock can stop that write; the storage can, if it refuses a
//! token lower than one it has already seen. A [`Fence`] does that on a
//! Redis connection the application already has (any Redis: one of the
//! lock's nodes, or the one that holds the data):
//!
//! ```no_run
//! use std::time::Duration;
//! use redlock_sync::{LockManager, fence::Fence};
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let dlm = LockManager::new(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])?;
//!     let mut store = redis::Client::open("redis://10.0.0.9")?.get_connection()?;
//!     let fence = Fence::new("jobs/report");
//!     let guard = dlm.lock("jobs/report", Duration::from_secs(10))?;
//!     let token = guard.fencing_token().expect("fencing is on by default");
//!     // ... the work, which may pause past the lock's validity ...
//!     match fence.set(&mut store, "report:latest", b"the report", token) {
//!         Ok(()) => {}
//!         Err(e) if e.is_stale() => eprintln!("a later holder wrote first: {e}"),
//!         Err(e) => return Err(e.into()),
//!     }
//!     Ok(())
//! }
//! ```
//!
//! **How.** The fence of a resource `R` is one key on the storage's Redis,
//! `R` followed by `:redlock-seen` (in `R`'s Redis Cluster slot, as its
//! fencing counter; [`Fence::seen_key`]): the highest token a write
//! through it carried. [`Fence::set`] is one script: it writes the value
//! only when the caller's token is at least that highest (the same holder
//! may write many times), and then notes the token; otherwise it writes
//! nothing and says which token was seen ([`FenceError::Stale`]). Compare
//! and write are one step on the server, so no stale write slips between
//! them.
//!
//! **Why it is safe.** Tokens grow with each holder (see the manual's
//! "When tokens stay monotonic"): once a later holder's write went through
//! a fence, the fence holds a token above every earlier holder's, and
//! refuses their writes for ever after. A stale holder whose write comes
//! *before* any later holder's goes through: it held the lock when it took
//! the token, and nobody newer has written; the later holder's write then
//! comes after it, as it would have had the stale one been quick. It also
//! lets through a late write of a holder whose token is the highest so far
//! (its lock expired, nobody newer wrote yet): fencing orders writes by
//! holders, it does not stop a lone holder whose lock lapsed. Pair it with
//! [`ensure_held`](crate::Guard::ensure_held) before the work, which fails
//! closed on what the client knows.
//!
//! **Model checked.** The project's model checker (TESTING.md in the
//! repository, "Model checking") runs the lock with this script's rule
//! at a store: two clients of two acquisitions, each holder writing once
//! with its token, the write held in the network until delivered in any
//! order, after its writer's release or validity too; in every schedule of
//! 8 steps (a million states) the store never took an earlier holder's
//! write after a later holder's. With the comparison off it does in 7 (a
//! write held back past the next holder's). The script's model is tied to
//! this Lua by a differential test on real servers.
//!
//! **What it does not protect.** Only writes through the fence are
//! checked: another writer of the same data key that passes no token (a
//! plain `SET`, another program) is not stopped, and is not seen. The
//! seen key never expires: deleting it (or losing it, with a Redis that
//! restarts empty) lets a stale token through once more, until a newer
//! write sets it again. Keep the storage durable if that matters (an
//! append-only file). On a Redis Cluster the data key must be in the
//! seen key's slot (a script touches one slot): give the resource a hash
//! tag and the data keys the same tag (resource `{job:42}`, data key
//! `{job:42}:report`); otherwise the server answers `CROSSSLOT`
//! ([`FenceError::Redis`]).
//!
//! **Which `redis`.** [`Fence::set`] and [`Fence::highest`] take a
//! connection of the [`redis`](https://docs.rs/redis/1) crate, version 1
//! (anything that implements its [`ConnectionLike`] trait). For a plain
//! `redis::Connection`, use the crate through this module's re-export,
//! [`fence::redis`](redis), and the versions always match; it has only
//! the features this library needs (`script`). For a pooled or cluster
//! connection, add `redis` yourself with the same major version and the
//! features you need (`cargo add redis@1 --features cluster`, or
//! `redis = { version = "1", features = ["cluster"] }`). A connection
//! of another major version (`redis = "0.23"`) does not implement this
//! trait: the compiler then says `the trait bound … ConnectionLike is not
//! satisfied` and that several versions of `redis` are in the build.
//!
//! ```no_run
//! // No `redis` line needed in Cargo.toml: the re-export is enough.
//! use redlock_sync::fence::{Fence, redis};
//!
//! fn record(token: u64) -> Result<(), Box<dyn std::error::Error>> {
//!     let client = redis::Client::open("redis://127.0.0.1:7101")?;
//!     let mut con = client.get_connection()?;
//!     Fence::new("jobs/report").set(&mut con, "report:latest", b"done", token)?;
//!     Ok(())
//! }
//! ```
//!
//! For a SQL database, the same rule is a condition on the update: see the
//! manual's "Fencing tokens".

use std::sync::OnceLock;

/// The [`redis`](https://docs.rs/redis/1) crate, version 1, whose
/// connections [`Fence`]'s methods take: use it from here (`use
/// redlock_sync::fence::redis;`) so that its version is this library's.
pub use redis;

use redis::ConnectionLike;

use crate::base::keys::seen_key;

/// The script of [`Fence::set`], built once (its SHA-1 with it): sent as
/// `EVALSHA`, and loaded again on `NOSCRIPT`.
fn script() -> &'static redis::Script {
    static SCRIPT: OnceLock<redis::Script> = OnceLock::new();
    SCRIPT.get_or_init(|| redis::Script::new(include_str!("../scripts/fence/set.lua")))
}

/// The fence of one resource's writes on the storage's Redis (see the
/// [module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fence {
    resource: String,
    seen: Vec<u8>,
}

impl Fence {
    /// The fence of `resource` (the name its lock is taken under), kept at
    /// [`seen_key`](Self::seen_key).
    pub fn new(resource: impl Into<String>) -> Fence {
        let resource = resource.into();
        let seen = seen_key(resource.as_bytes());
        Fence { resource, seen }
    }

    /// The resource it fences.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The key that holds the highest token seen: the resource's name
    /// followed by `:redlock-seen`, in its Redis Cluster slot
    /// (`jobs/report:redlock-seen{1457}`, or `{job:42}:redlock-seen` for a
    /// name with a hash tag).
    pub fn seen_key(&self) -> &[u8] {
        &self.seen
    }

    /// Sets `key` to `value`, if `token` is at least the highest token
    /// seen for the resource, and notes `token` as seen; one atomic step
    /// on the server (a script, sent as `EVALSHA`). Like `SET`, it clears
    /// any expiry the data key had. Tokens are compared as decimal
    /// numbers, exactly, whatever their size.
    ///
    /// # Errors
    ///
    /// [`FenceError::Stale`] when a higher token was seen (nothing was
    /// written: a later holder wrote, so the caller's lock is gone);
    /// [`FenceError::NotAToken`] when the seen key holds something else;
    /// [`FenceError::Redis`] when the server or the connection failed (or
    /// refused the script: `CROSSSLOT`, an ACL rule); it may have written
    /// then.
    pub fn set<C: ConnectionLike>(
        &self,
        con: &mut C,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        token: u64,
    ) -> Result<(), FenceError> {
        let key = key.as_ref();
        let (code, seen): (i64, Vec<u8>) = script()
            .key(&self.seen)
            .key(key)
            .arg(token)
            .arg(value.as_ref())
            .invoke(con)
            .map_err(|e| self.failed(e))?;
        match code {
            1 => Ok(()),
            0 => match parse_token(&seen) {
                Some(highest) => Err(FenceError::Stale {
                    resource: self.resource.clone(),
                    key: String::from_utf8_lossy(key).into_owned(),
                    token,
                    highest,
                }),
                None => Err(self.not_a_token(&seen)),
            },
            -1 => Err(self.not_a_token(&seen)),
            other => Err(FenceError::Redis {
                resource: self.resource.clone(),
                source: format!("the fence script answered {other}, not 1, 0 or -1").into(),
            }),
        }
    }

    /// The highest token seen for the resource, if any (a plain `GET` of
    /// the seen key).
    ///
    /// # Errors
    ///
    /// [`FenceError::NotAToken`] when the seen key holds something else;
    /// [`FenceError::Redis`] when the server or the connection failed.
    pub fn highest<C: ConnectionLike>(&self, con: &mut C) -> Result<Option<u64>, FenceError> {
        let seen: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&self.seen)
            .query(con)
            .map_err(|e| self.failed(e))?;
        seen.map(|s| parse_token(&s).ok_or_else(|| self.not_a_token(&s)))
            .transpose()
    }

    fn failed(&self, e: redis::RedisError) -> FenceError {
        FenceError::Redis {
            resource: self.resource.clone(),
            source: Box::new(e),
        }
    }

    fn not_a_token(&self, found: &[u8]) -> FenceError {
        FenceError::NotAToken {
            key: String::from_utf8_lossy(&self.seen).into_owned(),
            found: String::from_utf8_lossy(found).into_owned(),
        }
    }
}

/// A token as the seen key holds it: decimal digits, nothing else.
fn parse_token(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

/// Why a fenced write did not happen (see [`Fence::set`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// A higher token was seen for the resource: a later holder wrote, so
    /// the lock this token came from is gone. Nothing was written.
    #[error(
        "write to {key:?} refused: fencing token {token} of {resource:?} is stale \
         (token {highest} was seen)"
    )]
    Stale {
        /// The resource fenced.
        resource: String,
        /// The data key the write was for.
        key: String,
        /// The caller's token.
        token: u64,
        /// The highest token seen.
        highest: u64,
    },
    /// The seen key holds something other than a token (written by hand,
    /// or by another program): nothing was written.
    #[error("the fence key {key:?} holds {found:?}, not a fencing token")]
    NotAToken {
        /// The seen key.
        key: String,
        /// What it holds (lossy UTF-8).
        found: String,
    },
    /// The server or the connection failed, or refused the script
    /// (`CROSSSLOT`, `NOPERM`); the write may have happened.
    #[error("fenced write of {resource:?} failed: {source}")]
    Redis {
        /// The resource fenced.
        resource: String,
        /// What failed.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl FenceError {
    /// Whether a later holder's token was seen ([`FenceError::Stale`]):
    /// the caller's lock is gone, and its work should stop.
    pub fn is_stale(&self) -> bool {
        matches!(self, FenceError::Stale { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_decimal_digits_only() {
        assert_eq!(
            parse_token(b"1795000000000001"),
            Some(1_795_000_000_000_001)
        );
        assert_eq!(parse_token(b"0"), Some(0));
        for bad in [
            &b""[..],
            b"-1",
            b"1e3",
            b" 12",
            b"12 ",
            b"x",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_token(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_seen_key_is_reserved_and_in_the_resources_slot() {
        let fence = Fence::new("{job:42}");
        assert_eq!(fence.seen_key(), b"{job:42}:redlock-seen");
        assert!(crate::base::keys::check_resource(fence.seen_key()).is_err());
        let plain = Fence::new("jobs/report");
        assert!(plain.seen_key().starts_with(b"jobs/report:redlock-seen{"));
    }
}
