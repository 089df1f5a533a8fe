//! `lockrun`: run a command under a distributed lock, like `flock(1)`
//! across machines.
//!
//! ```text
//! cargo run --example lockrun -- [OPTIONS] RESOURCE -- COMMAND [ARGS...]
//!
//!   --nodes URL,...      Redis masters (else $REDLOCK_NODES, else three
//!                        temporary local servers: a demo, private to this run)
//!   --ttl DURATION       lock TTL, renewed every TTL/3 while COMMAND runs [30s]
//!   --wait DURATION      how long to wait for a lock held by someone else [10s]
//!   --node-timeout DUR   time each node gets per call [50ms]
//!
//! DURATION: 30s, 500ms, 2m, or plain seconds.
//! ```
//!
//! COMMAND gets the lock's fencing token in `REDLOCK_FENCING_TOKEN` (pass it
//! to the storage it writes to) and the resource in `REDLOCK_RESOURCE`.
//! The lock is released when COMMAND exits, and lockrun exits with
//! COMMAND's status (128 + N if a signal N ended it). Its own failures have
//! their own statuses:
//!
//! | status | meaning                                                       |
//! |--------|---------------------------------------------------------------|
//! | 64     | bad command line                                              |
//! | 69     | too many nodes unreachable or failing to take the lock        |
//! | 75     | the lock is held by someone else and `--wait` ran out         |
//! | 76     | the lock was lost while COMMAND ran; COMMAND got SIGTERM      |
//! | 126    | COMMAND could not be started                                  |
//! | 127    | COMMAND was not found                                         |
//!
//! If lockrun itself is killed, the lock expires after its TTL.

#[path = "../tests/support/server.rs"]
mod server;

use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitCode};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redlock_sync::{Error, LockGuard, LockManager};

const EX_USAGE: u8 = 64;
const EX_UNAVAILABLE: u8 = 69;
const EX_TEMPFAIL: u8 = 75;
const EX_LOST: u8 = 76;
const EX_CANNOT_RUN: u8 = 126;
const EX_NOT_FOUND: u8 = 127;

/// How long COMMAND gets to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(10);
/// How often the lock and the child are checked.
const POLL: Duration = Duration::from_millis(10);

struct Args {
    nodes: Option<Vec<String>>,
    ttl: Duration,
    wait: Duration,
    node_timeout: Duration,
    resource: String,
    command: Vec<String>,
}

const USAGE: &str = "usage: lockrun [--nodes URL,...] [--ttl 30s] [--wait 10s] \
                     [--node-timeout 50ms] RESOURCE -- COMMAND [ARGS...]";

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let before_command = argv.iter().take_while(|a| *a != "--");
    if before_command
        .into_iter()
        .any(|a| a == "-h" || a == "--help")
    {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match parse(argv.into_iter()) {
        Ok(args) => args,
        Err(msg) => {
            eprintln!("lockrun: {msg}");
            eprintln!("{USAGE}");
            return ExitCode::from(EX_USAGE);
        }
    };
    // Keep temporary servers, if any, until the end.
    let (urls, _servers) = match args.nodes.clone().or_else(nodes_from_env) {
        Some(urls) => (urls, None),
        None => match server::Cluster::start(3) {
            Ok(cluster) => {
                eprintln!(
                    "lockrun: no --nodes or REDLOCK_NODES: using 3 temporary local \
                     redis-server nodes, so this lock excludes nothing outside this run"
                );
                (cluster.urls(), Some(cluster))
            }
            Err(e) => {
                eprintln!("lockrun: no nodes given, and no local redis-server could start: {e}");
                return ExitCode::from(EX_UNAVAILABLE);
            }
        },
    };
    let dlm = match LockManager::builder()
        .nodes(&urls)
        .node_timeout(args.node_timeout)
        .retry(1, Duration::from_millis(100))
        .build()
    {
        Ok(dlm) => dlm,
        Err(e) => {
            eprintln!("lockrun: {e}");
            return ExitCode::from(EX_USAGE);
        }
    };
    let guard = match dlm.try_lock_for(&args.resource, args.ttl, args.wait) {
        Ok(guard) => guard.keep_alive(),
        Err(e) => {
            eprintln!("lockrun: cannot lock {:?}: {e}", args.resource);
            return ExitCode::from(match e {
                Error::Taken { .. } => EX_TEMPFAIL,
                Error::InvalidArgument { .. } => EX_USAGE,
                _ => EX_UNAVAILABLE,
            });
        }
    };
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("REDLOCK_RESOURCE", &args.resource);
    if let Some(token) = guard.fencing_token() {
        command.env("REDLOCK_FENCING_TOKEN", token.to_string());
    }
    let child = command.spawn();
    match child {
        Ok(child) => supervise(child, guard),
        Err(e) => {
            eprintln!("lockrun: cannot run {:?}: {e}", args.command[0]);
            // The guard drops here: the lock is released.
            ExitCode::from(if e.kind() == ErrorKind::NotFound {
                EX_NOT_FOUND
            } else {
                EX_CANNOT_RUN
            })
        }
    }
}

/// Waits for the child while watching the lock; on a loss, terminates the
/// child. Releases the lock (the guard drops) once the child has exited.
fn supervise(mut child: Child, guard: LockGuard) -> ExitCode {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                drop(guard);
                let code = status
                    .code()
                    .or_else(|| status.signal().map(|sig| 128 + sig))
                    .unwrap_or(1);
                return ExitCode::from(u8::try_from(code).unwrap_or(1));
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("lockrun: cannot wait for the command: {e}");
                return ExitCode::from(EX_CANNOT_RUN);
            }
        }
        if let Err(e) = guard.ensure_held() {
            eprintln!("lockrun: {e}; terminating the command");
            terminate(&mut child);
            return ExitCode::from(EX_LOST);
        }
        thread::sleep(POLL);
    }
}

/// SIGTERM, then SIGKILL if the child is still there after the grace time.
fn terminate(child: &mut Child) {
    let pid = Pid::from_raw(child.id() as i32);
    let _ = kill(pid, Signal::SIGTERM);
    let deadline = Instant::now() + TERM_GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        thread::sleep(POLL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn nodes_from_env() -> Option<Vec<String>> {
    let list = std::env::var("REDLOCK_NODES").ok()?;
    let urls: Vec<String> = split_urls(&list);
    (!urls.is_empty()).then_some(urls)
}

fn split_urls(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

fn parse(mut argv: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut args = Args {
        nodes: None,
        ttl: Duration::from_secs(30),
        wait: Duration::from_secs(10),
        node_timeout: Duration::from_millis(50),
        resource: String::new(),
        command: Vec::new(),
    };
    let mut resource = None;
    while let Some(arg) = argv.next() {
        let mut value = |name: &str| argv.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--nodes" => args.nodes = Some(split_urls(&value("--nodes")?)),
            "--ttl" => args.ttl = duration(&value("--ttl")?)?,
            "--wait" => args.wait = duration(&value("--wait")?)?,
            "--node-timeout" => args.node_timeout = duration(&value("--node-timeout")?)?,
            "--" => {
                args.command = argv.by_ref().collect();
                break;
            }
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            name if resource.is_none() => resource = Some(name.to_owned()),
            extra => return Err(format!("unexpected argument {extra:?} (missing `--`?)")),
        }
    }
    args.resource = resource.ok_or("no RESOURCE given")?;
    if args.command.is_empty() {
        return Err("no COMMAND given after `--`".into());
    }
    if args.nodes.as_ref().is_some_and(Vec::is_empty) {
        return Err("--nodes is empty".into());
    }
    Ok(args)
}

/// `30s`, `500ms`, `2m`, or plain (possibly fractional) seconds.
fn duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = match text.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (try 30s or 500ms)"))?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return Err(format!("unknown unit {unit:?} in {text:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{text:?} is out of range"))
}
