//! [`Builder`]: every setting of a [`LockManager`] and its default, in
//! one place, checked by [`Builder::build`].

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::base::error::{Error, Result};
use crate::engine::pipeline::{Engine, MAX_TTL};
use crate::engine::stage::Retry;
use crate::engine::wait::Waiters;
use crate::members::identities::Identities;
use crate::members::member::Member;
use crate::members::node::{Node, Setup};
use crate::members::redis_cluster::RedisCluster;
use crate::members::resolve::ResolveFn;
use crate::members::restart::Policy;
use crate::members::sentinel::{self, Group};
use crate::members::url::redact;
use crate::shapes::manager::LockManager;

// The defaults, in one place.
const DEFAULT_RETRY_COUNT: u32 = 3;
const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);
const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);
const DEFAULT_MAX_IDLE_PER_NODE: usize = 16;
const DEFAULT_FENCING: bool = true;
const DEFAULT_FENCING_EXPIRY: Duration = Duration::from_secs(10 * 60);
const DEFAULT_WAKE_ON_RELEASE: bool = true;
const DEFAULT_FAIR: bool = true;
const DEFAULT_FAIR_YIELD: Option<Duration> = Some(Duration::from_secs(1));
const DEFAULT_NAME_HOLDERS: bool = true;
const DEFAULT_REPLICA_ACKS: u32 = 0;

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
    fair: bool,
    fair_yield: Option<Duration>,
    name_holders: bool,
    holder_label: Option<String>,
    replica_acks: u32,
    restart_quarantine: Option<Duration>,
    resolver: Option<Arc<ResolveFn>>,
    #[cfg(feature = "tls")]
    tls: crate::members::tls::TlsOptions,
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
            .field("fair", &self.fair)
            .field("fair_yield", &self.fair_yield)
            .field("name_holders", &self.name_holders)
            .field("holder_label", &self.holder_label)
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
            fair: DEFAULT_FAIR,
            fair_yield: DEFAULT_FAIR_YIELD,
            name_holders: DEFAULT_NAME_HOLDERS,
            holder_label: None,
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

    /// Adds a Redis Sentinel group (one master and its replicas, watched
    /// by Sentinels) as one member, by a URL of the form
    /// `redis-sentinel://[[user]:password@]host[:port][,host[:port]...][/db]#master`:
    /// the Sentinels' addresses (26379 by default), the master's name
    /// after `#`; the credentials and database are the master's. The
    /// master's address is asked of every Sentinel on each new
    /// connection and taken where a majority of them agree, so a failover
    /// is followed. A promoted replica may lack recent grants: the
    /// restart rules keep it from counting (see the crate docs,
    /// "Redis Sentinel"). [`node`](Self::node) takes the same URL.
    ///
    /// Defaults to no members; at least one node or cluster is required.
    pub fn sentinel(self, url: impl AsRef<str>) -> Builder {
        self.node(url)
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

    /// Sets how long [`LockManager::lock`] (and every bare verb: `lock_all`,
    /// `read`, `write`, `acquire`, `campaign`) waits for a busy lock: `count`
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
    /// ([`LockGuard::fencing_token`](crate::LockGuard::fencing_token)). On, each node keeps a counter per
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
    /// TTL, so the counter outlives every lock taken on it). A counter's
    /// expiry is only ever raised: managers with different periods on one
    /// resource keep it for the longest. Any positive duration, in whole
    /// milliseconds (rounded up).
    ///
    /// A longer period tolerates larger clock errors between the machines
    /// taking the lock (a counter created anew, or gone back, counts on
    /// from the clock) and
    /// keeps a key (about 150 bytes) per resource used within it on every
    /// node: the crate docs' [Fencing tokens](crate#fencing-tokens) say
    /// when tokens stay monotonic, exactly, and what it costs.
    ///
    /// Defaults to 10 minutes.
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

    /// Sets whether this manager's waiters queue across managers and
    /// processes: a release hands the lock to the first live waiter
    /// queued on the members, so that waiters on different hosts are
    /// served in arrival order instead of racing on every release. The
    /// queue decides only who may try; mutual exclusion still comes from
    /// the majority of lock keys, so a queue lost or different on some
    /// member costs fairness, never safety. Applies to locks (and the
    /// write side of read-write locks), sets and election candidates;
    /// readers and permits wait as before. Give every client of a
    /// resource the same setting. Needs `+time +zadd +zrem +zrange +hset
    /// +hget +hdel` beside the [minimal ACL rule](crate#permissions).
    ///
    /// The design, why it is safe and deadlock-free, what a dead waiter
    /// costs, what it costs when nobody waits, and when to turn it off:
    /// [Fair waiting across processes](crate#fair-waiting-across-processes).
    ///
    /// Defaults to on.
    pub fn fair(mut self, on: bool) -> Builder {
        self.fair = on;
        self
    }

    /// Sets how long a fair manager's releases may hand a lock on from
    /// queued waiter to queued waiter (from the first hand-off, or the
    /// last yield, while waiters stay queued) before one release yields
    /// it instead, while a client that cannot queue says it waits: deletes
    /// the key, tells no fair waiter, and for a reservation's length (see
    /// "Its timings" in [Fair waiting across
    /// processes](crate#fair-waiting-across-processes)) no queued fair
    /// waiter takes the free key, the first in line included. With no such
    /// client saying so, a release yields after eight times as long.
    /// `None`: never yield (every client of the resource is a fair manager
    /// of this library).
    ///
    /// Who says it waits: this library's managers with
    /// [`fair(false)`](Self::fair), whose waiting threads listen on the
    /// name's release channel followed by `:-` (with
    /// [`wake_on_release`](Self::wake_on_release) on), which the release
    /// sees (`PUBSUB NUMSUB`), and whose threads ask at once when a yield
    /// is announced: a turn within about `every`. Other Redlock clients
    /// (node-redlock, redsync, pottery, the `redlock` crate) cannot: for
    /// them a yield comes every `8 × every`, a chance they take when an
    /// attempt of theirs comes within it.
    ///
    /// Under contention that never lets up, it costs the fair waiters a
    /// free key for a reservation, until their lapse retry, once per period
    /// (sets, which learn no lapse, up to two reservations), and a
    /// reservation more when the waiter first in line is dead; with nobody
    /// else there, once per eight periods, which measured within noise of
    /// `None`. See "Mixing clients" in [Fair waiting across
    /// processes](crate#fair-waiting-across-processes) for what it was
    /// measured to cost and to give.
    ///
    /// Defaults to `Some(1 s)`.
    pub fn fair_yield(mut self, every: Option<Duration>) -> Builder {
        self.fair_yield = every;
        self
    }

    /// Sets whether this manager's lock tokens name their holder: the
    /// host name and process id (and the [label](Self::holder_label), if
    /// any) after the token's 128 random bits, such as
    /// `3f2a…c1@web-3/4121/nightly-report`. [`inspect`](LockManager::inspect),
    /// `lockrun --inspect` and the [`Taken`](crate::Error::Taken) error then
    /// say who holds a lock ([`HolderName`](crate::HolderName)). The random
    /// part keeps tokens unguessable either way. Off (for privacy: the key's
    /// value is readable by anyone who can `GET` it), tokens are the 32 hex
    /// digits alone. Other Redlock clients compare values whole, so they
    /// exclude these tokens as any other, and these theirs.
    ///
    /// Defaults to on.
    pub fn name_holders(mut self, on: bool) -> Builder {
        self.name_holders = on;
        self
    }

    /// Sets a label that this manager's tokens carry after the host and
    /// process (with [`name_holders`](Self::name_holders) on): what the
    /// holder is, for operators (`lockrun` gives its command's name). Kept
    /// to letters, digits and `.-_+=,` (anything else is written `_`), at
    /// most [`MAX_LABEL`](crate::base::holder::MAX_LABEL) bytes (longer is cut).
    ///
    /// Defaults to none.
    pub fn holder_label(mut self, label: impl Into<String>) -> Builder {
        self.holder_label = Some(label.into());
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
    /// before (see "Restarts" in the crate docs). Set it to the
    /// longest TTL any client uses on these servers: then a server that
    /// restarted empty cannot help a second client take a lock the first
    /// still holds. Servers that sync every write to their append-only file
    /// (`appendfsync always` with `no-appendfsync-on-rewrite no`) are
    /// exempt, and so is any server whose `INFO` this user may not read. A
    /// server kept out is a failure in `Taken` and `NoQuorum`: "restarted
    /// 0.4s ago: in restart quarantine, not voting for 9.6s". With it,
    /// fencing counters are counted by the count script every time, never
    /// by `INCR` (which counts on from a counter whose data went back
    /// behind a connection that stayed open: see [Fencing
    /// tokens](crate#fencing-tokens)).
    ///
    /// Without it, only a change this manager witnessed (a new `run_id`
    /// behind an address) keeps a server out: blind to restarts before
    /// this process first connected (a short-lived `lockrun`), and to
    /// longer TTLs of other clients. The rules and their proof are in the
    /// crate docs, [The rule](crate#the-rule).
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
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
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
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_cert(
        mut self,
        cert_pem: impl AsRef<[u8]>,
        key_pem: impl AsRef<[u8]>,
    ) -> Builder {
        self.tls.client = Some((cert_pem.as_ref().to_vec(), key_pem.as_ref().to_vec()));
        self
    }

    /// Checks the settings and builds the manager. No connection is opened
    /// yet. The manager belongs to this process: a process forked without
    /// `exec` builds its own (see the crate docs, [Why the lock is
    /// safe](crate#why-the-lock-is-safe), assumption 6).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] when there are no nodes, a URL cannot be
    /// read or needs a feature not compiled in, the same server appears
    /// twice, the drift factor is outside `[0, 1)`, the node timeout or
    /// the fencing expiry is 0 or above [`MAX_TTL`], the retry count is
    /// 0, or [`fair_yield`](Self::fair_yield) is under 1 ms or above
    /// [`MAX_TTL`].
    pub fn build(self) -> Result<LockManager> {
        self.validate()?;
        // Whole milliseconds, rounded up: any positive duration is kept.
        let expiry_ms = self.fencing_expiry.as_nanos().div_ceil(1_000_000) as u64;
        let retry = Retry::new(self.retry_count, self.retry_delay).map_err(|e| match e {
            Error::InvalidArgument { reason } => Error::invalid_config(reason),
            other => other,
        })?;
        #[cfg(feature = "tls")]
        let tls = crate::members::tls::Configs::new(self.tls.clone());
        // Certificate material is checked now, whether or not a node uses
        // TLS yet.
        #[cfg(feature = "tls")]
        if !self.tls.roots.is_empty() || self.tls.client.is_some() {
            tls.config(false)?;
        }
        let restart = Arc::new(Policy::new(self.restart_quarantine, self.drift_factor));
        let setup = Setup {
            restart: restart.clone(),
            timeout: self.node_timeout,
            max_idle: self.max_idle_per_node,
            resolve: self
                .resolver
                .clone()
                .unwrap_or_else(|| Arc::new(crate::members::resolve::system)),
            #[cfg(feature = "tls")]
            tls: Arc::new(tls),
            preload: crate::shapes::preloaded(),
        };
        let identities = Arc::new(Identities::default());
        let members = self.open_members(&setup, &identities)?;
        let members: Arc<[Member]> = members.into();
        let entropy = crate::base::entropy::Entropy::new();
        Ok(LockManager::from_parts(
            Engine {
                // Hand-offs to fair waiters go to the manager's own channel
                // (without randomness, to the release channel).
                waiters: Waiters::new(
                    members.clone(),
                    self.fair
                        .then(|| crate::engine::pipeline::new_token(&entropy, b""))
                        .and_then(|t| t.ok())
                        .map(|t| t[..16].to_vec()),
                ),
                held: Default::default(),
                has_clusters: members.iter().any(Member::is_cluster),
                identities,
                restart,
                replica_acks: (self.replica_acks > 0).then(|| {
                    let ms = (self.node_timeout.as_millis() / 2).max(1);
                    (self.replica_acks, ms.to_string())
                }),
                members,
                drift_factor: self.drift_factor,
                node_timeout: self.node_timeout,
                warned_short_ttl: Default::default(),
                fair_yield_ms: self
                    .fair_yield
                    .map(|d| d.as_millis().min(u64::MAX as u128) as u64),
                fencing: self.fencing,
                counter_expiry_ms: expiry_ms,
                wake_on_release: self.wake_on_release,
                holder_name: match self.name_holders {
                    true => crate::base::holder::suffix(self.holder_label.as_deref()),
                    false => Vec::new(),
                },
                entropy,
                fair: self.fair,
                fair_refused: Default::default(),
                names: Default::default(),
            },
            retry,
        ))
    }

    /// The checks [`build`](Self::build) makes before it opens anything.
    fn validate(&self) -> Result<()> {
        if self.members.is_empty() {
            return Err(Error::invalid_config("no Redis nodes were given"));
        }
        if let Some(every) = self.fair_yield
            && !(Duration::from_millis(1)..=MAX_TTL).contains(&every)
        {
            return Err(Error::invalid_config(format!(
                "fair_yield must be from 1 ms to {MAX_TTL:?} (or None for never), got {every:?}"
            )));
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
        Ok(())
    }

    /// Opens every member given, each with `setup`: the same server twice
    /// (as nodes, or as seeds of two members) is refused.
    fn open_members(&self, setup: &Setup, identities: &Arc<Identities>) -> Result<Vec<Member>> {
        let mut members: Vec<Member> = Vec::with_capacity(self.members.len());
        // Every server given, with the member it belongs to: the same
        // server twice (as nodes, or as seeds of two members) is refused.
        let mut servers: Vec<(Arc<Node>, String)> = Vec::new();
        // The Sentinel groups given, each once.
        let mut groups: Vec<Group> = Vec::new();
        for spec in &self.members {
            let (member, given) = match spec {
                Spec::Node(url) => {
                    let group = sentinel::is_group(url)
                        .then(|| Group::parse(url))
                        .transpose()?;
                    if let Some(group) = &group
                        && let Some(other) = groups.iter().find(|g| g.same_as(group))
                    {
                        return Err(Error::invalid_config(format!(
                            "the Sentinel group {} is given twice (as {}); Redlock needs \
                             independent members, and a vote counted twice is unsafe",
                            group.name(),
                            other.name()
                        )));
                    }
                    let node = Arc::new(match &group {
                        Some(group) => Node::open_group(group, setup)?,
                        None => Node::open(url, setup)?,
                    });
                    node.plain_member();
                    identities.node(node.name());
                    node.join(identities.clone(), node.name().into());
                    // A group's address is its master's of the moment: told
                    // apart from the others' by its server's `run_id`.
                    let given = match group {
                        Some(group) => {
                            groups.push(group);
                            Vec::new()
                        }
                        None => vec![node.clone()],
                    };
                    (Member::Node(node), given)
                }
                Spec::Cluster(seeds) => {
                    let cluster = RedisCluster::open(seeds, setup, identities.clone())?;
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
        Ok(members)
    }
}
