//! [`LockManager::check`](crate::LockManager::check): what an operator
//! needs to know about each server before trusting it with locks, as a
//! typed report with a verdict per server.

use std::fmt;
use std::time::{Duration, Instant};

use crate::base::keys::{
    self, fence_key, queue_key, readers_key, record_key, release_channel, tickets_key, writer_key,
};
use crate::base::node_error::{NodeError, NodeErrorKind};
use crate::engine::fair::{CLAIM_QUEUED, HANDOFF, JOIN, LEAVE};
use crate::engine::single::{COUNT, EXTEND, RAISE, UNLOCK};
use crate::members::conn::pack;
use crate::members::member::Member;
use crate::members::node::Node;
use crate::members::restart::{config_pairs, field, text};
use crate::shapes::election::{CLAIM, EXTEND_LEADER, READ_LEADER, RESIGN};
use crate::shapes::manager::LockManager;
use crate::shapes::rwlock::{EXTEND_READ, READ, UNREAD};
use crate::shapes::set::{LOCK_SET, UNLOCK_SET};

/// How far a server can be trusted with locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Verdict {
    /// Nothing to change.
    Ok,
    /// Usable, with a weakness to know of (no persistence, so restarts
    /// keep it out for the quarantine; `appendfsync everysec`; restart
    /// detection off; waiters polling).
    Warning,
    /// Not usable for locks: unreachable, a replica, a memory policy that
    /// may evict lock keys, or a command the lock sends refused.
    Unsafe,
}

/// One thing found on a server, with what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Problem {
    /// How bad it is.
    pub verdict: Verdict,
    /// What is wrong and what to change, for a person, in a few words:
    /// `maxmemory-policy allkeys-lru may evict lock keys: set noeviction`.
    pub text: String,
    /// The servers' own words behind it, when there are some (each
    /// refused command with its error reply), for `lockrun --check -v`
    /// and the alternate form (`{:#}`) of the report.
    pub detail: Option<String>,
}

/// What [`LockManager::check`](crate::LockManager::check) found of a
/// Sentinel group's member beside its master (see the crate docs,
/// "Redis Sentinel").
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentinelReport {
    /// The Sentinels its URL gives.
    pub given: usize,
    /// Those that answered `SENTINEL MASTER`.
    pub answered: usize,
    /// The most Sentinels one of them knows for the master, itself
    /// included: more than given means some are missing from the URL.
    pub known: Option<u32>,
    /// The Sentinels' quorum for the master: how many must find it down
    /// before a failover (which a majority of them must then authorize).
    pub quorum: Option<u32>,
    /// The replicas linked to the master (`connected_slaves`).
    pub replicas: Option<u32>,
    /// The master's `min-replicas-to-write`, where `CONFIG GET` is allowed.
    pub min_replicas_to_write: Option<u32>,
    /// The master's `min-replicas-max-lag` (seconds).
    pub min_replicas_max_lag: Option<u32>,
}

/// What [`LockManager::check`](crate::LockManager::check) found on one
/// server (a node, or one master of a Redis Cluster member).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeReport {
    /// The server's name, as errors give it.
    pub node: String,
    /// It answered.
    pub reachable: bool,
    /// The round trip of a `PING` on an open connection.
    pub latency: Option<Duration>,
    /// `redis 7.0.15`, `valkey 8.1.8`.
    pub server: Option<String>,
    /// `master`, or `slave` for a replica.
    pub role: Option<String>,
    /// How long its process has been up.
    pub uptime: Option<Duration>,
    /// The append-only file is on.
    pub aof: Option<bool>,
    /// `always`, `everysec` or `no`, where `CONFIG GET` is allowed.
    pub appendfsync: Option<String>,
    /// `maxmemory` in bytes (0: no limit).
    pub maxmemory: Option<u64>,
    /// `maxmemory-policy`.
    pub maxmemory_policy: Option<String>,
    /// It runs in cluster mode.
    pub cluster_enabled: Option<bool>,
    /// Commands the lock sends that the server refused to this user.
    pub missing_permissions: Vec<String>,
    /// Why it does not vote now, if it is kept out after a restart.
    pub quarantine: Option<String>,
    /// A Sentinel group's member: its Sentinels and its master's
    /// replication (this report is its master's).
    pub sentinels: Option<SentinelReport>,
    /// Which forms of the lock's commands this server gets, by its
    /// version: `SET ... NX GET` or plain `NX` with the keep script
    /// (before Redis 7.0, or unknown), extends by script (every server:
    /// it never lowers an expiry), releases that hand nothing on by
    /// `DELIFEQ` (Valkey 9+), `DELEX ... IFEQ` (Redis 8.4+) or by script.
    /// `None` when it could not be asked.
    pub path: Option<String>,
    /// Everything found, worst first.
    pub problems: Vec<Problem>,
    /// The worst of the problems (`Ok` when none).
    pub verdict: Verdict,
}

impl NodeReport {
    fn new(node: &str) -> NodeReport {
        NodeReport {
            node: node.to_owned(),
            reachable: false,
            latency: None,
            server: None,
            path: None,
            role: None,
            uptime: None,
            aof: None,
            appendfsync: None,
            maxmemory: None,
            maxmemory_policy: None,
            cluster_enabled: None,
            missing_permissions: Vec::new(),
            quarantine: None,
            sentinels: None,
            problems: Vec::new(),
            verdict: Verdict::Ok,
        }
    }

    fn problem(&mut self, verdict: Verdict, text: impl Into<String>) {
        self.problem_with(verdict, text, None);
    }

    fn problem_with(&mut self, verdict: Verdict, text: impl Into<String>, detail: Option<String>) {
        let text = text.into();
        // Each distinct problem once.
        if self.problems.iter().any(|p| p.text == text) {
            return;
        }
        self.problems.push(Problem {
            verdict,
            text,
            detail,
        });
        self.verdict = self.verdict.max(verdict);
    }
}

/// How long a report's line may grow (see its `Display`).
const LINE: usize = 200;

/// One line for a person, at most about 200 characters: verdict, server,
/// what it is, then each problem and what to change, worst first, in a
/// few words; problems that do not fit are counted (`; 2 more (-v)`). The
/// alternate form (`{:#}`, `lockrun --check -v`) gives every problem, and
/// on indented lines below, the servers' own words behind each.
impl fmt::Display for NodeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write as _;
        let verdict = match self.verdict {
            Verdict::Ok => "ok",
            Verdict::Warning => "warning",
            Verdict::Unsafe => "UNSAFE",
        };
        let mut line = format!(
            "{verdict:<7} {}",
            crate::base::text::shorten(self.node.as_bytes(), 60)
        );
        if let Some(server) = &self.server {
            write!(line, " {server}")?;
        }
        if let Some(role) = &self.role {
            write!(line, " {role}")?;
        }
        if let Some(group) = &self.sentinels {
            write!(line, ", sentinels {}/{}", group.answered, group.given)?;
            if let Some(quorum) = group.quorum {
                write!(line, " (quorum {quorum})")?;
            }
            if let Some(replicas) = group.replicas {
                write!(line, ", {replicas} replicas")?;
            }
        }
        if let Some(up) = self.uptime {
            write!(line, ", up {}", human(up))?;
        }
        if let Some(latency) = self.latency {
            write!(line, ", {:.2} ms", latency.as_secs_f64() * 1e3)?;
        }
        for (i, p) in self.problems.iter().enumerate() {
            let left = self.problems.len() - i;
            // Room for "; N more (-v)" unless this is the last one.
            let reserve = if left > 1 { 16 } else { 0 };
            if i == 0 || f.alternate() || line.len() + 2 + p.text.len() + reserve <= LINE {
                write!(line, "; {}", p.text)?;
            } else {
                write!(line, "; {left} more (-v)")?;
                break;
            }
        }
        f.write_str(&line)?;
        if let (true, Some(path)) = (f.alternate(), &self.path) {
            write!(f, "\n    commands: {path}")?;
        }
        if f.alternate() {
            for detail in self.problems.iter().filter_map(|p| p.detail.as_deref()) {
                for line in detail.lines() {
                    write!(f, "\n    {line}")?;
                }
            }
        }
        Ok(())
    }
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// What the manager sends beside the lock's own commands, and so what
/// the trial tries.
#[derive(Clone, Copy)]
pub(crate) struct Trying {
    /// Fencing counters.
    pub(crate) fencing: bool,
    /// Release announcements.
    pub(crate) wakes: bool,
    /// Fair waiting's queues and hand-offs.
    pub(crate) fair: bool,
}

/// Checks every server of `members`, trying the lock's commands on keys
/// named after `resource` (which expire within seconds).
pub(crate) fn run(members: &[Member], resource: &[u8], trying: Trying) -> Vec<NodeReport> {
    let mut reports = Vec::new();
    for member in members {
        match member {
            Member::Node(node) => {
                let key = [resource, b":redlock-check"].concat();
                let mut report = check_node(node, &key, true, trying);
                if let Some(sentinels) = node.sentinels() {
                    group::check_group(node, sentinels, &mut report);
                }
                reports.push(report);
            }
            Member::Cluster(cluster) => {
                let deadline = Instant::now() + cluster.timeout() * 4;
                if let Err(e) = cluster.refresh(deadline) {
                    let mut report = NodeReport::new(cluster.name());
                    report.problem(Verdict::Unsafe, format!("no slot map: {}", e.short()));
                    reports.push(report);
                    continue;
                }
                for node in cluster.masters() {
                    let key = cluster_key(resource, |slot| {
                        cluster
                            .route(slot)
                            .is_some_and(|n| std::sync::Arc::ptr_eq(&n, &node))
                    });
                    let mut report = match key {
                        Some(key) => check_node(&node, &key, false, trying),
                        None => {
                            let mut report = NodeReport::new(node.name());
                            report.problem(Verdict::Warning, "serves no slot");
                            report
                        }
                    };
                    check_asking(&node, &mut report);
                    reports.push(report);
                }
            }
        }
    }
    reports
}

/// A scratch key for a cluster master, in one of the slots `serves`:
/// `resource` without its braces (so that an ACL pattern on the names'
/// prefix, `~lock:*`, still covers it), `:redlock-check`, then a hash tag
/// `{i}` chosen for the slot. Every key the trial derives from it (the
/// fencing counter, the readers) keeps the tag, so stays in that slot.
fn cluster_key(resource: &[u8], serves: impl Fn(u16) -> bool) -> Option<Vec<u8>> {
    let base: Vec<u8> = resource
        .iter()
        .copied()
        .filter(|b| !matches!(b, b'{' | b'}'))
        .chain(b":redlock-check".iter().copied())
        .collect();
    // 16384 slots: a few hundred thousand tags find every one of them.
    (0u32..400_000)
        .map(|i| i.to_string())
        .find(|tag| serves(keys::slot(tag.as_bytes())))
        .map(|tag| [&base[..], b"{", tag.as_bytes(), b"}"].concat())
}

/// Marks unsafe every report whose server `why` (two members found to be
/// one server or one cluster) names.
pub(crate) fn same_server(reports: &mut [NodeReport], why: &str) {
    for report in reports.iter_mut() {
        let named = why
            .split([' ', ',', '(', ')', ';'])
            .any(|w| w.trim_end_matches(':') == report.node);
        if named {
            report.problem_with(
                Verdict::Unsafe,
                "the same server as another member: its vote would count twice",
                Some(why.to_owned()),
            );
            report
                .problems
                .sort_by_key(|p| std::cmp::Reverse(p.verdict));
        }
    }
}

/// A cluster master must take `ASKING`: a lock whose slot is being
/// migrated is followed to the importing master after it. Sent with a
/// `PING` behind it on a connection of its own, so that the flag it sets
/// is spent on the `PING`.
fn check_asking(node: &Node, report: &mut NodeReport) {
    let asked = node.query_each(
        &[pack(&[b"ASKING"]), pack(&[b"PING"])],
        Instant::now() + node.timeout() * 2,
    );
    if let Ok(replies) = asked
        && let Some(Err(e)) = replies.first()
    {
        report.problem(
            Verdict::Warning,
            format!(
                "ASKING refused ({}): while a slot migrates, this cluster gives locks in it \
                 no vote (give the user +asking)",
                cause(e)
            ),
        );
    }
}

/// Checks one server, trying the lock's commands on `key` and keys
/// derived from it. `plain`: given as a node member (not a server of a
/// Redis Cluster member).
fn check_node(node: &Node, key: &[u8], plain: bool, trying: Trying) -> NodeReport {
    let mut report = NodeReport::new(node.name());
    // A few round trips: each gets the node timeout, the first a connect.
    let deadline = || Instant::now() + node.timeout() * 2;
    let info = match node.query(&pack(&[b"INFO"]), deadline()) {
        Ok(value) => text(&value),
        Err(e) if e.kind() == NodeErrorKind::Permission => {
            report.reachable = true;
            report.problem(
                Verdict::Warning,
                "INFO refused: restarts go undetected (give the user +info)",
            );
            None
        }
        Err(e) => {
            let text = match e.kind() {
                NodeErrorKind::Connect | NodeErrorKind::Resolve => {
                    format!("unreachable: {}", e.short())
                }
                // It answered (or accepted and said nothing): the cause
                // says which.
                _ => e.short(),
            };
            report.problem_with(Verdict::Unsafe, text, Some(cause(&e)));
            return report;
        }
    };
    report.reachable = true;
    let started = Instant::now();
    if node.query(&pack(&[b"PING"]), deadline()).is_ok() {
        report.latency = Some(started.elapsed());
    }
    // The handshake's reading of the server (its version decides the
    // forms of the commands it gets), from the same INFO.
    let identity = crate::members::restart::Identity::read(
        info.as_deref()
            .map(|i| redis::Value::SimpleString(i.into()))
            .as_ref(),
        None,
        None,
    );
    if let Some(info) = &info {
        read_info(info, &identity, &mut report);
    }
    // The configuration, where allowed: INFO says aof_enabled:0 while a
    // server loads its append-only file.
    let config = config_of(node, b"append*", deadline());
    report.appendfsync = setting(&config, "appendfsync").map(str::to_owned);
    if let Some(on) = setting(&config, "appendonly") {
        report.aof = Some(on == "yes");
    }
    // A Sentinel group's node dials what its Sentinels name: its URL's
    // port is a placeholder, no forwarder's.
    let dialled = match node.addr() {
        redis::ConnectionAddr::Tcp(_, port) if !node.follows() => Some(*port),
        _ => None,
    };
    forwarded(dialled, info.as_deref(), &mut report);
    let (replica, misplaced) = placement(plain, &mut report);
    // A replica refuses every write, and a misplaced cluster node most:
    // the trial would only repeat that.
    if !replica && !misplaced {
        trial(node, key, !plain, trying, &mut report, deadline);
    }
    durability(node, identity.set_nx_get, &mut report, deadline);
    if let Some(q) = node.quarantine() {
        let text = format!(
            "restarted {:.1}s ago: in restart quarantine, not voting for {:.1}s",
            q.up.as_secs_f64(),
            q.left.as_secs_f64()
        );
        report.quarantine = Some(text.clone());
        report.problem(Verdict::Warning, text);
    }
    report
        .problems
        .sort_by_key(|p| std::cmp::Reverse(p.verdict));
    report
}

/// The server's settings matching `pattern`, where `CONFIG GET` is
/// allowed (none otherwise).
fn config_of(node: &Node, pattern: &[u8], deadline: Instant) -> Vec<(String, String)> {
    node.query(&pack(&[b"CONFIG", b"GET", pattern]), deadline)
        .map(|reply| config_pairs(&reply))
        .unwrap_or_default()
}

/// The value of the setting `name` among `config`.
fn setting<'a>(config: &'a [(String, String)], name: &str) -> Option<&'a str> {
    config
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The report's reading of the server's `INFO`: version, role, uptime,
/// persistence, memory policy, cluster mode.
fn read_info(info: &str, identity: &crate::members::restart::Identity, report: &mut NodeReport) {
    let version = field(info, "valkey_version")
        .map(|v| format!("valkey {v}"))
        .or_else(|| field(info, "redis_version").map(|v| format!("redis {v}")));
    report.server = version;
    report.path = Some(command_path(identity));
    report.role = field(info, "role").map(str::to_owned);
    report.uptime = field(info, "uptime_in_seconds")
        .and_then(|u| u.parse().ok())
        .map(Duration::from_secs);
    report.aof = field(info, "aof_enabled").map(|v| v == "1");
    report.maxmemory = field(info, "maxmemory").and_then(|v| v.parse().ok());
    report.maxmemory_policy = field(info, "maxmemory_policy").map(str::to_owned);
    report.cluster_enabled = field(info, "cluster_enabled").map(|v| v == "1");
}

/// Where the server stands: a replica, a Redis Cluster node given as a
/// plain node (`plain`), or one that evicts lock keys is unsafe. Returns
/// whether it is a replica, and whether it is misplaced.
fn placement(plain: bool, report: &mut NodeReport) -> (bool, bool) {
    let replica = report.role.as_deref().is_some_and(|r| r != "master");
    if replica {
        report.problem(
            Verdict::Unsafe,
            "a replica (read-only): give its master, or an independent master",
        );
    }
    // A cluster node given as a plain node votes only on keys of its own
    // slots, and refuses the rest with MOVED: every other lock misses its
    // vote.
    let misplaced = plain && report.cluster_enabled == Some(true);
    if misplaced {
        report.problem_with(
            Verdict::Unsafe,
            "a Redis Cluster node given as a plain node: give the cluster \
         (Builder::cluster, lockrun --cluster)",
            Some(
                "a cluster node votes only on keys of its own slots and answers MOVED \
             for the rest: most locks would miss its vote"
                    .into(),
            ),
        );
    }
    if let (Some(max), Some(policy)) = (report.maxmemory, &report.maxmemory_policy)
        && max > 0
        && policy != "noeviction"
    {
        let which = if policy.starts_with("volatile") {
            "evicts keys with a TTL first: lock keys"
        } else {
            "may evict lock keys"
        };
        report.problem(
            Verdict::Unsafe,
            format!("maxmemory-policy {policy} {which}: set noeviction"),
        );
    }
    (replica, misplaced)
}

/// Whether a restart may forget locks: persistence and its syncing (see
/// the restart quarantine).
fn durability(
    node: &Node,
    takes_get: bool,
    report: &mut NodeReport,
    deadline: impl Fn() -> Instant,
) {
    // What a restart that loses locks means (for `-v`): before Redis 7.0
    // (or with the version unknown) refusals do not say who holds a key,
    // so only strict mode covers a restart no manager saw.
    let lost = match takes_get {
        true => LOST.to_owned(),
        false => format!(
            "{LOST}; before Redis 7.0 (or with INFO refused) a refusal does not say who holds \
             the key, so a restart no manager saw is covered by restart_quarantine only"
        ),
    };
    let skips_on_rewrite = node
        .query(
            &pack(&[b"CONFIG", b"GET", b"no-appendfsync-on-rewrite"]),
            deadline(),
        )
        .ok()
        .map(|reply| config_pairs(&reply))
        .and_then(|pairs| {
            pairs
                .into_iter()
                .find(|(k, _)| k == "no-appendfsync-on-rewrite")
        })
        .map(|(_, v)| v == "yes");
    match (report.aof, report.appendfsync.as_deref()) {
        (Some(true), Some("always")) if skips_on_rewrite != Some(false) => report.problem(
            Verdict::Warning,
            if skips_on_rewrite == Some(true) {
                "no-appendfsync-on-rewrite yes: writes during a rewrite are not synced, so \
             appendfsync always does not exempt restarts from the quarantine (set it to no)"
            } else {
                "no-appendfsync-on-rewrite unreadable: restarts are not exempt from the \
             quarantine"
            },
        ),
        (Some(true), Some("always")) => {}
        (Some(true), Some("everysec")) => report.problem_with(
            Verdict::Warning,
            "appendfsync everysec: a crash may lose the last second of locks \
         (appendfsync always keeps them)",
            Some(format!(
                "{lost}; with appendfsync always, restarts are exempt from the quarantine"
            )),
        ),
        (Some(true), _) => report.problem_with(
            Verdict::Warning,
            "append-only file without appendfsync always: a restart may forget locks",
            Some(lost),
        ),
        (Some(false), _) => report.problem_with(
            Verdict::Warning,
            "no persistence (or RDB snapshots only): a restart may forget locks \
         (appendonly yes + appendfsync always keeps them)",
            Some(lost),
        ),
        (None, _) => {}
    }
}

/// What a server that may lose locks in a restart means for the lock (see
/// the manual's "Restarts"), for `-v`.
const LOST: &str = "after a restart, empty or from an older copy, its yes does not count \
    beside a lock another node shows it may have lost (safe while the nodes that kept it \
    answer; restart_quarantine for a restart and a slow node at once), and fencing tokens \
    count on from the clock";

/// A warning when the server listens on another port than the one
/// dialled (`dialled`, none for a Unix socket or TLS, whose port INFO
/// does not give): something forwards (a proxy, a load balancer, a mapped
/// port), and it may re-point a live connection to another server, which
/// the library then takes for the one that voted (see the manual's "Late
/// requests and moved servers": safe only where the new server holds the
/// old one's keys). A heuristic: a forwarder on the server's own port
/// (a Kubernetes Service, a managed endpoint on 6379) is not seen, and a
/// port mapping that never re-points is warned of all the same.
fn forwarded(dialled: Option<u16>, info: Option<&str>, report: &mut NodeReport) {
    let theirs = info
        .and_then(|i| field(i, "tcp_port"))
        .and_then(|p| p.parse::<u16>().ok());
    if let (Some(ours), Some(theirs)) = (dialled, theirs)
        && ours != theirs
        && theirs != 0
    {
        report.problem_with(
            Verdict::Warning,
            format!(
                "reached through a forwarder (port {ours}; the server listens on \
                     {theirs}): if it re-points live connections, use replica_acks"
            ),
            Some(
                "a connection that stays up while its server changes is not noticed: \
                     the new server is taken for the one that voted, safe only where it \
                     holds the old one's keys (a promoted replica that acknowledged them)"
                    .into(),
            ),
        );
    }
}

/// The forms of the lock's commands a server read as `identity` gets
/// (see [`NodeReport::path`]), as the connection's handshake decides them.
fn command_path(identity: &crate::members::restart::Identity) -> String {
    let acquire = if identity.set_nx_get {
        "acquire by SET NX GET and the count script"
    } else {
        "acquire by SET NX and the count script (before Redis 7.0, or its version unknown)"
    };
    // Every extend runs its script, which raises the expiry and never
    // lowers it (`SET ... IFEQ ... PX` sets it exactly: delivered late,
    // a shorter one cut a later longer one; see the manual's "How it
    // works").
    let extend = "extend by script";
    let release = match identity.plain_delete {
        Some(form) => format!(
            "release by {} (no script) where nothing is handed on (fair(false), permits)",
            form.name()
        ),
        None => "release by script".to_owned(),
    };
    format!("{acquire}; {extend}; {release}")
}

mod group;
mod trial;

use trial::{cause, trial};

/// The resource [`LockManager::check`] names its scratch keys after
/// (`lockrun --check`'s default too).
const CHECK_RESOURCE: &str = "redlock-check";

impl LockManager {
    /// Checks every server (each node, each master of a Redis Cluster
    /// member) for what makes a lock server unsafe or weak, and says what
    /// to change: reachable and its round trip; server, version, role and
    /// uptime; persistence (`aof_enabled`, `appendfsync`); `maxmemory` and
    /// its policy; cluster mode; whether this user may run every command
    /// the lock sends (tried on scratch keys named `redlock-check:redlock-check`,
    /// which expire within seconds and are deleted; a
    /// [fair](crate::Builder::fair) manager's queue scripts too); and
    /// whether it is kept out of votes after a restart. A user whose ACL
    /// allows only some keys checks with [`check_resource`](Self::check_resource)
    /// and a resource name it may lock.
    ///
    /// Verdicts: [`Verdict::Unsafe`](crate::Verdict::Unsafe) for a server that is unreachable, a
    /// replica, set to evict keys (`maxmemory` with any policy but
    /// `noeviction`: `volatile-*` evicts keys with a TTL first, lock keys),
    /// or refusing a command the lock needs (for a fair manager, the
    /// release's look at the queue: its releases would fail); [`Verdict::Warning`](crate::Verdict::Warning) for no
    /// persistence (restarts forget locks, so the restart quarantine
    /// applies), `appendfsync everysec`, `INFO` refused, or channels
    /// refused; otherwise [`Verdict::Ok`](crate::Verdict::Ok). `lockrun --check` prints it.
    ///
    /// Takes a few round trips per server, each bounded by twice the node
    /// timeout; never use it on the hot path.
    pub fn check(&self) -> Vec<NodeReport> {
        self.check_resource(CHECK_RESOURCE)
    }

    /// As [`check`](Self::check), trying the lock's commands on keys
    /// named after `resource` (followed by `:redlock-check`): for a user
    /// whose ACL allows only some keys (`~lock:*`), give a name it may
    /// lock.
    pub fn check_resource(&self, resource: impl AsRef<[u8]>) -> Vec<NodeReport> {
        let trying = Trying {
            fencing: self.fencing(),
            wakes: self.engine().wake_on_release,
            fair: self.engine().fair,
        };
        let mut reports = run(&self.engine().members, resource.as_ref(), trying);
        // Two members found to be one server (or one cluster) while
        // checking, or before: unsafe, on each report it names.
        if let Some(why) = self.engine().identities.conflict.get() {
            same_server(&mut reports, why);
        }
        reports
    }
}
