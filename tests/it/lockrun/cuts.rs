//! A lockrun cut off its nodes: its command ends before the next holder
//! starts, and what the command leaves running holds the lock.

use super::*;

/// The lines of `path` as numbers (nanoseconds of the wall clock, as
/// `date +%s%N` writes them; one machine, one clock).
fn beats(path: &std::path::Path) -> Vec<u128> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Issue 39, flaw 1: a lockrun cut off two of three nodes while its
/// COMMAND ignores SIGTERM (`script`, beating into `beats`), and a
/// second lockrun waiting for the same resource. The first command must
/// be gone, every process of it, before the second starts: lockrun
/// signals the command's whole process group, and kills it before the
/// validity ends (the old grace of 10 s let it run on beside the next).
fn cut_off_lockrun_never_overlaps_the_next(name: &str, script: &str, beats_file: &std::path::Path) {
    use support::proxy::{Mode, Proxy};
    let cluster = Nodes::start(3).unwrap();
    let key = resource(name);
    let proxies = support::proxies(&cluster);
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let first_err = scratch(&format!("{name}-first.err"));
    let mut first = Command::new(lockrun_bin())
        .arg("--nodes")
        .arg(urls.join(","))
        .args(["--node-timeout", "200ms", "--ttl", "2s", &key, "--"])
        .args(["sh", "-c", script])
        .env_remove("REDLOCK_NODES")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        // A file, not a pipe: a process of the command left running
        // would hold a pipe open, and the test would never end.
        .stderr(std::fs::File::create(&first_err).unwrap())
        .spawn()
        .unwrap();
    let started = wait_for(Duration::from_secs(10), || !beats(beats_file).is_empty());
    assert!(started.is_some(), "the first command never ran");
    let second_started = scratch(&format!("{name}-second"));
    let second = spawn(&mut lockrun(
        &cluster,
        &["--ttl", "2s", "--wait", "30s"],
        &key,
        &format!("date +%s%N > {}", second_started.display()),
    ));
    thread::sleep(Duration::from_millis(200));
    proxies[0].set(Mode::Blackhole);
    proxies[1].set(Mode::Blackhole);
    let status = first.wait().unwrap();
    let first_said = std::fs::read_to_string(&first_err).unwrap();
    assert_eq!(status.code(), Some(76), "{first_said}");
    let out = second.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let second_at: u128 = std::fs::read_to_string(&second_started)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Whatever the first command started is gone: no beat from now on.
    let checked = now_ns();
    thread::sleep(Duration::from_millis(300));
    let all = beats(beats_file);
    let last = *all.iter().max().unwrap();
    // Left running by a broken lockrun: end it before failing.
    let _ = Command::new("pkill")
        .args(["-KILL", "-f", &beats_file.display().to_string()])
        .status();
    assert!(
        last < second_at,
        "the first command beat {} ms after the second started:\n{first_said}",
        (last - second_at) / 1_000_000
    );
    assert!(last < checked, "the first command outlived its lockrun");
    println!("{first_said}");
}

#[test]
fn a_cut_off_lockrun_kills_a_command_that_ignores_sigterm_before_the_next_starts() {
    let beats_file = scratch("ignores-term.beats");
    let script = format!(
        "trap '' TERM; while :; do date +%s%N >> {b}; sleep 0.02; done",
        b = beats_file.display()
    );
    cut_off_lockrun_never_overlaps_the_next("lockrun-ignores-term", &script, &beats_file);
}

#[test]
fn a_cut_off_lockrun_ends_what_a_wrapper_script_started() {
    let beats_file = scratch("wrapped.beats");
    // The beating loop is the wrapper's child: signalling the wrapper
    // alone would leave it running.
    let script = format!(
        "sh -c \"trap '' TERM; while :; do date +%s%N >> {b}; sleep 0.02; done\" & wait",
        b = beats_file.display()
    );
    cut_off_lockrun_never_overlaps_the_next("lockrun-wrapped", &script, &beats_file);
}

/// While renewals reach the quorum, nothing happens to COMMAND; a renewal
/// that misses it puts the lock in doubt, and one that succeeds before
/// the planned SIGTERM calls the end off: the command runs to its end.
#[test]
fn a_brief_cut_that_heals_before_the_planned_sigterm_leaves_the_command_running() {
    use support::proxy::{Mode, Proxy};
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-heals");
    let proxies = support::proxies(&cluster);
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let done = scratch("heals.done");
    // TTL 4 s: renewals every 1.33 s, retried every 333 ms once one
    // misses; SIGTERM would come with 1 s + 200 ms of validity left, at
    // least 1.4 s after the first miss.
    let child = Command::new(lockrun_bin())
        .arg("--nodes")
        .arg(urls.join(","))
        .args(["--node-timeout", "200ms", "--ttl", "4s", &key, "--"])
        .args([
            "sh",
            "-c",
            &format!("sleep 3; echo done > {}", done.display()),
        ])
        .env_remove("REDLOCK_NODES")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let taken = wait_for(Duration::from_secs(10), || {
        get(&cluster.servers[2], key.as_bytes()).is_some()
    });
    assert!(taken.is_some(), "lockrun never took the lock");
    proxies[0].set(Mode::Blackhole);
    proxies[1].set(Mode::Blackhole);
    // Until the first renewal misses, then a little more.
    thread::sleep(Duration::from_millis(1800));
    proxies[0].set(Mode::Pass);
    proxies[1].set(Mode::Pass);
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(std::fs::read_to_string(&done).unwrap().trim(), "done");
    assert!(err.contains("a renewal missed the quorum"), "{err}");
    assert!(err.contains("renewals reach the quorum again"), "{err}");
}

/// As flock(1)'s lock covers every process holding its descriptor,
/// lockrun's covers what COMMAND starts: a background process it leaves
/// keeps the lock held until it ends (lockrun warns, then exits with
/// COMMAND's status), and `setsid` inside COMMAND works as in a shell
/// (COMMAND is no process group leader) and stays covered (lockrun is
/// the subreaper).
#[test]
fn what_the_command_leaves_running_keeps_the_lock_until_it_ends() {
    let cluster = Nodes::start(1).unwrap();
    let key = resource("lockrun-leftovers");
    let done = scratch("leftover.done");
    for starter in ["", "setsid "] {
        let _ = std::fs::remove_file(&done);
        let script = format!(
            "{starter}sh -c 'sleep 1; echo done > {d}' & exit 3",
            d = done.display()
        );
        let (out, took) = support::timed(|| run(&mut lockrun(&cluster, &[], &key, &script)));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(3), "{starter}: {err}");
        assert!(
            err.contains("the lock is held until they end"),
            "{starter}: {err}"
        );
        // lockrun waited for the leftover: it had written, and the lock
        // was held until then (free now).
        assert_eq!(
            std::fs::read_to_string(&done).unwrap_or_default().trim(),
            "done",
            "{starter}: lockrun exited after {took:?}, before the leftover ended"
        );
        assert!(took >= Duration::from_millis(900), "{starter}: {took:?}");
        assert_eq!(get(&cluster.servers[0], key.as_bytes()), None);
    }
}

/// A member that never answers makes every renewal round take the whole
/// node timeout. Renewals start every TTL/3 from the previous round's
/// start, so a healthy majority keeps the validity above the kill margin:
/// the command runs to its end. (Scheduled from the previous round's end,
/// TTL 1 s and a 400 ms node timeout let the validity run out between
/// two rounds: the command was killed, exit 76.)
#[test]
fn a_silent_member_slows_every_renewal_but_never_ends_the_command() {
    use support::proxy::{Mode, Proxy};
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-slow-renewals");
    let proxies = support::proxies(&cluster);
    proxies[2].set(Mode::Blackhole);
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let out = Command::new(lockrun_bin())
        .arg("--nodes")
        .arg(urls.join(","))
        .args(["--node-timeout", "400ms", "--ttl", "1s", &key, "--"])
        .args(["sh", "-c", "sleep 3; exit 7"])
        .env_remove("REDLOCK_NODES")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
}

/// Children lockrun had before COMMAND started are not COMMAND's: a
/// shell's process substitution that `exec lockrun` inherited (`cat`,
/// reading lockrun's own stdout until it closes) is not waited for, so
/// lockrun ends as soon as COMMAND does (it hung, holding the lock, when
/// it counted every child of its own).
#[test]
fn a_child_lockrun_inherited_is_not_the_commands() {
    let cluster = Nodes::start(1).unwrap();
    let key = resource("lockrun-inherited");
    let line = format!(
        "exec {bin} --nodes {url} {key} -- true > >(cat)",
        bin = lockrun_bin().display(),
        url = cluster.urls()[0],
    );
    let mut child = Command::new("bash")
        .args(["-c", &line])
        .env_remove("REDLOCK_NODES")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ended = wait_for(Duration::from_secs(10), || {
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if ended.is_none() {
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    assert!(
        ended.is_some(),
        "lockrun waited for a child that was not COMMAND's"
    );
    assert_eq!(status.code(), Some(0));
    assert_eq!(get(&cluster.servers[0], key.as_bytes()), None);
}

/// Too many members refusing the password is reported at once, not after
/// `--wait`, with exit status 78 and each refusal named.
#[test]
fn refused_credentials_on_a_majority_end_the_wait_at_once() {
    let secured = [
        support::Server::start_with(&["--requirepass", "s3cret"]).unwrap(),
        support::Server::start_with(&["--requirepass", "s3cret"]).unwrap(),
    ];
    let open = support::Server::start().unwrap();
    let nodes = [secured[0].url(), secured[1].url(), open.url()];
    let started = Instant::now();
    let out = Command::new(lockrun_bin())
        .args(["--nodes", &nodes.join(","), "--wait", "30s"])
        .args(["--node-timeout", "500ms", &resource("lockrun-auth")])
        .args(["--", "true"])
        .env_remove("REDLOCK_NODES")
        .output()
        .unwrap();
    let took = started.elapsed();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(took < Duration::from_secs(15), "took {took:?}: {err}");
    assert_eq!(
        err.matches("requires a password and none was given")
            .count(),
        2,
        "{err}"
    );
    assert!(!err.contains("still trying"), "{err}");
}
