//! The node set and the rounds run on it: acquire (with the resource's
//! fencing counter), extend, unlock and raise. Shared by the manager, which
//! acquires, and the guards, which extend and release.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::error::{Error, NodeError, Result};
use crate::member::Member;
use crate::node::{
    CLEANUP, EXTEND, FREE, Lua, MISMATCH, PERMITS, RAISE, Reply, Request, UNLOCK, pack,
};
use crate::quorum::{self, Tally};
use crate::redis_cluster::{self, Identities};
use crate::restart::Policy;
use crate::wait::{Waiters, channel};

/// The largest TTL accepted: 2^52 ms, about 142,000 years. Anything
/// larger would risk overflowing Redis's millisecond expiry times.
pub const MAX_TTL: Duration = Duration::from_millis(1 << 52);

/// Suffix of the fencing counter keys: the counter of resource `R` is
/// `R` followed by this suffix, so that an ACL key pattern that covers the
/// resource names (`~lock:*`) covers their counters too. Resource names
/// ending with it are reserved.
pub const FENCE_SUFFIX: &[u8] = b":redlock-fence";

/// Suffix of the key that lists a read-write lock's readers (see
/// `rwlock.rs`), kept beside the lock key in its slot. Reserved.
pub(crate) const READERS_SUFFIX: &[u8] = b":redlock-readers";

/// Suffix of the key that stores a semaphore's permit count (see
/// `semaphore.rs`), beside its name in its slot. Reserved.
pub(crate) const PERMITS_SUFFIX: &[u8] = b":redlock-permits";

/// Suffix of the flag a waiting writer sets so that new readers queue
/// behind it (see `rwlock.rs`). Reserved.
pub(crate) const WRITER_SUFFIX: &[u8] = b":redlock-writer";

/// The key of the fencing counter of `resource`: the resource's name
/// followed by [`FENCE_SUFFIX`], in the resource's Redis Cluster hash slot
/// (`lock:job:redlock-fence{29178}`; see the README's "Redis Cluster"
/// section for the rule).
pub fn fence_key(resource: impl AsRef<[u8]>) -> Vec<u8> {
    redis_cluster::companion(resource.as_ref(), FENCE_SUFFIX)
}

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

/// The value a fencing counter created anew starts from: microseconds
/// since the Unix epoch on this machine's clock (0 if the clock is before
/// 1970). A node cannot count faster than one increment per microsecond,
/// so a counter's value stays below the clock, and one created later
/// starts above every value an earlier one reached (see the README's
/// fencing section for the exact assumption). Stays below 2^53 until the
/// year 2255.
pub(crate) fn counter_start() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Which members may hold what an attempt wrote, by their answers: those
/// that said yes, and those that failed after the command may have run
/// (not settled).
pub(crate) fn may_hold(answers: &[Option<std::result::Result<u64, NodeError>>]) -> Vec<bool> {
    answers
        .iter()
        .map(|answer| match answer {
            Some(Ok(count)) => *count > 0,
            Some(Err(e)) => !e.settled,
            None => false,
        })
        .collect()
}

/// The error of an attempt that got no validity (and whose clean-up
/// is done): the raising round's when the fencing counters could not
/// be brought to a quorum (`raised`), `NoValidity` when a quorum
/// granted it (`reached`) too slowly, else what `tally` says, with
/// `held_here` filled in for `Taken`. `shown` names the resource (or
/// the set).
pub(crate) fn attempt_error(
    shown: &[u8],
    raised: Option<Tally>,
    reached: bool,
    elapsed: Duration,
    ttl: Duration,
    tally: Tally,
    held_here: impl FnOnce() -> bool,
) -> Error {
    match raised {
        // The failures of the raising round say why.
        Some(raised) => raised.acquire_error(shown),
        None if reached => Error::NoValidity {
            resource: quorum::display(shown),
            elapsed,
            ttl,
        },
        None => {
            let mut err = tally.acquire_error(shown);
            if let Error::Taken { held_here: h, .. } = &mut err {
                *h = held_here();
            }
            err
        }
    }
}

/// A granted acquisition.
pub(crate) struct Granted {
    /// The end of the validity.
    pub(crate) valid_until: Instant,
    /// The fencing token; `None` with fencing off.
    pub(crate) fencing: Option<u64>,
}

/// The members and the settings every round needs.
pub(crate) struct Rounds {
    pub(crate) members: Arc<[Member]>,
    pub(crate) drift_factor: f64,
    pub(crate) node_timeout: Duration,
    /// With fencing on: how long, in ms, a counter lives after its last
    /// acquisition or renewal. `None`: fencing off.
    pub(crate) fencing_expiry_ms: Option<u64>,
    /// Whether releases publish and waiters listen for them.
    pub(crate) wake_on_release: bool,
    /// This manager's threads waiting for busy resources.
    pub(crate) waiters: Waiters,
    /// Resources a guard of this manager holds, with how many guards.
    pub(crate) held: Mutex<HashMap<Box<[u8]>, usize>>,
    /// Some member is a Redis Cluster (requests then get their cluster
    /// variant).
    pub(crate) has_clusters: bool,
    /// What the members turned out to be at first contact.
    pub(crate) identities: Arc<Identities>,
    /// Replicas that must acknowledge an acquisition or extend for the
    /// member's vote to count, and the `WAIT` timeout in ms.
    pub(crate) replica_acks: Option<(u32, String)>,
    /// When restarted servers vote again (shared with every node).
    pub(crate) restart: Arc<Policy>,
}

/// What a script round is for.
#[derive(Clone, Copy)]
pub(crate) struct Mode {
    /// The script answers a count, not yes or no.
    pub(crate) count: bool,
    /// A yes counts only once the replicas asked for acknowledged it.
    pub(crate) replicated: bool,
    /// Its answers decide a holder: servers kept out after a restart give
    /// none.
    pub(crate) decides: bool,
}

pub(crate) const RELEASE: Mode = Mode {
    count: false,
    replicated: false,
    decides: false,
};

/// The arguments of the clean-up script: the token, then the channel,
/// message and command (`PUBLISH`, or `SPUBLISH` on a Redis Cluster) of
/// the announcement (none when releases are not announced).
pub(crate) fn announce_args<'a>(
    token: &'a [u8],
    channel: &'a [u8],
    message: &'a [u8],
    verb: &'static [u8],
) -> Vec<&'a [u8]> {
    if channel.is_empty() {
        vec![token]
    } else {
        vec![token, channel, message, verb]
    }
}

/// How one variant of a script call differs: its arguments, and what is
/// written behind it.
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    pub(crate) args: &'a [&'a [u8]],
    pub(crate) tail: Option<&'a [u8]>,
}

impl Rounds {
    /// Checks a resource name: not empty, and not a fencing counter's.
    pub(crate) fn check_resource(resource: &[u8]) -> Result<()> {
        if resource.is_empty() {
            return Err(Error::invalid_argument("the resource name is empty"));
        }
        for (suffix, what) in [
            (FENCE_SUFFIX, "fencing counters"),
            (READERS_SUFFIX, "the readers of read-write locks"),
            (WRITER_SUFFIX, "the flags of waiting writers"),
            (PERMITS_SUFFIX, "the permit counts of semaphores"),
        ] {
            if redis_cluster::is_companion(resource, suffix) {
                return Err(Error::invalid_argument(format!(
                    "resource names ending with {:?} (or with it and a {{number}} hash tag) \
                     are reserved for {what}",
                    String::from_utf8_lossy(suffix)
                )));
            }
        }
        Ok(())
    }

    /// `WAIT <replicas> <ms>`, written behind acquisitions and extends
    /// when replica acknowledgements are asked for; empty otherwise.
    pub(crate) fn wait_command(&self) -> Vec<u8> {
        match &self.replica_acks {
            Some((n, ms)) => pack(&[b"WAIT", n.to_string().as_bytes(), ms.as_bytes()]),
            None => Vec::new(),
        }
    }

    /// Fails once two members turned out to be the same server or cluster
    /// (found at first contact): their votes would count twice.
    pub(crate) fn check_members(&self) -> Result<()> {
        match self.identities.conflict.get() {
            Some(why) => Err(Error::invalid_config(why.clone())),
            None => Ok(()),
        }
    }

    /// How an attempt that began at `start` and took `elapsed` ends: its
    /// validity, when a quorum said yes (`won`), no two members turned
    /// out to be the same during the round, and time is left of `ttl`;
    /// and that conflict, when one was found.
    pub(crate) fn settle(
        &self,
        start: Instant,
        elapsed: Duration,
        ttl: Duration,
        won: bool,
    ) -> (Option<Instant>, Option<Error>) {
        let conflict = self.check_members().err();
        let valid_until = if won && conflict.is_none() {
            quorum::valid_until(start, elapsed, ttl, self.drift_factor)
        } else {
            None
        };
        (valid_until, conflict)
    }

    /// Checks a TTL and returns it in whole milliseconds (what `PX` and
    /// `PEXPIRE` take; a fraction of a millisecond is dropped).
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<u64> {
        if ttl > MAX_TTL {
            return Err(Error::invalid_argument(format!(
                "TTL {ttl:?} is larger than the maximum of {MAX_TTL:?}"
            )));
        }
        let ttl_ms = ttl.as_millis() as u64;
        if ttl_ms == 0 {
            return Err(Error::invalid_argument(format!(
                "TTL must be at least 1 ms, got {ttl:?}"
            )));
        }
        let whole = Duration::from_millis(ttl_ms);
        if quorum::validity(whole, Duration::ZERO, self.drift_factor).is_none() {
            return Err(Error::invalid_argument(format!(
                "TTL {ttl:?} leaves no validity after the clock drift allowance of {:?}",
                quorum::drift(whole, self.drift_factor)
            )));
        }
        Ok(ttl_ms)
    }

    /// With fencing on, how long (ms, as a command argument) a counter is
    /// kept after an acquisition or renewal with `ttl_ms`: the idle
    /// expiry, and never less than the lock's TTL. `None`: fencing off.
    pub(crate) fn counter_keep(&self, ttl_ms: u64) -> Option<String> {
        self.fencing_expiry_ms
            .map(|expiry_ms| expiry_ms.max(ttl_ms).to_string())
    }

    /// One acquisition attempt on every node.
    ///
    /// Fencing off: `SET resource token NX PX ttl`, nothing else.
    ///
    /// Fencing on: the same, pipelined in one write with three commands on
    /// the resource's counter: `SET counter <clock µs> NX PX keep` (a
    /// counter created anew starts from the clock), `INCR counter` and
    /// `PEXPIRE counter keep`. The token is the largest count among the
    /// nodes that set the lock key. Then the granting nodes whose counter
    /// is below it are raised to it (keeping their expiry), so that a
    /// quorum holds the token and any later quorum, which shares a node
    /// with it, counts past it.
    ///
    /// On failure removes whatever it set, from every node, before
    /// returning.
    ///
    /// A semaphore's permit (`permits`: the key of its stored count, and
    /// this client's count) puts the count check ahead of it in the same
    /// write: a member that stores another count answers that, and the
    /// attempt fails with `InvalidArgument` (after its clean-up).
    pub(crate) fn acquire(
        &self,
        resource: &[u8],
        token: &[u8],
        ttl_ms: u64,
        permits: Option<(&[u8], u32)>,
    ) -> Result<Granted> {
        self.check_members()?;
        self.restart.note_ttl(ttl_ms);
        let ttl = Duration::from_millis(ttl_ms);
        let px = ttl_ms.to_string();
        // The count check goes by hash: the handshake loads it, and a
        // `SCRIPT FLUSH` costs one attempt (see `Pooled::finish`).
        let mut packed = match permits {
            Some((key, k)) => {
                let keep = self.permits_keep(ttl_ms).to_string();
                PERMITS.evalsha(&[key], &[k.to_string().as_bytes(), keep.as_bytes()])
            }
            None => Vec::new(),
        };
        packed.extend_from_slice(&pack(&[
            b"SET",
            resource,
            token,
            b"NX",
            b"PX",
            px.as_bytes(),
        ]));
        let fence = fence_key(resource);
        let keep = self.counter_keep(ttl_ms);
        let reply = match &keep {
            None => Reply::Set,
            Some(keep) => {
                // The counter is incremented on every node asked, whether
                // or not it set the lock key: only the counts of nodes that
                // set it make the token; the others' counts just grow,
                // which keeps every counter monotonic.
                let start = counter_start().to_string();
                let keep = keep.as_bytes();
                packed.extend_from_slice(&pack(&[
                    b"SET",
                    &fence,
                    start.as_bytes(),
                    b"NX",
                    b"PX",
                    keep,
                ]));
                packed.extend_from_slice(&pack(&[b"INCR", &fence]));
                packed.extend_from_slice(&pack(&[b"PEXPIRE", &fence, keep]));
                Reply::SetCount
            }
        };
        let wait = self.wait_command();
        packed.extend_from_slice(&wait);
        let describe = |at: usize| {
            let (verb, key) = match at {
                0 => ("SET", resource),
                1 => ("SET", &fence[..]),
                2 => ("INCR", &fence[..]),
                _ => ("PEXPIRE", &fence[..]),
            };
            format!("{verb} {:?}", String::from_utf8_lossy(key))
        };
        // Queued behind an acquisition that times out: removes the key
        // right after a late execution (and announces that only if it did).
        let cleanup = |verb: &'static [u8]| {
            let (channel, message) = self.cleanup_announcement(resource, token);
            CLEANUP.eval(&[resource], &announce_args(token, &channel, &message, verb))
        };
        let node_cleanup = || cleanup(b"PUBLISH");
        let cluster_cleanup = || cleanup(b"SPUBLISH");
        // On a Redis Cluster member the same pipeline goes to the slot's
        // master. While the slot is being migrated, the source runs a
        // command only on a key it still has (keys only leave it) and
        // answers ASK for the others, so it never creates a key there;
        // an ASK is followed to the target only for a single-key request,
        // so a counter is never created on the target while the source
        // still has it (MIGRATE would then fail on it). A lock with a
        // fencing counter is therefore no vote while its slot migrates.
        let acks = self.replica_acks.as_ref().map(|(n, _)| *n);
        let cluster_req = Request {
            packed: &packed,
            key: resource,
            alt: None,
            asking: false,
            permits: permits.is_some(),
            // One key only (see above).
            follow_ask: keep.is_none() && permits.is_none(),
            decides: true,
            wait: acks,
            reply,
            describe: &describe,
            reload: None,
            on_timeout: Some(&cluster_cleanup),
        };
        let req = Request {
            alt: self.has_clusters.then_some(&cluster_req),
            on_timeout: Some(&node_cleanup),
            ..cluster_req
        };
        let start = Instant::now();
        let answers = quorum::round(&self.members, None, &req);
        let quorum = quorum::quorum(self.members.len());
        let counts = || {
            answers
                .iter()
                .filter_map(|a| a.as_ref()?.as_ref().ok().copied())
        };
        // A member storing another permit count grants nothing.
        let stored = counts().find(|c| c & MISMATCH != 0).map(|c| c & !MISMATCH);
        let granted = counts().filter(|&c| c > 0 && c & MISMATCH == 0).count();
        let highest = counts().filter(|&c| c & MISMATCH == 0).max().unwrap_or(0);
        let mut failed = None;
        if let (true, None, Some(keep)) = (granted >= quorum, stored, &keep) {
            let lagging: Vec<bool> = answers
                .iter()
                .map(|a| matches!(a, Some(Ok(c)) if *c > 0 && *c < highest))
                .collect();
            let mut fenced = granted - lagging.iter().filter(|l| **l).count();
            if fenced < granted {
                let raised = self.raise(&lagging, &fence, highest, keep);
                fenced += raised.yes;
                if fenced < quorum {
                    failed = Some(raised);
                }
            }
        }
        let elapsed = start.elapsed();
        let won = granted >= quorum && failed.is_none() && stored.is_none();
        let (valid_until, conflict) = self.settle(start, elapsed, ttl, won);
        if let Some(valid_until) = valid_until {
            return Ok(Granted {
                valid_until,
                fencing: keep.is_some().then_some(highest),
            });
        }
        // Best effort, on every node that may hold our key (a failure
        // whose clean-up is already queued behind it is settled).
        let dirty = may_hold(&answers);
        if dirty.contains(&true) {
            self.clean_up(&dirty, resource, token);
        }
        if let Some(conflict) = conflict {
            return Err(conflict);
        }
        if let (Some(stored), Some((_, k))) = (stored, permits) {
            return Err(Error::invalid_argument(format!(
                "this semaphore was made with {k} permits, but its members store {stored}: \
                 every client of one semaphore must give the same count (it may change once \
                 no permit has been held for {:?})",
                Duration::from_millis(self.permits_keep(ttl_ms))
            )));
        }
        Err(attempt_error(
            resource,
            failed,
            granted >= quorum,
            elapsed,
            ttl,
            Tally::count(answers),
            || self.held_here(resource),
        ))
    }

    /// How long (in ms) a semaphore's stored count is
    /// kept after an acquisition or renewal with `ttl_ms`: as a fencing
    /// counter, and never less than the TTL, so that it outlives every
    /// permit granted with it.
    pub(crate) fn permits_keep(&self, ttl_ms: u64) -> u64 {
        self.fencing_expiry_ms
            .map_or(ttl_ms, |expiry_ms| expiry_ms.max(ttl_ms))
    }

    /// Raises the counter to `to` on the nodes `only` selects, keeping its
    /// expiry (or creating it with `keep` ms if it expired meanwhile).
    fn raise(&self, only: &[bool], fence: &[u8], to: u64, keep: &str) -> Tally {
        let to = to.to_string();
        Tally::count(self.script(
            &RAISE,
            Some(only),
            &[fence],
            &[to.as_bytes(), keep.as_bytes()],
        ))
    }

    /// The `PUBLISH` sent behind a release to nodes and the `SPUBLISH`
    /// (sharded, in the resource's slot) sent to Redis Cluster members,
    /// when releases wake waiters, and their message (see
    /// [`announcement`](Self::announcement)).
    pub(crate) fn publish(
        &self,
        resource: &[u8],
        token: &[u8],
    ) -> Option<(Vec<u8>, Vec<u8>, Vec<u8>)> {
        self.wake_on_release.then(|| {
            let (channel, message) = self.announcement(resource, token);
            (
                pack(&[b"PUBLISH", &channel, &message]),
                pack(&[b"SPUBLISH", &channel, &message]),
                message,
            )
        })
    }

    /// The channel and message announcing one unlock of `resource`: the
    /// resource's release channel, and a message naming this one unlock
    /// (the token, then a count that tells apart the unlocks of one token:
    /// a release and the clean-ups of its failed attempts).
    pub(crate) fn announcement(&self, resource: &[u8], token: &[u8]) -> (Vec<u8>, Vec<u8>) {
        static UNLOCKS: AtomicU64 = AtomicU64::new(0);
        let n = UNLOCKS.fetch_add(1, Ordering::Relaxed).to_string();
        (channel(resource), [token, b":", n.as_bytes()].concat())
    }

    /// The clean-up of a failed attempt on the nodes `dirty` selects:
    /// deletes the key where it holds `token`, and only there announces a
    /// release (in the same script), so that an attempt that freed nothing
    /// wakes nobody. Its message names `token`, so this manager's own
    /// listeners do not wake the attempt's own thread with it.
    fn clean_up(&self, dirty: &[bool], resource: &[u8], token: &[u8]) {
        let (channel, message) = self.cleanup_announcement(resource, token);
        let node_args = announce_args(token, &channel, &message, b"PUBLISH");
        let cluster_args = announce_args(token, &channel, &message, b"SPUBLISH");
        self.script_then(
            &CLEANUP,
            Some(dirty),
            &[resource],
            Call {
                args: &node_args,
                tail: None,
            },
            Some(Call {
                args: &cluster_args,
                tail: None,
            }),
            RELEASE,
        );
    }

    /// The channel and message a clean-up announces its release with
    /// (both empty when releases are not announced).
    pub(crate) fn cleanup_announcement(&self, resource: &[u8], token: &[u8]) -> (Vec<u8>, Vec<u8>) {
        if self.wake_on_release {
            self.announcement(resource, token)
        } else {
            (Vec::new(), Vec::new())
        }
    }

    /// Marks `resource` as held by a guard of this manager (see
    /// [`held_here`](Self::held_here)).
    pub(crate) fn hold(&self, resource: &[u8]) {
        *self.held.lock().entry(resource.into()).or_insert(0) += 1;
    }

    /// A guard of this manager for `resource` is gone.
    pub(crate) fn let_go(&self, resource: &[u8]) {
        let mut held = self.held.lock();
        if let Some(n) = held.get_mut(resource) {
            *n -= 1;
            if *n == 0 {
                held.remove(resource);
            }
        }
    }

    /// Whether a guard of this manager (or a clone) for `resource` is
    /// alive: a `Taken` then most likely means the caller already holds
    /// it (locks are not re-entrant).
    pub(crate) fn held_here(&self, resource: &[u8]) -> bool {
        self.held.lock().contains_key(resource)
    }

    /// Releases a held lock: runs the check-and-delete script on every
    /// member, with a `PUBLISH` on the release channel of `announce` (the
    /// resource, or a semaphore's name) pipelined behind it (when releases
    /// wake waiters), and wakes this manager's own waiters of `announce`
    /// once the round is over.
    pub(crate) fn unlock(&self, resource: &[u8], announce: &[u8], token: &[u8]) -> Tally {
        let publish = self.publish(announce, token);
        let args: &[&[u8]] = &[token];
        let node = Call {
            args,
            tail: publish.as_ref().map(|p| &p.0[..]),
        };
        let cluster = Call {
            args,
            tail: publish.as_ref().map(|p| &p.1[..]),
        };
        let tally = Tally::count(self.script_then(
            &UNLOCK,
            None,
            &[resource],
            node,
            Some(cluster),
            RELEASE,
        ));
        if let (true, Some((_, _, message))) = (tally.yes > 0, &publish) {
            self.waiters.released(announce, message);
        }
        tally
    }

    /// A semaphore's survey on every member: with `start` `None` (at most
    /// 52 keys), the mask of the free permits among `keys`; otherwise the
    /// first free permit from index `start` on, plus one (0: none free).
    pub(crate) fn survey(
        &self,
        keys: &[&[u8]],
        start: Option<usize>,
    ) -> Vec<Option<std::result::Result<u64, NodeError>>> {
        let arg = start.map_or_else(|| "mask".to_owned(), |s| s.to_string());
        let call = Call {
            args: &[arg.as_bytes()],
            tail: None,
        };
        let mode = Mode {
            count: true,
            replicated: false,
            decides: false,
        };
        self.script_then(&FREE, None, keys, call, None, mode)
    }

    /// Sets the key's expiry to `ttl_ms` on every node where it holds
    /// `token`; with fencing on, also keeps the counter alive at least as
    /// long (raising its expiry to the idle period when it has less than
    /// the TTL left).
    ///
    /// A permit's semaphore count (`count`, its key) is kept alive with it.
    pub(crate) fn extend(
        &self,
        resource: &[u8],
        token: &[u8],
        ttl_ms: u64,
        count: Option<&[u8]>,
    ) -> Tally {
        let ttl = ttl_ms.to_string();
        let fence = fence_key(resource);
        let fenced = self.fencing_expiry_ms.is_some();
        let keep = self.permits_keep(ttl_ms).to_string();
        let mut keys = vec![resource];
        if fenced {
            keys.push(&fence);
        }
        keys.extend(count);
        let args: Vec<&[u8]> = if keys.len() > 1 {
            vec![token, ttl.as_bytes(), keep.as_bytes()]
        } else {
            vec![token, ttl.as_bytes()]
        };
        let call = Call {
            args: &args,
            tail: None,
        };
        self.restart.note_ttl(ttl_ms);
        let mode = Mode {
            count: false,
            replicated: true,
            decides: true,
        };
        Tally::count(self.script_then(&EXTEND, None, &keys, call, None, mode))
    }

    /// Runs a script that answers 1 or 0 on the members `only` selects,
    /// to decide a holder.
    pub(crate) fn script(
        &self,
        lua: &Lua,
        only: Option<&[bool]>,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Vec<Option<std::result::Result<u64, NodeError>>> {
        let mode = Mode {
            count: false,
            replicated: false,
            decides: true,
        };
        self.script_then(lua, only, keys, Call { args, tail: None }, None, mode)
    }

    /// Runs a script on the members `only` selects: as `node` says on
    /// nodes, and as `cluster` says (when given) on Redis Cluster
    /// members; a `tail` (a packed command whose answer does not matter)
    /// is written right behind it. `mode` says whether a yes counts only
    /// once replicas acknowledged it (`WAIT`), and whether servers kept
    /// out after a restart answer.
    pub(crate) fn script_then(
        &self,
        lua: &Lua,
        only: Option<&[bool]>,
        keys: &[&[u8]],
        node: Call<'_>,
        cluster: Option<Call<'_>>,
        mode: Mode,
    ) -> Vec<Option<std::result::Result<u64, NodeError>>> {
        self.script_split(
            lua,
            only,
            (keys, node),
            (keys, cluster.unwrap_or(node)),
            mode,
        )
    }

    /// As [`script_then`](Self::script_then), with keys of their own for
    /// Redis Cluster members (a set's keys in one slot, where nodes take
    /// the whole set). The round is routed by the cluster keys' slot.
    pub(crate) fn script_split(
        &self,
        lua: &Lua,
        only: Option<&[bool]>,
        (node_keys, node): (&[&[u8]], Call<'_>),
        (cluster_keys, cluster): (&[&[u8]], Call<'_>),
        mode: Mode,
    ) -> Vec<Option<std::result::Result<u64, NodeError>>> {
        let replicated = mode.replicated;
        let wait = if replicated {
            self.wait_command()
        } else {
            Vec::new()
        };
        let acks = self
            .replica_acks
            .as_ref()
            .filter(|_| replicated)
            .map(|(n, _)| *n);
        let packed = |call: Call<'_>, script: Vec<u8>| {
            let mut packed = script;
            packed.extend_from_slice(&wait);
            packed.extend_from_slice(call.tail.unwrap_or_default());
            packed
        };
        let reply = |call: Call<'_>| match call.tail {
            _ if mode.count => Reply::Count,
            Some(_) => Reply::OneThenAny,
            None => Reply::One,
        };
        let describe_node = |_: usize| lua.describe(node_keys[0]);
        let describe_cluster = |_: usize| lua.describe(cluster_keys[0]);
        let cluster_packed = if self.has_clusters {
            packed(cluster, lua.evalsha(cluster_keys, cluster.args))
        } else {
            Vec::new()
        };
        let cluster_reload = || packed(cluster, lua.eval(cluster_keys, cluster.args));
        let cluster_req = Request {
            packed: &cluster_packed,
            key: cluster_keys[0],
            alt: None,
            asking: false,
            permits: false,
            follow_ask: true,
            decides: mode.decides,
            wait: acks,
            reply: reply(cluster),
            describe: &describe_cluster,
            reload: Some(&cluster_reload),
            on_timeout: None,
        };
        let node_packed = packed(node, lua.evalsha(node_keys, node.args));
        let node_reload = || packed(node, lua.eval(node_keys, node.args));
        let req = Request {
            packed: &node_packed,
            // The slot routes the round to each cluster's master.
            key: cluster_keys[0],
            alt: self.has_clusters.then_some(&cluster_req),
            asking: false,
            permits: false,
            follow_ask: true,
            decides: mode.decides,
            wait: acks,
            reply: reply(node),
            describe: &describe_node,
            reload: Some(&node_reload),
            on_timeout: None,
        };
        quorum::round(&self.members, only, &req)
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

    #[test]
    fn counters_start_from_the_clock_in_microseconds_below_2_pow_53() {
        let start = counter_start();
        // After 2026-01-01 and far below 2^53 (exact in a JSON number).
        assert!(start > 1_767_225_600_000_000, "{start}");
        assert!(start < (1 << 53) / 4, "{start}");
        assert!(counter_start() >= start);
    }

    #[test]
    fn counter_keys_follow_the_resource_in_its_slot_and_are_reserved() {
        // The README's example.
        assert_eq!(fence_key(b"lock:job"), b"lock:job:redlock-fence{29178}");
        assert_eq!(fence_key(b"{lock}:job"), b"{lock}:job:redlock-fence");
        for r in [&b"lock:job"[..], b"{lock}:job", b"a{b"] {
            assert!(Rounds::check_resource(r).is_ok());
            assert!(Rounds::check_resource(&fence_key(r)).is_err());
        }
        assert!(Rounds::check_resource(b"lock:job:redlock-fence").is_err());
        for suffix in [READERS_SUFFIX, WRITER_SUFFIX, PERMITS_SUFFIX] {
            let taken = redis_cluster::companion(b"lock:job", suffix);
            assert!(Rounds::check_resource(&taken).is_err());
            assert!(Rounds::check_resource(&[b"lock:job", suffix].concat()).is_err());
        }
        assert!(Rounds::check_resource(b"").is_err());
    }
}
