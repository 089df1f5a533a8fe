//! Throwaway Redis Clusters: cluster-enabled `redis-server` processes on
//! free loopback ports, joined with `CLUSTER ADDSLOTSRANGE` and `CLUSTER
//! MEET`, with replicas if asked. Needs Redis 7.0+ (or Valkey): the
//! cluster bus port is set with `--cluster-port`.

#![allow(dead_code)]

use std::io;
use std::thread;
use std::time::{Duration, Instant};

use super::server::{Server, free_port, server_at_least};

/// Why the cluster tests cannot run on this server, if they cannot.
pub fn unsupported() -> Option<String> {
    (!server_at_least(7, 0)).then(|| {
        super::server::skip(format!(
            "skipped: Redis Cluster tests need Redis 7.0+ or Valkey (ADDSLOTSRANGE, \
             --cluster-port, sharded pub/sub); this is {:?}",
            super::server::server_version()
        ))
    })
}

/// A Redis Cluster: masters (each owning an equal share of the slots) and
/// replicas (replica `i` follows master `i % masters`).
pub struct RedisCluster {
    pub masters: Vec<Server>,
    pub replicas: Vec<Server>,
    /// The TLS ports, in the order of [`servers`](Self::servers), when
    /// the servers talk to each other over TLS (`MIGRATE` too).
    pub tls_ports: Vec<u16>,
}

/// Starts one cluster-enabled server with a bus port of its own, and
/// `extra` arguments.
fn cluster_server(extra: &[String]) -> io::Result<(Server, u16)> {
    let port = free_port()?;
    let bus = port.to_string();
    let mut args = vec![
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "1000",
        "--cluster-port",
        &bus,
    ];
    args.extend(extra.iter().map(String::as_str));
    let server = Server::start_with(&args)?;
    Ok((server, port))
}

/// Runs a command on `server`, panicking with its error.
pub fn cmd<T: redis::FromRedisValue>(server: &Server, args: &[&str]) -> T {
    let mut con = super::admin(server);
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(&mut con)
        .unwrap_or_else(|e| panic!("{args:?} on {}: {e}", server.port()))
}

/// How many connections `server` has subscribed to the sharded
/// `channel` (`PUBSUB SHARDNUMSUB`).
pub fn shard_subscribers(server: &Server, channel: &[u8]) -> i64 {
    let reply: (Vec<u8>, i64) = redis::cmd("PUBSUB")
        .arg("SHARDNUMSUB")
        .arg(channel)
        .query(&mut super::admin(server))
        .unwrap();
    reply.1
}

/// The server's cluster node ID.
pub fn node_id(server: &Server) -> String {
    cmd(server, &["CLUSTER", "MYID"])
}

/// The hash slot of `key`, as the server computes it.
pub fn keyslot(server: &Server, key: &[u8]) -> u16 {
    let mut con = super::admin(server);
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut con)
        .unwrap()
}

impl RedisCluster {
    /// Starts `masters` masters and `replicas` replicas and waits until
    /// every server sees the cluster as ok.
    pub fn start(masters: usize, replicas: usize) -> io::Result<RedisCluster> {
        RedisCluster::start_with(masters, replicas, Vec::new)
    }

    /// As [`start`](Self::start), each server (masters first) with the
    /// arguments `extra` makes for it.
    pub fn start_with(
        masters: usize,
        replicas: usize,
        mut extra: impl FnMut() -> Vec<String>,
    ) -> io::Result<RedisCluster> {
        let (masters, buses): (Vec<Server>, Vec<u16>) = (0..masters)
            .map(|_| cluster_server(&extra()))
            .collect::<io::Result<Vec<_>>>()?
            .into_iter()
            .unzip();
        let replicas: Vec<Server> = (0..replicas)
            .map(|_| cluster_server(&extra()).map(|(s, _)| s))
            .collect::<io::Result<_>>()?;
        let n = masters.len();
        for (i, m) in masters.iter().enumerate() {
            let (from, to) = (i * 16384 / n, (i + 1) * 16384 / n - 1);
            let _: () = cmd(
                m,
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &from.to_string(),
                    &to.to_string(),
                ],
            );
        }
        let cluster = RedisCluster {
            masters,
            replicas,
            tls_ports: Vec::new(),
        };
        let first = &cluster.masters[0];
        for s in cluster.servers().skip(1) {
            let (port, bus) = (first.port().to_string(), buses[0].to_string());
            let _: () = cmd(s, &["CLUSTER", "MEET", "127.0.0.1", &port, &bus]);
        }
        let total = cluster.servers().count();
        cluster.wait(
            Duration::from_secs(30),
            "every server to know every other",
            |s| {
                let nodes: String = cmd(s, &["CLUSTER", "NODES"]);
                nodes.lines().count() == total
            },
        )?;
        for (i, r) in cluster.replicas.iter().enumerate() {
            let master = node_id(&cluster.masters[i % n]);
            let _: () = cmd(r, &["CLUSTER", "REPLICATE", &master]);
        }
        cluster.wait_ok()?;
        Ok(cluster)
    }

    /// Every server, masters first.
    pub fn servers(&self) -> impl Iterator<Item = &Server> {
        self.masters.iter().chain(&self.replicas)
    }

    /// The masters' URLs (seeds).
    pub fn seeds(&self) -> Vec<String> {
        self.masters.iter().map(Server::url).collect()
    }

    /// Waits until every live server reports `cluster_state:ok` and every
    /// replica is in sync.
    pub fn wait_ok(&self) -> io::Result<()> {
        self.wait(Duration::from_secs(30), "cluster_state:ok", |s| {
            let info: String = cmd(s, &["CLUSTER", "INFO"]);
            info.contains("cluster_state:ok")
        })?;
        self.wait(Duration::from_secs(30), "replicas in sync", |s| {
            let info: String = cmd(s, &["INFO", "replication"]);
            !info.contains("role:slave") || info.contains("master_link_status:up")
        })
    }

    fn wait(&self, limit: Duration, what: &str, ok: impl Fn(&Server) -> bool) -> io::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if self.servers().filter(|s| s.pid().is_some()).all(&ok) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "cluster: no {what} within {limit:?}"
                )));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// What each live server says of itself (its replication and its
    /// keys) and one node's view of the cluster: for a failing test's
    /// message.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for s in self.servers().filter(|s| s.pid().is_some()) {
            let info: String = cmd(s, &["INFO", "replication"]);
            let keys: Vec<String> = cmd(s, &["KEYS", "*"]);
            let fields: Vec<&str> = info
                .lines()
                .filter(|l| {
                    [
                        "role",
                        "master_port",
                        "master_link",
                        "master_repl_offset",
                        "slave",
                    ]
                    .iter()
                    .any(|f| l.starts_with(f))
                })
                .collect();
            out += &format!("{}: {} keys {keys:?}\n", s.port(), fields.join(" "));
        }
        if let Some(s) = self.servers().find(|s| s.pid().is_some()) {
            let nodes: String = cmd(s, &["CLUSTER", "NODES"]);
            out += &nodes;
        }
        out
    }

    /// The index of the master that serves `key` now (asked of the
    /// masters themselves).
    pub fn master_of(&self, key: &[u8]) -> usize {
        let live = self
            .servers()
            .find(|s| s.pid().is_some())
            .expect("a live server");
        self.master_of_slot(keyslot(live, key))
    }

    /// The index of the live master that owns `slot`.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        let live = self
            .masters
            .iter()
            .chain(&self.replicas)
            .find(|s| s.pid().is_some())
            .expect("a live server");
        let slots: redis::Value = cmd(live, &["CLUSTER", "SLOTS"]);
        let redis::Value::Array(ranges) = slots else {
            panic!("CLUSTER SLOTS: {slots:?}")
        };
        for range in ranges {
            let redis::Value::Array(f) = range else {
                continue;
            };
            let (redis::Value::Int(a), redis::Value::Int(b)) = (&f[0], &f[1]) else {
                continue;
            };
            if (*a..=*b).contains(&i64::from(slot)) {
                let redis::Value::Array(master) = &f[2] else {
                    continue;
                };
                let redis::Value::Int(port) = master[1] else {
                    continue;
                };
                return self
                    .servers()
                    .position(|s| i64::from(s.port()) == port)
                    .expect("a known server");
            }
        }
        panic!("no master owns slot {slot}")
    }

    /// The server at index `i` of [`servers`](Self::servers).
    pub fn server(&self, i: usize) -> &Server {
        self.servers().nth(i).expect("server index")
    }

    /// Moves `slot` from master `from` to master `to`, keys included, as
    /// `redis-cli --cluster reshard` does: IMPORTING and MIGRATING, then
    /// `before_keys` runs (the slot is being migrated: requests for keys
    /// not moved yet get `ASK`), then every key is migrated and the slot
    /// assigned to `to` everywhere.
    pub fn move_slot(&self, slot: u16, from: usize, to: usize, before_keys: impl FnOnce()) {
        let (src, dst) = (&self.masters[from], &self.masters[to]);
        let s = slot.to_string();
        let _: () = cmd(dst, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &node_id(src)]);
        let _: () = cmd(src, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &node_id(dst)]);
        before_keys();
        loop {
            let keys: Vec<Vec<u8>> = cmd(src, &["CLUSTER", "GETKEYSINSLOT", &s, "100"]);
            if keys.is_empty() {
                break;
            }
            let mut con = super::admin(src);
            let mut migrate = redis::cmd("MIGRATE");
            let port = self.tls_ports.get(to).copied().unwrap_or(dst.port());
            migrate
                .arg("127.0.0.1")
                .arg(port)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS");
            for k in &keys {
                migrate.arg(k.as_slice());
            }
            let _: () = migrate.query(&mut con).unwrap();
        }
        let dst_id = node_id(dst);
        for m in self.servers().filter(|s| s.pid().is_some()) {
            let _: () = cmd(m, &["CLUSTER", "SETSLOT", &s, "NODE", &dst_id]);
        }
    }
}
