//! The processes COMMAND started: lockrun is their subreaper (Linux), so
//! whatever COMMAND starts stays lockrun's descendant even when its parent
//! exits or it calls `setsid`; lockrun finds them in `/proc` and signals
//! every one of them when the lock ends. Elsewhere (or with a `/proc` of
//! another pid namespace) only COMMAND itself is known.
//!
//! A look at `/proc` is not atomic: a process that forks and exits while
//! it is read may hide its child for a moment (the child is reparented to
//! lockrun right after). So emptiness is only believed when two looks a
//! few milliseconds apart agree, and a kill is repeated until then.

use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Makes lockrun the subreaper of what it starts (Linux): an orphaned
/// descendant is reparented to lockrun, not to init, so it stays in the
/// tree lockrun ends, and lockrun reaps it.
pub(crate) fn adopt_orphans() {
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// One process of `/proc`: its parent, whether it is a zombie, and when
/// it started (clock ticks since boot).
struct Proc {
    pid: i32,
    ppid: i32,
    zombie: bool,
    start: u64,
}

/// One process's line of `/proc/PID/stat`.
fn stat(pid: i32) -> Option<Proc> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`: comm may hold spaces and parens.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    Some(Proc {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        zombie: matches!(*fields.first()?, "Z" | "X"),
        // Field 22 of the line; the 20th after comm.
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Every process in `/proc`.
fn processes() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| stat(entry.ok()?.file_name().to_str()?.parse().ok()?))
        .collect()
}

/// COMMAND and what it started.
pub(crate) struct Tree {
    /// COMMAND's pid: its zombie is `Child`'s to reap.
    command: i32,
    /// When COMMAND started: lockrun's children started before it (a
    /// shell's process substitution that `exec lockrun` inherited) are no
    /// part of the tree. `None`: `/proc` cannot be read as ours (none, or
    /// another pid namespace's); only COMMAND is known.
    since: Option<u64>,
}

impl Tree {
    pub(crate) fn of(child: &Child) -> Tree {
        let command = child.id() as i32;
        let ours = std::fs::read_link("/proc/self")
            .ok()
            .and_then(|p| p.to_str()?.parse::<u32>().ok())
            == Some(std::process::id());
        Tree {
            command,
            since: stat(command).filter(|_| ours).map(|p| p.start),
        }
    }

    /// The live processes of the tree (COMMAND while `running`, what it
    /// started, orphans of it reparented to lockrun), zombies left out;
    /// reaps the zombies that are lockrun's children, but for COMMAND.
    pub(crate) fn live(&self, running: bool) -> Vec<Pid> {
        let mut live = Vec::new();
        if running {
            live.push(Pid::from_raw(self.command));
        }
        let Some(since) = self.since else {
            return live;
        };
        let all = processes();
        let me = std::process::id() as i32;
        let mut tree = vec![me];
        let mut i = 0;
        while i < tree.len() {
            let parent = tree[i];
            i += 1;
            for p in all.iter().filter(|p| p.ppid == parent) {
                if parent == me && (p.start < since || p.pid == self.command) {
                    // Older than COMMAND (not ours to end), or COMMAND,
                    // counted above while it runs.
                    if p.pid == self.command {
                        tree.push(p.pid);
                    }
                    continue;
                }
                tree.push(p.pid);
                if !p.zombie {
                    live.push(Pid::from_raw(p.pid));
                } else if parent == me {
                    let _ = nix::sys::wait::waitpid(
                        Pid::from_raw(p.pid),
                        Some(nix::sys::wait::WaitPidFlag::WNOHANG),
                    );
                }
            }
        }
        live
    }

    /// Whether nothing of the tree is left but COMMAND (which has
    /// exited): two looks, 5 ms apart, that find nothing.
    pub(crate) fn gone(&self) -> bool {
        self.live(false).is_empty() && {
            thread::sleep(Duration::from_millis(5));
            self.live(false).is_empty()
        }
    }

    /// Sends `signal` to every live process of the tree.
    pub(crate) fn signal(&self, signal: Signal, running: bool) {
        for pid in self.live(running) {
            let _ = kill(pid, signal);
        }
    }

    /// SIGKILL to every live process of the tree, again until it is gone
    /// (one may fork meanwhile) or a second has passed; then reaps
    /// COMMAND, waiting at most another second (a process stuck in the
    /// kernel dies when it leaves it). True when all of it is gone.
    pub(crate) fn kill(&self, child: &mut Child) -> bool {
        let until = Instant::now() + Duration::from_secs(1);
        loop {
            let running = matches!(child.try_wait(), Ok(None));
            let live = self.live(running);
            if live.is_empty() && !running && self.gone() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            for pid in live {
                let _ = kill(pid, Signal::SIGKILL);
            }
            thread::sleep(Duration::from_millis(1));
        }
    }
}
