//! Running the command under the lock: the child's supervision, which\n//! stops it before the lock can be lost, and how it ends.

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
    let tree = tree::Tree::of(&child);
    let mut signalled: Option<i32> = None;
    // When SIGTERM went (a signal passed on, or the lock in doubt).
    let mut termed: Option<Instant> = None;
    // lockrun ended the command because of the lock: exit 76.
    let mut for_the_lock = false;
    let mut in_doubt = false;
    // COMMAND's own exit status, once it has exited.
    let mut status: Option<std::process::ExitStatus> = None;
    // The tree is looked at every 100 ms once COMMAND has exited, else
    // every second (to reap orphans that died).
    let mut looked = Instant::now();
    let mut left_warned = false;
    // SIGKILL went to the tree: nothing of it runs any more (a process
    // stuck in the kernel may linger; it is not waited for).
    let mut killed = false;
    loop {
        let mut just_exited = false;
        if status.is_none() {
            match child.try_wait() {
                Ok(done) => {
                    just_exited = done.is_some();
                    status = done;
                }
                Err(e) => {
                    tree.kill(&mut child);
                    say!(ERROR, "cannot wait for the command: {e}");
                    return ExitCode::from(EX_CANNOT_RUN);
                }
            }
        }
        let look = just_exited || looked.elapsed() >= Duration::from_millis(100);
        if let Some(exited) = status
            && (killed || look)
        {
            looked = Instant::now();
            let left = if killed { Vec::new() } else { tree.live(false) };
            if left.is_empty() && (killed || tree.gone()) {
                if for_the_lock {
                    // Lost or in doubt: what is left expires, or is deleted
                    // where it is still ours, when the guard is dropped.
                    return ExitCode::from(EX_LOST);
                }
                release(guard);
                if let Some(sig) = signalled {
                    return ExitCode::from(128u8.saturating_add(sig as u8));
                }
                let code = exited
                    .code()
                    .or_else(|| exited.signal().map(|sig| 128 + sig))
                    .unwrap_or(1);
                return ExitCode::from(u8::try_from(code).unwrap_or(1));
            }
            if !left_warned && termed.is_none() && !left.is_empty() {
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
                left_warned = true;
            }
        } else if status.is_none() && looked.elapsed() >= Duration::from_secs(1) {
            let _ = tree.live(true);
            looked = Instant::now();
        }
        let running = status.is_none();
        while let Ok(origin) = signals.try_recv() {
            // A terminal's signal (from the kernel) already reached the
            // command, which shares lockrun's process group.
            let from_terminal = matches!(origin.cause, Cause::Kernel);
            if !from_terminal && let Ok(sig) = Signal::try_from(origin.signal) {
                if running {
                    let _ = kill(Pid::from_raw(child.id() as i32), sig);
                } else {
                    // COMMAND has exited: what it left gets the signal.
                    tree.signal(sig, false);
                }
            }
            signalled.get_or_insert(origin.signal);
            // A signal sent to lockrun ends the command within the grace;
            // a terminal's (Ctrl-C to a REPL) is the command's to handle.
            if !from_terminal {
                termed.get_or_insert_with(Instant::now);
            }
            say!(
                INFO,
                "got signal {}; {}waiting for the command to exit",
                origin.signal,
                if from_terminal { "" } else { "passing it on, " }
            );
        }
        let now = Instant::now();
        match guard.ensure_held() {
            Ok(()) => {
                if in_doubt && termed.is_none() {
                    say!(WARN, "renewals reach the quorum again; the command goes on");
                }
                in_doubt = false;
            }
            Err(Error::NotHeld {
                renewal: Some(why), ..
            }) => {
                if !in_doubt {
                    let kill_in = guard.validity().saturating_sub(end.margin);
                    say!(
                        WARN,
                        "a renewal missed the quorum: {why}; unless one succeeds, the command \
                         gets SIGTERM in {} and SIGKILL in {}",
                        human(kill_in.saturating_sub(end.grace)),
                        human(kill_in)
                    );
                }
                in_doubt = true;
            }
            Err(e) => {
                tree.kill(&mut child);
                say!(ERROR, "{e}; killed the command");
                return ExitCode::from(EX_LOST);
            }
        }
        // SIGKILL `margin` before the validity ends, whatever else holds;
        // SIGTERM `grace` before that, once the lock is in doubt.
        let left = guard.validity();
        let kill_in = left.saturating_sub(end.margin);
        if in_doubt && termed.is_none() && kill_in <= end.grace {
            tree.signal(Signal::SIGTERM, running);
            termed = Some(now);
            for_the_lock = true;
            say!(
                ERROR,
                "the lock is in doubt and its validity ends in {}: terminating the command",
                human(left)
            );
        }
        let grace_over = termed.is_some_and(|t| now >= t + end.grace);
        if kill_in.is_zero() || grace_over {
            tree.kill(&mut child);
            killed = true;
            status = status.or_else(|| child.try_wait().ok().flatten());
            if kill_in.is_zero() {
                for_the_lock = true;
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
            continue;
        }
        // Up to POLL for the command and signals; a loss of the lock ends
        // the wait at once (the keep-alive thread signals it).
        guard.wait_lost(POLL);
    }
}
