//! Throwaway `redis-server` processes on free loopback ports.
//!
//! Shared by the integration tests (through `tests/support/mod.rs`) and the
//! examples (through `#[path]`). The binary is `redis-server` from `PATH`,
//! or whatever `REDIS_SERVER_BIN` names.

#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// The `redis-server` binary to run.
pub fn redis_server_bin() -> String {
    std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_owned())
}

/// A test that cannot run on this server (no TLS, no Redis Cluster)
/// returns `why` to be printed and is skipped; with `REDLOCK_REQUIRE_ALL=1`
/// (set in CI for the main server) it fails instead, so that a suite
/// cannot pass there by skipping.
pub fn skip(why: String) -> String {
    if std::env::var("REDLOCK_REQUIRE_ALL").as_deref() == Ok("1") {
        panic!("{why} (REDLOCK_REQUIRE_ALL=1: a test that would be skipped fails)");
    }
    why
}

/// The server binary's name and version, from `--version` (`"Redis"`,
/// `(7, 0)`; `"Valkey"`, `(8, 1)`), read once.
pub fn server_version() -> &'static (String, (u32, u32)) {
    static VERSION: std::sync::OnceLock<(String, (u32, u32))> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| version_of(&redis_server_bin()))
}

/// A server binary's name and version, from `--version`.
pub fn version_of(bin: &str) -> (String, (u32, u32)) {
    {
        let out = Command::new(bin)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        // "Redis server v=7.0.15 sha=..." / "Valkey server v=8.1.8 ..."
        let name = out.split_whitespace().next().unwrap_or("Redis").to_owned();
        let version = out
            .split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .unwrap_or("0.0");
        let mut parts = version.split('.').map(|p| p.parse().unwrap_or(0));
        let major = parts.next().unwrap_or(0);
        let minor = parts.next().unwrap_or(0);
        (name, (major, minor))
    }
}

/// Whether the server is at least `major.minor` (Valkey 8 counts as the
/// Redis 7.2 it forked from, and above).
pub fn server_at_least(major: u32, minor: u32) -> bool {
    server_version().1 >= (major, minor)
}

/// Whether the server is older than `major.minor`: then the test that
/// asks skips, saying so with `why` (see [`skip`]).
pub fn skipped_before(major: u32, minor: u32, why: &str) -> bool {
    let older = !server_at_least(major, minor);
    if older {
        eprintln!("{}", skip(format!("skipped: {why}")));
    }
    older
}

/// The server's own compare-and-delete, as `INFO commandstats` names
/// it, where the library releases with it: `delifeq` on Valkey 9.0 and
/// later, `delex` on Redis 8.4 and later; `None` elsewhere.
pub fn plain_delete() -> Option<&'static str> {
    match server_version() {
        (name, version) if name == "Valkey" && *version >= (9, 0) => Some("delifeq"),
        (name, version) if name == "Redis" && *version >= (8, 4) => Some("delex"),
        _ => None,
    }
}

/// One `redis-server` process on 127.0.0.1, killed when dropped.
pub struct Server {
    port: u16,
    dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    paused: bool,
    /// The rate its clock runs at (libfaketime; see [`clock_server`]),
    /// kept for restarts; `None`: the real clock, the usual binary.
    rate: Option<f64>,
    /// Another binary than the usual one (see [`Server::start_on`]).
    bin: Option<String>,
}

/// What runs a server whose clock runs fast or slow: a server binary
/// that works under libfaketime (`REDLOCK_CLOCK_SERVER_BIN`: Valkey's,
/// built with libc malloc; Debian's `redis-server`, with jemalloc, does
/// not start under it) and the library (`REDLOCK_FAKETIME_LIB`, by
/// default Debian's `faketime` package's); `Err` says what is missing.
pub fn clock_server() -> Result<(String, String), String> {
    let bin = std::env::var("REDLOCK_CLOCK_SERVER_BIN").map_err(|_| {
        "REDLOCK_CLOCK_SERVER_BIN is not set (a valkey-server binary, which runs under \
         libfaketime; .ci/run sets it)"
            .to_owned()
    })?;
    let lib = std::env::var("REDLOCK_FAKETIME_LIB")
        .unwrap_or_else(|_| "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1".to_owned());
    for path in [&bin, &lib] {
        if !Path::new(path).exists() {
            return Err(format!("{path} does not exist (apt-get install faketime)"));
        }
    }
    Ok((bin, lib))
}

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

impl Server {
    /// Starts a server with no persistence on a free port.
    pub fn start() -> io::Result<Server> {
        Server::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (`"--name",
    /// "value"` pairs), kept for restarts.
    pub fn start_with(args: &[&str]) -> io::Result<Server> {
        Server::start_at_rate(args, None)
    }

    /// Starts a server whose clock runs at `rate` (1.02: 2% fast, its keys
    /// expire 2% early) on the binary [`clock_server`] names.
    pub fn start_clocked(rate: f64) -> io::Result<Server> {
        Server::start_at_rate(&[], Some(rate))
    }

    /// Starts a server of the binary `bin` (not the usual one).
    pub fn start_on(bin: &str) -> io::Result<Server> {
        Server::start_of(&[], None, Some(bin.to_owned()))
    }

    fn start_at_rate(args: &[&str], rate: Option<f64>) -> io::Result<Server> {
        Server::start_of(args, rate, None)
    }

    fn start_of(args: &[&str], rate: Option<f64>, bin: Option<String>) -> io::Result<Server> {
        let dir = std::env::temp_dir().join(format!(
            "redlock-sync-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let mut server = Server {
            port: 0,
            dir,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            child: None,
            paused: false,
            rate,
            bin,
        };
        // A port found free can be taken before the server binds it:
        // try a few.
        let mut last = None;
        for _ in 0..5 {
            server.port = free_port()?;
            match server.spawn(true) {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    /// Starts the process; with `until_loaded`, returns only once it has
    /// loaded its data (it answers `-LOADING` until then).
    fn spawn(&mut self, until_loaded: bool) -> io::Result<()> {
        let (bin, faked) = match self.rate {
            Some(rate) => {
                let (bin, lib) = clock_server().map_err(io::Error::other)?;
                (bin, Some((lib, format!("+0 x{rate}"))))
            }
            None => (self.bin.clone().unwrap_or_else(redis_server_bin), None),
        };
        // `REDLOCK_SERVER_CPUS` (a `taskset -c` list) pins the servers,
        // for benchmarks that state where each process runs (BENCHMARKS.md).
        let mut cmd = match std::env::var("REDLOCK_SERVER_CPUS") {
            Ok(cpus) if !cpus.is_empty() => {
                let mut cmd = Command::new("taskset");
                cmd.args(["-c", &cpus]).arg(&bin);
                cmd
            }
            _ => Command::new(&bin),
        };
        if let Some((lib, rate)) = faked {
            cmd.env("LD_PRELOAD", lib).env("FAKETIME", rate);
        }
        cmd.arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--protected-mode", "no"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--loglevel", "warning", "--logfile", ""]);
        // `REDLOCK_TEST_LOGS` (a directory): each server logs there at
        // `notice`, in `<port>.log`, kept after the test, to diagnose a
        // failure (a cluster's failover, a replica's resync).
        if let Ok(logs) = std::env::var("REDLOCK_TEST_LOGS")
            && !logs.is_empty()
        {
            // Absolute: the server opens it after moving into `--dir`.
            let logs = std::path::absolute(&logs)?;
            std::fs::create_dir_all(&logs)?;
            let file = logs.join(format!("{}.log", self.port));
            cmd.args(["--loglevel", "notice", "--logfile"]).arg(file);
        }
        // DEBUG is off by default from Redis 7 on (and the option unknown
        // before it; the clock server is Valkey 8 or later).
        if server_at_least(7, 0) || self.rate.is_some() {
            cmd.args(["--enable-debug-command", "local"]);
        }
        cmd.arg("--dir")
            .arg(&self.dir)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot run {bin:?} ({e}); install redis-server or set REDIS_SERVER_BIN"),
            )
        })?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "redis-server on port {} exited with {status}",
                    self.port
                )));
            }
            if ping(self.port).is_some_and(|loading| !(until_loaded && loading)) {
                self.child = Some(child);
                self.paused = false;
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::other(format!(
                    "redis-server on port {} did not answer PING",
                    self.port
                )));
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// The server's TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its loopback address, for a forwarder in front of it.
    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's working directory (its dump and any socket live here).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the process (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Stops the process with SIGSTOP: it keeps its port and accepts
    /// connections (the kernel does), but answers nothing.
    pub fn pause(&mut self) {
        if let Some(pid) = self.pid() {
            signal("-STOP", pid);
            self.paused = true;
        }
    }

    /// Resumes a paused process with SIGCONT.
    pub fn resume(&mut self) {
        if let Some(pid) = self.pid() {
            signal("-CONT", pid);
            self.paused = false;
        }
    }

    /// Kills the process and starts a new one on the same port, with the
    /// same arguments: without persistence its keys and script cache are
    /// gone. Returns once the new process has loaded any persisted keys.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.spawn(true)
    }

    /// Like [`restart`](Self::restart), with `extra` arguments for this
    /// start only.
    pub fn restart_with(&mut self, extra: &[&str]) -> io::Result<()> {
        self.kill();
        let kept = self.args.len();
        self.args.extend(extra.iter().map(|a| (*a).to_owned()));
        let result = self.spawn(false);
        self.args.truncate(kept);
        result
    }

    /// Starts the process again after [`kill`](Self::kill).
    pub fn start_again(&mut self) -> io::Result<()> {
        if self.child.is_none() {
            self.spawn(true)?;
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.paused {
            self.resume();
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Several plain servers, each its own independent master: the nodes of
/// a manager (a Redis Cluster is `redis_cluster::RedisCluster`).
pub struct Nodes {
    pub servers: Vec<Server>,
}

impl Nodes {
    /// Starts `n` servers.
    pub fn start(n: usize) -> io::Result<Nodes> {
        Nodes::start_with(n, &[])
    }

    /// Starts `n` servers with persistence on (AOF, fsync always), as
    /// Redlock requires of nodes that restart: a restart keeps their keys.
    pub fn persistent(n: usize) -> io::Result<Nodes> {
        Nodes::start_with(n, &["--appendonly", "yes", "--appendfsync", "always"])
    }

    /// Starts `n` servers with extra `redis-server` arguments.
    pub fn start_with(n: usize, args: &[&str]) -> io::Result<Nodes> {
        let servers = (0..n)
            .map(|_| Server::start_with(args))
            .collect::<io::Result<_>>()?;
        Ok(Nodes { servers })
    }

    /// The servers' URLs, in order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(Server::url).collect()
    }
}

impl std::ops::Index<usize> for Nodes {
    type Output = Server;
    fn index(&self, i: usize) -> &Server {
        &self.servers[i]
    }
}

impl std::ops::IndexMut<usize> for Nodes {
    fn index_mut(&mut self, i: usize) -> &mut Server {
        &mut self.servers[i]
    }
}

/// Ports handed out in this process, never handed out again. A test that
/// kills a server frees its port; were a server or proxy of another test
/// (running beside it) started there, the dead node would answer again,
/// as someone else, and vote: a killed node must stay dead until its own
/// test starts it again.
static CLAIMED: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A listener on a loopback port that no server, proxy or listener of this
/// process has had before.
pub fn claimed_listener() -> io::Result<TcpListener> {
    for _ in 0..1000 {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
        if claimed.insert(port) {
            return Ok(listener);
        }
    }
    Err(io::Error::other(
        "no loopback port left that this process has not used",
    ))
}

/// A free loopback port that this process has not handed out before (see
/// [`claimed_listener`]).
pub fn free_port() -> io::Result<u16> {
    Ok(claimed_listener()?.local_addr()?.port())
}

/// Whether the server on `port` answers PING (any reply will do: a server
/// with a password answers -NOAUTH), and if so whether it is still loading.
fn ping(port: u16) -> Option<bool> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    s.write_all(b"PING\r\n").ok()?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\n") && line.len() < 256 {
        s.read_exact(&mut byte).ok()?;
        line.push(byte[0]);
    }
    matches!(line.first(), Some(b'+' | b'-')).then(|| line.starts_with(b"-LOADING"))
}

pub fn signal(sig: &str, pid: u32) {
    use nix::sys::signal::{Signal, kill};
    let sig = if sig == "-STOP" {
        Signal::SIGSTOP
    } else {
        Signal::SIGCONT
    };
    let _ = kill(nix::unistd::Pid::from_raw(pid as i32), sig);
}
