//! A Redis Cluster as one quorum member: the slot map, and routing
//! (`MOVED`, `ASK`). The slots of keys and channels are in `keys.rs`.
//!
//! # Routing
//!
//! The slot map comes from `CLUSTER SLOTS` (every version since 3.0,
//! Valkey included), asked of any seed or known server that answers. A
//! request goes to its slot's master over that master's own connection
//! pool. `MOVED` updates the slot's owner, sends the request there once
//! more within the same node timeout, and refreshes the whole map in the
//! background; `ASK` sends `ASKING` and the request to the target, once.
//! A connection to a master that fails refreshes the map in the
//! background, so that a promoted replica is found. Every step of one
//! round ends by the round's deadline: a member costs at most the node
//! timeout, like a node.
//!
//! Why slot migrations are safe is in the crate docs ("Redis Cluster").

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use redis::Value;

use crate::base::error::Error;
use crate::base::keys::SLOTS;
use crate::base::node_error::{Cause, NodeError};
use crate::members::conn::pack;
use crate::members::identities::Identities;
use crate::members::node::{Node, Setup};
use crate::members::request::Routed;
use crate::members::request::Said;
use crate::members::url::{UrlParts, url_parts};

/// Which master serves each slot.
struct SlotMap {
    /// Per slot, an index into `masters` (`u16::MAX`: no owner known).
    owner: Vec<u16>,
    masters: Vec<Arc<Node>>,
}

impl SlotMap {
    fn route(&self, slot: u16) -> Option<&Arc<Node>> {
        let i = *self.owner.get(usize::from(slot))?;
        self.masters.get(usize::from(i))
    }
}

/// How to open the servers a cluster names: the first seed's URL parts
/// (scheme, credentials, TLS fragment) around another host and port.
struct Template {
    scheme: String,
    userinfo: String,
    fragment: String,
    setup: Setup,
}

impl Template {
    fn url(&self, host: &str, port: u16) -> String {
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        format!(
            "{}://{}{host}:{port}{}",
            self.scheme, self.userinfo, self.fragment
        )
    }
}

/// One quorum member that is a whole Redis Cluster.
pub(crate) struct RedisCluster {
    /// `cluster <first seed>`, for messages.
    name: Arc<str>,
    seeds: Vec<Arc<Node>>,
    template: Template,
    timeout: Duration,
    map: RwLock<Option<Arc<SlotMap>>>,
    /// Every server the cluster has named (masters and replicas), by
    /// address, so that pools survive map refreshes.
    known: Mutex<HashMap<String, Arc<Node>>>,
    /// A background refresh is under way.
    refreshing: AtomicBool,
    /// When the last refresh started (ms since `epoch`), to space them.
    last_refresh: AtomicU64,
    epoch: Instant,
    /// Bumped on every map change (listeners follow it).
    generation: AtomicU64,
    identities: Arc<Identities>,
}

/// Refreshes started in the background are at least this far apart.
const REFRESH_SPACING: Duration = Duration::from_millis(100);
/// A background refresh gets this long.
const REFRESH_BUDGET: Duration = Duration::from_secs(1);

impl RedisCluster {
    /// A cluster member reached through `seeds` (URLs with the usual
    /// options: credentials, `rediss://`). Connects lazily.
    pub(crate) fn open(
        seeds: &[String],
        setup: &Setup,
        identities: Arc<Identities>,
    ) -> Result<RedisCluster, Error> {
        let Some(first) = seeds.first() else {
            return Err(Error::invalid_config(
                "a Redis Cluster member needs at least one seed URL",
            ));
        };
        let nodes = seeds
            .iter()
            .map(|url| Node::open(url, setup).map(Arc::new))
            .collect::<Result<Vec<_>, Error>>()?;
        for (i, node) in nodes.iter().enumerate() {
            if node.db() != 0 {
                return Err(Error::invalid_config(format!(
                    "cluster seed {}: a Redis Cluster has only database 0",
                    node.name()
                )));
            }
            if nodes[..i].iter().any(|n| n.addr() == node.addr()) {
                return Err(Error::invalid_config(format!(
                    "cluster seed {} is given twice",
                    node.name()
                )));
            }
        }
        let parts = url_parts(first);
        let scheme = parts.as_ref().map_or("redis", |p| p.scheme);
        let userinfo = parts
            .as_ref()
            .and_then(|p| p.userinfo)
            .map(|u| format!("{u}@"))
            .unwrap_or_default();
        let fragment = parts
            .as_ref()
            .and_then(UrlParts::fragment)
            .map(|f| format!("#{f}"))
            .unwrap_or_default();
        let name: Arc<str> = format!("cluster {}", nodes[0].name()).into();
        for node in &nodes {
            node.join(identities.clone(), name.clone());
        }
        Ok(RedisCluster {
            name,
            seeds: nodes,
            template: Template {
                scheme: scheme.to_owned(),
                userinfo,
                fragment,
                setup: setup.clone(),
            },
            timeout: setup.timeout,
            map: RwLock::new(None),
            known: Mutex::new(HashMap::new()),
            refreshing: AtomicBool::new(false),
            last_refresh: AtomicU64::new(0),
            epoch: Instant::now(),
            generation: AtomicU64::new(0),
            identities,
        })
    }

    /// `cluster <first seed>`.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// The seeds (for spotting a server given twice).
    pub(crate) fn seeds(&self) -> &[Arc<Node>] {
        &self.seeds
    }

    /// The node timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes whenever the slot map changes.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The masters of the slot map (empty before it was fetched).
    pub(crate) fn masters(&self) -> Vec<Arc<Node>> {
        self.map
            .read()
            .as_ref()
            .map(|m| m.masters.clone())
            .unwrap_or_default()
    }

    /// The master that serves `slot`, if the map is known (no I/O).
    pub(crate) fn route(&self, slot: u16) -> Option<Arc<Node>> {
        self.map.read().as_ref()?.route(slot).cloned()
    }

    /// The master that serves `slot`, fetching the slot map first if it
    /// is not known yet, by `deadline`.
    pub(crate) fn route_or_fetch(
        &self,
        slot: u16,
        deadline: Instant,
    ) -> Result<Arc<Node>, NodeError> {
        if let Some(node) = self.route(slot) {
            return Ok(node);
        }
        self.refresh(deadline)?;
        self.route(slot).ok_or_else(|| self.unserved(slot))
    }

    /// Runs `req` on the master of `slot` (fetching the map if needed),
    /// then follows one `MOVED` or `ASK`; everything by `deadline`.
    pub(crate) fn call(
        self: &Arc<Self>,
        req: Routed<'_>,
        slot: u16,
        deadline: Instant,
    ) -> Result<Said, NodeError> {
        let node = self.route_or_fetch(slot, deadline)?;
        let answer = node.run(req, deadline);
        self.after(answer, req, deadline)
    }

    /// Looks at an answer from one of this cluster's masters: follows a
    /// `MOVED` or `ASK` once, and refreshes the map in the background
    /// after a connection failure.
    pub(crate) fn after(
        self: &Arc<Self>,
        answer: Result<Said, NodeError>,
        req: Routed<'_>,
        deadline: Instant,
    ) -> Result<Said, NodeError> {
        match answer {
            Err(e) if is_redirect(&e) => self.follow(e, req, deadline),
            Err(e) => {
                if e.is_connection_failure() {
                    self.refresh_soon();
                }
                Err(e)
            }
            ok => ok,
        }
    }

    /// Follows a `MOVED` (the slot has a new owner: noted, and the map
    /// refreshed in the background) or an `ASK` (a slot being migrated:
    /// this one request goes to the target, after `ASKING`).
    fn follow(
        self: &Arc<Self>,
        e: NodeError,
        req: Routed<'_>,
        deadline: Instant,
    ) -> Result<Said, NodeError> {
        let Some((slot, host, port)) = parse_redirect(e.cause()) else {
            return Err(e);
        };
        let Ok(node) = self.node_at(&host, port) else {
            return Err(e);
        };
        if e.code() == Some("MOVED") {
            self.moved(slot, &node);
            self.refresh_soon();
            return node.run(req, deadline);
        }
        if !req.req.op.follow_ask() {
            return Err(NodeError::cluster(
                node.name().into(),
                format!(
                    "slot {slot} is being migrated here: a lock with a fencing counter \
                     (two keys) is taken there once the migration is over"
                ),
                self.timeout,
            ));
        }
        // After `ASKING`, which holds for one command; never as a plain
        // compare-and-delete (see `lower.rs`).
        let asked = Routed {
            asking: true,
            ..req
        };
        node.run(asked, deadline)
    }

    /// Notes the new owner a `MOVED` answer names (the map is refreshed
    /// in the background too), so that the request may be routed again;
    /// false for any other answer.
    pub(crate) fn note_moved(self: &Arc<Self>, e: &NodeError) -> bool {
        if e.code() != Some("MOVED") {
            return false;
        }
        let Some((slot, host, port)) = parse_redirect(e.cause()) else {
            return false;
        };
        let Ok(node) = self.node_at(&host, port) else {
            return false;
        };
        self.moved(slot, &node);
        self.refresh_soon();
        true
    }

    /// Notes that `slot` is served by `node` now.
    fn moved(&self, slot: u16, node: &Arc<Node>) {
        let mut map = self.map.write();
        let Some(old) = map.as_ref() else { return };
        let mut masters = old.masters.clone();
        let at = match masters.iter().position(|m| Arc::ptr_eq(m, node)) {
            Some(at) => at,
            None => {
                masters.push(node.clone());
                masters.len() - 1
            }
        };
        let mut owner = old.owner.clone();
        let Some(entry) = owner.get_mut(usize::from(slot)) else {
            return;
        };
        *entry = at as u16;
        *map = Some(Arc::new(SlotMap { owner, masters }));
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// The error for a slot no master serves.
    fn unserved(&self, slot: u16) -> NodeError {
        NodeError::cluster(
            self.name.clone(),
            format!("no master serves slot {slot} (CLUSTERDOWN or a slot map being changed)"),
            self.timeout,
        )
    }

    /// The server at `host:port`, opened with the seeds' settings.
    fn node_at(&self, host: &str, port: u16) -> Result<Arc<Node>, Error> {
        let key = format!("{host}:{port}");
        if let Some(node) = self.known.lock().get(&key) {
            return Ok(node.clone());
        }
        if let Some(seed) = self.seeds.iter().find(|s| s.name() == key) {
            self.known.lock().insert(key, seed.clone());
            return Ok(seed.clone());
        }
        let node = Arc::new(Node::open(
            &self.template.url(host, port),
            &self.template.setup,
        )?);
        node.join(self.identities.clone(), self.name.clone());
        Ok(self.known.lock().entry(key).or_insert(node).clone())
    }

    /// Fetches the slot map from the first known server or seed that
    /// answers, by `deadline`.
    pub(crate) fn refresh(&self, deadline: Instant) -> Result<(), NodeError> {
        // Two masters of the current map, then the seeds, then every other
        // server the map named: after a full change of topology the old
        // servers (dead, or black-holed at a node timeout each) must not
        // use up the budget before the seeds are asked.
        let mut candidates: Vec<Arc<Node>> = Vec::new();
        let mut rest: Vec<Arc<Node>> = Vec::new();
        if let Some(map) = self.map.read().as_ref() {
            candidates.extend(map.masters.iter().take(2).cloned());
            rest.extend(map.masters.iter().skip(2).cloned());
        }
        candidates.extend(self.seeds.iter().cloned());
        candidates.extend(rest);
        candidates.extend(self.known.lock().values().cloned());
        let mut seen = HashSet::new();
        candidates.retain(|n| seen.insert(n.name().to_owned()));
        let mut last = None;
        for node in candidates {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            // Each server gets at most a node timeout: a hung one must not
            // take the whole budget from the others.
            let until = deadline.min(now + self.timeout);
            match node.query(&pack(&[b"CLUSTER", b"SLOTS"]), until) {
                Ok(reply) => match self.install(&node, &reply) {
                    Ok(()) => return Ok(()),
                    Err(e) => last = Some(e),
                },
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            NodeError::cluster(
                self.name.clone(),
                "no server of the cluster answered in time".into(),
                self.timeout,
            )
        }))
    }

    /// Builds the map from a `CLUSTER SLOTS` reply got from `from`.
    fn install(&self, from: &Node, reply: &Value) -> Result<(), NodeError> {
        let bad = |why: &str| {
            NodeError::cluster(
                from.name().into(),
                format!("unexpected CLUSTER SLOTS reply: {why}"),
                self.timeout,
            )
        };
        let Value::Array(ranges) = reply else {
            return Err(bad("not an array"));
        };
        let from_host = from.host().unwrap_or("127.0.0.1").to_owned();
        let mut owner = vec![u16::MAX; SLOTS];
        let mut masters: Vec<Arc<Node>> = Vec::new();
        let mut ids = Vec::new();
        let mut addresses = Vec::new();
        for range in ranges {
            let Value::Array(fields) = range else {
                return Err(bad("a range is not an array"));
            };
            let (Some(Value::Int(start)), Some(Value::Int(end))) = (fields.first(), fields.get(1))
            else {
                return Err(bad("a range has no bounds"));
            };
            let mut servers = Vec::new();
            for server in &fields[2..] {
                let Value::Array(parts) = server else {
                    continue;
                };
                let host = match parts.first() {
                    Some(Value::BulkString(h)) if !h.is_empty() && h != b"?" => {
                        String::from_utf8_lossy(h).into_owned()
                    }
                    _ => from_host.clone(),
                };
                let Some(Value::Int(port)) = parts.get(1) else {
                    continue;
                };
                let Ok(port) = u16::try_from(*port) else {
                    continue;
                };
                if let Some(Value::BulkString(id)) = parts.get(2) {
                    ids.push(String::from_utf8_lossy(id).into_owned());
                }
                addresses.push(format!("{host}:{port}"));
                servers.push((host, port));
            }
            let Some((host, port)) = servers.first() else {
                continue;
            };
            let master = self.node_at(host, *port).map_err(|e| bad(&e.to_string()))?;
            for (host, port) in &servers[1..] {
                // Replicas: candidates for the next refresh.
                let _ = self.node_at(host, *port);
            }
            let at = match masters.iter().position(|m| Arc::ptr_eq(m, &master)) {
                Some(at) => at,
                None => {
                    masters.push(master);
                    masters.len() - 1
                }
            };
            let (start, end) = (*start as usize, *end as usize);
            if start > end || end >= SLOTS {
                return Err(bad("a slot out of range"));
            }
            for slot in &mut owner[start..=end] {
                *slot = at as u16;
            }
        }
        self.identities.claim(&self.name, &ids);
        self.identities.check_servers(&self.name, &addresses);
        // Servers the cluster no longer names are forgotten: their idle
        // connections close, and refreshes do not try them first.
        self.known
            .lock()
            .retain(|address, _| addresses.iter().any(|a| a == address));
        *self.map.write() = Some(Arc::new(SlotMap { owner, masters }));
        self.generation.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Refreshes the map on a background thread, unless one runs or one
    /// started less than `REFRESH_SPACING` ago.
    pub(crate) fn refresh_soon(self: &Arc<RedisCluster>) {
        let now = (self.epoch.elapsed().as_millis() as u64).max(1);
        let last = self.last_refresh.load(Ordering::SeqCst);
        if last != 0 && now.saturating_sub(last) < REFRESH_SPACING.as_millis() as u64 {
            return;
        }
        if self.refreshing.swap(true, Ordering::SeqCst) {
            return;
        }
        self.last_refresh.store(now, Ordering::SeqCst);
        let this = self.clone();
        let spawned = thread::Builder::new()
            .name("redlock-cluster-map".into())
            .spawn(move || {
                let _ = this.refresh(Instant::now() + REFRESH_BUDGET);
                this.refreshing.store(false, Ordering::SeqCst);
            });
        if spawned.is_err() {
            // No thread to be had: the next round that needs the map
            // fetches it.
            self.refreshing.store(false, Ordering::SeqCst);
        }
    }
}

/// Whether an error reply redirects the request (`MOVED`, `ASK`).
fn is_redirect(e: &NodeError) -> bool {
    matches!(e.code(), Some("MOVED" | "ASK"))
}

/// `MOVED 3999 127.0.0.1:6381` / `ASK ...`: the slot and the target.
fn parse_redirect(e: &Cause) -> Option<(u16, String, u16)> {
    let detail = e.detail()?;
    let mut parts = detail.split_whitespace();
    // A slot past the map is no redirect we can follow (the error stays
    // the node's failure): never an index out of bounds.
    let slot = parts
        .next()?
        .parse::<u16>()
        .ok()
        .filter(|s| usize::from(*s) < SLOTS)?;
    let target = parts.next()?;
    let (host, port) = target.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((slot, host.to_owned(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_are_read() {
        let e = Cause::Reply {
            code: "MOVED".into(),
            detail: "3999 127.0.0.1:6381".into(),
        };
        assert_eq!(parse_redirect(&e), Some((3999, "127.0.0.1".into(), 6381)));
        // A slot of 16384 or more (before: an index past the slot map, a
        // panic) is no redirect.
        for detail in [
            "16384 127.0.0.1:6381",
            "65535 127.0.0.1:6381",
            "-1 127.0.0.1:6381",
        ] {
            let e = Cause::Reply {
                code: "MOVED".into(),
                detail: detail.to_owned(),
            };
            assert_eq!(parse_redirect(&e), None, "{detail}");
        }
    }

    /// A `CLUSTER SLOTS` reply: each range's servers by port on
    /// 127.0.0.1, master first.
    fn slots(ranges: &[(i64, i64, &[u16])]) -> Value {
        Value::Array(
            ranges
                .iter()
                .map(|(start, end, ports)| {
                    let mut fields = vec![Value::Int(*start), Value::Int(*end)];
                    fields.extend(ports.iter().map(|p| {
                        Value::Array(vec![
                            Value::BulkString(b"127.0.0.1".to_vec()),
                            Value::Int(i64::from(*p)),
                            Value::BulkString(format!("id-{p}").into_bytes()),
                        ])
                    }));
                    Value::Array(fields)
                })
                .collect(),
        )
    }

    /// Servers a new map no longer names are forgotten (their pools
    /// closed); a map with a slot out of range is refused, never indexed.
    #[test]
    fn servers_the_cluster_no_longer_names_are_forgotten() {
        let setup = Setup {
            timeout: Duration::from_millis(50),
            max_idle: 1,
            resolve: Arc::new(crate::members::resolve::system),
            #[cfg(feature = "tls")]
            tls: Default::default(),
            restart: Default::default(),
            preload: Vec::new(),
        };
        let cluster = RedisCluster::open(
            &["redis://127.0.0.1:7000".to_owned()],
            &setup,
            Arc::new(Identities::default()),
        )
        .unwrap();
        let known = |c: &RedisCluster| {
            let mut k: Vec<String> = c.known.lock().keys().cloned().collect();
            k.sort();
            k
        };
        let seed = cluster.seeds[0].clone();
        let first = slots(&[(0, 8191, &[7001, 7011]), (8192, 16383, &[7002, 7012])]);
        cluster.install(&seed, &first).unwrap();
        assert_eq!(
            known(&cluster),
            [
                "127.0.0.1:7001",
                "127.0.0.1:7002",
                "127.0.0.1:7011",
                "127.0.0.1:7012"
            ]
        );
        let second = slots(&[(0, 16383, &[7003, 7013])]);
        cluster.install(&seed, &second).unwrap();
        assert_eq!(known(&cluster), ["127.0.0.1:7003", "127.0.0.1:7013"]);
        for bad in [slots(&[(0, 16384, &[7003])]), slots(&[(-5, 10, &[7003])])] {
            assert!(cluster.install(&seed, &bad).is_err());
        }
        assert_eq!(known(&cluster), ["127.0.0.1:7003", "127.0.0.1:7013"]);
    }
}
