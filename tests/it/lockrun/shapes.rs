//! Every shape from the command line: cluster members, `--check`, the
//! restart quarantine, permits, sets and shared runs, leaders.

use super::*;

/// `--cluster` adds one Redis Cluster member (repeatable); with
/// `--nodes` they make one quorum. `REDLOCK_NODES` names a cluster as
/// `cluster:URL|URL`.
#[test]
fn a_cluster_member_from_the_command_line_and_the_environment() {
    if let Some(why) = support::redis_cluster::unsupported() {
        eprintln!("{why}");
        return;
    }
    let cluster = support::redis_cluster::RedisCluster::start(3, 0).unwrap();
    let nodes = Nodes::start(2).unwrap();
    let key = resource("lockrun-cluster");
    let seeds = cluster.seeds().join(",");
    let out = Command::new(lockrun_bin())
        .args(["--nodes", &nodes.urls().join(","), "--cluster", &seeds])
        .args(["--node-timeout", "500ms", &key, "--", "sh", "-c"])
        .arg("echo \"$REDLOCK_FENCING_TOKEN\"")
        .env_remove("REDLOCK_NODES")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let token: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    // The same through the environment: the cluster is one member of 3.
    let env = format!(
        "{},cluster:{}",
        nodes.urls().join(","),
        cluster.seeds().join("|")
    );
    let out = Command::new(lockrun_bin())
        .args(["--node-timeout", "500ms", "-v", &key, "--", "sh", "-c"])
        .arg("echo \"$REDLOCK_FENCING_TOKEN\"")
        .env("REDLOCK_NODES", env)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let next: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(next > token);
}

/// `--check` prints one line per server with its verdict and what to
/// change, and exits 1 when any server is unsafe, 0 otherwise.
#[test]
fn check_reports_each_server_and_exits_1_when_one_is_unsafe() {
    let healthy = Nodes::start(2).unwrap();
    let out = Command::new(lockrun_bin())
        .args(["--check", "--nodes", &healthy.urls().join(","), "lock:x"])
        .env_remove("REDLOCK_NODES")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(text.lines().all(|l| l.starts_with("warning ")), "{text}");
    assert!(text.contains("no persistence"), "{text}");
    // Said to be expected of throwaway nodes, with what production needs.
    let note = stderr(&out);
    assert!(
        note.contains("2 of 2 servers keep no append-only file: expected for throwaway")
            && note.contains("appendonly yes and appendfsync always"),
        "{note}"
    );

    let lru =
        support::Server::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"])
            .unwrap();
    let mut nodes = healthy.urls();
    nodes.push(lru.url());
    let out = Command::new(lockrun_bin())
        .args(["--check", "--nodes", &nodes.join(",")])
        .env_remove("REDLOCK_NODES")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("UNSAFE")).unwrap();
    assert!(line.contains(&lru.port().to_string()), "{line}");
    assert!(
        line.contains("maxmemory-policy allkeys-lru may evict lock keys: set noeviction"),
        "{line}"
    );
    // --check runs no command.
    let out = Command::new(lockrun_bin())
        .args(["--check", "--nodes", &nodes.join(","), "r", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
}

/// `--restart-quarantine` keeps out a server started less than that ago,
/// though this process never saw it before.
#[test]
fn restart_quarantine_keeps_out_a_server_started_recently() {
    let cluster = Nodes::start(1).unwrap();
    let key = resource("lockrun-quarantine");
    let out = run(&mut lockrun(
        &cluster,
        &["--restart-quarantine", "60s", "--wait", "0"],
        &key,
        "echo ran",
    ));
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert!(stderr(&out).contains("not voting for"), "{}", stderr(&out));
}

/// `--permits K`: at most K commands run at once across lockruns; the
/// K+1st waits for a free permit, or exits 75 after --wait.
#[test]
fn permits_limit_how_many_commands_run_at_once() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-permits");
    let marker = scratch("permits");
    let script = format!("touch {m}; sleep 2", m = marker.display());
    let mut holders: Vec<Child> = (0..2)
        .map(|_| spawn(&mut lockrun(&cluster, &["--permits", "2"], &key, &script)))
        .collect();
    assert!(wait_for(Duration::from_secs(10), || marker.exists()).is_some());
    thread::sleep(Duration::from_millis(300));
    // Both permits are in use: a third gives up after its wait.
    let out = run(&mut lockrun(
        &cluster,
        &["--permits", "2", "--wait", "300ms"],
        &key,
        "echo ran",
    ));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("(a semaphore of 2 permits)"),
        "{}",
        stderr(&out)
    );
    // With a longer wait it runs once a holder is done.
    let out = run(&mut lockrun(
        &cluster,
        &["--permits", "2", "--wait", "20s"],
        &key,
        "echo ran",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ran");
    for h in &mut holders {
        assert!(h.wait().unwrap().success());
    }
    // Another count for the same semaphore is a mistake, said as such.
    let out = run(&mut lockrun(
        &cluster,
        &["--permits", "3"],
        &key,
        "echo ran",
    ));
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    assert!(
        stderr(&out).contains("made with 3 permits, but its members store 2"),
        "{}",
        stderr(&out)
    );
    let bad = Command::new(lockrun_bin())
        .args([
            "--nodes",
            "redis://127.0.0.1:1",
            "--permits",
            "0",
            "r",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(64));
}

#[test]
fn several_resources_are_locked_together_and_shared_runs_read() {
    let cluster = Nodes::start(3).unwrap();
    let (a, b) = (resource("lockrun-set-a"), resource("lockrun-set-b"));
    let urls = cluster.urls().join(",");
    let base = |flags: &[&str], resources: &[&str], script: &str| {
        let mut cmd = Command::new(lockrun_bin());
        cmd.args(["--nodes", &urls, "--node-timeout", "500ms"])
            .args(flags)
            .args(resources)
            .args(["--", "sh", "-c", script])
            .env_remove("REDLOCK_NODES")
            .stdin(Stdio::null());
        cmd
    };
    // Both resources are held while the command runs, and named to it.
    let out = run(&mut base(
        &[],
        &[&a, &b],
        "printf '%s|' \"$REDLOCK_RESOURCE\" \"$REDLOCK_RESOURCES\"",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{a}|{a}\n{b}|")
    );
    let dlm = support::manager(&cluster, Duration::from_millis(500));
    let marker = scratch("set.started");
    let mut child = spawn(&mut base(
        &[],
        &[&a, &b],
        &format!("touch {}; sleep 30", marker.display()),
    ));
    assert!(wait_for(Duration::from_secs(20), || marker.exists()).is_some());
    for r in [&a, &b] {
        assert!(matches!(
            dlm.try_lock(r, Duration::from_secs(5)),
            Err(redlock_sync::Error::Taken { .. })
        ));
    }
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    child.wait().unwrap();
    for server in &cluster.servers {
        assert_eq!(get(server, a.as_bytes()), None);
        assert_eq!(get(server, b.as_bytes()), None);
    }
    // Two --shared runs overlap; an exclusive one waits for both.
    let log = scratch("shared.log");
    let reader = format!(
        "echo in >> {log}; sleep 1; echo out >> {log}",
        log = log.display()
    );
    let mut readers: Vec<Child> = (0..2)
        .map(|_| spawn(&mut base(&["--shared", "--wait", "20s"], &[&a], &reader)))
        .collect();
    assert!(
        wait_for(Duration::from_secs(20), || {
            std::fs::read_to_string(&log).is_ok_and(|t| t.lines().count() >= 2)
        })
        .is_some()
    );
    let writer = run(&mut base(
        &["--wait", "20s"],
        &[&a],
        &format!("echo write >> {}", log.display()),
    ));
    assert_eq!(writer.status.code(), Some(0), "{}", stderr(&writer));
    for r in &mut readers {
        assert!(r.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        ["in", "in", "out", "out", "write"],
        "readers share, the writer waits for both"
    );
    // Bad combinations are refused with a reason.
    for (flags, resources, says) in [
        (
            &["--shared"][..],
            &[&a[..], &b[..]][..],
            "--shared takes one RESOURCE",
        ),
        (
            &["--permits", "2"],
            &[&a, &b],
            "--permits takes one RESOURCE",
        ),
        (&["--permits", "2", "--shared"], &[&a], "do not go together"),
    ] {
        let out = run(&mut base(flags, resources, "true"));
        assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
        assert!(stderr(&out).contains(says), "{}", stderr(&out));
    }
}

/// `lockrun --leader-of NAME`: its output and status.
fn leader_of(cluster: &Nodes, name: &str) -> Output {
    run(Command::new(lockrun_bin())
        .arg("--nodes")
        .arg(cluster.urls().join(","))
        .args(["--node-timeout", "500ms", "--leader-of", name])
        .env_remove("REDLOCK_NODES")
        .stdin(Stdio::null()))
}

#[test]
fn leader_runs_one_copy_and_a_sigkilled_leader_is_replaced_with_a_higher_term() {
    let cluster = Nodes::start(3).unwrap();
    let name = resource("lockrun-leader");
    let log = scratch("leader.log");
    // Each copy logs "PID TERM" once it runs, then waits.
    let script = format!(
        "echo $$ $REDLOCK_FENCING_TOKEN >> {l}; exec sleep 60",
        l = log.display()
    );
    let lines = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let (pid, term) = l.split_once(' ').unwrap();
                (pid.parse::<i32>().unwrap(), term.parse::<u64>().unwrap())
            })
            .collect::<Vec<_>>()
    };
    let start = |value: &str| {
        spawn(&mut lockrun(
            &cluster,
            &[
                "--leader",
                "--ttl",
                "1s",
                "--node-timeout",
                "250ms",
                "--leader-value",
                value,
            ],
            &name,
            &script,
        ))
    };
    let mut first = start("host-a");
    assert!(wait_for(Duration::from_secs(10), || lines().len() == 1).is_some());
    let second = start("host-b");
    // The second stands by: one copy runs.
    thread::sleep(Duration::from_millis(1500));
    let running = lines();
    assert_eq!(running.len(), 1, "{running:?}");
    let (pid, term) = running[0];
    let out = leader_of(&cluster, &name);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        format!("{term} host-a")
    );
    // The leader's lockrun dies: its command dies with it, and the other
    // takes over once the leadership expires, with a higher term.
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(wait_for(Duration::from_secs(5), || ended(pid)).is_some());
    let took = wait_for(Duration::from_secs(10), || lines().len() == 2);
    println!("the standby took over {took:?} after the SIGKILL");
    assert!(took.expect("the standby took over") < Duration::from_secs(4));
    let (_, next) = lines()[1];
    assert!(next > term, "{next} after {term}");
    let out = leader_of(&cluster, &name);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        format!("{next} host-b")
    );
    // SIGTERM: the command ends, the leadership is resigned at once.
    kill(Pid::from_raw(second.id() as i32), Signal::SIGTERM).unwrap();
    let out = second.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    let out = leader_of(&cluster, &name);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("nobody leads"), "{}", stderr(&out));
}

#[test]
fn a_leader_whose_command_exits_resigns_and_exits_with_its_status() {
    let cluster = Nodes::start(3).unwrap();
    let name = resource("lockrun-leader-exit");
    let out = run(&mut lockrun(
        &cluster,
        &["--leader"],
        &name,
        "echo term=$REDLOCK_FENCING_TOKEN; exit 3",
    ));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    let term: u64 = printed
        .trim()
        .strip_prefix("term=")
        .unwrap()
        .parse()
        .unwrap();
    assert!(term > 0);
    for s in &cluster.servers {
        assert_eq!(get(s, name.as_bytes()), None);
    }
    assert_eq!(leader_of(&cluster, &name).status.code(), Some(1));
}

#[test]
fn a_leader_that_loses_the_majority_terminates_its_command_and_exits_76() {
    let mut cluster = Nodes::start(3).unwrap();
    let name = resource("lockrun-leader-lost");
    let marker = scratch("leader-terminated");
    let script = format!(
        "sleep 60 & trap 'echo term > {m}; kill $!; exit 143' TERM; wait",
        m = marker.display()
    );
    let child = spawn(&mut lockrun(
        &cluster,
        &["--leader", "--ttl", "1500ms"],
        &name,
        &script,
    ));
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(&cluster.servers[2], name.as_bytes()).is_none() {
        assert!(Instant::now() < deadline, "lockrun was never elected");
        thread::sleep(Duration::from_millis(10));
    }
    thread::sleep(Duration::from_millis(100));
    cluster.servers[0].kill();
    cluster.servers[1].kill();
    let killed = Instant::now();
    let out = child.wait_with_output().unwrap();
    let took = killed.elapsed();
    assert_eq!(out.status.code(), Some(76), "{}", stderr(&out));
    // In doubt (renewals missing the quorum) before the validity ends:
    // the command is terminated within the validity.
    let err = stderr(&out);
    assert!(
        err.contains("the lock is in doubt") && err.contains("terminating the command"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&marker).unwrap().trim(), "term");
    println!("lockrun --leader exited 76 {took:?} after the majority was killed");
    assert!(took < Duration::from_secs(10), "took {took:?}");
}
