//! The read-write lock's room: [`RwLock`], its read shape and scripts,
//! and the waiting writer. Its safety argument is on [`RwLock`].

use std::sync::Arc;
use std::time::Duration;

use crate::base::error::Result;
use crate::base::keys::{self, readers_key, release_channel, writer_key};
use crate::engine::guard::{LockGuard, ReadGuard};
use crate::engine::pipeline::{
    DECIDE, Engine, NAMING, Names, RELEASE, Removal, Shape, Vote, announced_on,
};
use crate::engine::quorum::Tally;
use crate::engine::single::{UNLOCK, give_holders};
use crate::engine::stage::{self, Budget, Grant, WaitOn};
use crate::members::request::Said;
use crate::members::script::scripts;
use crate::shapes::manager::{LockManager, Wait, waiting_family};

scripts! {
    /// Acquisition of a read lock.
    READ, "read", "rwlock/read.lua",
        keys ["key", "readers", "writer"], args ["token", "ttl"];
    /// Release and clean-up of a read lock.
    UNREAD, "unread", "rwlock/unread.lua",
        keys ["key", "readers"], args ["token", "publish?", "message?", "channel?"];
    /// Extend of a read lock.
    EXTEND_READ, "extend-read", "rwlock/extend_read.lua" after "lock/expiry.lua",
        keys ["key", "readers"], args ["token", "ttl"];
    /// A writer waiting behind readers: new readers queue behind it.
    WRITER_WAITS, "writer-waits", "rwlock/writer_waits.lua",
        keys ["key", "writer"], args ["token", "ttl"];
}

/// A read-write lock over the same members as the lock, made by
/// [`LockManager::rwlock`]. Many readers share it ([`ReadGuard`]); a
/// writer excludes readers and writers ([`LockGuard`]).
///
/// # Design: one namespace with the lock
///
/// The write side of `rwlock(name)` *is* the ordinary lock on `name`:
/// [`RwLock::write`] is [`LockManager::lock`], the key is `name` holding
/// the writer's token, taken with `SET NX PX`. So `lock(name)` and
/// `write` exclude each other, and other Redlock clients that lock `name`
/// (node-redlock, redsync) exclude writers and readers too.
///
/// Readers are kept beside the key, in its hash slot: the sorted set
/// `name:redlock-readers` holds each reader's token scored by its expiry
/// (in ms of the server's clock). While any reader holds, the key `name`
/// holds the mark `redlock:readers` (no token), with an expiry at least
/// that of the longest reader; so a writer's `SET NX` fails until every
/// reader is gone or expired. A reader is taken with one script per
/// member: refused while the key holds anything but the mark (a writer)
/// or a writer waits (see below); otherwise it adds itself with its TTL
/// and extends the key to cover it. Releasing removes the reader; the
/// last valid one out deletes the key and announces the release, which
/// wakes waiting writers; otherwise expired readers are dropped and the
/// key's expiry shrinks to the longest remaining reader's. Extending moves only this
/// reader's expiry (and the key's, when it must cover more).
///
/// # Why it is safe
///
/// Every conflict is between two parties, a writer and a reader or two
/// writers, and each party holds on a majority of members within its
/// validity. Two majorities share a member. On that member the two cannot
/// hold at once: a writer's `SET NX` needs the key absent, while a reader
/// needs the key absent or holding the mark, and leaves it holding the
/// mark with an expiry at least its own; a writer's key holds its token,
/// which refuses readers. So a writer and a reader (or two writers) both
/// valid at one instant would need that member to hold both, under the
/// same assumptions as the mutex (bounded clock drift, no eviction, the
/// restart quarantine), which is impossible. Readers never conflict with
/// readers, so their count needs no quorum of its own. A reader's expiry
/// and the key's are read on the same server's clock, so the key never
/// expires before a reader it covers.
///
/// What arrives late is harmless for two reasons. Each attempt reads
/// with a token of its own, so a failed attempt's clean-up (`unread`),
/// delivered after a later attempt was granted, removes only its own
/// reader, never the later one (with one token for both, the last
/// reader's removal deleted the mark under a valid reader). And every
/// read raises the mark to last at least its own TTL, so a read that
/// finds an earlier reader's mark never leaves it to expire first.
///
/// **Model checked.** The project's tests check this over every
/// interleaving of a small system, to a bound: three servers (one with a
/// clock fast by the drift), a reader of two acquisitions (whose guard
/// may be abandoned, its keys left to expire) and a writer, each request
/// in flight, late, lost or run twice; the clients decide with the
/// library's verdict and validity over Rust models of the read and
/// release scripts, each tied to its Lua by a differential test on real
/// servers. Every schedule of 7-8 steps holds (30 and 50 ms, one run
/// with a loss and a duplicate); with either rule above turned off the
/// checker finds a writer beside a valid reader in 6 or 8 steps. Not
/// modelled: the waiting writer's flag, read extends, restarts, fair
/// writers (TESTING.md in the repository, "Model checking").
///
/// # Writers are not starved
///
/// A writer's acquisition is `SET name token NX GET PX ttl`: a refusal
/// answers what holds the key. A writer refused where readers hold it
/// (the key holds the mark) and that will wait asks every member to set
/// the flag `name:redlock-writer`, with its token, for what is left of its
/// wait and never much past its next attempt (twice the retry delay plus
/// the node timeout; each pause after such a refusal sets it again). A
/// member sets it only while readers hold the key. Behind another writer
/// there is no stream of readers to hold back, so a plain lock refused by
/// a plain lock sends nothing for read-write locks. (A server before
/// Redis 7.0 has no `NX GET`: its refusal cannot say, so a writer waiting
/// there asks at every pause, and the member answers whether readers
/// hold.) New readers are refused while the flag exists, so they queue
/// behind the writer; readers already in keep their hold and leave within
/// their TTL, and the writer gets in. The flag is taken down when the
/// writer gets the lock or gives up, so readers wait no longer than the
/// writer's own wait. (This holds for every waiting `lock`, since writing
/// is locking.) The flag only orders arrivals; safety never depends on
/// it.
///
/// # Expiry and leftovers
///
/// Each reader expires with its own TTL: a crashed reader holds writers
/// off only until its TTL runs out (the key's expiry is the longest
/// reader's, and releases drop expired readers). Every key written
/// (the key, the readers' set, the flag) has an expiry.
#[derive(Clone)]
pub struct RwLock {
    manager: LockManager,
    name: Vec<u8>,
}

/// A lock waiting as the writer of the read-write lock of its name (see
/// "Writers are not starved" on [`RwLock`](crate::RwLock)).
pub(crate) struct Writer<'a>(pub(crate) &'a [u8]);

impl stage::Writer for Writer<'_> {
    /// Where readers hold the name, sets the flag that makes new readers
    /// queue behind the writer, for `ms`. True when some member set it.
    fn waits(&self, engine: &Engine, token: &[u8], ms: u64) -> bool {
        let flag = writer_key(self.0);
        let ms = ms.max(1).to_string();
        let args: [&[u8]; 2] = [token, ms.as_bytes()];
        // Decides no holder, waits for no replica: as a release.
        engine
            .script(&WRITER_WAITS, &[self.0, &flag], &args)
            .run(RELEASE)
            .into_iter()
            .any(|a| matches!(a, Some(Ok(Said::Yes(1)))))
    }

    /// Removes the writer's flag where it is still its own.
    fn done(&self, engine: &Engine, token: &[u8]) {
        let flag = writer_key(self.0);
        engine.script(&UNLOCK, &[&flag], &[token]).run(RELEASE);
    }
}

impl LockManager {
    /// The read-write lock named `name`: many readers share it, a writer
    /// excludes readers and writers. Its write side is the ordinary lock
    /// on `name` ([`lock`](Self::lock)); readers are kept beside the key,
    /// in the same Redis Cluster slot. Waiting writers go first: once a
    /// writer waits, new readers queue behind it, for no longer than the
    /// writer's own wait.
    ///
    /// The handle is cheap (a clone of the manager and the name) and
    /// takes the manager's retry settings at this call.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a
    /// name that [`lock`](Self::lock) would refuse (empty, or reserved).
    pub fn rwlock(&self, name: impl AsRef<[u8]>) -> Result<RwLock> {
        let name = name.as_ref();
        keys::check_resource(name)?;
        Ok(RwLock {
            manager: self.clone(),
            name: name.to_vec(),
        })
    }
}

impl RwLock {
    /// The lock's name (the Redis key of its write side).
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    waiting_family! {
        /// Takes a read lock for `ttl`, with [`LockManager::lock`]'s retries
        /// and waiting. The [`ReadGuard`] is shared and has no fencing token
        /// (readers do not write); it extends, keeps alive and releases as any
        /// guard.
        ///
        /// # Errors
        ///
        /// As [`LockManager::lock`]: [`Error::Taken`](crate::Error::Taken)
        /// while a writer holds the lock or waits for it.
        fn read, try_read, try_read_for, try_read_until => read_with
        () -> ReadGuard
    }

    /// As [`read`](Self::read), waiting as `wait` says (see
    /// [`LockManager::lock_with`]).
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read), from the last attempt.
    pub fn read_with(&self, ttl: Duration, wait: Wait) -> Result<ReadGuard> {
        self.acquire_read(ttl, self.manager.budget(wait))
    }

    waiting_family! {
        /// Takes the write lock for `ttl`: exactly [`LockManager::lock`] on
        /// the name, which waits for readers to leave.
        ///
        /// # Errors
        ///
        /// As [`LockManager::lock`]; `Taken` while readers or a writer hold.
        fn write, try_write, try_write_for, try_write_until => write_with
        () -> LockGuard
    }

    /// As [`write`](Self::write), waiting as `wait` says
    /// ([`LockManager::lock_with`]).
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write), from the last attempt.
    pub fn write_with(&self, ttl: Duration, wait: Wait) -> Result<LockGuard> {
        self.manager.lock_with(&self.name, ttl, wait)
    }

    fn acquire_read(&self, ttl: Duration, budget: Budget) -> Result<ReadGuard> {
        let name = &self.name[..];
        keys::check_resource(name)?;
        let engine = self.manager.engine();
        let ttl_ms = engine.acquisition_ttl(ttl)?;
        let names = [name];
        let wait = WaitOn::names(&names).grant(Grant::Shared);
        let shape = Arc::new(Read { name: name.into() });
        self.manager
            .stage()
            .acquire_shape(shape, wait, budget, ttl_ms, |guard, _| Ok(guard))
    }
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &String::from_utf8_lossy(&self.name))
            .finish()
    }
}

/// A read lock: the token among the readers beside the lock key, which
/// holds the readers' mark.
struct Read {
    name: Box<[u8]>,
}

/// Readers never queue across managers: they share.
impl crate::engine::fair::Queued for Read {
    fn place(&self) -> Option<&crate::engine::fair::Fair> {
        None
    }
}

impl Shape for Read {
    fn resources(&self) -> Names<'_> {
        Names::One(&self.name)
    }

    /// Readers do not write: no fencing token.
    fn fenced(&self) -> bool {
        false
    }

    fn shared(&self) -> bool {
        true
    }

    /// The read script on every member (see its docs).
    fn take(&self, engine: &Engine, token: &[u8], ttl_ms: u64, _: Option<&str>) -> Vec<Vote> {
        let px = ttl_ms.to_string();
        let (readers, flag) = (readers_key(&self.name), writer_key(&self.name));
        let args: [&[u8]; 2] = [token, px.as_bytes()];
        let call = &args;
        let (answers, held) = engine
            .script(&READ, &[&self.name, &readers, &flag], call)
            .run_naming(NAMING);
        // A writer's value holds the key: a no.
        let mut votes: Vec<Vote> = answers.into_iter().map(Vote::naming).collect();
        give_holders(&mut votes, &held, token);
        votes
    }

    /// Never called: readers have no counters.
    fn raise(&self, _: &Engine, _: &[bool], _: &[u8], _: u64, _: &str) -> Tally {
        Tally::default()
    }

    /// This reader's expiry to `ttl_ms` from now.
    fn extend(&self, engine: &Engine, token: &[u8], ttl_ms: u64, last: bool) -> Tally {
        let ttl = crate::engine::pipeline::ttl_arg(ttl_ms, last);
        let readers = readers_key(&self.name);
        let args: [&[u8]; 2] = [token, ttl.as_bytes()];
        let call = &args;
        Tally::count(
            engine
                .script(&EXTEND_READ, &[&self.name, &readers], call)
                .run(DECIDE),
        )
    }

    /// Removes this reader; the last reader out deletes the lock key and
    /// announces the release.
    fn unlock(&self, engine: &Engine, token: &[u8], removal: Removal<'_>) -> Tally {
        let Removal {
            only,
            message,
            release: _,
        } = removal;
        let readers = readers_key(&self.name);
        let channel = release_channel(&self.name);
        let args = announced_on(vec![token], message, &channel);
        Tally::count(
            engine
                .script(&UNREAD, &[&self.name, &readers], &args)
                .only(only)
                .run(RELEASE),
        )
    }
}
