//! The Lua scripts every shape runs, each built once: its source (a file
//! under `src/scripts/`, named for the shape it serves, whose header
//! documents its `KEYS`, `ARGV` and answers) and its SHA1, so that
//! rounds send `EVALSHA` and fall back to `EVAL` on `NOSCRIPT`. They live
//! here, below the shapes, because the connection handshake loads some
//! of them and `check` tries them all.

use std::sync::LazyLock;

use crate::members::conn::pack;

/// A Lua script: its name for messages, its source, and its SHA1 computed
/// once by `redis::Script`.
pub(crate) struct Lua {
    name: &'static str,
    /// The source sent: the prelude, then the script's own file.
    src: String,
    /// The script's own file, whose header documents it.
    #[cfg_attr(not(test), allow(dead_code))]
    own: &'static str,
    sha: String,
}

impl Lua {
    /// The script of the file `own`, after the functions of `prelude`
    /// (shared by several scripts; empty for most).
    fn new(name: &'static str, prelude: &'static str, own: &'static str) -> Lua {
        let src = format!("{prelude}{own}");
        Lua {
            name,
            sha: redis::Script::new(&src).get_hash().to_owned(),
            src,
            own,
        }
    }

    /// The source, as `SCRIPT LOAD` takes it.
    pub(crate) fn source(&self) -> &[u8] {
        self.src.as_bytes()
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

/// Declares each script: its static, its name in messages, its file.
macro_rules! scripts {
    ($($(#[$doc:meta])* $name:ident, $shown:literal, $file:literal $(after $($prelude:literal)+)?;)+) => {
        $(
            $(#[$doc])*
            pub(crate) static $name: LazyLock<Lua> = LazyLock::new(|| {
                Lua::new(
                    $shown,
                    concat!("", $($(include_str!(concat!("../scripts/", $prelude)), "\n"),+)?),
                    include_str!(concat!("../scripts/", $file)),
                )
            });
        )+
        /// Every script, for tests.
        #[cfg(test)]
        pub(crate) fn all() -> Vec<&'static Lua> {
            vec![$(&*$name),+]
        }
    };
}

scripts! {
    /// Release and clean-up of a lock or permit (see `lock.rs`).
    UNLOCK, "unlock", "lock/unlock.lua";
    /// A fair manager's release of a lock, handing it to the first fair
    /// waiter queued (see `fair.rs`).
    HANDOFF, "release", "fair/release.lua" after "fair/hand.lua";
    /// A queued fair waiter's attempt.
    CLAIM_QUEUED, "claim-queued", "fair/claim.lua" after "fair/hand.lua" "lock/counter.lua";
    /// A fair waiter takes its place in the queue.
    JOIN, "join-queue", "fair/join.lua";
    /// A fair waiter gives up its place (never a token).
    LEAVE, "leave-queue", "fair/leave.lua" after "fair/hand.lua";
    /// The clean-up of a queued fair waiter's failed attempt: puts back
    /// the reservation it took.
    UNCLAIM, "unclaim", "fair/unclaim.lua";
    /// Extend of a lock or permit.
    EXTEND, "extend", "lock/extend.lua";
    /// Raises fencing counters to a token (locks, permits, sets).
    RAISE, "raise", "lock/raise.lua";
    /// Raises a fencing counter's expiry, never lowers it: the
    /// acquisition's `PEXPIRE ... GT` on servers before Redis 7.0.
    KEEP, "keep-counter", "lock/keep.lua";
    /// A semaphore's count check (see `semaphore.rs`).
    PERMITS, "permit-count", "semaphore/permits.lua";
    /// A semaphore's survey of its slots.
    FREE, "free-permit", "semaphore/free.lua";
    /// Acquisition of a set (see `set.rs`).
    LOCK_SET, "lock-set", "set/lock.lua" after "lock/counter.lua";
    /// Release and clean-up of a set.
    UNLOCK_SET, "unlock-set", "set/unlock.lua";
    /// Extend of a set.
    EXTEND_SET, "extend-set", "set/extend.lua";
    /// A writer waiting behind readers (see `rwlock.rs`).
    WRITER_WAITS, "writer-waits", "rwlock/writer_waits.lua";
    /// Acquisition of a read lock.
    READ, "read", "rwlock/read.lua";
    /// Release and clean-up of a read lock.
    UNREAD, "unread", "rwlock/unread.lua";
    /// Extend of a read lock.
    EXTEND_READ, "extend-read", "rwlock/extend_read.lua";
    /// A leader's record: its term and value (see `election.rs`).
    CLAIM, "claim", "election/claim.lua";
    /// Renewal of a leadership.
    EXTEND_LEADER, "extend-leader", "election/extend.lua";
    /// Resignation of a leader, and clean-up of a failed campaign.
    RESIGN, "resign", "election/resign.lua";
    /// A member's view of an election, for `Election::leader`.
    READ_LEADER, "read-leader", "election/read.lua";
    /// A member's view of a lock, for `LockManager::inspect`.
    INSPECT, "inspect", "operator/inspect.lua";
    /// An operator's removal of a lock (`LockManager::force_unlock`).
    FORCE, "force-unlock", "operator/force.lua" after "lock/counter.lua";
}

/// An answer of the set script that names the first busy key: this bit,
/// plus the key's index (see `Reply::Count`).
pub(crate) const BUSY: u64 = 1 << 62;

/// An acquisition answer of a member that stores another permit count for
/// the semaphore: this bit, plus the count stored there (the acquisition
/// behind it may have written, so it is cleaned up as a yes would be).
pub(crate) const MISMATCH: u64 = 1 << 61;

/// A lock acquisition's no, where the key may hold a read-write lock's
/// readers: it holds their mark, or the server could not say (`SET NX`
/// without `GET`). A waiting writer then asks readers to queue behind it.
pub(crate) const MAYBE_READERS: u64 = 1 << 60;

/// The answer of a node whose key is gone (expired or deleted), to an
/// unlock or extend: the scripts' -1.
pub(crate) const GONE: u64 = u64::MAX;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_documents_its_keys_and_arguments_and_is_distinct() {
        let all = all();
        for (i, lua) in all.iter().enumerate() {
            let header: Vec<&str> = lua
                .own
                .lines()
                .take_while(|l| l.starts_with("--"))
                .collect();
            assert!(
                header.iter().any(|l| l.starts_with("-- KEYS")),
                "{}",
                lua.name
            );
            assert!(
                header.iter().any(|l| l.starts_with("-- ARGV")),
                "{}",
                lua.name
            );
            assert!(header.iter().any(|l| l.contains("nswer")), "{}", lua.name);
            assert_eq!(lua.sha.len(), 40);
            for other in &all[i + 1..] {
                assert_ne!(lua.sha, other.sha, "{} and {}", lua.name, other.name);
            }
        }
    }
}
