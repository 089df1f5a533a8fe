//! `lockrun`: run a command under a distributed lock, like `flock(1)`
//! across machines. Built with the `cli` feature:
//! `cargo install --path . --features cli`. `lockrun --help` says
//! everything; its EXAMPLES have cron and systemd.
//!
//! One `unsafe` block: `CommandExt::pre_exec`, to ask Linux to kill the
//! command if lockrun itself dies (the parent-death signal). The closure
//! only makes two system calls (`prctl`, `getppid`), both safe between
//! `fork` and `exec`.

use std::io::ErrorKind;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitCode};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redlock_sync::mode::Mode;
#[path = "lockrun/args.rs"]
mod args;
#[path = "lockrun/tree.rs"]
mod tree;

use args::{Args, MemberArg, Parsed, human, parse};
use redlock_sync::{
    Cancel, Error, Guard, Leadership, LockGuard, LockManager, NodeError, ReadGuard, Wait,
};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::low_level::siginfo::{Cause, Origin};

/// The signals received, from the thread that receives them.
type Signals = mpsc::Receiver<Origin>;

const EX_USAGE: u8 = 64;
const EX_UNAVAILABLE: u8 = 69;
const EX_LOST: u8 = 76;
const EX_CONFIG: u8 = 78;
const EX_CANNOT_RUN: u8 = 126;
const EX_NOT_FOUND: u8 = 127;

/// How often the child and signals are checked (a lost lock is seen at once).
const POLL: Duration = Duration::from_millis(10);

/// 0: errors only, 1: warnings too (the default), 2: everything.
static VERBOSITY: AtomicU8 = AtomicU8::new(1);

/// One line to stderr, whole, at `$level` or above; a stderr that cannot
/// be written (a closed pipe, a hung-up terminal) loses the line and
/// nothing else.
macro_rules! say {
    ($level:expr, $($arg:tt)+) => {
        if VERBOSITY.load(Ordering::Relaxed) >= $level {
            let line = format!("lockrun: {}\n", format_args!($($arg)+));
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        }
    };
}
const ERROR: u8 = 0;
const WARN: u8 = 1;
const INFO: u8 = 2;

// After `say!`, which it uses.
#[path = "lockrun/ops.rs"]
mod ops;

fn main() -> ExitCode {
    // Signals are taken from the start: one that comes while waiting for
    // the lock ends lockrun cleanly, before COMMAND starts.
    let signals = match SignalsInfo::<WithOrigin>::new([SIGTERM, SIGINT, SIGHUP]) {
        Ok(signals) => signals,
        Err(e) => {
            say!(ERROR, "cannot handle signals: {e}");
            return ExitCode::from(EX_UNAVAILABLE);
        }
    };
    let (tx, received) = mpsc::channel();
    let handle = signals.handle();
    // A signal also stops any wait for the lock under way.
    let cancel = Cancel::new();
    let thrown = cancel.clone();
    thread::spawn(move || {
        let mut signals = signals;
        for origin in signals.forever() {
            let sent = tx.send(origin);
            thrown.cancel();
            if sent.is_err() {
                break;
            }
        }
    });
    let code = match parse() {
        Ok(Parsed::Run(args)) => {
            VERBOSITY.store(args.verbosity, Ordering::Relaxed);
            run(&args, &received, &cancel)
        }
        Ok(Parsed::Exit(code)) => code,
        Err(msg) => {
            say!(ERROR, "{msg}");
            eprintln!("usage: lockrun [OPTIONS] RESOURCE -- COMMAND [ARGS...]  (see --help)");
            ExitCode::from(EX_USAGE)
        }
    };
    handle.close();
    code
}

fn run(args: &Args, signals: &Signals, cancel: &Cancel) -> ExitCode {
    let mut builder = LockManager::builder();
    for member in &args.members {
        builder = match member {
            MemberArg::Node(url) => builder.node(url),
            MemberArg::Cluster(seeds) => builder.cluster(seeds),
        };
    }
    if let Some(q) = args.restart_quarantine {
        builder = builder.restart_quarantine(q);
    }
    let mut builder = builder
        .node_timeout(args.node_timeout)
        .fencing(args.fencing)
        .fair(args.fair)
        .retry(1, Duration::from_millis(100));
    // The lock's value names this host and process, and the command's
    // program (`--inspect` and a refused lockrun show it).
    if let Some(program) = args.command.first() {
        let name = std::path::Path::new(program)
            .file_name()
            .unwrap_or(program.as_os_str());
        builder = builder.holder_label(name.to_string_lossy());
    }
    if let Some(ca) = &args.tls_ca {
        match std::fs::read(ca) {
            Ok(pem) => builder = builder.tls_root_cert(pem),
            Err(e) => return usage_error(format!("--tls-ca {ca}: {e}")),
        }
    }
    match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => match (std::fs::read(cert), std::fs::read(key)) {
            (Ok(cert), Ok(key)) => builder = builder.tls_client_cert(cert, key),
            (Err(e), _) => return usage_error(format!("--tls-cert {cert}: {e}")),
            (_, Err(e)) => return usage_error(format!("--tls-key {key}: {e}")),
        },
        (None, None) => {}
        _ => return usage_error("--tls-cert and --tls-key go together".into()),
    }
    let dlm = match builder.build() {
        Ok(dlm) => dlm.cancel_on(cancel),
        Err(e) => return usage_error(chained(&e)),
    };
    if args.check {
        return ops::check(&dlm, args.resources.first());
    }
    if args.leader_of {
        return ops::leader_of(&dlm, &args.resources[0]);
    }
    if args.inspect {
        return ops::inspect(&dlm, &args.resources[0]);
    }
    if args.force_unlock {
        return ops::force_unlock(&dlm, &args.resources[0]);
    }
    if args.leader {
        return lead(&dlm, args, signals);
    }

    let what = if args.shared { " for reading" } else { "" };
    if args.wait.is_zero() {
        say!(
            INFO,
            "locking {}{what} without waiting (--wait 0)",
            args.resource
        );
    } else {
        say!(
            INFO,
            "locking {}{what}, waiting up to {} if it is busy",
            args.resource,
            human(args.wait)
        );
    }
    match acquire(&dlm, args, signals) {
        Acquired::Signal(sig) => ExitCode::from(128u8.saturating_add(sig as u8)),
        Acquired::Lock(Ok(Held::Lock(mut guard))) => {
            if let Some(hold) = args.min_hold {
                guard.set_min_hold(hold);
            }
            let fencing = guard.fencing_token();
            run_locked(guard.keep_alive(), fencing, args, signals)
        }
        Acquired::Lock(Ok(Held::Read(guard))) => {
            run_locked(guard.keep_alive(), None, args, signals)
        }
        Acquired::Lock(Err(e)) => {
            say!(ERROR, "cannot lock {}: {}", args.resource, chained(&e));
            ExitCode::from(exit_for(&e, args.conflict_exit))
        }
    }
}

/// The exit status for a lock (or leadership) not taken: `conflict` when
/// someone else holds it, 78 when settings must change first (refused
/// credentials or permissions, TLS, a peer that is not Redis, on too many
/// members), 64 for bad arguments, 69 otherwise.
fn exit_for(e: &Error, conflict: u8) -> u8 {
    match e {
        e if e.is_misconfigured() => EX_CONFIG,
        Error::Taken { .. } => conflict,
        e if e.is_invalid() => EX_USAGE,
        _ => EX_UNAVAILABLE,
    }
}

/// What COMMAND runs under: a lock's guard, or a leadership (both kept
/// alive).
trait Hold {
    /// How many members agreed, and the ones that failed.
    fn agreed(&self) -> (usize, &[NodeError]);
    fn ensure_held(&self) -> Result<(), Error>;
    /// What is left of the validity (zero once lost).
    fn validity(&self) -> Duration;
    fn wait_lost(&self, timeout: Duration) -> bool;
    fn release(self) -> Result<(), Error>;
    /// What is held, for messages.
    fn shown(&self) -> String;
}

impl<M: Mode> Hold for Guard<M> {
    fn agreed(&self) -> (usize, &[NodeError]) {
        (Guard::agreed(self), Guard::failures(self))
    }
    fn ensure_held(&self) -> Result<(), Error> {
        Guard::ensure_held(self)
    }
    fn validity(&self) -> Duration {
        Guard::validity(self)
    }
    fn wait_lost(&self, timeout: Duration) -> bool {
        Guard::wait_lost(self, timeout)
    }
    fn release(self) -> Result<(), Error> {
        Guard::release(self)
    }
    fn shown(&self) -> String {
        args::cut(
            self.resources()
                .map(|r| format!("{:?}", String::from_utf8_lossy(r)))
                .collect::<Vec<_>>()
                .join(", "),
        )
    }
}

impl Hold for Leadership {
    fn agreed(&self) -> (usize, &[NodeError]) {
        (Leadership::agreed(self), Leadership::failures(self))
    }
    fn ensure_held(&self) -> Result<(), Error> {
        Leadership::ensure_held(self)
    }
    fn validity(&self) -> Duration {
        Leadership::validity(self)
    }
    fn wait_lost(&self, timeout: Duration) -> bool {
        Leadership::wait_lost(self, timeout)
    }
    fn release(self) -> Result<(), Error> {
        self.resign()
    }
    fn shown(&self) -> String {
        args::cut(format!(
            "the leadership of {:?}",
            String::from_utf8_lossy(self.name())
        ))
    }
}

/// Runs the command while `guard` (kept alive) holds the lock, whose
/// fencing token is `fencing`.
fn run_locked<H: Hold>(guard: H, fencing: Option<u64>, args: &Args, signals: &Signals) -> ExitCode {
    match fencing {
        Some(token) => say!(INFO, "locked {} (fencing token {token})", args.resource),
        None => say!(INFO, "locked {}", args.resource),
    }
    // Held, but with a member down: one line, so that someone can act
    // before the next failure stops every lock.
    let (agreed, failures) = guard.agreed();
    if !failures.is_empty() {
        say!(
            WARN,
            "redundancy lost: {} taken with {agreed} of {} members agreeing; failed: {}",
            args.resource,
            args.members.len(),
            failures
                .iter()
                .map(|f| f.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let mut command = Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .env("REDLOCK_RESOURCE", &args.resources[0])
        .env("REDLOCK_RESOURCES", args.resources.join("\n"));
    if let Some(token) = fencing {
        command.env("REDLOCK_FENCING_TOKEN", token.to_string());
    }
    die_with_parent(&mut command);
    tree::adopt_orphans();
    match command.spawn() {
        Ok(child) => supervise(child, guard, signals, &Ending::of(args)),
        Err(e) => {
            say!(ERROR, "cannot run {:?}: {e}", args.command[0]);
            release(guard);
            ExitCode::from(if e.kind() == ErrorKind::NotFound {
                EX_NOT_FOUND
            } else {
                EX_CANNOT_RUN
            })
        }
    }
}

/// The lock taken: exclusive (a lock, a set, a permit) or shared.
enum Held {
    Lock(LockGuard),
    Read(ReadGuard),
}

/// How waiting for the lock ended.
enum Acquired {
    Lock(Result<Held, Error>),
    /// A signal came first.
    Signal(i32),
}

/// Takes the lock within `--wait`: one attempt first, whose failing nodes
/// are reported at once (a person should not wait 10 s to learn that a
/// node is down or refuses the password; a lock merely held by someone
/// else is reported only with `-v`), then one wait for the rest, which a
/// signal stops (the signal thread throws the manager's `Cancel`). One
/// wait, not many short ones: a waiting writer keeps its place, and its
/// flag that holds off new readers, for the whole of it.
fn acquire(dlm: &LockManager, args: &Args, signals: &Signals) -> Acquired {
    let first = take(dlm, args, Wait::No);
    match &first {
        Ok(_) => return after_signals(first, signals),
        // Nor when waiting cannot help: too few members are left once
        // those that refuse our credentials or are not Redis are counted
        // out.
        Err(e) if e.is_invalid() || e.is_misconfigured() || args.wait.is_zero() => {
            return Acquired::Lock(first);
        }
        Err(e) if !e.failures().is_empty() => say!(
            WARN,
            "cannot lock {} yet: {e}; still trying for up to {}",
            args.resource,
            human(args.wait)
        ),
        Err(e) => say!(
            INFO,
            "cannot lock {} yet ({e}); waiting up to {}",
            args.resource,
            human(args.wait)
        ),
    }
    match take(dlm, args, Wait::For(args.wait)) {
        Err(e) if e.is_cancelled() => match signals.try_recv() {
            Ok(origin) => {
                say!(
                    WARN,
                    "got signal {} while waiting for the lock; giving up",
                    origin.signal
                );
                Acquired::Signal(origin.signal)
            }
            Err(_) => Acquired::Lock(Err(e)),
        },
        result => after_signals(result, signals),
    }
}

/// One acquisition of what the arguments ask for, waiting as `wait` says.
fn take(dlm: &LockManager, args: &Args, wait: Wait) -> Result<Held, Error> {
    let first = &args.resources[0];
    match args.permits {
        None if args.shared => dlm
            .rwlock(first)
            .and_then(|rw| rw.read_with(args.ttl, wait))
            .map(Held::Read),
        None if args.resources.len() == 1 => dlm.lock_with(first, args.ttl, wait).map(Held::Lock),
        None => dlm
            .lock_all_with(&args.resources, args.ttl, wait)
            .map(Held::Lock),
        // One of K permits: a lock on one of the semaphore's slots.
        Some(k) => dlm.semaphore(first, k).and_then(|sem| {
            sem.acquire_with(args.ttl, wait)
                .map(|permit| Held::Lock(permit.into_guard()))
        }),
    }
}

/// A signal that came while the lock was being taken wins: the lock is
/// released and COMMAND never starts.
fn after_signals(result: Result<Held, Error>, signals: &Signals) -> Acquired {
    match (result, signals.try_recv()) {
        (Ok(held), Ok(origin)) => {
            say!(
                WARN,
                "got signal {} while taking the lock; releasing it",
                origin.signal
            );
            match held {
                Held::Lock(guard) => release(guard),
                Held::Read(guard) => release(guard),
            }
            Acquired::Signal(origin.signal)
        }
        (result, _) => Acquired::Lock(result),
    }
}

/// On Linux, COMMAND gets SIGKILL when lockrun dies, however it dies, so
/// that it never runs on unprotected. Elsewhere there is no such signal:
/// if lockrun is killed with SIGKILL, COMMAND keeps running (and the lock
/// expires with its TTL).
#[cfg(target_os = "linux")]
fn die_with_parent(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the child between fork and exec, where
    // only async-signal-safe calls are allowed: it makes two system calls
    // (prctl and getppid) and allocates nothing on success.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // lockrun died before prctl took effect: do not start at all.
            if nix::unistd::getppid().as_raw() as u32 != parent {
                return Err(std::io::Error::from(ErrorKind::BrokenPipe));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_command: &mut Command) {}

#[path = "lockrun/supervise.rs"]
mod supervise;

use supervise::{Ending, supervise};

/// `--leader`: campaigns (without limit, unless `--wait` was given), in
/// attempts of at most 100 ms so that a signal is seen promptly, then
/// runs COMMAND while leader with the term as its fencing token.
fn lead(dlm: &LockManager, args: &Args, signals: &Signals) -> ExitCode {
    let name = &args.resources[0];
    let election = match dlm.election(name) {
        Ok(election) => election,
        Err(e) => return usage_error(e.to_string()),
    };
    let election = election.with_value(args.leader_value.as_deref().unwrap_or(""));
    let wait = if args.wait_given {
        Wait::For(args.wait)
    } else {
        Wait::Forever
    };
    say!(INFO, "campaigning for {}", args.resource);
    // One attempt first, whose failing nodes are reported at once; then
    // one campaign for the rest, which a signal stops.
    let mut result = election.try_campaign(args.ttl);
    if let Err(e) = &result
        && !e.is_invalid()
        && !e.is_misconfigured()
        && wait != Wait::For(Duration::ZERO)
    {
        if !e.failures().is_empty() {
            say!(WARN, "campaigning for {}: {e}; still trying", args.resource);
        }
        result = election.campaign_with(args.ttl, wait);
    }
    let signal = signals.try_recv().ok();
    match (result, signal) {
        (Ok(lead), None) => {
            say!(INFO, "leading {} (term {})", args.resource, lead.term());
            let term = lead.term();
            run_locked(lead, Some(term), args, signals)
        }
        (result, Some(origin)) => {
            say!(
                WARN,
                "got signal {} while campaigning; giving up",
                origin.signal
            );
            if let Ok(lead) = result {
                release(lead);
            }
            ExitCode::from(128u8.saturating_add(origin.signal as u8))
        }
        (Err(e), None) if e.is_invalid() => usage_error(e.to_string()),
        (Err(e), None) => {
            say!(ERROR, "not elected for {}: {e}", args.resource);
            ExitCode::from(exit_for(&e, args.conflict_exit))
        }
    }
}

fn release<H: Hold>(guard: H) {
    let resource = guard.shown();
    match guard.release() {
        Ok(()) => say!(INFO, "released {resource}"),
        Err(e) => say!(
            WARN,
            "release: {e} (keys it could not delete expire with their TTL)"
        ),
    }
}

/// An error and each cause behind it, on one line (`a: b`): the library
/// prints a cause either in its message or as its `source()`, never both,
/// so that this prints each once (an unreadable node URL's parser error is
/// a source).
fn chained(e: &dyn std::error::Error) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        line.push_str(": ");
        line.push_str(&c.to_string());
        cause = c.source();
    }
    line
}

fn usage_error(msg: String) -> ExitCode {
    say!(ERROR, "{msg}");
    ExitCode::from(EX_USAGE)
}
