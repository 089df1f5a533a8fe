//! The processes COMMAND started: lockrun is their subreaper (Linux), so
//! whatever COMMAND starts stays lockrun's descendant even when its parent
//! exits or it calls `setsid`; lockrun finds them in `/proc` and signals
//! every one of them when the lock ends. Elsewhere only COMMAND itself is
//! known.

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

/// One process of `/proc`: its parent and whether it is a zombie.
struct Proc {
    pid: i32,
    ppid: i32,
    zombie: bool,
}

/// Every process in `/proc` (none where there is no `/proc`).
fn processes() -> Vec<Proc> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let name = entry.ok()?.file_name();
        let pid: i32 = name.to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // `pid (comm) state ppid ...`: comm may hold spaces and parens.
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        let state = fields.next()?;
        let ppid = fields.next()?.parse().ok()?;
        Some(Proc {
            pid,
            ppid,
            zombie: state == "Z" || state == "X",
        })
    })
    .collect()
}

/// COMMAND and what it started.
pub(crate) struct Tree {
    /// COMMAND's pid: its zombie is `Child`'s to reap.
    command: i32,
}

impl Tree {
    pub(crate) fn of(child: &Child) -> Tree {
        Tree {
            command: child.id() as i32,
        }
    }

    /// The live processes of the tree: lockrun's descendants (COMMAND,
    /// what it started, and orphans reparented to lockrun), zombies
    /// left out. Reaps the zombies that are lockrun's children, but for
    /// COMMAND. Without `/proc`, COMMAND alone while it runs.
    pub(crate) fn live(&self, command_running: bool) -> Vec<Pid> {
        let all = processes();
        if all.is_empty() {
            return if command_running {
                vec![Pid::from_raw(self.command)]
            } else {
                Vec::new()
            };
        }
        let me = std::process::id() as i32;
        let mut tree = vec![me];
        let mut live = Vec::new();
        let mut i = 0;
        while i < tree.len() {
            let parent = tree[i];
            for p in all.iter().filter(|p| p.ppid == parent) {
                tree.push(p.pid);
                if !p.zombie {
                    live.push(Pid::from_raw(p.pid));
                } else if parent == me && p.pid != self.command {
                    let _ = nix::sys::wait::waitpid(
                        Pid::from_raw(p.pid),
                        Some(nix::sys::wait::WaitPidFlag::WNOHANG),
                    );
                }
            }
            i += 1;
        }
        live
    }

    /// Sends `signal` to every live process of the tree.
    pub(crate) fn signal(&self, signal: Signal, command_running: bool) {
        for pid in self.live(command_running) {
            let _ = kill(pid, signal);
        }
    }

    /// SIGKILL to every live process of the tree, again until none is
    /// left (one may fork meanwhile) or 200 ms have passed.
    pub(crate) fn kill(&self, child: &mut Child) {
        let until = Instant::now() + Duration::from_millis(200);
        loop {
            let running = matches!(child.try_wait(), Ok(None));
            let live = self.live(running);
            if live.is_empty() || Instant::now() >= until {
                break;
            }
            for pid in live {
                let _ = kill(pid, Signal::SIGKILL);
            }
            thread::sleep(Duration::from_millis(1));
        }
        let _ = child.wait();
    }
}
