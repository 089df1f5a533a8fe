//! A Redis Sentinel group on loopback: one master, two replicas and
//! three Sentinels (`redis-server <conf> --sentinel`), each a process of
//! its own, killed when dropped.

use std::io;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::server::{Server, free_port, redis_server_bin};

/// The master's name the Sentinels monitor.
pub const MASTER: &str = "locks";

/// One Sentinel process.
pub struct Sentinel {
    pub port: u16,
    child: Option<Child>,
    dir: std::path::PathBuf,
    /// Its `requirepass`, if any (also what it gives the other Sentinels).
    pass: Option<String>,
}

impl Sentinel {
    /// Starts a Sentinel that monitors `name` at `master_port` (quorum 2,
    /// down after 1 s: at 300 ms, a freshly promoted master was marked
    /// down before its first replies, and failed over again and again).
    pub fn start(name: &str, master_port: u16) -> io::Result<Sentinel> {
        Sentinel::start_with(name, master_port, None)
    }

    /// Starts a Sentinel as [`start`](Self::start) does, that requires
    /// `pass` of its clients when given.
    pub fn start_with(name: &str, master_port: u16, pass: Option<&str>) -> io::Result<Sentinel> {
        Sentinel::start_conf(name, master_port, pass, "")
    }

    /// Starts a Sentinel as [`start_with`](Self::start_with) does, with
    /// `extra` lines in its configuration (TLS).
    pub fn start_conf(
        name: &str,
        master_port: u16,
        pass: Option<&str>,
        extra: &str,
    ) -> io::Result<Sentinel> {
        let port = free_port()?;
        let dir = std::env::temp_dir().join(format!(
            "redlock-sync-sentinel-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)?;
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n\
                 dir {dir}\nlogfile \"\"\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 3000\n\
                 sentinel parallel-syncs {name} 2\n{auth}{extra}",
                dir = dir.display(),
                auth = pass.map_or(String::new(), |p| format!("requirepass {p}\n")),
            ),
        )?;
        let child = Command::new(redis_server_bin())
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let sentinel = Sentinel {
            port,
            child: Some(child),
            dir,
            pass: pass.map(str::to_owned),
        };
        let up = wait(Duration::from_secs(10), || sentinel.admin().is_ok());
        up.then_some(sentinel)
            .ok_or_else(|| io::Error::other(format!("the Sentinel on {port} did not start")))
    }

    /// A connection to it.
    pub fn admin(&self) -> redis::RedisResult<redis::Connection> {
        let auth = self
            .pass
            .as_ref()
            .map_or(String::new(), |p| format!(":{p}@"));
        let client = redis::Client::open(format!("redis://{auth}127.0.0.1:{}", self.port))?;
        let con = client.get_connection_with_timeout(Duration::from_secs(2))?;
        con.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(con)
    }

    /// The master's port it reports, if any.
    pub fn master_port(&self, name: &str) -> Option<u16> {
        let said: Option<(String, String)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(name)
            .query(&mut self.admin().ok()?)
            .ok()?;
        said?.1.parse().ok()
    }

    /// How many replicas, and other Sentinels, it knows of `name`.
    fn knows(&self, name: &str) -> (usize, usize) {
        let Ok(mut con) = self.admin() else {
            return (0, 0);
        };
        let count = |what: &str, con: &mut redis::Connection| {
            redis::cmd("SENTINEL")
                .arg(what)
                .arg(name)
                .query::<Vec<redis::Value>>(con)
                .map_or(0, |v| v.len())
        };
        (count("replicas", &mut con), count("sentinels", &mut con))
    }

    /// Stops (`true`, SIGSTOP) or resumes it: stopped, it accepts
    /// connections and answers nothing.
    pub fn pause(&self, stop: bool) {
        if let Some(child) = &self.child {
            super::server::signal(if stop { "-STOP" } else { "-CONT" }, child.id());
        }
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the process.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Polls `f` every 20 ms until it holds or `limit` passes.
fn wait(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if f() {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

/// One master, two replicas and three Sentinels that know them all.
pub struct Group {
    /// Every data server: the first is the master at the start.
    pub servers: Vec<Server>,
    pub sentinels: Vec<Sentinel>,
}

impl Group {
    /// Starts the group and waits until every Sentinel knows both
    /// replicas and the two other Sentinels (so a failover can run).
    pub fn start() -> io::Result<Group> {
        Group::start_with(None)
    }

    /// Starts the group as [`start`](Self::start) does, its Sentinels
    /// requiring `sentinel_pass` when given.
    pub fn start_with(sentinel_pass: Option<&str>) -> io::Result<Group> {
        let master = Server::start()?;
        let of = ["--replicaof", "127.0.0.1"];
        let port = master.port().to_string();
        let mut servers = vec![master];
        for _ in 0..2 {
            servers.push(Server::start_with(&[of[0], of[1], &port])?);
        }
        let monitored = servers[0].port();
        Group::assemble(servers, monitored, sentinel_pass, String::new)
    }

    /// A group of `servers` (the first the master, the others its
    /// replicas), whose master three new Sentinels monitor at `monitored`,
    /// each with the configuration lines `extra` gives, once the replicas
    /// are linked.
    pub fn assemble(
        servers: Vec<Server>,
        monitored: u16,
        sentinel_pass: Option<&str>,
        mut extra: impl FnMut() -> String,
    ) -> io::Result<Group> {
        let linked = wait(Duration::from_secs(10), || {
            role_field(&servers[0], "connected_slaves").as_deref() == Some("2")
        });
        if !linked {
            return Err(io::Error::other("the replicas did not link to the master"));
        }
        let sentinels = (0..3)
            .map(|_| Sentinel::start_conf(MASTER, monitored, sentinel_pass, &extra()))
            .collect::<io::Result<Vec<_>>>()?;
        let group = Group { servers, sentinels };
        let ready = wait(Duration::from_secs(20), || {
            group.sentinels.iter().all(|s| s.knows(MASTER) == (2, 2))
        });
        if !ready {
            return Err(io::Error::other("the Sentinels did not learn the group"));
        }
        Ok(group)
    }

    /// The member's URL: every Sentinel, the master's name.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis-sentinel://{}#{MASTER}", hosts.join(","))
    }

    /// The master's port as every live Sentinel reports it, once they
    /// agree.
    pub fn agreed_master(&self, limit: Duration) -> Option<u16> {
        let mut agreed = None;
        wait(limit, || {
            let ports: Vec<Option<u16>> = self
                .sentinels
                .iter()
                .filter(|s| s.child.is_some())
                .map(|s| s.master_port(MASTER))
                .collect();
            agreed = ports[0].filter(|p| ports.iter().all(|q| *q == Some(*p)));
            agreed.is_some()
        });
        agreed
    }

    /// Waits until each live Sentinel has a subscriber (a member's
    /// watcher of `+switch-master`), so that a failover is announced to
    /// it: whether it is in time is what a test checks, not a race.
    pub fn until_watched(&self) {
        let watched = wait(Duration::from_secs(10), || {
            self.sentinels
                .iter()
                .filter(|s| s.child.is_some())
                .all(|s| {
                    s.admin().is_ok_and(|mut con| {
                        redis::cmd("CLIENT")
                            .arg("LIST")
                            .query::<String>(&mut con)
                            .is_ok_and(|list| list.lines().any(|l| l.contains(" sub=1 ")))
                    })
                })
        });
        assert!(watched, "the member's watchers did not subscribe");
    }

    /// The data server on `port`.
    pub fn server(&mut self, port: u16) -> &mut Server {
        self.servers
            .iter_mut()
            .find(|s| s.port() == port)
            .expect("a server of the group")
    }

    /// Has a Sentinel fail the master over (`SENTINEL FAILOVER`), and
    /// waits until every live Sentinel reports a master other than
    /// `from`: the new master's port.
    pub fn fail_over(&self, from: u16) -> Option<u16> {
        let asked = wait(Duration::from_secs(20), || {
            self.sentinels[0].admin().is_ok_and(|mut con| {
                redis::cmd("SENTINEL")
                    .arg("failover")
                    .arg(MASTER)
                    .query::<()>(&mut con)
                    .is_ok()
            })
        });
        if !asked {
            return None;
        }
        let mut to = None;
        wait(Duration::from_secs(30), || {
            to = self
                .agreed_master(Duration::from_millis(100))
                .filter(|p| *p != from);
            to.is_some()
        });
        let promoted = to?;
        // The new master writes (its role switched, not only reported).
        let writable = wait(Duration::from_secs(10), || {
            self.servers
                .iter()
                .find(|s| s.port() == promoted)
                .and_then(|s| role_field(s, "role"))
                .as_deref()
                == Some("master")
        });
        writable.then_some(promoted)
    }
}

/// A field of `server`'s `INFO replication`, if it answers.
pub fn role_field(server: &Server, field: &str) -> Option<String> {
    super::info_field(&mut super::admin(server), "replication", field)
        .ok()
        .flatten()
}

/// A group whose master, replicas and
/// Sentinels serve TLS beside their plain ports, replication and the
/// Sentinels' links over TLS (`tls-replication yes`), so that the
/// Sentinels announce the master's TLS port; and its
/// `rediss-sentinel://` URL (the Sentinels' TLS ports). `None`, saying
/// why, when this `redis-server` has no TLS.
#[cfg(feature = "tls")]
pub fn tls_group(certs: &super::tls::Certs) -> Option<(Group, String)> {
    use super::tls::{tls_args, tls_server};
    tls_server(certs, false)?;
    let tls = |port: u16| {
        let mut args = tls_args(certs, port, "no");
        args.extend(["--tls-replication", "yes"].map(str::to_owned));
        args
    };
    let master_tls = super::server::free_port().unwrap();
    let args = tls(master_tls);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut servers = vec![Server::start_with(&args).unwrap()];
    for _ in 0..2 {
        let mut args = tls(super::server::free_port().unwrap());
        args.extend(["--replicaof", "127.0.0.1", &master_tls.to_string()].map(str::to_owned));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        servers.push(Server::start_with(&args).unwrap());
    }
    let mut sentinel_ports = Vec::new();
    let group = Group::assemble(servers, master_tls, None, || {
        let port = super::server::free_port().unwrap();
        sentinel_ports.push(port);
        format!(
            "tls-port {port}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
             tls-auth-clients no\ntls-replication yes\n",
            certs.path("server.pem"),
            certs.path("server.key"),
            certs.path("ca.pem"),
        )
    })
    .unwrap();
    let hosts: Vec<String> = sentinel_ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let url = format!("rediss-sentinel://{}#{}", hosts.join(","), MASTER);
    Some((group, url))
}
