//! The lock: one key per resource, taken with `SET NX PX` on every
//! member. Its shape for the pipeline ([`One`]: the lock, a write lock,
//! a semaphore's permit) and its entry points on [`LockManager`]. The
//! safety argument is on [`LockManager`] ("Why it is safe").

use std::time::{Duration, Instant};

use redis::Value;

use crate::base::error::{Error, Result};
use crate::base::keys::{self, RESERVED_PREFIX, fence_key, release_channel};
use crate::engine::fair::{self, Fair};
use crate::engine::guard::LockGuard;
use crate::engine::pipeline::{
    Answer, DECIDE, Pipeline, RELEASE, Shape, Vote, announce_args, counter_start,
};
use crate::engine::quorum::{self, Tally};
use crate::members::conn::pack;
use crate::members::request::{Reply, Request};
use crate::members::script::{
    EXTEND, EXTEND_LEADER, KEEP, Lua, MAYBE_READERS, MISMATCH, PERMITS, RAISE, RESIGN, UNLOCK,
};
use crate::shapes::manager::{Budget, LockManager, Wait, WaitOn};
use crate::shapes::rwlock::Writer;

/// One key holding the token: a lock, a write lock, a semaphore's permit
/// (which also checks and keeps alive the semaphore's count), or an
/// election's leadership (which also keeps its record, see
/// `election.rs`).
pub(crate) struct One {
    key: Box<[u8]>,
    /// The name whose waiters a release wakes: the key, or a permit's
    /// semaphore.
    wakes: Box<[u8]>,
    /// A permit: the key of the semaphore's stored count, and the count
    /// this client was made with.
    permits: Option<(Box<[u8]>, u32)>,
    /// A leadership: the key of the election's record, renewed and
    /// deleted with the lock key.
    record: Option<Box<[u8]>>,
    /// A lock whose waiting is fair: its place in the queues.
    fair: Option<Fair>,
    /// The value a member that refused the last ordinary attempt said the
    /// key holds (`SET ... NX GET`): who holds it, for the `Taken` error.
    seen: parking_lot::Mutex<Option<Vec<u8>>>,
}

impl One {
    /// The lock on `key`.
    pub(crate) fn lock(key: &[u8]) -> One {
        One {
            key: key.into(),
            wakes: key.into(),
            permits: None,
            record: None,
            fair: None,
            seen: Default::default(),
        }
    }

    /// This lock or leadership, waiting fairly with `fair` (see
    /// `fair.rs`): its release hands it to the first waiter queued.
    pub(crate) fn fair(self, fair: Option<Fair>) -> One {
        One { fair, ..self }
    }

    /// The leadership of the election `name`: the lock on `name`, whose
    /// record goes with it, and whose fencing counter always counts (the
    /// terms).
    pub(crate) fn leader(name: &[u8]) -> One {
        One {
            record: Some(keys::record_key(name).into()),
            ..One::lock(name)
        }
    }

    /// A permit: the lock on the slot `key` of the semaphore `name`, made
    /// with `count` permits.
    pub(crate) fn permit(key: &[u8], name: &[u8], count: u32) -> One {
        One {
            key: key.into(),
            wakes: name.into(),
            permits: Some((keys::permits_key(name).into(), count)),
            record: None,
            fair: None,
            seen: Default::default(),
        }
    }

    /// The arguments of the unlock script after the token: the
    /// announcement, and its channel.
    fn unlock_args<'a>(
        message: Option<&'a [u8]>,
        cluster: bool,
        channel: &'a [u8],
    ) -> Vec<&'a [u8]> {
        let mut args = announce_args(message, cluster);
        if !args.is_empty() {
            args.push(channel);
        }
        args
    }
}

impl Shape for One {
    fn resources(&self) -> Vec<&[u8]> {
        vec![&self.key]
    }

    fn shown(&self) -> String {
        match &self.permits {
            Some((_, count)) => semaphore_shown(&self.wakes, *count),
            None => quorum::display(&self.key),
        }
    }

    fn wakes(&self) -> Vec<&[u8]> {
        vec![&self.wakes]
    }

    fn hands_off(&self) -> bool {
        self.permits.is_none()
    }

    fn holder(&self) -> Option<Vec<u8>> {
        self.seen.lock().clone()
    }

    /// A leadership counts terms whether fencing is on or not.
    fn keep(&self, p: &Pipeline, ttl_ms: u64) -> Option<String> {
        match self.record {
            Some(_) => Some(p.counter_expiry_ms.max(ttl_ms).to_string()),
            None => p.counter_keep(ttl_ms),
        }
    }

    /// Fencing off: `SET key token NX GET PX ttl`, nothing else (`GET`:
    /// a refusal answers the holder's value, so that a waiting writer
    /// knows whether readers hold it; plain `NX` on servers before Redis
    /// 7.0, see `Request::legacy`, and for permits).
    ///
    /// Fencing on: the same, pipelined in one write with three commands on
    /// the key's counter: `SET counter <clock µs> NX PX keep` (a counter
    /// created anew starts from the clock), `INCR counter` and `PEXPIRE
    /// counter keep GT` (raised, never lowered; the keep script on servers
    /// before Redis 7.0). A member's count is its counter's value.
    ///
    /// A permit puts the count check ahead of it in the same write: a
    /// member that stores another count answers that, and grants nothing.
    fn take(&self, p: &Pipeline, token: &[u8], ttl_ms: u64, keep: Option<&str>) -> Vec<Vote> {
        let key = &self.key[..];
        if let Some(fair) = self.fair.as_ref().filter(|f| f.queued()) {
            return fair.claim(p, key, &self.wakes, token, ttl_ms, keep);
        }
        let px = ttl_ms.to_string();
        // The count check goes by hash: the handshake loads it, and a
        // `SCRIPT FLUSH` costs one attempt (see `Pooled::finish`).
        let head = match &self.permits {
            Some((count, k)) => {
                let keep = p.permits_keep(ttl_ms).to_string();
                PERMITS.evalsha(&[count], &[k.to_string().as_bytes(), keep.as_bytes()])
            }
            None => Vec::new(),
        };
        let fence = fence_key(key);
        // The counter's commands: on servers before Redis 7.0 (`legacy`),
        // the keep script stands for `PEXPIRE ... GT`.
        let tail = |legacy: bool| {
            let mut tail = Vec::new();
            if let Some(keep) = keep {
                // The counter is incremented on every member asked,
                // whether or not it set the lock key: only the counts of
                // members that set it make the token; the others' counts
                // just grow, which keeps every counter monotonic. Its
                // expiry is only ever raised: an attempt with a short keep
                // never cuts the life of a counter a long-TTL holder
                // relies on.
                let start = counter_start().to_string();
                let keep = keep.as_bytes();
                tail.extend_from_slice(&pack(&[
                    b"SET",
                    &fence,
                    start.as_bytes(),
                    b"NX",
                    b"PX",
                    keep,
                ]));
                tail.extend_from_slice(&pack(&[b"INCR", &fence]));
                tail.extend_from_slice(&if legacy {
                    KEEP.eval(&[&fence], &[keep])
                } else {
                    pack(&[b"PEXPIRE", &fence, keep, b"GT"])
                });
            }
            tail.extend_from_slice(&p.wait_command());
            tail
        };
        let set = |get: bool, legacy: bool| {
            let mut set: Vec<&[u8]> = vec![b"SET", key, token, b"NX"];
            if get {
                set.push(b"GET");
            }
            set.extend([&b"PX"[..], px.as_bytes()]);
            [&head[..], &pack(&set), &tail(legacy)].concat()
        };
        let fenced = keep.is_some();
        // A refusal says who holds the key with `NX GET` (Redis 7.0+,
        // Valkey), so that a waiting writer asks readers to queue only
        // where readers hold it; older servers get plain `NX`, whose
        // refusal may be readers. Permits never meet readers.
        let readers_matter = self.permits.is_none();
        let (packed, reply) = match (readers_matter, fenced) {
            (true, true) => (set(true, false), Reply::SetGetCount),
            (true, false) => (set(true, false), Reply::SetGet),
            (false, true) => (set(false, false), Reply::SetCount),
            (false, false) => (set(false, false), Reply::Set),
        };
        // Servers before Redis 7.0 take neither `SET ... NX GET` nor
        // `PEXPIRE ... GT`.
        let has_legacy = readers_matter || fenced;
        let legacy_packed = if has_legacy {
            set(false, true)
        } else {
            Vec::new()
        };
        let legacy_reply = if fenced { Reply::SetCount } else { Reply::Set };
        let describe = |at: usize| {
            let (verb, key) = match at {
                0 => ("SET", key),
                1 => ("SET", &fence[..]),
                2 => ("INCR", &fence[..]),
                _ => ("PEXPIRE ... GT (or the keep script)", &fence[..]),
            };
            format!("{verb} {:?}", String::from_utf8_lossy(key))
        };
        // Queued behind an acquisition that times out: removes the key
        // right after a late execution (and announces that only if it did).
        let cleanup = |cluster: bool| {
            let (message, channel) = (p.message(token), release_channel(&self.wakes));
            let mut args = vec![token];
            args.extend(Self::unlock_args(message.as_deref(), cluster, &channel));
            UNLOCK.eval(&[key], &args)
        };
        let node_cleanup = || cleanup(false);
        let cluster_cleanup = || cleanup(true);
        // On a Redis Cluster member the same pipeline goes to the slot's
        // master. An `ASK` is followed to the target only for a single-key
        // request (see `redis_cluster.rs`, "Safety under slot
        // migration"): a lock with a fencing counter or a permit count is
        // no vote while its slot migrates.
        let seen = parking_lot::Mutex::new(Vec::new());
        let base = Request {
            packed: &packed,
            key,
            alt: None,
            asking: false,
            permits: self.permits.is_some(),
            follow_ask: keep.is_none() && self.permits.is_none(),
            decides: true,
            wait: p.replica_acks.as_ref().map(|(n, _)| *n),
            reply,
            describe: &describe,
            legacy: None,
            ifeq: None,
            token: b"",
            reload: None,
            on_timeout: Some(&cluster_cleanup),
            kept: Some(&seen),
        };
        let legacy = |on_timeout| Request {
            packed: &legacy_packed,
            reply: legacy_reply,
            on_timeout,
            ..base
        };
        let (cluster_legacy, node_legacy) =
            (legacy(Some(&cluster_cleanup)), legacy(Some(&node_cleanup)));
        let cluster_req = Request {
            legacy: has_legacy.then_some(&cluster_legacy),
            ..base
        };
        let req = Request {
            alt: p.has_clusters.then_some(&cluster_req),
            on_timeout: Some(&node_cleanup),
            legacy: has_legacy.then_some(&node_legacy),
            ..base
        };
        let votes = quorum::round(&p.members, None, &req);
        // Who holds it, as this attempt's refusals said (a reservation
        // names nobody); a fair waiter's claims, which do not say, leave
        // what its last ordinary attempt found.
        *self.seen.lock() = seen.into_inner().into_iter().find_map(|v| match v {
            Value::BulkString(v) if !v.starts_with(RESERVED_PREFIX) => Some(v),
            _ => None,
        });
        votes
            .into_iter()
            .map(|answer| match answer {
                // Another permit count stored: no grant (the acquisition
                // behind the check may have written: cleaned up as a yes).
                Some(Ok(c)) if c & MISMATCH != 0 => Vote {
                    yes: None,
                    ..Vote::of(Some(Ok(c)))
                },
                // A no where readers may hold the key.
                Some(Ok(c)) if c & MAYBE_READERS != 0 => Vote {
                    readers: true,
                    ..Vote::of(Some(Ok(0)))
                },
                answer => Vote::of(answer),
            })
            .collect()
    }

    fn refusal(&self, p: &Pipeline, ttl_ms: u64, votes: &[Vote]) -> Option<Error> {
        let (_, k) = self.permits.as_ref()?;
        let stored = votes.iter().find_map(|v| match v.answer {
            Some(Ok(c)) if c & MISMATCH != 0 => Some(c & !MISMATCH),
            _ => None,
        })?;
        Some(Error::invalid_argument(format!(
            "this semaphore was made with {k} permits, but its members store {stored}: \
             every client of one semaphore must give the same count (it may change once \
             no permit has been held for {:?})",
            Duration::from_millis(p.permits_keep(ttl_ms))
        )))
    }

    fn raise(&self, p: &Pipeline, only: &[bool], to: u64, keep: &str) -> Tally {
        let to = to.to_string();
        let fence = fence_key(&self.key);
        Tally::count(p.script(
            &RAISE,
            Some(only),
            &[&fence],
            &[to.as_bytes(), keep.as_bytes()],
        ))
    }

    /// Sets the key's expiry to `ttl_ms` where it holds `token`; with
    /// fencing on, also keeps the counter alive at least as long (raising
    /// its expiry to the idle period when it has less than the TTL left);
    /// a permit's semaphore count is kept alive with it.
    fn extend(&self, p: &Pipeline, token: &[u8], ttl_ms: u64) -> Tally {
        let ttl = ttl_ms.to_string();
        let fence = fence_key(&self.key);
        if let Some(record) = &self.record {
            let keep = self.keep(p, ttl_ms).unwrap_or_default();
            let keys: [&[u8]; 3] = [&self.key, &fence, record];
            let args: [&[u8]; 3] = [token, ttl.as_bytes(), keep.as_bytes()];
            return Tally::count(p.script_then(&EXTEND_LEADER, None, &keys, &args, None, DECIDE));
        }
        let keep = p.permits_keep(ttl_ms).to_string();
        let mut keys: Vec<&[u8]> = vec![&self.key];
        if p.fencing_expiry_ms.is_some() {
            keys.push(&fence);
        }
        if let Some((count, _)) = &self.permits {
            keys.push(count);
        }
        let args: Vec<&[u8]> = if keys.len() > 1 {
            vec![token, ttl.as_bytes(), keep.as_bytes()]
        } else {
            vec![token, ttl.as_bytes()]
        };
        // Servers that take `SET ... IFEQ` (Valkey 8.1+) get the script's
        // work in plain commands: the key's expiry set where it holds our
        // token (`GET`: the value it held says yes, another's, or gone),
        // and the companions' expiry raised to `keep` (where the key is
        // not ours too: a counter or a count that lives longer harms
        // nobody).
        let mut plain = pack(&[
            b"SET",
            &self.key,
            token,
            b"IFEQ",
            token,
            b"PX",
            ttl.as_bytes(),
            b"GET",
        ]);
        for companion in &keys[1..] {
            plain.extend_from_slice(&pack(&[b"PEXPIRE", companion, keep.as_bytes(), b"GT"]));
        }
        Tally::count(p.script_or_ifeq(&EXTEND, &keys, &args, (&plain, keys.len(), token), DECIDE))
    }

    /// A release: the unlock script with a `PUBLISH` (`SPUBLISH` on a
    /// Redis Cluster) pipelined behind it in the same write, whose answer
    /// is ignored (a server or user refusing it changes nothing). A
    /// clean-up, and a leadership's release: the script announces only
    /// where it deleted our key.
    fn unlock(
        &self,
        p: &Pipeline,
        only: Option<&[bool]>,
        token: &[u8],
        message: Option<&[u8]>,
        release: bool,
    ) -> Tally {
        // A fair manager's release of a lock hands it to the first fair
        // waiter queued (the others' releases delete it, as before: their
        // users' ACL rules need not cover the queue's keys).
        if release && p.fair && self.hands_off() && !fair::refused_lately(p) {
            let answers = self.fair_release(p, only, token, message);
            // A member that refused the queue (an ACL rule without the
            // fair additions, a key pattern that misses the queue's keys)
            // is released as an unfair manager releases.
            return fair::release_or_unfair(p, answers, |refused| {
                Tally::count(self.plain_unlock(p, Some(refused), token, message, release))
            });
        }
        // The clean-up of a queued waiter's attempt puts back the
        // reservation it took (see `fair.rs`).
        if !release && self.fair.as_ref().is_some_and(Fair::queued) {
            return fair::unclaim(p, only, &self.key, &self.wakes, token, message);
        }
        Tally::count(self.plain_unlock(p, only, token, message, release))
    }
}

impl One {
    /// A fair manager's release. One that knows of no waiter (it did not
    /// queue, and its manager's threads did not wait for the name lately)
    /// sends the plain unlock, which deletes nothing where a queue stands;
    /// the hand-off follows there, in a second round (see `fair.rs`,
    /// "What it costs"). One that knows of waiters hands off at once.
    fn fair_release(
        &self,
        p: &Pipeline,
        only: Option<&[bool]>,
        token: &[u8],
        message: Option<&[u8]>,
    ) -> Vec<Answer> {
        let record = self.record.as_deref();
        let knows = self.fair.as_ref().is_some_and(Fair::queued) || p.waiters.lately(&self.wakes);
        match (knows, record, message) {
            (false, None, Some(message)) => self.unlock_unless_queued(p, only, token, message),
            _ => fair::release(p, only, &self.key, record, &self.wakes, token, message),
        }
    }

    /// The unlock (a leadership's: the resign script), announced: a
    /// release pipelines its `PUBLISH` behind the script (or behind
    /// `DELIFEQ`, where the server takes it); a clean-up and a
    /// leadership's release have the script announce only where it
    /// deleted our key.
    fn plain_unlock(
        &self,
        p: &Pipeline,
        only: Option<&[bool]>,
        token: &[u8],
        message: Option<&[u8]>,
        release: bool,
    ) -> Vec<Answer> {
        let channel = release_channel(&self.wakes);
        let (lua, keys): (&Lua, Vec<&[u8]>) = match &self.record {
            Some(record) => (&RESIGN, vec![&self.key, record]),
            None => (&UNLOCK, vec![&self.key]),
        };
        let keys = &keys[..];
        match message {
            // Not for a leadership: its script is not loaded with the
            // handshake, and a `PUBLISH` behind an `EVALSHA` refused with
            // `NOSCRIPT` would announce the release before the reload
            // deletes anything, waking candidates too early (and counting
            // every release twice).
            Some(message) if release && self.record.is_none() => {
                let node_tail = pack(&[b"PUBLISH", &channel, message]);
                let cluster_tail = pack(&[b"SPUBLISH", &channel, message]);
                // Servers that take `DELIFEQ` (Valkey 9+) release without
                // the script: the same rule, one command.
                p.script_or_delifeq(
                    lua,
                    only,
                    (&self.key, &[token]),
                    token,
                    Some((&node_tail, &cluster_tail)),
                    RELEASE,
                )
            }
            // A release not announced (`wake_on_release(false)`).
            None if release && self.record.is_none() => {
                p.script_or_delifeq(lua, only, (&self.key, &[token]), token, None, RELEASE)
            }
            _ => {
                let node: Vec<&[u8]> =
                    [vec![token], Self::unlock_args(message, false, &channel)].concat();
                let cluster: Vec<&[u8]> =
                    [vec![token], Self::unlock_args(message, true, &channel)].concat();
                p.script_then(lua, only, keys, &node, Some(&cluster), RELEASE)
            }
        }
    }
}

impl fair::Queued for One {
    fn place(&self) -> Option<&Fair> {
        self.fair.as_ref()
    }
}

impl One {
    /// A fair manager's release of a lock that knows of no waiter: the
    /// unlock script with the queue's key, and the release's `PUBLISH`
    /// pipelined behind it, as an unfair release costs. A member where a
    /// queue stands deletes nothing (it answers 2: a waiter came while it
    /// was held); the hand-off release then runs there, and its answer is
    /// that member's.
    fn unlock_unless_queued(
        &self,
        p: &Pipeline,
        only: Option<&[bool]>,
        token: &[u8],
        message: &[u8],
    ) -> Vec<Answer> {
        let channel = release_channel(&self.wakes);
        let queue = keys::queue_key(&self.key);
        let keys: [&[u8]; 2] = [&self.key, &queue];
        let node_tail = pack(&[b"PUBLISH", &channel, message]);
        let cluster_tail = pack(&[b"SPUBLISH", &channel, message]);
        let mut answers = p.script_tailed(
            &UNLOCK,
            only,
            (&keys, &[token]),
            (&keys, &[token]),
            Some((&node_tail, &cluster_tail)),
            RELEASE,
        );
        let queued: Vec<bool> = answers.iter().map(|a| matches!(a, Some(Ok(2)))).collect();
        if queued.contains(&true) {
            // A message of its own: listeners count a hand-off's messages
            // apart from the release announced above.
            let handing = p.message(token);
            let handed = fair::release(
                p,
                Some(&queued),
                &self.key,
                None,
                &self.wakes,
                token,
                handing.as_deref().or(Some(message)),
            );
            for (answer, handed) in answers.iter_mut().zip(handed) {
                if matches!(answer, Some(Ok(2))) {
                    *answer = handed;
                }
            }
        }
        answers
    }
}

impl LockManager {
    /// Takes the lock on `resource` for `ttl`, waiting for it as the retry
    /// settings allow (see [`set_retry`](Self::set_retry)).
    ///
    /// The first attempt is made at once. After a failed one, the thread
    /// pauses (a random pause between half the retry delay and all of it)
    /// and asks again; `count - 1` pauses in all, so a lock that is never
    /// released is given up after between `(count - 1) × max_delay / 2`
    /// and `(count - 1) × max_delay` (by default 3 attempts and 200-400 ms
    /// of pauses). A release of the resource ends a pause early (see
    /// [`Builder::wake_on_release`](crate::Builder::wake_on_release)) and the thread asks at once; if it is
    /// beaten to the lock, it waits out the rest of the interrupted pause,
    /// so being woken never shortens the time `lock` waits. Threads of this
    /// manager waiting for the same resource are served in arrival order: a
    /// thread that finds others waiting queues behind them, and its time
    /// behind them counts as pausing.
    ///
    /// Locks are not re-entrant: a thread that calls `lock` on a resource
    /// it already holds waits for its own release, and gets
    /// [`Error::Taken`] with `held_here` set.
    ///
    /// `lock` is the write side of [`rwlock`](Self::rwlock)`(resource)`:
    /// it waits for readers to leave, and while it waits behind readers,
    /// new readers wait behind it.
    ///
    /// The returned guard releases the lock when dropped. The lock is safe
    /// to rely on only for [`LockGuard::validity`]: the TTL less the time
    /// the acquisition took and a clock drift allowance.
    ///
    /// # Errors
    ///
    /// The last attempt's error: [`Error::Taken`] when another owner holds
    /// the resource, [`Error::NoQuorum`] when too many nodes failed,
    /// [`Error::NoValidity`] when the round was too slow for the TTL.
    /// [`Error::InvalidArgument`] for an empty resource or a TTL that is 0,
    /// larger than [`MAX_TTL`](crate::MAX_TTL), or too small to leave any validity.
    pub fn lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        self.lock_with(resource, ttl, Wait::Retries)
    }

    /// Takes the lock on `resource` for `ttl` with exactly one attempt.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), from the single attempt.
    pub fn try_lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        self.lock_with(resource, ttl, Wait::No)
    }

    /// Takes the lock on `resource` for `ttl`, trying until `timeout` has
    /// passed, with a random pause (between half the retry delay and all of
    /// it, and never past the timeout) between attempts. At least one
    /// attempt is made. Waits as [`lock`](Self::lock) does: woken by
    /// releases, served in arrival order.
    ///
    /// The TTL comes before the wait, as in every call here; to name the
    /// wait, write [`lock_with`](Self::lock_with)`(resource, ttl,
    /// Wait::For(timeout))`, or use [`try_lock_until`](Self::try_lock_until),
    /// whose deadline cannot be mistaken for the TTL.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), from the last attempt.
    pub fn try_lock_for(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<LockGuard> {
        self.lock_with(resource, ttl, Wait::For(timeout))
    }

    /// Takes the lock on `resource` for `ttl`, trying until `deadline`, as
    /// [`try_lock_for`](Self::try_lock_for) does. At least one attempt is
    /// made.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), from the last attempt.
    pub fn try_lock_until(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<LockGuard> {
        self.lock_with(resource, ttl, Wait::Until(deadline))
    }

    /// Takes the lock on `resource` for `ttl`, waiting as `wait` says: the
    /// one call behind [`lock`](Self::lock) ([`Wait::Retries`]),
    /// [`try_lock`](Self::try_lock) ([`Wait::No`]),
    /// [`try_lock_for`](Self::try_lock_for) ([`Wait::For`]) and
    /// [`try_lock_until`](Self::try_lock_until) ([`Wait::Until`]).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), from the last attempt.
    pub fn lock_with(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        wait: Wait,
    ) -> Result<LockGuard> {
        self.acquire(resource.as_ref(), ttl, self.budget(wait))
    }

    /// The lock's acquisition: its shape through the pipeline, in the
    /// manager's waiting loop. A plain lock is a writer of the read-write
    /// lock of the same name.
    fn acquire(&self, resource: &[u8], ttl: Duration, budget: Budget) -> Result<LockGuard> {
        keys::check_resource(resource)?;
        let pipeline = self.pipeline();
        let ttl_ms = pipeline.check_ttl(ttl)?;
        let writer = Writer(resource);
        let wait = WaitOn {
            names: &[resource],
            writer: Some(&writer),
            shared: false,
            permit: false,
        };
        let waits = !matches!(budget, Budget::Once);
        let fair = Fair::waiting(pipeline, waits, resource, self.retry().1);
        let shape = std::sync::Arc::new(One::lock(resource).fair(fair));
        let mut ours = None;
        let result = self.attempts_on(wait, budget, |token, refusal| {
            ours = Some(token.clone());
            let granted = fair::attempt(pipeline, &*shape, token, ttl_ms, refusal)?;
            Ok(LockGuard::new(
                pipeline.clone(),
                shape.clone(),
                token.clone(),
                Duration::from_millis(ttl_ms),
                granted,
            ))
        });
        // Given up: its places go at once.
        if let (Err(_), Some(token)) = (&result, ours) {
            fair::give_up(pipeline, &*shape, &token);
        }
        result
    }
}

/// A semaphore as errors name it, whatever its count:
/// `nightly (a semaphore of 3 permits)`.
pub(crate) fn semaphore_shown(name: &[u8], count: u32) -> String {
    let plural = if count == 1 { "" } else { "s" };
    format!(
        "{} (a semaphore of {count} permit{plural})",
        quorum::display(name)
    )
}
