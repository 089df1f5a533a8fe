//! Running the command under the lock: the child's supervision, which
//! stops it before the lock can be lost, and how it ends.

use super::*;

/// When and how COMMAND is ended, from the arguments (see "When the
/// lock is in doubt" in `--help`).
pub(super) struct Ending {
    /// Between SIGTERM and SIGKILL (`--kill-after`).
    grace: Duration,
    /// SIGKILL comes at least this long before the validity ends.
    margin: Duration,
}

impl Ending {
    pub(super) fn of(args: &Args) -> Ending {
        Ending {
            grace: args.kill_after(),
            margin: args.kill_margin(),
        }
    }
}

/// Waits for COMMAND, and for whatever it started, while watching the
/// lock and the signals; releases the lock once all of it has ended.
///
/// The lock covers COMMAND's whole tree (see `tree.rs`), as flock(1)'s
/// covers every process holding its descriptor: what COMMAND leaves
/// running when it exits keeps the lock held until it ends.
///
/// None of it runs past the lock's validity: while renewals reach the
/// quorum nothing happens; once one misses it (the lock in doubt),
/// SIGTERM to the whole tree is planned `grace` before SIGKILL, and
/// SIGKILL `margin` before the validity ends, each moment moving with the
/// validity a later renewal proves, and a renewal that succeeds before
/// the SIGTERM calls it off. A lock known lost (taken over, forced,
/// validity run out) gets SIGKILL at once: there is no validity left for
/// a grace. Signals go out before anything is logged (a blocked stderr
/// never delays them).
pub(super) fn supervise<H: Hold>(
    mut child: Child,
    guard: H,
    signals: &Signals,
    end: &Ending,
) -> ExitCode {
    let mut watch = Watch {
        tree: tree::Tree::of(&child),
        signalled: None,
        termed: None,
        for_the_lock: false,
        in_doubt: false,
        status: None,
        looked: Instant::now(),
        left_warned: false,
        killed: false,
    };
    loop {
        if let Some(code) = watch.look(&mut child) {
            return match code {
                Ended::Released => {
                    release(guard);
                    watch.exit_code()
                }
                Ended::Code(code) => code,
            };
        }
        watch.pass_on(&child, signals);
        if let Err(code) = watch.check_lock(&guard, &mut child, end) {
            return code;
        }
        if watch.enforce(&guard, &mut child, end) {
            continue;
        }
        // Up to POLL for the command and signals; a loss of the lock ends
        // the wait at once (the keep-alive thread signals it).
        guard.wait_lost(POLL);
    }
}

/// How the supervision ends, once COMMAND's tree is gone (or could not
/// be waited for).
enum Ended {
    /// Release the lock, then exit as COMMAND did.
    Released,
    /// Exit with this code, the lock not released (lost, in doubt, or the
    /// command could not be waited for).
    Code(ExitCode),
}

/// What [`supervise()`] knows of COMMAND, its tree and the lock.
struct Watch {
    tree: tree::Tree,
    /// The first signal lockrun got, if any.
    signalled: Option<i32>,
    /// When SIGTERM went (a signal passed on, or the lock in doubt).
    termed: Option<Instant>,
    /// lockrun ended the command because of the lock: exit 76.
    for_the_lock: bool,
    in_doubt: bool,
    /// COMMAND's own exit status, once it has exited.
    status: Option<std::process::ExitStatus>,
    /// The tree is looked at every 100 ms once COMMAND has exited, else
    /// every second (to reap orphans that died).
    looked: Instant,
    left_warned: bool,
    /// SIGKILL went to the tree: nothing of it runs any more (a process
    /// stuck in the kernel may linger; it is not waited for).
    killed: bool,
}

impl Watch {
    /// Reaps COMMAND and looks at what is left of its tree: `Some` once
    /// all of it has ended (or COMMAND cannot be waited for).
    fn look(&mut self, child: &mut Child) -> Option<Ended> {
        let mut just_exited = false;
        if self.status.is_none() {
            match child.try_wait() {
                Ok(done) => {
                    just_exited = done.is_some();
                    self.status = done;
                }
                Err(e) => {
                    self.tree.kill(child);
                    say!(ERROR, "cannot wait for the command: {e}");
                    return Some(Ended::Code(ExitCode::from(EX_CANNOT_RUN)));
                }
            }
        }
        let look = just_exited || self.looked.elapsed() >= Duration::from_millis(100);
        if self.status.is_some() && (self.killed || look) {
            self.looked = Instant::now();
            let left = if self.killed {
                Vec::new()
            } else {
                self.tree.live(false)
            };
            if left.is_empty() && (self.killed || self.tree.gone()) {
                // Lost or in doubt: what is left expires, or is deleted
                // where it is still ours, when the guard is dropped.
                return Some(match self.for_the_lock {
                    true => Ended::Code(ExitCode::from(EX_LOST)),
                    false => Ended::Released,
                });
            }
            if !self.left_warned && self.termed.is_none() && !left.is_empty() {
                // (Said once; the lock stays held meanwhile.)
                say!(
                    WARN,
                    "the command exited, leaving {} process(es) it started: the lock is held \
                     until they end (pids {})",
                    left.len(),
                    left.iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(" ")
                );
                self.left_warned = true;
            }
        } else if self.status.is_none() && self.looked.elapsed() >= Duration::from_secs(1) {
            let _ = self.tree.live(true);
            self.looked = Instant::now();
        }
        None
    }

    /// The exit code once the tree is gone and the lock released: a
    /// signal lockrun got, else COMMAND's own status.
    fn exit_code(&self) -> ExitCode {
        if let Some(sig) = self.signalled {
            return ExitCode::from(128u8.saturating_add(sig as u8));
        }
        let code = self
            .status
            .and_then(|exited| {
                exited
                    .code()
                    .or_else(|| exited.signal().map(|sig| 128 + sig))
            })
            .unwrap_or(1);
        ExitCode::from(u8::try_from(code).unwrap_or(1))
    }

    /// Passes the signals lockrun got on to COMMAND (or, once it has
    /// exited, to what it left).
    fn pass_on(&mut self, child: &Child, signals: &Signals) {
        let running = self.status.is_none();
        while let Ok(origin) = signals.try_recv() {
            // A terminal's signal (from the kernel) already reached the
            // command, which shares lockrun's process group.
            let from_terminal = matches!(origin.cause, Cause::Kernel);
            if !from_terminal && let Ok(sig) = Signal::try_from(origin.signal) {
                if running {
                    let _ = kill(Pid::from_raw(child.id() as i32), sig);
                } else {
                    // COMMAND has exited: what it left gets the signal.
                    self.tree.signal(sig, false);
                }
            }
            self.signalled.get_or_insert(origin.signal);
            // A signal sent to lockrun ends the command within the grace;
            // a terminal's (Ctrl-C to a REPL) is the command's to handle.
            if !from_terminal {
                self.termed.get_or_insert_with(Instant::now);
            }
            say!(
                INFO,
                "got signal {}; {}waiting for the command to exit",
                origin.signal,
                if from_terminal { "" } else { "passing it on, " }
            );
        }
    }

    /// Notes whether the lock is in doubt (a renewal missed the quorum);
    /// a lock known lost kills the tree at once: `Err` with the exit code.
    fn check_lock<H: Hold>(
        &mut self,
        guard: &H,
        child: &mut Child,
        end: &Ending,
    ) -> Result<(), ExitCode> {
        match guard.ensure_held() {
            Ok(()) => {
                if self.in_doubt && self.termed.is_none() {
                    say!(WARN, "renewals reach the quorum again; the command goes on");
                }
                self.in_doubt = false;
            }
            Err(Error::NotHeld {
                renewal: Some(why), ..
            }) => {
                if !self.in_doubt {
                    let kill_in = guard.validity().saturating_sub(end.margin);
                    say!(
                        WARN,
                        "a renewal missed the quorum: {why}; unless one succeeds, the command \
                         gets SIGTERM in {} and SIGKILL in {}",
                        human(kill_in.saturating_sub(end.grace)),
                        human(kill_in)
                    );
                }
                self.in_doubt = true;
            }
            Err(e) => {
                self.tree.kill(child);
                say!(ERROR, "{e}; killed the command");
                return Err(ExitCode::from(EX_LOST));
            }
        }
        Ok(())
    }

    /// SIGKILL `margin` before the validity ends, whatever else holds;
    /// SIGTERM `grace` before that, once the lock is in doubt. True when
    /// SIGKILL went (look again at once).
    fn enforce<H: Hold>(&mut self, guard: &H, child: &mut Child, end: &Ending) -> bool {
        let now = Instant::now();
        let running = self.status.is_none();
        let left = guard.validity();
        let kill_in = left.saturating_sub(end.margin);
        if self.in_doubt && self.termed.is_none() && kill_in <= end.grace {
            self.tree.signal(Signal::SIGTERM, running);
            self.termed = Some(now);
            self.for_the_lock = true;
            say!(
                ERROR,
                "the lock is in doubt and its validity ends in {}: terminating the command",
                human(left)
            );
        }
        let grace_over = self.termed.is_some_and(|t| now >= t + end.grace);
        if !(kill_in.is_zero() || grace_over) {
            return false;
        }
        self.tree.kill(child);
        self.killed = true;
        self.status = self.status.or_else(|| child.try_wait().ok().flatten());
        if kill_in.is_zero() {
            self.for_the_lock = true;
            say!(
                ERROR,
                "the lock's validity ends in {}: killed the command",
                human(left)
            );
        } else {
            say!(
                WARN,
                "the command did not exit within {} of SIGTERM; killed it",
                human(end.grace)
            );
        }
        true
    }
}
