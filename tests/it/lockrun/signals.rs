//! Signals: to lockrun (TERM, INT, HUP, KILL) and what the command and
//! the next holder see.

use super::*;

/// Waits until the command has written its pid to `pidfile`.
fn command_pid(pidfile: &std::path::Path) -> i32 {
    let seen = wait_for(Duration::from_secs(10), || {
        std::fs::read_to_string(pidfile).is_ok_and(|s| s.ends_with('\n'))
    });
    assert!(seen.is_some(), "the command never started");
    std::fs::read_to_string(pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn start_section(
    cluster: &Nodes,
    key: &str,
    name: &str,
    flags: &[&str],
) -> (Child, PathBuf, PathBuf) {
    let pidfile = scratch(&format!("{name}.pid"));
    let marker = scratch(&format!("{name}.trap"));
    // The command records its pid, traps TERM/INT/HUP (recording which)
    // and otherwise runs for a minute.
    let script = format!(
        "trap 'echo TERM > {m}; kill $!; exit 0' TERM; \
         trap 'echo INT > {m}; kill $!; exit 0' INT; \
         trap 'echo HUP > {m}; kill $!; exit 0' HUP; \
         sleep 60 & echo $$ > {p}; wait $!",
        m = marker.display(),
        p = pidfile.display()
    );
    let child = spawn(&mut lockrun(cluster, flags, key, &script));
    (child, pidfile, marker)
}

#[test]
fn sigterm_sigint_and_sighup_end_the_command_release_at_once_and_exit_128_plus_n() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-signals");
    for (signal, status, name) in [
        (Signal::SIGTERM, 143, "TERM"),
        (Signal::SIGINT, 130, "INT"),
        (Signal::SIGHUP, 129, "HUP"),
    ] {
        // A long TTL: a release that waited for it would show.
        let (child, pidfile, marker) = start_section(&cluster, &key, name, &["--ttl", "60s"]);
        let pid = command_pid(&pidfile);
        let sent = Instant::now();
        kill(Pid::from_raw(child.id() as i32), signal).unwrap();
        let out = child.wait_with_output().unwrap();
        let took = sent.elapsed();
        println!(
            "{name}: lockrun exited {:?} {took:?} after the signal",
            out.status.code()
        );
        assert_eq!(out.status.code(), Some(status), "{}", stderr(&out));
        // The command got the signal and ended.
        assert_eq!(std::fs::read_to_string(&marker).unwrap().trim(), name);
        assert!(ended(pid), "the command is still running");
        // Released at once: no key left, and the next lockrun runs
        // without waiting.
        for server in &cluster.servers {
            assert_eq!(get(server, key.as_bytes()), None, "{name}: key left");
        }
        let out = run(&mut lockrun(&cluster, &["--wait", "0s"], &key, "true"));
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stderr(&out));
    }
}

#[test]
fn a_second_signal_does_not_skip_the_release() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-two-signals");
    let pidfile = scratch("slow.pid");
    // A command that takes 300 ms to exit after TERM.
    let script = format!(
        "trap 'sleep 0.3; kill $!; exit 0' TERM; sleep 60 & echo $$ > {p}; wait $!",
        p = pidfile.display()
    );
    let child = spawn(&mut lockrun(&cluster, &["--ttl", "60s"], &key, &script));
    command_pid(&pidfile);
    let lockrun_pid = Pid::from_raw(child.id() as i32);
    kill(lockrun_pid, Signal::SIGTERM).unwrap();
    thread::sleep(Duration::from_millis(50));
    kill(lockrun_pid, Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()), None);
    }
}

#[test]
fn a_signal_while_waiting_for_the_lock_exits_without_running_the_command() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-signal-waiting");
    let dlm = support::manager(&cluster, Duration::from_millis(500));
    let _held = dlm.lock(&key, Duration::from_secs(30)).unwrap();
    let child = spawn(&mut lockrun(&cluster, &["--wait", "30s"], &key, "echo ran"));
    // Waiting: its first attempt was refused and it is queued.
    support::until_queued(&cluster, &key, 1);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let (out, took) = support::timed(|| child.wait_with_output().unwrap());
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("while waiting for the lock"),
        "{}",
        stderr(&out)
    );
    // At once (the wait checks its cancel switch every 20 ms while
    // queued), with slack; and its place in the queue is given up.
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(fair_queued(&cluster, &key, 0));
}

#[test]
fn sigkill_of_lockrun_ends_the_command_within_about_a_second() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-sigkill");
    let pidfile = scratch("orphan.pid");
    let script = format!("echo $$ > {p}; exec sleep 60", p = pidfile.display());
    let mut child = lockrun(
        &cluster,
        &["--ttl", "1s", "--node-timeout", "250ms"],
        &key,
        &script,
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let pid = command_pid(&pidfile);
    // `exec`: the pid written is the sleep's.
    thread::sleep(Duration::from_millis(50));
    child.kill().unwrap();
    child.wait().unwrap();
    let gone = wait_for(Duration::from_secs(5), || ended(pid));
    println!("SIGKILL of lockrun: the command ended {gone:?} later");
    let gone = gone.expect("the command outlived lockrun");
    assert!(gone < Duration::from_secs(2), "{gone:?}");
    // The lock is left to expire with its TTL.
    let free = wait_for(Duration::from_secs(5), || {
        cluster
            .servers
            .iter()
            .all(|s| get(s, key.as_bytes()).is_none())
    });
    assert!(free.is_some());
}

#[test]
fn lockruns_killed_by_term_or_kill_never_overlap_the_next_holder() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-killed-overlap");
    let log = scratch("killed-overlap.log");
    // Each command logs "start PID", a tick every 20 ms, and "end PID".
    let script = format!(
        "echo start $$ >> {l}; trap 'echo end $$ >> {l}; exit 0' TERM; \
         i=0; while [ $i -lt 100 ]; do echo tick $$ >> {l}; sleep 0.02; i=$((i+1)); done; \
         echo end $$ >> {l}",
        l = log.display()
    );
    for signal in [Signal::SIGTERM, Signal::SIGKILL] {
        let _ = std::fs::remove_file(&log);
        let first = lockrun(&cluster, &["--ttl", "3s"], &key, &script)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = wait_for(Duration::from_secs(10), || {
            std::fs::read_to_string(&log).is_ok_and(|l| l.contains("tick"))
        });
        assert!(started.is_some());
        // Two more wait for the lock while the first is killed mid-run.
        let waiters: Vec<Child> = (0..2)
            .map(|_| {
                lockrun(&cluster, &["--ttl", "3s", "--wait", "30s"], &key, &script)
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        thread::sleep(Duration::from_millis(300));
        kill(Pid::from_raw(first.id() as i32), signal).unwrap();
        let _ = first.wait_with_output();
        for w in waiters {
            let out = w.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        }
        // One section at a time: after "start P", only P's lines until
        // P's last line (its "end", or its last tick when SIGKILL ended it).
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<(&str, &str)> = text.lines().map(|l| l.split_once(' ').unwrap()).collect();
        let mut current: Option<&str> = None;
        let mut sections = 0;
        for (i, (what, pid)) in lines.iter().enumerate() {
            match (*what, current) {
                ("start", _) => {
                    // The previous holder must never write again.
                    if let Some(prev) = current {
                        assert!(
                            lines[i..].iter().all(|(_, p)| *p != prev),
                            "{signal:?}: {prev} wrote after {pid} started:\n{text}"
                        );
                    }
                    current = Some(pid);
                    sections += 1;
                }
                (_, Some(holder)) => assert_eq!(*pid, holder, "{signal:?}: overlap:\n{text}"),
                (_, None) => panic!("{signal:?}: a line before any start:\n{text}"),
            }
        }
        assert_eq!(sections, 3, "{signal:?}:\n{text}");
    }
}
