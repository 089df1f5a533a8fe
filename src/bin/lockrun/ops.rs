//! `lockrun`'s operator modes, which run no command: `--check`,
//! `--leader-of`, `--inspect` and `--force-unlock`.

use std::process::ExitCode;
use std::sync::atomic::Ordering;

use redlock_sync::{LockManager, Verdict};

use crate::{ERROR, EX_UNAVAILABLE, INFO, VERBOSITY, WARN, usage_error};

/// `--leader-of`: the leader's term and value on stdout; 1 when nobody
/// leads.
pub(crate) fn leader_of(dlm: &LockManager, name: &str) -> ExitCode {
    match dlm.election(name).and_then(|e| e.leader()) {
        Ok(Some(leader)) => {
            println!(
                "{} {}",
                leader.term(),
                String::from_utf8_lossy(leader.value())
            );
            ExitCode::SUCCESS
        }
        Ok(None) => {
            say!(WARN, "nobody leads {name:?}");
            ExitCode::from(1)
        }
        Err(e) if e.is_invalid() => usage_error(e.to_string()),
        Err(e) => {
            say!(ERROR, "cannot tell who leads {name:?}: {e}");
            ExitCode::from(EX_UNAVAILABLE)
        }
    }
}

/// `--check`: one line per server on stdout; 1 if any is unsafe. Without
/// a RESOURCE, the library's own scratch keys (`check()`).
pub(crate) fn check(dlm: &LockManager, resource: Option<&String>) -> ExitCode {
    let reports = match resource {
        Some(resource) => dlm.check_resource(resource),
        None => dlm.check(),
    };
    for report in &reports {
        if VERBOSITY.load(Ordering::Relaxed) >= INFO {
            println!("{report:#}");
        } else {
            println!("{report}");
        }
    }
    // Throwaway nodes (the README's, `--save '' --appendonly no`) all get
    // this warning: say that it is expected there, and what production
    // needs.
    let diskless = reports.iter().filter(|r| r.aof == Some(false)).count();
    if diskless > 0 {
        say!(
            WARN,
            "{diskless} of {} servers keep no append-only file: expected for throwaway \
             test nodes; in production set appendonly yes and appendfsync always, so that \
             a restarted server keeps its locks (one that restarts empty may vote for a \
             lock it forgot: see --restart-quarantine)",
            reports.len()
        );
    }
    let unsafe_ = reports
        .iter()
        .filter(|r| r.verdict == Verdict::Unsafe)
        .count();
    if unsafe_ > 0 {
        say!(
            WARN,
            "{unsafe_} of {} servers unsafe for locks",
            reports.len()
        );
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// `--inspect`: one line per member on stdout, then a summary naming the
/// holder, its time left and its fencing counter; 0 when held, 1 when
/// free, 69 when too many members are unreachable to tell.
pub(crate) fn inspect(dlm: &LockManager, resource: &str) -> ExitCode {
    let info = match dlm.inspect(resource) {
        Ok(info) => info,
        Err(e) if e.is_invalid() => return usage_error(e.to_string()),
        Err(e) => {
            // A line for each member that failed, as when enough answer.
            for failure in e.failures() {
                println!("{failure}");
            }
            say!(ERROR, "cannot tell who holds {resource:?}: {e}");
            return ExitCode::from(EX_UNAVAILABLE);
        }
    };
    for member in &info.members {
        println!("{member}");
    }
    let holding = info
        .members
        .iter()
        .filter(|m| m.holder.is_some() && m.holder == info.holder)
        .count();
    match &info.holder {
        Some(holder) => {
            // The holder's name and its token's random part (`web-3 pid
            // 4121 (make), token 3f2a…c1`, 32 hex digits), or its token
            // alone where it names nobody.
            let who = match (info.shared, info.holder_name()) {
                (true, _) => "readers".to_owned(),
                (false, Some(name)) => format!("{name}, token {}", &holder[..32]),
                (false, None) => holder.clone(),
            };
            let mut line = format!(
                "held: {:?} by {who} on {holding} of {} members",
                info.resource,
                info.members.len()
            );
            if let Some(left) = info.left {
                line.push_str(&format!(", {:.1}s left", left.as_secs_f64()));
            }
            if let Some(counter) = info.fencing_counter {
                line.push_str(&format!(", fencing token at most {counter}"));
            }
            println!("{line}");
            ExitCode::SUCCESS
        }
        None => {
            let some = info.members.iter().filter(|m| m.holder.is_some()).count();
            if let Some(waiter) = &info.reserved_for {
                let mut line = format!(
                    "reserved: {:?} is handed to fair waiter {waiter}, which has not taken it \
                     yet (nobody holds it)",
                    info.resource
                );
                if let Some(left) = info.left {
                    line.push_str(&format!(", {:.1}s left", left.as_secs_f64()));
                }
                println!("{line}");
            } else if some > 0 {
                println!(
                    "free: {:?} is held on {some} of {} members, by no quorum (an attempt under \
                     way, or what a failed one left until it expires)",
                    info.resource,
                    info.members.len()
                );
            } else {
                println!("free: {:?}", info.resource);
            }
            ExitCode::from(1)
        }
    }
}

/// `--force-unlock`: removes the lock whoever holds it; one line per
/// member and a summary; 0 done, 69 too few members answered.
pub(crate) fn force_unlock(dlm: &LockManager, resource: &str) -> ExitCode {
    match dlm.force_unlock(resource) {
        Ok(forced) => {
            for member in &forced.members {
                match (&member.failure, &member.holder) {
                    (Some(e), _) => println!("{e}"),
                    (None, Some(holder)) => println!(
                        "{}: removed {holder}{}",
                        member.member,
                        counter(member.counter)
                    ),
                    (None, None) => println!(
                        "{}: nothing to remove{}",
                        member.member,
                        counter(member.counter)
                    ),
                }
            }
            println!(
                "force-unlocked {:?}: removed on {} of {} members; the old holder's fencing \
                 token is below every later one",
                forced.resource,
                forced.removed,
                forced.members.len()
            );
            ExitCode::SUCCESS
        }
        Err(e) if e.is_invalid() => usage_error(e.to_string()),
        Err(e) => {
            say!(
                ERROR,
                "cannot force-unlock {resource:?}: {e}; it may still be held: run it again \
                 when the members answer"
            );
            ExitCode::from(EX_UNAVAILABLE)
        }
    }
}

fn counter(counter: Option<u64>) -> String {
    counter.map_or_else(String::new, |c| format!(", counter now {c}"))
}
