//! One Redis node: its address, a small pool of idle connections, the node
//! timeout, and the requests the algorithm sends.
//!
//! A request goes out in two steps so that a round can write to every node
//! before it reads any reply: [`Node::send`] writes on a pooled connection,
//! [`Node::receive`] reads the reply by the round's deadline. A node with
//! no usable pooled connection goes through [`Node::call`], which connects
//! first; only that can block for long, so only that runs on its own
//! thread (see `fanout::round`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{ConnectionAddr, IntoConnectionInfo};

use crate::base::error::Error;
use crate::base::node_error::{CallStep, Cause, NodeError, NodeErrorKind};
use crate::members::conn::{Tls, pack};
use crate::members::identities::Identities;
use crate::members::request::{Failure, Pooled, Routed, Said, is_reply, is_stale};
use crate::members::resolve::{ResolveFn, Resolver};
use crate::members::restart::{Policy, Quarantine, RunWatch};
use crate::members::script::Lua;
use crate::members::sentinel::{self, Group};
use crate::members::url::{check_url, redact, tls_scheme};

/// What every node of a manager is opened with (kept by Redis Cluster
/// members, which open the masters they discover).
#[derive(Clone)]
pub(crate) struct Setup {
    pub(crate) timeout: Duration,
    pub(crate) max_idle: usize,
    pub(crate) resolve: Arc<ResolveFn>,
    #[cfg(feature = "tls")]
    pub(crate) tls: Arc<crate::members::tls::Configs>,
    /// When restarted servers vote again.
    pub(crate) restart: Arc<Policy>,
    /// Scripts loaded with the handshake of every new connection: those
    /// a round sends by hash without a reload (the shapes choose them).
    pub(crate) preload: Vec<&'static Lua>,
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
    /// The failovers its Sentinels announced (see `sentinel::watch`),
    /// counted while `sentinels` lives; none for other nodes.
    switches: Arc<std::sync::atomic::AtomicU64>,
    sentinels: Option<sentinel::Sentinels>,

    /// Sent on every new connection: AUTH and SELECT (the first
    /// `required_names.len()`, which must succeed), then CLIENT SETINFO and
    /// SCRIPT LOAD of the scripts (which may fail).
    handshake: Vec<Vec<u8>>,
    /// The required commands' names, for messages.
    required_names: Vec<&'static str>,
    /// Where in the handshake `INFO server` and `CONFIG GET append*` are.
    identity_at: usize,
    /// What the connections told about the server over time.
    watch: RunWatch,
    /// Given as a node member (not a server of a Redis Cluster member).
    plain: std::sync::atomic::AtomicBool,
    /// The manager's record of who the members are, and the member this
    /// node serves (itself, or its cluster): see [`Node::join`].
    member: std::sync::OnceLock<(Arc<Identities>, Arc<str>)>,
    restart: Arc<Policy>,
    timeout: Duration,
    max_idle: usize,
    idle: Mutex<Vec<Pooled>>,
    /// The failure of a first contact (see [`Node::meet`]) and when.
    met_failure: Mutex<Option<(Instant, NodeError)>>,
    /// A connection's user was refused the server's own
    /// compare-and-delete: releases send the script on every connection
    /// (see `Reply::DelIfEq`).
    plain_delete_refused: std::sync::atomic::AtomicBool,
}

/// The commands a new connection starts with, those whose failure fails
/// it (by name), and where the server's identity is read (see
/// `restart.rs`).
fn handshake(
    credentials: (Option<&str>, Option<&str>),
    db: i64,
    preload: &[&'static Lua],
) -> (Vec<Vec<u8>>, Vec<&'static str>, usize) {
    let mut handshake = Vec::new();
    let mut required_names = Vec::new();
    match credentials {
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
    for lua in preload {
        handshake.push(pack(&[b"SCRIPT", b"LOAD", lua.source()]));
    }
    handshake.push(pack(&[b"CLIENT", b"SETINFO", b"LIB-NAME", b"redlock-sync"]));
    handshake.push(pack(&[
        b"CLIENT",
        b"SETINFO",
        b"LIB-VER",
        env!("CARGO_PKG_VERSION").as_bytes(),
    ]));
    (handshake, required_names, identity_at)
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
                reason: format!("cannot read node URL {:?}", redact(url)),
                source: Some(Box::new(source)),
            })?;
        if !info.addr().is_supported() {
            return Err(Error::invalid_config(format!(
                "node URL {:?} names an address this platform cannot connect to",
                redact(url)
            )));
        }
        let settings = info.redis_settings();
        let db = settings.db();
        let (handshake, required_names, identity_at) = handshake(
            (settings.username(), settings.password()),
            db,
            &setup.preload,
        );
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
                name: Some(crate::members::tls::server_name(host)?),
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
            switches: Arc::default(),
            sentinels: None,
            handshake,
            required_names,
            identity_at,
            watch: RunWatch::default(),
            plain: std::sync::atomic::AtomicBool::new(false),
            plain_delete_refused: std::sync::atomic::AtomicBool::new(false),
            member: std::sync::OnceLock::new(),
            restart: setup.restart.clone(),
            timeout,
            max_idle,
            idle: Mutex::new(Vec::with_capacity(max_idle)),
            met_failure: Mutex::new(None),
        })
    }

    /// A Sentinel group's master (see `sentinel.rs`): a node whose host
    /// its Sentinels resolve on every new connection.
    pub(crate) fn open_group(group: &Group, setup: &Setup) -> Result<Node, Error> {
        #[cfg(feature = "tls")]
        let tls = match group.tls {
            true => Some(setup.tls.config(false)?),
            false => None,
        };
        #[cfg(not(feature = "tls"))]
        let tls = match group.tls {
            true => {
                return Err(Error::invalid_config(format!(
                    "the Sentinel group {} is over TLS, which needs redlock-sync's `tls` \
                     feature (features = [\"tls\"] in Cargo.toml)",
                    group.name()
                )));
            }
            false => None,
        };
        let reach = sentinel::Reach::new(group, setup.timeout, setup.resolve.clone(), tls);
        let mut setup = setup.clone();
        setup.resolve = sentinel::resolver(group.clone(), reach.clone());
        let mut node = Node::open(&group.data_url, &setup)?;
        node.name = group.name().into();
        // The master's certificate is checked against the IP address
        // dialled (the one the Sentinels announce, or one their name
        // resolves to).
        #[cfg(feature = "tls")]
        if let Some(tls) = &mut node.tls {
            tls.name = None;
        }
        let switches = node.switches.clone();
        node.resolver = node.resolver.take().map(|r| r.following(switches));
        node.sentinels = Some(sentinel::watch(group, &reach, node.switches.clone()));
        Ok(node)
    }

    /// Whether its address follows a Sentinel group's master.
    pub(crate) fn follows(&self) -> bool {
        self.sentinels.is_some()
    }

    /// A Sentinel group's Sentinels (none for other nodes).
    pub(crate) fn sentinels(&self) -> Option<&sentinel::Sentinels> {
        self.sentinels.as_ref()
    }

    /// How many failovers its Sentinels announced (0 for other nodes).
    fn switches(&self) -> u64 {
        self.switches.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether its Sentinels announced a failover since `switches` were
    /// counted (a connection opened then may reach the old master).
    pub(crate) fn switched_since(&self, switches: u64) -> bool {
        self.switches() != switches
    }

    /// Makes this node tell `identities` which server it reaches (its
    /// `run_id`, on every new connection), as a server of `member`: one
    /// server reached by two members is a configuration error.
    pub(crate) fn join(&self, identities: Arc<Identities>, member: Arc<str>) {
        let _ = self.member.set((identities, member));
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
    pub(crate) fn run(&self, req: Routed<'_>, deadline: Instant) -> Result<Said, NodeError> {
        match self.send(req, deadline, None) {
            Some(pooled) => match self.receive(pooled, req, deadline) {
                Received::Done(answer) => answer,
                Received::Stale => self.call(req, deadline),
            },
            None => self.call(req, deadline),
        }
    }

    /// The node timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Writes `req` on a pooled connection. `None` when there is no pooled
    /// connection or it was found broken: then use [`call`](Self::call).
    /// `left`: what was left until `deadline` at a clock read just
    /// before, with nothing since but short steps (the pool's and the
    /// route's locks, packing; a round's first write), so that the write
    /// reads no clock of its own.
    pub(crate) fn send(
        &self,
        req: Routed<'_>,
        deadline: Instant,
        left: Option<Duration>,
    ) -> Option<Pooled> {
        let mut pooled = self.checkout()?;
        match pooled.send(&[req], deadline, left) {
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

    /// Connects to the server if no connection ever did, by `deadline`, so
    /// that what its handshake reads (its `run_id`) is known; the
    /// connection goes to the pool. A failure leaves it unknown, and is
    /// what the next connection attempt within a node timeout answers
    /// (the round that follows: one wait for a dead server, not two, and
    /// its first words, not a second attempt's).
    pub(crate) fn meet(&self, deadline: Instant) {
        if self.watch.met() {
            return;
        }
        match self.connect(deadline) {
            Ok(pooled) => self.checkin(pooled),
            Err(e) => *self.met_failure.lock() = Some((Instant::now(), e)),
        }
    }

    /// How many times the `run_id` this node's connections read changed.
    pub(crate) fn runs(&self) -> u64 {
        self.watch.runs()
    }

    /// Whether a connection to the server was ever made (see
    /// [`meet`](Self::meet)).
    pub(crate) fn met(&self) -> bool {
        self.watch.met()
    }

    /// The server this node reaches, as its token names it: the first
    /// digits of the `run_id` its last connection read (see
    /// `holder::server_names`); none while unknown.
    pub(crate) fn run_digest(&self) -> Option<Vec<u8>> {
        self.watch.run_digest(crate::base::holder::RUN_DIGITS)
    }

    /// Whether this server is kept out of votes now (see `restart.rs`).
    pub(crate) fn quarantine(&self) -> Option<Quarantine> {
        self.watch.quarantine_now(&self.restart)
    }

    /// An answer as it counts: none from a cluster-mode server given as a
    /// plain node (whatever key was asked), and, for a request that decides
    /// a holder, none from a server kept out after a restart, whatever it
    /// said (a yes left a key there, so the failure is not settled).
    fn vote(&self, req: Routed<'_>, answer: Result<Said, NodeError>) -> Result<Said, NodeError> {
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
        if req.req.decides
            && answer.is_ok()
            && let Some(q) = self.quarantine()
        {
            return Err(self.quarantined(q));
        }
        answer
    }

    /// The failure of a server kept out after a restart.
    #[cold]
    fn quarantined(&self, q: Quarantine) -> NodeError {
        let (seen, why) = match q.witnessed {
            true => (
                "restarted or replaced (run_id changed)",
                " (a restart, or another server behind its address)",
            ),
            false => ("restarted", ""),
        };
        let e = Cause::Restarted(format!(
            "{seen} {:.1}s ago: in restart quarantine, not voting for {:.1}s{why}",
            q.up.as_secs_f64(),
            q.left.as_secs_f64()
        ));
        self.error(e, false)
    }

    /// Reads the reply to `req` written by [`send`](Self::send).
    pub(crate) fn receive(
        &self,
        mut pooled: Pooled,
        req: Routed<'_>,
        deadline: Instant,
    ) -> Received {
        match pooled.finish(req, 0, deadline) {
            Ok(v) => {
                self.checkin(pooled);
                Received::Done(self.vote(req, Ok(v)))
            }
            Err(f) => self.receive_failed(pooled, f, req),
        }
    }

    /// [`receive`](Self::receive) after a failure: out of the common
    /// path's way.
    #[cold]
    #[inline(never)]
    fn receive_failed(&self, mut pooled: Pooled, f: Failure, req: Routed<'_>) -> Received {
        self.role_changed(&mut pooled, &f.error);
        match f {
            f if f.keep => {
                let refused = self.refused(&pooled, f, req, 0);
                self.checkin(pooled);
                Received::Done(self.vote(req, Err(refused)))
            }
            // Refused with replies left unread: the connection is dropped.
            f if is_reply(&f.error) => {
                Received::Done(self.vote(req, Err(self.refused(&pooled, f, req, 0))))
            }
            // Closed before any reply: the server restarted since the
            // connection was last used, and never ran the request. (One
            // that answered part of a pipeline and then broke ran it: a
            // failure of this node, cleaned up as one, never sent again.)
            f if is_stale(&f.error) && !pooled.con.answered() => {
                self.idle.lock().clear();
                crate::base::logging::log!(
                    debug,
                    "redlock_sync::node",
                    "{}: pooled connection found closed; reconnecting",
                    self.name
                );
                Received::Stale
            }
            f => Received::Done(Err(self.failed(pooled, f.error, req, 0))),
        }
    }

    /// After `error` on `pooled`: a reply that says the server changed
    /// role, or may have (a master demoted, a slot moved, data loading),
    /// makes this connection and the node's idle ones forget the fencing
    /// counters they counted, which are then counted by the script again
    /// (see `Counts`, "What it does not cover").
    fn role_changed(&self, pooled: &mut Pooled, error: &Cause) {
        let changed = [
            "READONLY",
            "MASTERDOWN",
            "LOADING",
            "MOVED",
            "ASK",
            "CLUSTERDOWN",
        ];
        let code = error.code();
        // A demoted master (READONLY), a replica whose link to its master
        // is down (MASTERDOWN), one reloading as a replica (LOADING), a
        // master cut off from its replicas under `min-replicas-to-write`
        // (NOREPLICAS: an old master after a failover, maybe): the next
        // connection asks the Sentinels where the master is now.
        let moved = ["READONLY", "MASTERDOWN", "LOADING", "NOREPLICAS"];
        if self.follows() && code.is_some_and(|code| moved.contains(&code)) {
            pooled.demoted = true;
            self.idle.lock().clear();
        }
        if code.is_some_and(|code| changed.contains(&code)) {
            pooled.counts.forget();
            for idle in self.idle.lock().iter_mut() {
                idle.counts.forget();
                idle.counts.settle();
            }
        }
    }

    /// Runs `req` on a new connection, everything by `deadline`.
    pub(crate) fn call(&self, req: Routed<'_>, deadline: Instant) -> Result<Said, NodeError> {
        let mut pooled = self.connect(deadline)?;
        let result = match pooled.send(&[req], deadline, None) {
            Ok(()) => pooled.finish(req, 0, deadline),
            Err(e) => Err(e.into()),
        };
        match result {
            Ok(v) => {
                self.checkin(pooled);
                self.vote(req, Ok(v))
            }
            Err(f) if f.keep => {
                self.role_changed(&mut pooled, &f.error);
                let refused = self.refused(&pooled, f, req, 0);
                self.checkin(pooled);
                self.vote(req, Err(refused))
            }
            // Refused with replies left unread: the connection is dropped.
            Err(f) if is_reply(&f.error) => self.vote(req, Err(self.refused(&pooled, f, req, 0))),
            Err(f) => Err(self.failed(pooled, f.error, req, 0)),
        }
    }

    /// Writes `reqs` back to back on a pooled connection (one pipeline).
    /// `None` when there is no pooled connection or it was found broken:
    /// then use [`run_all`](Self::run_all).
    pub(crate) fn send_all(&self, reqs: &[Routed<'_>], deadline: Instant) -> Option<Pooled> {
        let mut pooled = self.checkout()?;
        match pooled.send(reqs, deadline, None) {
            Ok(()) => Some(pooled),
            Err(_) => {
                self.idle.lock().clear();
                None
            }
        }
    }

    /// Reads the replies to `reqs` written by [`send_all`](Self::send_all),
    /// in order, each answer as [`receive`](Self::receive) gives it.
    /// `None` when the connection was found closed before any reply
    /// (nothing ran: send them again on a new connection). A reply that
    /// leaves the connection out of step fails the ones behind it, as not
    /// settled (they may have run); the connection is dropped.
    pub(crate) fn receive_all(
        &self,
        mut pooled: Pooled,
        reqs: &[Routed<'_>],
        deadline: Instant,
    ) -> Option<Vec<Result<Said, NodeError>>> {
        let mut answers = Vec::with_capacity(reqs.len());
        for (at, &req) in reqs.iter().enumerate() {
            let answer = match pooled.finish(req, at, deadline) {
                Ok(v) => self.vote(req, Ok(v)),
                Err(f) if f.keep => self.vote(req, Err(self.refused(&pooled, f, req, at))),
                Err(f) if is_stale(&f.error) && !pooled.con.answered() => {
                    self.idle.lock().clear();
                    return None;
                }
                Err(f) => {
                    let answer = if is_reply(&f.error) {
                        self.vote(req, Err(self.refused(&pooled, f, req, at)))
                    } else {
                        Err(self.failed(pooled, f.error, req, at))
                    };
                    let timed_out = matches!(&answer, Err(e) if e.kind() == NodeErrorKind::Timeout);
                    answers.push(answer);
                    answers.extend(reqs[at + 1..].iter().map(|_| Err(self.unread(timed_out))));
                    return Some(answers);
                }
            };
            answers.push(answer);
        }
        self.checkin(pooled);
        Some(answers)
    }

    /// Runs `reqs` as one pipeline: on a pooled connection if there is
    /// one, else (or if it was found closed) on a new one; everything by
    /// `deadline`. Without a connection, the first request's answer says
    /// why and the others' that they were not sent.
    pub(crate) fn run_all(
        &self,
        reqs: &[Routed<'_>],
        deadline: Instant,
    ) -> Vec<Result<Said, NodeError>> {
        if let Some(pooled) = self.send_all(reqs, deadline)
            && let Some(answers) = self.receive_all(pooled, reqs, deadline)
        {
            return answers;
        }
        let sent =
            self.connect(deadline)
                .and_then(|mut pooled| match pooled.send(reqs, deadline, None) {
                    Ok(()) => Ok(pooled),
                    Err(e) => Err(self.error(e, true)),
                });
        let pooled = match sent {
            Ok(pooled) => pooled,
            Err(first) => {
                let mut answers = vec![Err(first)];
                answers.extend(reqs[1..].iter().map(|_| {
                    let why = "not sent: no connection (see the first request's failure)";
                    let e = std::io::Error::new(std::io::ErrorKind::NotConnected, why);
                    Err(NodeError::opening(
                        self.name.clone(),
                        e,
                        CallStep::Connect,
                        self.timeout,
                    ))
                }));
                return answers;
            }
        };
        // Found closed again, before any reply: each one a failure.
        self.receive_all(pooled, reqs, deadline)
            .unwrap_or_else(|| reqs.iter().map(|_| Err(self.unread(false))).collect())
    }

    /// The failure of a request pipelined behind one that broke the
    /// connection: it may have run (not settled).
    fn unread(&self, timed_out: bool) -> NodeError {
        let cause = if timed_out {
            crate::members::conn::timed_out()
        } else {
            Cause::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "no reply read: an earlier reply of the pipeline failed",
            ))
        };
        self.error(cause, false)
    }

    /// The error for an error reply to `req` (the `at`-th request written
    /// on `pooled`), naming the command it answered.
    #[cold]
    fn refused(&self, pooled: &Pooled, f: Failure, req: Routed<'_>, at: usize) -> NodeError {
        let about = pooled.lowered(req, at).describe(f.at);
        self.error(f.error, false).about(about)
    }

    /// The error for a request that got no complete reply. The connection
    /// is dropped, never reused: a late reply must never be read as the
    /// answer to a later command. If the request timed out, its
    /// `Lowered::on_timeout` follow-up is written on the connection first, so that
    /// the node executes it right after a late execution of the request.
    #[cold]
    fn failed(&self, mut pooled: Pooled, e: Cause, req: Routed<'_>, at: usize) -> NodeError {
        let mut error = self.error(e, false);
        let timed_out = error.kind() == NodeErrorKind::Timeout;
        if let Some(follow_up) = timed_out
            .then(|| pooled.lowered(req, at).on_timeout())
            .flatten()
        {
            // Sent as the request was: a request that followed an `ASK`
            // runs on the importing node only after `ASKING`, and so does
            // its clean-up.
            let follow_up = if req.asking {
                [&pack(&[b"ASKING"])[..], &follow_up].concat()
            } else {
                follow_up
            };
            error.settled = pooled.con.write_now(&follow_up).is_ok();
        }
        error
    }

    /// The failure reported for a node whose call panicked (a bug, never
    /// expected): counted as a failed node instead of unwinding.
    #[cold]
    pub(crate) fn panicked(&self) -> NodeError {
        let e = Cause::Panicked;
        self.error(e, false)
    }

    #[cold]
    fn error(&self, e: impl Into<Cause>, connecting: bool) -> NodeError {
        NodeError::classify(self.name.clone(), e, connecting, self.timeout)
    }

    /// Connections currently idle in the pool (for tests).
    #[cfg(test)]
    pub(crate) fn idle_len(&self) -> usize {
        self.idle.lock().len()
    }
}

mod pool;
mod query;

pub(crate) use pool::{Listener, Received};

#[cfg(test)]
mod tests;
