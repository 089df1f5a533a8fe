//! [`LockGuard`]: a held lock, released when dropped.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::manager::Shared;
use crate::quorum;

/// Random bytes in a token: 128 bits.
const TOKEN_BYTES: usize = 16;

/// A token: the random bytes, hex encoded so that it reads well in
/// `redis-cli`.
pub(crate) type Token = [u8; 2 * TOKEN_BYTES];

/// Draws a fresh token from the operating system's generator.
pub(crate) fn new_token() -> Result<Token> {
    let mut raw = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut raw).map_err(|source| Error::Entropy { source })?;
    let mut token = [0u8; 2 * TOKEN_BYTES];
    for (pair, byte) in token.chunks_exact_mut(2).zip(raw) {
        pair[0] = HEX[usize::from(byte >> 4)];
        pair[1] = HEX[usize::from(byte & 0xf)];
    }
    Ok(token)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A lock held on a quorum of nodes.
///
/// Dropping the guard releases the lock on every node, best effort and
/// within the node timeout; [`release`](Self::release) does the same and
/// reports how it went. If the holder dies, the keys expire after the TTL.
///
/// The lock protects you only while [`validity`](Self::validity) is above
/// zero: check [`is_valid`](Self::is_valid) before acting on shared state,
/// and [`extend`](Self::extend) for long work.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    shared: Arc<Shared>,
    resource: Box<[u8]>,
    token: Token,
    valid_until: Instant,
    /// Cleared by `release`, so that `Drop` has nothing left to do.
    armed: bool,
}

impl LockGuard {
    pub(crate) fn new(
        shared: Arc<Shared>,
        resource: &[u8],
        token: Token,
        valid_until: Instant,
    ) -> LockGuard {
        LockGuard {
            shared,
            resource: resource.into(),
            token,
            valid_until,
            armed: true,
        }
    }

    /// The locked resource (the Redis key).
    pub fn resource(&self) -> &[u8] {
        &self.resource
    }

    /// The random token stored as the key's value: 32 lowercase hex
    /// characters, new for every acquisition.
    pub fn token(&self) -> &[u8] {
        &self.token
    }

    /// How long the lock is still safe to rely on, measured on this
    /// process's monotonic clock; zero once it has run out.
    pub fn validity(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// Whether any validity is left.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.valid_until
    }

    /// Extends the lock so that it lasts `ttl` from now.
    ///
    /// Sets the expiry of every node's key that still holds our token. The
    /// extension counts only if a quorum confirms it before the current
    /// validity runs out; the validity is then `ttl` less the round's
    /// duration and the drift allowance. On error the validity is left as
    /// it was.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the validity had run out (before or during
    /// the round) or a quorum of nodes no longer holds our token: the
    /// lock is lost and nothing was extended on the new owner's behalf.
    /// [`Error::NoQuorum`] when too many nodes failed; the lock may still
    /// be held until its current validity ends. [`Error::NoValidity`]
    /// when the round took the whole new TTL. [`Error::InvalidArgument`]
    /// for a TTL that `lock` would reject.
    pub fn extend(&mut self, ttl: Duration) -> Result<()> {
        let shared = &*self.shared;
        let ttl_ms = shared.check_ttl(ttl)?;
        let ttl = Duration::from_millis(ttl_ms);
        let start = Instant::now();
        if start >= self.valid_until {
            return Err(self.not_held());
        }
        let resource = &*self.resource;
        let tally = shared.extend(resource, &self.token, ttl_ms);
        let end = Instant::now();
        if end >= self.valid_until {
            return Err(self.not_held());
        }
        if !tally.reached() {
            return Err(tally.held_error(resource));
        }
        let elapsed = end - start;
        match quorum::validity(ttl, elapsed, shared.drift_factor)
            .and_then(|validity| start.checked_add(elapsed + validity))
        {
            Some(valid_until) => {
                self.valid_until = valid_until;
                Ok(())
            }
            None => Err(Error::NoValidity {
                resource: quorum::display(resource),
                elapsed,
                ttl,
            }),
        }
    }

    /// Releases the lock on every node and reports the outcome; `Drop`
    /// does the same silently.
    ///
    /// Each node deletes the key only if it still holds our token, so a
    /// release never removes another owner's lock.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when a quorum of nodes no longer held our token
    /// (the lock had expired, and may have been taken by someone else).
    /// [`Error::NoQuorum`] when too many nodes failed: keys left behind
    /// expire with their TTL.
    pub fn release(mut self) -> Result<()> {
        self.armed = false;
        let tally = self.shared.unlock(None, &self.resource, &self.token);
        if tally.reached() {
            Ok(())
        } else {
            Err(tally.held_error(&self.resource))
        }
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            resource: quorum::display(&self.resource),
            lost_on: 0,
            nodes: self.shared.nodes.len(),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.armed {
            self.armed = false;
            // Best effort: every node deletes the key if it is still ours;
            // failures are left to the key's expiry.
            let _ = self.shared.unlock(None, &self.resource, &self.token);
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("resource", &String::from_utf8_lossy(&self.resource))
            .field("token", &String::from_utf8_lossy(&self.token))
            .field("validity", &self.validity())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_hex_and_distinct() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_ne!(a, b);
        for t in [a, b] {
            assert!(
                t.iter()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
            );
        }
    }
}
