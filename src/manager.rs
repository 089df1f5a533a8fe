//! [`LockManager`], its [`Builder`], and the acquisition loop.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::check::NodeReport;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::member::Member;
use crate::node::{Node, Setup, redact};
use crate::quorum;
use crate::redis_cluster::{Identities, RedisCluster};
use crate::resolve::ResolveFn;
use crate::restart::Policy;
use crate::rounds::{MAX_TTL, Rounds, Token, new_token};
use crate::wait::Waiters;

// The defaults, in one place.
const DEFAULT_RETRY_COUNT: u32 = 3;
const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);
const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);
const DEFAULT_MAX_IDLE_PER_NODE: usize = 16;
const DEFAULT_FENCING: bool = true;
const DEFAULT_FENCING_EXPIRY: Duration = Duration::from_secs(10 * 60);
const DEFAULT_WAKE_ON_RELEASE: bool = true;
const DEFAULT_REPLICA_ACKS: u32 = 0;

/// Retry settings of one manager handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Retry {
    count: u32,
    max_delay: Duration,
}

impl Retry {
    fn new(count: u32, max_delay: Duration) -> Result<Retry> {
        if count == 0 {
            return Err(Error::invalid_argument(
                "retry count is the total number of attempts and must be at least 1",
            ));
        }
        Ok(Retry { count, max_delay })
    }
}

/// How long one acquisition may go on pausing between attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Budget {
    /// One attempt, no pause (`try_lock`).
    Once,
    /// `lock`: pauses left to draw, and the unspent rest of the current
    /// one. An attempt on a wake-up does not end a pause: what is left of
    /// it is waited next, so the whole wait is the sum of the pauses.
    Pauses { left: u32, rest: Duration },
    /// `try_lock_for`: pauses until this instant (`None`: beyond any
    /// representable instant).
    Until(Option<Instant>),
}

impl Budget {
    /// The next pause, given a freshly drawn random `delay`; `None` when
    /// the budget is spent.
    fn next(&mut self, delay: Duration) -> Option<Duration> {
        match self {
            Budget::Once => None,
            Budget::Pauses { rest, .. } if !rest.is_zero() => Some(*rest),
            Budget::Pauses { left: 0, .. } => None,
            Budget::Pauses { left, rest } => {
                *left -= 1;
                *rest = delay;
                Some(delay)
            }
            Budget::Until(None) => Some(delay),
            Budget::Until(Some(deadline)) => {
                let left = deadline.saturating_duration_since(Instant::now());
                (!left.is_zero()).then(|| delay.min(left))
            }
        }
    }

    /// The most this budget may still wait (`None`: no bound), given the
    /// pauses' maximum.
    fn most(&self, max_delay: Duration) -> Option<Duration> {
        match *self {
            Budget::Once => Some(Duration::ZERO),
            Budget::Pauses { left, rest } => {
                Some(rest.saturating_add(max_delay.saturating_mul(left)))
            }
            Budget::Until(None) => None,
            Budget::Until(Some(deadline)) => {
                Some(deadline.saturating_duration_since(Instant::now()))
            }
        }
    }

    /// Records that `paused` of the current pause went by (all of it, or
    /// less when a release ended it early).
    fn spent(&mut self, paused: Duration) {
        if let Budget::Pauses { rest, .. } = self {
            *rest = rest.saturating_sub(paused);
        }
    }
}

/// What an acquisition waits on.
#[derive(Clone, Copy)]
pub(crate) struct Wait<'a> {
    /// The names whose releases wake it (one; a set's resources).
    pub(crate) names: &'a [&'a [u8]],
    /// A writer: while it waits, new readers of `names[0]` queue behind it.
    pub(crate) writer: bool,
    /// A shared acquisition (a reader): once in, it wakes the next waiter
    /// of this manager, who may share too.
    pub(crate) shared: bool,
}

/// Takes Redlock locks over a fixed set of independent Redis masters.
///
/// Create one with [`LockManager::new`] or [`LockManager::builder`] and
/// share it: it is `Clone`, `Send` and `Sync`, and clones share the nodes
/// and their pooled connections. Each clone has its own retry settings
/// ([`set_retry`](Self::set_retry)).
///
/// Every call asks all nodes at once and succeeds when a majority
/// ([`quorum`](Self::quorum)) agrees; a node that is down, hung or failing
/// costs at most the node timeout and counts as one vote against.
#[derive(Clone)]
pub struct LockManager {
    rounds: Arc<Rounds>,
    retry: Retry,
}

impl LockManager {
    /// A manager over the nodes at `urls`, with default settings.
    ///
    /// URLs are read as the `redis` crate reads them:
    /// `redis://[user][:password@]host[:port][/db]`, `unix:///path` or
    /// `redis+unix:///path`, and `rediss://` with the `tls` feature.
    /// No connection is opened until the first lock.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when `urls` is empty, a URL cannot be read,
    /// or the same server is given twice.
    ///
    /// ```no_run
    /// # fn main() -> redlock_sync::Result<()> {
    /// let dlm = redlock_sync::LockManager::new([
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    ///     "redis://10.0.0.3:6379",
    /// ])?;
    /// assert_eq!(dlm.quorum(), 2);
    /// # Ok(()) }
    /// ```
    pub fn new<I, S>(urls: I) -> Result<LockManager>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        LockManager::builder().nodes(urls).build()
    }

    /// A [`Builder`] with every setting at its default.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Sets how long [`lock`](Self::lock) waits for a busy lock: `count`
    /// attempts' worth, that is the first attempt and `count - 1` pauses,
    /// each drawn uniformly from `[max_delay / 2, max_delay]`. A lock that
    /// is never released is given up after `(count - 1) × max_delay / 2`
    /// to `(count - 1) × max_delay` of pausing. A release ends a pause
    /// early and the thread asks at once; if another wins, the thread
    /// waits out the rest of that pause, so wake-ups may add attempts but
    /// never shorten the wait. [`try_lock_for`](Self::try_lock_for) uses
    /// the same pauses. Affects this handle only, not its clones.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `count` is 0; the settings are then
    /// left as they were.
    pub fn set_retry(&mut self, count: u32, max_delay: Duration) -> Result<()> {
        self.retry = Retry::new(count, max_delay)?;
        Ok(())
    }

    /// The rounds this manager runs (for the other shapes of lock).
    pub(crate) fn rounds(&self) -> &Arc<Rounds> {
        &self.rounds
    }

    /// The retry settings: total attempts of [`lock`](Self::lock) and the
    /// maximum random pause between attempts.
    pub fn retry(&self) -> (u32, Duration) {
        (self.retry.count, self.retry.max_delay)
    }

    /// How many members must agree: a strict majority of the members
    /// (a node, or a whole Redis Cluster given with [`Builder::cluster`],
    /// is one member).
    pub fn quorum(&self) -> usize {
        quorum::quorum(self.rounds.members.len())
    }

    /// Whether acquisitions carry a fencing token (see
    /// [`Builder::fencing`]).
    pub fn fencing(&self) -> bool {
        self.rounds.fencing_expiry_ms.is_some()
    }

    /// The members' names (`host:port`, `unix:path`, with `/db` when not
    /// 0; `cluster host:port` for a Redis Cluster, after its first seed),
    /// in the order given. Errors name nodes the same way (for a cluster,
    /// the master that failed).
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = &str> {
        self.rounds.members.iter().map(Member::name)
    }

    /// The time each node gets to answer one call, connecting included.
    pub fn node_timeout(&self) -> Duration {
        self.rounds.node_timeout
    }

    /// The clock drift factor.
    pub fn drift_factor(&self) -> f64 {
        self.rounds.drift_factor
    }

    /// Takes the lock on `resource` for `ttl`, waiting for it as the retry
    /// settings allow (see [`set_retry`](Self::set_retry)).
    ///
    /// The first attempt is made at once. After a failed one, the thread
    /// pauses (a random pause between half the retry delay and all of it)
    /// and asks again; `count - 1` pauses in all, so a lock that is never
    /// released is given up after between `(count - 1) × max_delay / 2`
    /// and `(count - 1) × max_delay` (by default 3 attempts and 200-400 ms
    /// of pauses). A release of the resource ends a pause early (see
    /// [`Builder::wake_on_release`]) and the thread asks at once; if it is
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
    /// larger than [`MAX_TTL`], or too small to leave any validity.
    pub fn lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        self.acquire(resource.as_ref(), ttl, self.lock_budget())
    }

    /// The waiting `lock` buys: `count - 1` pauses (see
    /// [`set_retry`](Self::set_retry)).
    pub(crate) fn lock_budget(&self) -> Budget {
        Budget::Pauses {
            left: self.retry.count - 1,
            rest: Duration::ZERO,
        }
    }

    /// Takes the lock on `resource` for `ttl` with exactly one attempt.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), from the single attempt.
    pub fn try_lock(&self, resource: impl AsRef<[u8]>, ttl: Duration) -> Result<LockGuard> {
        self.acquire(resource.as_ref(), ttl, Budget::Once)
    }

    /// Takes the lock on `resource` for `ttl`, trying until `timeout` has
    /// passed, with a random pause (between half the retry delay and all of
    /// it, and never past the timeout) between attempts. At least one
    /// attempt is made. Waits as [`lock`](Self::lock) does: woken by
    /// releases, served in arrival order.
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
        let budget = Budget::Until(Instant::now().checked_add(timeout));
        self.acquire(resource.as_ref(), ttl, budget)
    }

    /// The acquisition loop: attempts, with pauses as `budget` allows.
    ///
    /// When waiting is on, a pause is spent in the resource's queue of
    /// this manager's waiters (see `wait.rs`): it ends early when a release
    /// is heard, and only the longest waiter then asks again; a thread that
    /// finds others of this manager already waiting queues behind them
    /// without asking. A pause that runs out behind other waiters is spent
    /// with no attempt (they are served first); if no attempt was made at
    /// all when the budget runs out, one is made then. The releases
    /// announced by this acquisition's own failed attempts (the clean-up of
    /// a split vote) wake none of this manager's threads.
    fn acquire(&self, resource: &[u8], ttl: Duration, budget: Budget) -> Result<LockGuard> {
        Rounds::check_resource(resource)?;
        let ttl_ms = self.rounds.check_ttl(ttl)?;
        let wait = Wait {
            names: &[resource],
            writer: true,
            shared: false,
        };
        self.attempts_on(wait, budget, |token, _| {
            let granted = self.rounds.acquire(resource, token, ttl_ms, None)?;
            Ok(LockGuard::new(
                self.rounds.clone(),
                resource,
                resource,
                *token,
                Duration::from_millis(ttl_ms),
                granted,
            ))
        })
    }

    /// The loop of [`acquire`](Self::acquire) around any `attempt` (given
    /// the acquisition's token), waiting in the queue of `resource` (the
    /// name whose releases wake it).
    pub(crate) fn attempts<T>(
        &self,
        resource: &[u8],
        budget: Budget,
        mut attempt: impl FnMut(&Token) -> Result<T>,
    ) -> Result<T> {
        let wait = Wait {
            names: &[resource],
            writer: false,
            shared: false,
        };
        self.attempts_on(wait, budget, |token, _| attempt(token))
    }

    /// The acquisition loop for any shape (see [`Wait`]): `attempt` gets
    /// the token and may name, by its index in `wait.names`, the name
    /// found held by another owner; the thread then waits in that name's
    /// queue.
    pub(crate) fn attempts_on<T>(
        &self,
        wait_on: Wait<'_>,
        mut budget: Budget,
        mut attempt: impl FnMut(&Token, &mut Option<usize>) -> Result<T>,
    ) -> Result<T> {
        let token = new_token()?;
        let names = wait_on.names;
        let rounds = &self.rounds;
        let waiters = &rounds.waiters;
        let wait = !matches!(budget, Budget::Once) && rounds.wake_on_release;
        let (_own, busy) = match wait {
            true => {
                let (own, busy) = waiters.start(names[0], &token);
                (Some(own), busy)
            }
            false => (None, false),
        };
        let seen_all = || {
            names
                .iter()
                .map(|n| waiters.before_attempt(n))
                .collect::<Vec<_>>()
        };
        let mut at = 0;
        let mut seen = wait.then(seen_all);
        let mut place = busy.then(|| waiters.join(names[at], seen.as_ref().map(|s| s[at])));
        let mut turn = place.is_none();
        let (mut last, mut owed, mut flagged) = (None, false, false);
        // A writer's flag is taken down once it waits no more.
        let done = |flagged: bool| {
            if flagged {
                rounds.writer_done(names[0], &token);
            }
        };
        loop {
            if turn {
                if wait && place.is_none() {
                    seen = Some(seen_all());
                }
                let mut blocked = None;
                match attempt(&token, &mut blocked) {
                    Ok(acquired) => {
                        if let Some(place) = place {
                            place.acquired(wait_on.shared);
                        }
                        done(flagged);
                        return Ok(acquired);
                    }
                    Err(err) if owed => {
                        done(flagged);
                        return Err(err);
                    }
                    Err(err) => last = Some(err),
                }
                if let Some(b) = blocked.filter(|&b| b != at && b < names.len()) {
                    // Another name holds it up now: wait in its queue.
                    at = b;
                    place = None;
                }
            }
            let delay = quorum::retry_delay(self.retry.max_delay, random_u64());
            let most = budget.most(self.retry.max_delay);
            match budget.next(delay) {
                Some(pause) => {
                    if wait_on.writer && matches!(last, Some(Error::Taken { .. })) {
                        // Where readers hold it, new readers queue behind
                        // this writer while it waits: at most what is left
                        // of its wait, and never long past its next
                        // attempt (each pause after a refusal sets it
                        // again).
                        let cap = self.retry.max_delay * 2 + rounds.node_timeout;
                        let ms = most.map_or(cap, |m| m.min(cap)).as_millis() as u64;
                        flagged |= rounds.writer_waits(names[0], &token, ms);
                    }
                    if wait {
                        let place = place.get_or_insert_with(|| {
                            waiters.join(names[at], seen.as_ref().map(|s| s[at]))
                        });
                        let started = Instant::now();
                        turn = place.wait(pause);
                        budget.spent(started.elapsed());
                    } else {
                        thread::sleep(pause);
                        budget.spent(pause);
                        turn = true;
                    }
                }
                None => match last.take() {
                    Some(err) => {
                        done(flagged);
                        return Err(err);
                    }
                    None => {
                        // Queued all along: the one attempt owed.
                        drop(place.take());
                        owed = true;
                        turn = true;
                    }
                },
            }
        }
    }

    /// Checks every server (each node, each master of a Redis Cluster
    /// member) for what makes a lock server unsafe or weak, and says what
    /// to change: reachable and its round trip; server, version, role and
    /// uptime; persistence (`aof_enabled`, `appendfsync`); `maxmemory` and
    /// its policy; cluster mode; whether this user may run every command
    /// the lock sends (tried on keys named after `resource`, followed by
    /// `:redlock-check`, which expire within seconds and are deleted); and
    /// whether it is kept out of votes after a restart.
    ///
    /// Verdicts: [`Verdict::Unsafe`](crate::Verdict::Unsafe) for a server that is unreachable, a
    /// replica, set to evict keys (`maxmemory` with any policy but
    /// `noeviction`: `volatile-*` evicts keys with a TTL first, lock keys),
    /// or refusing a command the lock needs; [`Verdict::Warning`](crate::Verdict::Warning) for no
    /// persistence (restarts forget locks, so the restart quarantine
    /// applies), `appendfsync everysec`, `INFO` refused, or channels
    /// refused; otherwise [`Verdict::Ok`](crate::Verdict::Ok). `lockrun --check` prints it.
    ///
    /// Takes a few round trips per server, each bounded by twice the node
    /// timeout; never use it on the hot path.
    pub fn check(&self, resource: impl AsRef<[u8]>) -> Vec<NodeReport> {
        crate::check::run(
            &self.rounds.members,
            resource.as_ref(),
            self.fencing(),
            self.rounds.wake_on_release,
        )
    }

    /// Takes the lock with [`lock`](Self::lock)'s retries, keeps it alive
    /// (see [`LockGuard::keep_alive`]) while `work` runs, then releases
    /// it. A panic in `work` still releases the lock (as the guard drops
    /// while unwinding).
    ///
    /// # Errors
    ///
    /// [`lock`](Self::lock)'s errors when the lock cannot be taken, and
    /// [`Error::NotHeld`] when the lock was not held any more when `work`
    /// returned (its validity ran out, a renewal found it taken over, or
    /// the latest renewal missed the quorum; see
    /// [`LockGuard::ensure_held`]): `work` then ran at least partly
    /// unprotected, and its result is dropped. Call `ensure_held` inside
    /// `work` to stop early. A failure to
    /// release after `work` is not reported: the keys expire with their
    /// TTL.
    pub fn with_lock<T>(
        &self,
        resource: impl AsRef<[u8]>,
        ttl: Duration,
        work: impl FnOnce(&LockGuard) -> T,
    ) -> Result<T> {
        let guard = self.lock(resource, ttl)?.keep_alive();
        let out = work(&guard);
        let held = guard.ensure_held();
        let _ = guard.release();
        held.map(|()| out)
    }
}

impl fmt::Debug for LockManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockManager")
            .field("nodes", &self.nodes().collect::<Vec<_>>())
            .field("quorum", &self.quorum())
            .field("node_timeout", &self.rounds.node_timeout)
            .field("drift_factor", &self.rounds.drift_factor)
            .field("fencing_expiry_ms", &self.rounds.fencing_expiry_ms)
            .field("wake_on_release", &self.rounds.wake_on_release)
            .field("retry", &self.retry)
            .finish()
    }
}

/// 64 random bits for a retry delay. Falls back to the clock if the
/// system generator fails: a delay needs spread, not secrecy.
fn random_u64() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos().into())
    })
}

/// Configures and builds a [`LockManager`].
///
/// ```no_run
/// use std::time::Duration;
/// # fn main() -> redlock_sync::Result<()> {
/// let dlm = redlock_sync::LockManager::builder()
///     .nodes(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
///     .retry(5, Duration::from_millis(100))
///     .node_timeout(Duration::from_millis(20))
///     .build()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Builder {
    members: Vec<Spec>,
    retry_count: u32,
    retry_delay: Duration,
    drift_factor: f64,
    node_timeout: Duration,
    max_idle_per_node: usize,
    fencing: bool,
    fencing_expiry: Duration,
    wake_on_release: bool,
    replica_acks: u32,
    restart_quarantine: Option<Duration>,
    resolver: Option<Arc<ResolveFn>>,
    #[cfg(feature = "tls")]
    tls: crate::tls::TlsOptions,
}

/// One member as given to the builder.
#[derive(Clone)]
enum Spec {
    Node(String),
    Cluster(Vec<String>),
}

impl fmt::Debug for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spec::Node(url) => f.write_str(&redact(url)),
            Spec::Cluster(seeds) => f
                .debug_tuple("cluster")
                .field(&seeds.iter().map(|u| redact(u)).collect::<Vec<_>>())
                .finish(),
        }
    }
}

impl fmt::Debug for Builder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Builder");
        d.field("members", &self.members)
            .field("retry_count", &self.retry_count)
            .field("retry_delay", &self.retry_delay)
            .field("drift_factor", &self.drift_factor)
            .field("node_timeout", &self.node_timeout)
            .field("max_idle_per_node", &self.max_idle_per_node)
            .field("fencing", &self.fencing)
            .field("fencing_expiry", &self.fencing_expiry)
            .field("wake_on_release", &self.wake_on_release)
            .field("replica_acks", &self.replica_acks)
            .field("restart_quarantine", &self.restart_quarantine)
            .field("custom_resolver", &self.resolver.is_some());
        #[cfg(feature = "tls")]
        d.field("tls", &self.tls);
        d.finish()
    }
}

impl Default for Builder {
    fn default() -> Builder {
        Builder {
            members: Vec::new(),
            retry_count: DEFAULT_RETRY_COUNT,
            retry_delay: DEFAULT_RETRY_DELAY,
            drift_factor: DEFAULT_DRIFT_FACTOR,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            max_idle_per_node: DEFAULT_MAX_IDLE_PER_NODE,
            fencing: DEFAULT_FENCING,
            fencing_expiry: DEFAULT_FENCING_EXPIRY,
            wake_on_release: DEFAULT_WAKE_ON_RELEASE,
            replica_acks: DEFAULT_REPLICA_ACKS,
            restart_quarantine: None,
            resolver: None,
            #[cfg(feature = "tls")]
            tls: Default::default(),
        }
    }
}

impl Builder {
    /// Adds one node by URL (see [`LockManager::new`] for the forms).
    /// Use independent masters, not replicas of one another: 3 or 5 is
    /// usual.
    ///
    /// Defaults to no members; at least one node or cluster is required.
    pub fn node(mut self, url: impl AsRef<str>) -> Builder {
        self.members.push(Spec::Node(url.as_ref().to_owned()));
        self
    }

    /// Adds several nodes by URL, in order.
    ///
    /// Defaults to no members; at least one node or cluster is required.
    pub fn nodes<I, S>(mut self, urls: I) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.members.extend(
            urls.into_iter()
                .map(|url| Spec::Node(url.as_ref().to_owned())),
        );
        self
    }

    /// Adds ONE member that is a whole Redis Cluster (ElastiCache or
    /// MemoryDB in cluster mode, a Valkey or Redis cluster), reached
    /// through these seed URLs: any seed that answers gives the slot map,
    /// and each lock goes to the master of its resource's hash slot. The
    /// seeds carry the usual URL options (user, password, `rediss://`),
    /// used for every server of the cluster. Mixes with
    /// [`node`](Self::node): the quorum counts members, and a cluster is
    /// one vote, so several independent clusters make a Redlock quorum
    /// of clusters.
    ///
    /// Every key a lock touches is in the resource's slot (see
    /// [`fence_key`](crate::fence_key)); `MOVED` and `ASK` are followed
    /// within the node timeout; a failed master's slots are found on the
    /// promoted replica. Waiters are woken with sharded pub/sub
    /// (`SSUBSCRIBE`, Redis 7.0+ and Valkey; on older servers they poll).
    ///
    /// Defaults to no members; at least one node or cluster is required.
    pub fn cluster<I, S>(mut self, seeds: I) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.members.push(Spec::Cluster(
            seeds.into_iter().map(|s| s.as_ref().to_owned()).collect(),
        ));
        self
    }

    /// Sets how long [`LockManager::lock`] waits for a busy lock: `count`
    /// attempts' worth (at least 1), that is `count - 1` pauses, each drawn
    /// uniformly from `[max_delay / 2, max_delay]`. Being woken by a
    /// release never shortens that wait (see
    /// [`LockManager::set_retry`]).
    ///
    /// Defaults to 3 attempts and 200 ms: 200 to 400 ms of waiting.
    pub fn retry(mut self, count: u32, max_delay: Duration) -> Builder {
        self.retry_count = count;
        self.retry_delay = max_delay;
        self
    }

    /// Sets the clock drift factor, in `[0, 1)`: the share of the TTL
    /// assumed lost to clocks running at different rates. Each lock's
    /// validity is cut by `ttl * factor + 2 ms`.
    ///
    /// Defaults to 0.01.
    pub fn drift_factor(mut self, factor: f64) -> Builder {
        self.drift_factor = factor;
        self
    }

    /// Sets how long one node may take to answer one call, connecting
    /// included. A dead or hung node costs this much per call and no more,
    /// so keep it far below your TTLs; it must cover a connect plus a round
    /// trip on your network, since a slower node counts as failed.
    ///
    /// Defaults to 50 ms: tens of round trips on a LAN or between zones of
    /// one region, and a small fraction of the second-scale TTLs locks
    /// usually have.
    pub fn node_timeout(mut self, timeout: Duration) -> Builder {
        self.node_timeout = timeout;
        self
    }

    /// Sets how many idle connections each node keeps for reuse: as many
    /// as threads that lock at once. Calls beyond that open and then close
    /// their own connection; 0 disables reuse.
    ///
    /// Defaults to 16.
    pub fn max_idle_per_node(mut self, max_idle: usize) -> Builder {
        self.max_idle_per_node = max_idle;
        self
    }

    /// Sets whether acquisitions carry a fencing token
    /// ([`LockGuard::fencing_token`]). On, each node keeps a counter per
    /// resource (at the resource's name followed by
    /// [`FENCE_SUFFIX`](crate::FENCE_SUFFIX)), incremented in the same
    /// write that sets the lock key and expiring after
    /// [`fencing_expiry`](Self::fencing_expiry). Off, an acquisition writes
    /// nothing but the lock key (`SET NX PX`) and guards have no fencing
    /// token.
    ///
    /// Defaults to on.
    pub fn fencing(mut self, on: bool) -> Builder {
        self.fencing = on;
        self
    }

    /// Sets how long a resource's fencing counter is kept after the last
    /// acquisition or renewal of a lock on it (never less than that lock's
    /// TTL, so the counter outlives every lock taken on it). Any positive
    /// duration, in whole milliseconds (rounded up).
    ///
    /// While a counter lives, every token is larger than the last one
    /// whatever the clocks say. A counter created anew (after this idle
    /// period, or on a node that restarted empty) starts from this
    /// machine's clock in microseconds, so its tokens are still larger
    /// provided the clocks of the machines taking the lock do not
    /// disagree by more than the time since the lost counter was created:
    /// after an expiry, at least this period. A longer period tolerates
    /// larger clock errors and keeps a key (about 150 bytes of server
    /// memory) per resource used within it on every node.
    ///
    /// Defaults to 10 minutes: thousands of times any sane clock error
    /// between NTP-synchronized machines and longer than almost any lock's
    /// TTL, while a service that locks per entity keeps only the entities
    /// of the last 10 minutes (1,000 new entities a second: about 600,000
    /// keys, 90 MB per node).
    pub fn fencing_expiry(mut self, idle: Duration) -> Builder {
        self.fencing_expiry = idle;
        self
    }

    /// Sets whether waiting threads are woken by releases. On, every
    /// release publishes on the resource's channel (the resource
    /// name followed by [`RELEASE_SUFFIX`](crate::RELEASE_SUFFIX)), and
    /// while threads of this manager wait for a lock (in
    /// [`LockManager::lock`] or [`LockManager::try_lock_for`]) it keeps one
    /// listening connection per node, subscribed to the channels of the
    /// resources waited on. A release ends the longest waiter's pause at
    /// once; this manager's threads are served in arrival order; a message
    /// that never comes costs one pause, as without it. A server or ACL
    /// user that refuses `SUBSCRIBE` or `PUBLISH` leaves waiting as it is
    /// off, and releases still succeed. Off, a waiting thread sleeps its
    /// whole random pause and asks again, and releases publish nothing.
    ///
    /// Defaults to on.
    pub fn wake_on_release(mut self, on: bool) -> Builder {
        self.wake_on_release = on;
        self
    }

    /// Sets how many replicas must acknowledge a member's write before its
    /// vote counts: each acquisition and extend is followed by `WAIT n`
    /// on the same connection, given half the node timeout, and a master
    /// whose write reached fewer replicas in that time counts as a failed
    /// member ([`NodeErrorKind::Replication`](crate::NodeErrorKind), "the
    /// write reached 0 of 1 replicas in time"; its key is removed again).
    /// A refusal wrote nothing, and counts as the no it is however far the
    /// replicas lag.
    /// This is the answer to a failover losing a lock: Redis replicates
    /// asynchronously, so a master that fails right after granting may be
    /// replaced by a replica that never saw the key. With `n` ≥ 1, a
    /// granted vote survives the promotion of a replica that acknowledged
    /// it, and only that: with `n` below the number of replicas another
    /// may be promoted, and in a split where the old master keeps taking
    /// writes while a replica is promoted on the other side, both sides
    /// can grant (`WAIT` does not make replication consistent). Costs one replication round trip per acquisition
    /// and extend (see BENCHMARKS.md), and a member whose replicas are
    /// down cannot vote: use it with members that have replicas (a Redis
    /// Cluster with replicas, a managed primary with a replica).
    ///
    /// Defaults to 0: no `WAIT`, as Redlock's plain masters need none.
    pub fn replica_acks(mut self, n: u32) -> Builder {
        self.replica_acks = n;
        self
    }

    /// Strict restart safety: a server whose process started less than
    /// `quarantine` ago does not vote, even one this manager never saw
    /// before (see the `restart` notes in the README). Set it to the
    /// longest TTL any client uses on these servers: then a server that
    /// restarted empty cannot help a second client take a lock the first
    /// still holds. Servers that sync every write to their append-only file
    /// (`appendfsync always` with `no-appendfsync-on-rewrite no`) are
    /// exempt, and so is any server whose `INFO` this user may not read. A
    /// server kept out is a failure in `Taken` and `NoQuorum`: "restarted
    /// 0.4s ago, not voting for 9.6s".
    ///
    /// Always on, with or without it: a change this manager witnessed (the
    /// server's `run_id` changed since it last connected: a restart, or
    /// another server behind a name that moved) keeps the server out for
    /// the longest TTL this manager has used (or this quarantine, if
    /// longer), counted from when the change was seen, whatever the
    /// server's uptime or persistence. That needs no configuration, but is
    /// blind to restarts before this process first connected (a
    /// short-lived `lockrun`), and to longer TTLs of other clients.
    ///
    /// Defaults to off (witnessed restarts only).
    pub fn restart_quarantine(mut self, quarantine: Duration) -> Builder {
        self.restart_quarantine = Some(quarantine);
        self
    }

    /// Sets how host names in node URLs are turned into addresses. It is
    /// called on a helper thread for every new connection to a node given
    /// by name (not for IP addresses), and waited for at most until the
    /// node timeout; while it has not answered, further connections to
    /// that node wait for the same answer instead of asking again. Nothing
    /// is cached, so a name that moves to a new address (a failover) is
    /// followed by the next connection.
    ///
    /// Defaults to the system resolver (`getaddrinfo`, as
    /// `std::net::ToSocketAddrs`).
    pub fn resolver<F>(mut self, resolve: F) -> Builder
    where
        F: Fn(&str, u16) -> std::io::Result<Vec<SocketAddr>> + Send + Sync + 'static,
    {
        self.resolver = Some(Arc::new(resolve));
        self
    }

    /// Trusts the PEM root certificate(s) in `pem` for `rediss://` nodes
    /// (a private CA), instead of the bundled Mozilla roots; may be called
    /// more than once. Server names are verified against the host in the
    /// URL, IP addresses included.
    ///
    /// Defaults to Mozilla's roots (the `webpki-roots` crate), which is
    /// what managed services' certificates chain to.
    #[cfg(feature = "tls")]
    pub fn tls_root_cert(mut self, pem: impl AsRef<[u8]>) -> Builder {
        self.tls.roots.push(pem.as_ref().to_vec());
        self
    }

    /// Presents a client certificate (mutual TLS) to `rediss://` nodes:
    /// `cert_pem` holds the certificate chain, `key_pem` its private key
    /// (PKCS#8, PKCS#1 or SEC1 PEM).
    ///
    /// Defaults to no client certificate.
    #[cfg(feature = "tls")]
    pub fn tls_client_cert(
        mut self,
        cert_pem: impl AsRef<[u8]>,
        key_pem: impl AsRef<[u8]>,
    ) -> Builder {
        self.tls.client = Some((cert_pem.as_ref().to_vec(), key_pem.as_ref().to_vec()));
        self
    }

    /// Checks the settings and builds the manager. No connection is opened
    /// yet.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when there are no nodes, a URL cannot be
    /// read or needs a feature not compiled in, the same server appears
    /// twice, the drift factor is outside `[0, 1)`, the node timeout or
    /// the fencing expiry is 0 or above [`MAX_TTL`], or the retry count is
    /// 0.
    pub fn build(self) -> Result<LockManager> {
        if self.members.is_empty() {
            return Err(Error::invalid_config("no Redis nodes were given"));
        }
        if !(0.0..1.0).contains(&self.drift_factor) {
            return Err(Error::invalid_config(format!(
                "drift factor must be in [0, 1), got {}",
                self.drift_factor
            )));
        }
        if self.node_timeout.is_zero() || self.node_timeout > MAX_TTL {
            return Err(Error::invalid_config(format!(
                "node timeout must be more than 0 and at most {MAX_TTL:?}, got {:?}",
                self.node_timeout
            )));
        }
        if self.fencing_expiry.is_zero() || self.fencing_expiry > MAX_TTL {
            return Err(Error::invalid_config(format!(
                "fencing expiry must be more than 0 and at most {MAX_TTL:?}, got {:?}",
                self.fencing_expiry
            )));
        }
        if self.restart_quarantine.is_some_and(|q| q > MAX_TTL) {
            return Err(Error::invalid_config(format!(
                "restart quarantine must be at most {MAX_TTL:?}, got {:?}",
                self.restart_quarantine
            )));
        }
        // Whole milliseconds, rounded up: any positive duration is kept.
        let expiry_ms = self.fencing_expiry.as_nanos().div_ceil(1_000_000) as u64;
        let retry = Retry::new(self.retry_count, self.retry_delay).map_err(|e| match e {
            Error::InvalidArgument { reason } => Error::invalid_config(reason),
            other => other,
        })?;
        #[cfg(feature = "tls")]
        let tls = crate::tls::Configs::new(self.tls.clone());
        // Certificate material is checked now, whether or not a node uses
        // TLS yet.
        #[cfg(feature = "tls")]
        if !self.tls.roots.is_empty() || self.tls.client.is_some() {
            tls.config(false)?;
        }
        let restart = Arc::new(Policy::new(self.restart_quarantine));
        let setup = Setup {
            restart: restart.clone(),
            timeout: self.node_timeout,
            max_idle: self.max_idle_per_node,
            resolve: self
                .resolver
                .clone()
                .unwrap_or_else(|| Arc::new(crate::resolve::system)),
            #[cfg(feature = "tls")]
            tls: Arc::new(tls),
        };
        let identities = Arc::new(Identities::default());
        let mut members: Vec<Member> = Vec::with_capacity(self.members.len());
        // Every server given, with the member it belongs to: the same
        // server twice (as nodes, or as seeds of two members) is refused.
        let mut servers: Vec<(Arc<Node>, String)> = Vec::new();
        for spec in &self.members {
            let (member, given) = match spec {
                Spec::Node(url) => {
                    let node = Arc::new(Node::open(url, &setup)?);
                    node.plain_member();
                    identities.node(node.name());
                    (Member::Node(node.clone()), vec![node])
                }
                Spec::Cluster(seeds) => {
                    let cluster = RedisCluster::open(seeds, &setup, identities.clone())?;
                    let seeds = cluster.seeds().to_vec();
                    (Member::Cluster(Arc::new(cluster)), seeds)
                }
            };
            for node in given {
                if let Some((_, other)) = servers.iter().find(|(n, _)| n.addr() == node.addr()) {
                    return Err(Error::invalid_config(format!(
                        "the server {} is given twice (in {other} and {}); Redlock needs \
                         independent members, and a vote counted twice is unsafe",
                        node.addr(),
                        member.name()
                    )));
                }
                servers.push((node, member.name().to_owned()));
            }
            members.push(member);
        }
        let members: Arc<[Member]> = members.into();
        Ok(LockManager {
            rounds: Arc::new(Rounds {
                waiters: Waiters::new(members.clone()),
                held: Default::default(),
                has_clusters: members.iter().any(|m| matches!(m, Member::Cluster(_))),
                identities,
                restart,
                replica_acks: (self.replica_acks > 0).then(|| {
                    let ms = (self.node_timeout.as_millis() / 2).max(1);
                    (self.replica_acks, ms.to_string())
                }),
                members,
                drift_factor: self.drift_factor,
                node_timeout: self.node_timeout,
                fencing_expiry_ms: self.fencing.then_some(expiry_ms),
                wake_on_release: self.wake_on_release,
            }),
            retry,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager(drift_factor: f64) -> LockManager {
        LockManager::builder()
            .node("redis://127.0.0.1:1")
            .drift_factor(drift_factor)
            .build()
            .unwrap()
    }

    #[test]
    fn ttl_checks() {
        let m = manager(0.01);
        let s = &m.rounds;
        assert_eq!(s.check_ttl(Duration::from_millis(1500)).unwrap(), 1500);
        assert_eq!(s.check_ttl(Duration::from_micros(1_500_900)).unwrap(), 1500);
        assert!(s.check_ttl(Duration::ZERO).is_err());
        assert!(s.check_ttl(Duration::from_micros(999)).is_err());
        assert!(s.check_ttl(Duration::from_millis(2)).is_err());
        assert!(s.check_ttl(Duration::from_millis(3)).is_ok());
        assert!(s.check_ttl(MAX_TTL).is_ok());
        assert!(s.check_ttl(MAX_TTL + Duration::from_millis(1)).is_err());
        assert!(s.check_ttl(Duration::MAX).is_err());
        // with a 0.5 factor, 4 ms leaves 4 - 2 - 2 = 0
        let m = manager(0.5);
        assert!(m.rounds.check_ttl(Duration::from_millis(4)).is_err());
        assert!(m.rounds.check_ttl(Duration::from_millis(6)).is_ok());
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_lock_budget_is_its_pauses_whatever_wakes_them_early() {
        let mut b = Budget::Pauses {
            left: 2,
            rest: Duration::ZERO,
        };
        assert_eq!(b.next(100 * MS), Some(100 * MS));
        // Woken after 30 ms: the next pause is the 70 ms left of it.
        b.spent(30 * MS);
        assert_eq!(b.next(999 * MS), Some(70 * MS));
        b.spent(70 * MS);
        // Then the second and last pause.
        assert_eq!(b.next(150 * MS), Some(150 * MS));
        b.spent(150 * MS);
        assert_eq!(b.next(150 * MS), None);
        // One attempt in all: no pause.
        let mut b = Budget::Pauses {
            left: 0,
            rest: Duration::ZERO,
        };
        assert_eq!(b.next(100 * MS), None);
        assert_eq!(Budget::Once.next(100 * MS), None);
    }

    #[test]
    fn a_deadline_budget_ends_at_the_deadline() {
        assert_eq!(Budget::Until(None).next(5 * MS), Some(5 * MS));
        let mut past = Budget::Until(Some(Instant::now()));
        assert_eq!(past.next(5 * MS), None);
        let mut far = Budget::Until(Some(Instant::now() + Duration::from_secs(60)));
        assert_eq!(far.next(5 * MS), Some(5 * MS));
        let mut near = Budget::Until(Some(Instant::now() + 50 * MS));
        assert!(near.next(Duration::from_secs(1)).unwrap() <= 50 * MS);
    }

    #[test]
    fn set_retry_rejects_zero_attempts_and_keeps_old_settings() {
        let mut m = manager(0.01);
        assert_eq!(m.retry(), (3, Duration::from_millis(200)));
        assert!(matches!(
            m.set_retry(0, Duration::ZERO),
            Err(Error::InvalidArgument { .. })
        ));
        assert_eq!(m.retry(), (3, Duration::from_millis(200)));
        m.set_retry(7, Duration::from_millis(5)).unwrap();
        assert_eq!(m.retry(), (7, Duration::from_millis(5)));
        // a clone keeps its own copy
        let c = m.clone();
        m.set_retry(1, Duration::ZERO).unwrap();
        assert_eq!(c.retry(), (7, Duration::from_millis(5)));
    }
}
