//! Operators' runs: `--inspect`, `--force-unlock`, `--min-hold`, long
//! waits, fair runs.

use super::*;

/// `--inspect` of a key reserved for a fair waiter on a majority says so,
/// and exits 1: nobody holds the lock (before, it said "held" and exited
/// 0).
#[test]
fn inspect_of_a_fair_reservation_says_reserved_and_exits_1() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-inspect-reserved");
    let waiter = "0123456789abcdef0123456789abcdef";
    for s in &cluster.servers {
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(format!("redlock:next:{waiter}"))
            .arg("PX")
            .arg(5000)
            .query(&mut support::admin(s))
            .unwrap();
    }
    let out = run(Command::new(lockrun_bin())
        .args(["--nodes", &cluster.urls().join(","), "--inspect", &key])
        .env_remove("REDLOCK_NODES")
        .stdin(Stdio::null()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", stderr(&out));
    assert!(
        stdout.contains(&format!(
            "reserved: {key:?} is handed to fair waiter {waiter}"
        )),
        "{stdout}"
    );
}

/// `--inspect` names the holder and its fencing counter (exit 0), says
/// free (exit 1) and cannot tell with two of three members down (69);
/// `--force-unlock` takes the lock from a running lockrun, which exits 76.
#[test]
fn inspect_and_force_unlock_from_the_command_line() {
    let mut cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-inspect");
    let op = |flag: &str, cluster: &Nodes| {
        run(Command::new(lockrun_bin())
            .args([
                "--nodes",
                &cluster.urls().join(","),
                "--node-timeout",
                "500ms",
            ])
            .args([flag, &key])
            .env_remove("REDLOCK_NODES")
            .stdin(Stdio::null()))
    };
    let free = op("--inspect", &cluster);
    assert_eq!(free.status.code(), Some(1), "{}", stderr(&free));
    assert!(String::from_utf8_lossy(&free.stdout).contains("free"));
    let marker = scratch("inspect.started");
    let holder = spawn(&mut lockrun(
        &cluster,
        &["--ttl", "3s"],
        &key,
        &format!(
            "echo $REDLOCK_FENCING_TOKEN > {}; sleep 60",
            marker.display()
        ),
    ));
    assert!(
        wait_for(Duration::from_secs(20), || {
            std::fs::read_to_string(&marker).is_ok_and(|t| t.ends_with('\n'))
        })
        .is_some()
    );
    let token: u64 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let held = op("--inspect", &cluster);
    let text = String::from_utf8_lossy(&held.stdout).into_owned();
    assert_eq!(held.status.code(), Some(0), "{text}{}", stderr(&held));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let summary = lines[3];
    assert!(
        summary.starts_with("held: ") && summary.contains("on 3 of 3 members"),
        "{text}"
    );
    // The holder names itself: the lockrun process, and its command's
    // program as the label (issue 42).
    assert!(
        summary.contains(&format!(" pid {} (sh), token ", holder.id())),
        "{text}"
    );
    let at_most: u64 = summary.rsplit("at most ").next().unwrap().parse().unwrap();
    assert!(at_most >= token, "{text}");
    let forced = op("--force-unlock", &cluster);
    let text = String::from_utf8_lossy(&forced.stdout).into_owned();
    assert_eq!(forced.status.code(), Some(0), "{text}{}", stderr(&forced));
    assert!(text.contains("removed on 3 of 3 members"), "{text}");
    // The holder's next renewal (every second) finds the lock gone.
    let (out, took) = support::timed(|| holder.wait_with_output().unwrap());
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    assert!(took < Duration::from_secs(15), "{took:?}");
    // Told as it happened: removed, not expired.
    assert!(
        stderr(&out).contains("its key was removed before it could expire"),
        "{}",
        stderr(&out)
    );
    cluster.servers[0].kill();
    cluster.servers[1].kill();
    let blind = op("--inspect", &cluster);
    assert_eq!(blind.status.code(), Some(69), "{}", stderr(&blind));
    // Each member that failed has its line, as when enough answer.
    let lines = String::from_utf8_lossy(&blind.stdout).into_owned();
    for dead in &cluster.servers[..2] {
        assert!(
            lines
                .lines()
                .any(|l| l.starts_with(&format!("127.0.0.1:{}: ", dead.port()))),
            "{lines}"
        );
    }
}

/// `--min-hold`: a command that ends at once still keeps others out until
/// the hold is over (the second run exits 75); afterwards the lock is
/// free. It goes with exclusive locks only.
#[test]
fn min_hold_keeps_the_lock_after_a_quick_command() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-min-hold");
    let first = run(&mut lockrun(&cluster, &["--min-hold", "3s"], &key, "true"));
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let started = Instant::now();
    let second = run(&mut lockrun(&cluster, &["--wait", "0"], &key, "echo ran"));
    assert_eq!(second.status.code(), Some(75), "{}", stderr(&second));
    assert!(second.stdout.is_empty());
    let third = run(&mut lockrun(&cluster, &["--wait", "20s"], &key, "echo ran"));
    assert_eq!(third.status.code(), Some(0), "{}", stderr(&third));
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    let bad = run(&mut lockrun(
        &cluster,
        &["--min-hold", "3s", "--shared"],
        &key,
        "true",
    ));
    assert_eq!(bad.status.code(), Some(64), "{}", stderr(&bad));
}

/// A wait too long for the clock (`--wait` of 10^19 s: before, an
/// `Instant` overflow panicked) waits, and a signal still ends it.
#[test]
fn a_wait_beyond_the_clock_waits_and_a_signal_ends_it() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-huge-wait");
    let dlm = support::manager(&cluster, Duration::from_millis(500));
    let _held = dlm.lock(&key, Duration::from_secs(30)).unwrap();
    let child = spawn(&mut lockrun(
        &cluster,
        &["--wait", "10000000000000000000s"],
        &key,
        "echo ran",
    ));
    thread::sleep(Duration::from_millis(500));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let (out, took) = support::timed(|| child.wait_with_output().unwrap());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(out.stdout.is_empty());
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn fair_runs_on_one_resource_go_in_arrival_order() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-fair");
    let log = scratch("fair.log");
    let flags = ["--fair", "--wait", "60s"];
    let queued = |n: usize| fair_queued(&cluster, &key, n);
    let mut holder = spawn(&mut lockrun(&cluster, &flags, &key, "sleep 4"));
    let held = || {
        cluster
            .servers
            .iter()
            .all(|s| get(s, key.as_bytes()).is_some())
    };
    assert!(wait_for(Duration::from_secs(10), held).is_some());
    let mut waiters = Vec::new();
    for (n, who) in ["first", "second", "third"].into_iter().enumerate() {
        let script = format!("echo {who} >> {}", log.display());
        waiters.push(spawn(&mut lockrun(&cluster, &flags, &key, &script)));
        assert!(
            wait_for(Duration::from_secs(10), || queued(n + 1)).is_some(),
            "{who} never queued"
        );
    }
    assert!(holder.wait().unwrap().success());
    for mut w in waiters {
        assert!(w.wait().unwrap().success());
    }
    let order = std::fs::read_to_string(&log).unwrap();
    assert_eq!(order, "first\nsecond\nthird\n");
}

#[test]
fn a_fair_waiter_killed_while_queued_delays_the_next_briefly() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-fair-killed");
    let flags = ["--fair", "--wait", "60s"];
    // The holder runs until told to stop, so that the release comes soon
    // after the kill, while the dead waiter's ticket is still live.
    let stop = scratch("killed.stop");
    let until_stop = format!("while [ ! -f {} ]; do sleep 0.02; done", stop.display());
    let mut holder = spawn(&mut lockrun(&cluster, &flags, &key, &until_stop));
    let held = || {
        cluster
            .servers
            .iter()
            .all(|s| get(s, key.as_bytes()).is_some())
    };
    assert!(wait_for(Duration::from_secs(10), held).is_some());
    // The first waiter queues, then dies (SIGKILL: it cannot leave).
    let mut dead = spawn(&mut lockrun(&cluster, &flags, &key, "true"));
    assert!(wait_for(Duration::from_secs(10), || fair_queued(&cluster, &key, 1)).is_some());
    kill(Pid::from_raw(dead.id() as i32), Signal::SIGKILL).unwrap();
    dead.wait().unwrap();
    // The second one queues behind it, and notes when it runs.
    let log = scratch("killed.log");
    let script = format!("date +%s%N >> {}", log.display());
    let mut live = spawn(&mut lockrun(&cluster, &flags, &key, &script));
    assert!(wait_for(Duration::from_secs(10), || fair_queued(&cluster, &key, 2)).is_some());
    let released = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::fs::write(&stop, b"").unwrap();
    assert!(holder.wait().unwrap().success());
    assert!(live.wait().unwrap().success());
    let ran: u128 = std::fs::read_to_string(&log)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // At most the dead waiter's reservation (twice the 500 ms node
    // timeout given here; none if its ticket lapsed first) and the live
    // one's next attempt: generous bound.
    let delay = Duration::from_nanos(ran.saturating_sub(released) as u64);
    eprintln!("the killed waiter delayed the next by {delay:?}");
    assert!(delay < Duration::from_secs(4), "{delay:?}");
}
