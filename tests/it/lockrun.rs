//! The `lockrun` command (feature `cli`), run as users run it: the built
//! binary as a separate process around a shell command, against real
//! servers; signals sent to it as supervisors send them.

use crate::support;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use support::{Nodes, get, resource, wait_for};

/// The binary cargo built for this test run.
fn lockrun_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_lockrun"))
}

fn lockrun(cluster: &Nodes, flags: &[&str], resource: &str, script: &str) -> Command {
    let mut cmd = Command::new(lockrun_bin());
    // A generous node timeout: the machine is shared, and a renewal that
    // misses it several times in a row would end the lock (as it should).
    cmd.arg("--nodes")
        .arg(cluster.urls().join(","))
        .args(["--node-timeout", "500ms"])
        .args(flags)
        .arg(resource)
        .args(["--", "sh", "-c", script])
        .env_remove("REDLOCK_NODES")
        .stdin(Stdio::null());
    cmd
}

/// Starts `cmd` with its output captured.
fn spawn(cmd: &mut Command) -> Child {
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("lockrun starts")
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("lockrun runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("redlock-sync-lockrun-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

#[test]
fn two_lockruns_on_one_resource_never_overlap() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-overlap");
    let log = scratch("overlap.log");
    // Each section logs its start and end; a section that begins while
    // another is open shows as two starts in a row.
    let script = format!(
        "echo \"start $$ $REDLOCK_FENCING_TOKEN\" >> {log}; \
         sleep 0.2; echo \"end $$\" >> {log}",
        log = log.display()
    );
    let flags = ["--ttl", "2s", "--wait", "60s"];
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (key, script) = (key.clone(), script.clone());
            let urls = cluster.urls().join(",");
            thread::spawn(move || {
                let mut statuses = Vec::new();
                for _ in 0..4 {
                    let out = Command::new(lockrun_bin())
                        .args(["--nodes", &urls])
                        .args(flags)
                        .arg(&key)
                        .args(["--", "sh", "-c", &script])
                        .env_remove("REDLOCK_NODES")
                        .output()
                        .unwrap();
                    statuses.push((out.status.code(), stderr(&out)));
                }
                statuses
            })
        })
        .collect();
    for worker in workers {
        for (code, err) in worker.join().unwrap() {
            assert_eq!(code, Some(0), "{err}");
        }
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 16, "{text}");
    let mut last_token = 0;
    for pair in lines.chunks(2) {
        let start: Vec<&str> = pair[0].split(' ').collect();
        let end: Vec<&str> = pair[1].split(' ').collect();
        assert_eq!(start[0], "start", "sections overlap:\n{text}");
        assert_eq!(end, ["end", start[1]], "sections overlap:\n{text}");
        // The fencing token grows from one section to the next.
        let token: u64 = start[2].parse().unwrap();
        assert!(token > last_token, "{text}");
        last_token = token;
    }
    // All released.
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()), None);
    }
}

#[test]
fn passes_the_token_and_exits_with_the_commands_status() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-status");
    let out = run(&mut lockrun(
        &cluster,
        &[],
        &key,
        "echo \"$REDLOCK_RESOURCE $REDLOCK_FENCING_TOKEN\"; exit 3",
    ));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // The token is the fencing counter every node now holds.
    let counter = get(&cluster.servers[0], &redlock_sync::fence_key(&key)).unwrap();
    let expected = format!("{key} {}\n", String::from_utf8_lossy(&counter));
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()), None);
    }
    let out = run(&mut lockrun(&cluster, &[], &key, "exit 0"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_taken_lock_exits_75_after_the_wait() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-taken");
    let dlm = support::manager(&cluster, Duration::from_millis(500));
    let _held = dlm.lock(&key, Duration::from_secs(30)).unwrap();
    let started = Instant::now();
    let out = run(&mut lockrun(
        &cluster,
        &["--wait", "300ms"],
        &key,
        "echo ran",
    ));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "the command ran");
    // The holder, named: this test's process.
    assert!(
        stderr(&out).contains("locked by another owner ("),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains(&format!(" pid {}, token ", std::process::id())),
        "{}",
        stderr(&out)
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[test]
fn unreachable_nodes_exit_69_and_name_the_nodes() {
    let mut cluster = Nodes::start(3).unwrap();
    cluster.servers[0].kill();
    cluster.servers[1].kill();
    let key = resource("lockrun-down");
    let out = run(&mut lockrun(&cluster, &["--wait", "0s"], &key, "echo ran"));
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "the command ran");
    let err = stderr(&out);
    let port = cluster.servers[0].port().to_string();
    assert!(err.contains(&port), "{err}");
}

#[test]
fn a_lost_lock_terminates_the_command_and_exits_76() {
    let mut cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-lost");
    let marker = scratch("terminated");
    let script = format!(
        "sleep 60 & trap 'echo term > {m}; kill $!; exit 143' TERM; wait",
        m = marker.display()
    );
    let child = spawn(&mut lockrun(&cluster, &["--ttl", "1500ms"], &key, &script));
    // Wait for the command to run, then kill the majority.
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(&cluster.servers[2], key.as_bytes()).is_none() {
        assert!(Instant::now() < deadline, "lockrun never took the lock");
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
    println!("lockrun exited 76 {took:?} after the majority was killed");
    // Renewal every 500 ms: far sooner than the child's 60 s.
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn bad_command_lines_exit_64_and_say_what_is_wrong() {
    let bin = lockrun_bin();
    let node = "redis://127.0.0.1:1";
    for (args, says) in [
        (&["--nodes", node, "res"][..], "missing `--` and COMMAND"),
        (&["--nodes", node, "--", "echo", "ran"], "missing RESOURCE"),
        (&["--nodes", node, "res", "--"], "missing COMMAND"),
        (
            &["--nodes", node, "res", "echo", "ran"],
            "put `--` before COMMAND",
        ),
        (
            &["--nodes", node, "--ttl", "soon", "res", "--", "true"],
            "--ttl: \"soon\" is not a duration",
        ),
        (
            &["--nodes", node, "--ttl", "-5s", "res", "--", "true"],
            "--ttl: \"-5s\" is not a duration",
        ),
        (
            &["--nodes", node, "--wait", "5parsecs", "res", "--", "true"],
            "--wait: unknown unit",
        ),
        (
            &[
                "--nodes",
                node,
                "--ttl",
                "10s",
                "--kill-after",
                "10s",
                "res",
                "--",
                "true",
            ],
            "--kill-after 10s must be shorter than --ttl 10s",
        ),
        (
            &["--nodes", node, "--ttl", "100ms", "res", "--", "true"],
            "--ttl 100ms is too short for --node-timeout 50ms",
        ),
        (
            &["--nodes", node, "--bogus", "res", "--", "true"],
            "--bogus",
        ),
        (
            &["--nodes", node, "--leader-of", "a", "b"],
            "--leader-of takes one RESOURCE",
        ),
        (
            &["--nodes", node, "--leader-of", "a", "--", "true"],
            "--leader-of runs no COMMAND",
        ),
        (
            &["--nodes", node, "--leader-value", "v", "a", "--", "true"],
            "--leader-value goes with --leader",
        ),
        (
            &["--nodes", node, "--leader", "--shared", "a", "--", "true"],
            "do not go together",
        ),
        (
            &["--nodes", node, "--leader", "a", "b", "--", "true"],
            "--leader takes one RESOURCE",
        ),
        (
            &[
                "--nodes",
                node,
                "--leader",
                "x:redlock-leader",
                "--",
                "true",
            ],
            "reserved for the records of elections",
        ),
        (
            &["--nodes", node, "--ttl", "0s", "res", "--", "true"],
            "--ttl 0ms is too short for --node-timeout 50ms",
        ),
        (
            &["--nodes", node, "--ttl", "40ms", "res", "--", "true"],
            "give a TTL of at least",
        ),
        (
            &[
                "--nodes",
                node,
                "--ttl",
                "99999999999999999999999s",
                "res",
                "--",
                "true",
            ],
            "--ttl: \"99999999999999999999999s\" is out of range: at most 18446744073709551615s",
        ),
        (
            &["--nodes", "not a url", "res", "--", "true"],
            "no scheme: write redis://",
        ),
        (
            &[
                "--nodes",
                "redis://127.0.0.1:1,,redis://127.0.0.1:2",
                "res",
                "--",
                "true",
            ],
            "--nodes: empty entry",
        ),
        (
            &["--nodes", "127.0.0.1:7000", "res", "--", "true"],
            "write redis://127.0.0.1:7000",
        ),
    ] {
        let out = Command::new(&bin)
            .args(args)
            .env_remove("REDLOCK_NODES")
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.contains("lockrun:"), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: expected {says:?} in {err}");
    }
    // The command never ran: `lockrun -- echo ran` is not a lock on "echo".
    let out = Command::new(&bin)
        .args(["--nodes", node, "--", "echo", "ran"])
        .output()
        .unwrap();
    assert!(out.stdout.is_empty());
    // An empty entry in REDLOCK_NODES too.
    let out = Command::new(&bin)
        .args(["res", "--", "true"])
        .env("REDLOCK_NODES", "redis://127.0.0.1:1,")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("REDLOCK_NODES: empty entry"),
        "{}",
        stderr(&out)
    );
}

/// Each failing node's cause is printed without `-v`: a wrong password,
/// a missing one, a dead port, a host that does not resolve.
#[test]
fn failing_nodes_are_named_with_their_cause() {
    let secured = support::Server::start_with(&["--requirepass", "s3cret"]).unwrap();
    let open = support::Server::start().unwrap();
    let dead = {
        let mut s = support::Server::start().unwrap();
        s.kill();
        s
    };
    let key = resource("lockrun-causes");
    // Refused credentials are a setting to fix (78); the rest may pass
    // (69).
    for (url, says, status) in [
        (
            format!("redis://:wrong@127.0.0.1:{}", secured.port()),
            "wrong user name or password",
            78,
        ),
        (
            format!("redis://127.0.0.1:{}", secured.port()),
            "requires a password and none was given",
            78,
        ),
        (
            format!("redis://:s3cret@127.0.0.1:{}", open.port()),
            "a password was given but the server has none set",
            78,
        ),
        (
            format!("redis://127.0.0.1:{}", dead.port()),
            "connection refused",
            69,
        ),
        // `.invalid` never resolves (RFC 6761); a resolver that does not
        // answer in time is a timeout instead (still a stated cause).
        (
            "redis://no-such-host.invalid:6390".to_owned(),
            "no-such-host.invalid:6390: name resolution failed",
            69,
        ),
    ] {
        let out = Command::new(lockrun_bin())
            .args(["--nodes", &url, "--wait", "0", "--node-timeout", "2s"])
            .args([key.as_str(), "--", "echo", "ran"])
            .env_remove("REDLOCK_NODES")
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(status), "{url}: {err}");
        let resolver_hung = url.contains(".invalid") && err.contains("no connection within 2s");
        assert!(
            err.contains(says) || resolver_hung,
            "{url}: expected {says:?} in {err}"
        );
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
}

/// With every node down, the first failure is reported at once, and
/// lockrun goes on trying until --wait runs out.
#[test]
fn nodes_failing_while_waiting_are_reported_at_once() {
    let mut cluster = Nodes::start(3).unwrap();
    for s in &mut cluster.servers {
        s.kill();
    }
    let key = resource("lockrun-down-wait");
    let started = Instant::now();
    let mut child = spawn(&mut lockrun(&cluster, &["--wait", "3s"], &key, "echo ran"));
    let stderr_pipe = child.stderr.take().unwrap();
    let reader = thread::spawn(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stderr_pipe)
            .lines()
            .map_while(Result::ok)
            .map(|line| (started.elapsed(), line))
            .collect::<Vec<_>>()
    });
    let status = child.wait().unwrap();
    let took = started.elapsed();
    let lines = reader.join().unwrap();
    assert_eq!(status.code(), Some(69), "{lines:?}");
    assert!(took >= Duration::from_secs(3), "gave up after {took:?}");
    let (at, first) = &lines[0];
    assert!(
        first.contains("cannot lock") && first.contains("yet"),
        "{lines:?}"
    );
    assert!(first.contains("connection refused"), "{lines:?}");
    assert!(
        *at < Duration::from_millis(2000),
        "first report after {at:?}"
    );
    assert_eq!(
        lines.len(),
        2,
        "one report while waiting, one at the end: {lines:?}"
    );
}

#[test]
fn help_lists_every_option_the_environment_and_the_exit_statuses() {
    let out = Command::new(lockrun_bin()).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--nodes",
        "--ttl",
        "[30s]",
        "--wait",
        "[10s]",
        "--node-timeout",
        "[50ms]",
        "--no-fencing",
        "--tls-ca",
        "--tls-cert",
        "--tls-key",
        "--quiet",
        "--verbose",
        "--version",
        "REDLOCK_NODES",
        "REDLOCK_FENCING_TOKEN",
        "REDLOCK_RESOURCE",
        "SIGTERM",
        "SIGKILL",
        "64",
        "69",
        "75",
        "76",
        "126",
        "127",
        "143",
        "130",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    let out = Command::new(lockrun_bin())
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("lockrun (redlock-sync) {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn a_command_that_cannot_run_exits_127_or_126_and_releases() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-norun");
    let mut cmd = Command::new(lockrun_bin());
    cmd.arg("--nodes")
        .arg(cluster.urls().join(","))
        .args([&key, "--", "/nonexistent/command"]);
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(127), "{}", stderr(&out));
    let not_executable = scratch("not-executable");
    std::fs::write(&not_executable, "data").unwrap();
    let mut cmd = Command::new(lockrun_bin());
    cmd.arg("--nodes")
        .arg(cluster.urls().join(","))
        .arg(&key)
        .arg("--")
        .arg(&not_executable);
    let out = run(&mut cmd);
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()), None);
    }
}

#[test]
fn verbose_with_no_wait_says_it_will_not_wait() {
    let cluster = Nodes::start(1).unwrap();
    let key = resource("lockrun-nowait");
    let out = run(&mut lockrun(&cluster, &["-v", "--wait", "0"], &key, "true"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("without waiting"), "{err}");
    assert!(!err.contains("0ns"), "{err}");
}

#[test]
fn no_fencing_passes_no_token_and_verbose_logs_the_steps() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-nofence");
    let out = run(&mut lockrun(
        &cluster,
        &["--no-fencing", "-v"],
        &key,
        "echo \"token=${REDLOCK_FENCING_TOKEN-none}\"",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "token=none");
    let err = stderr(&out);
    assert!(err.contains("lockrun: locked"), "{err}");
    assert!(err.contains("lockrun: released"), "{err}");
    // Quiet by default: nothing on stderr when all goes well.
    let out = run(&mut lockrun(&cluster, &[], &key, "true"));
    assert_eq!(stderr(&out), "");
}

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

/// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
fn ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
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

/// A node URL only the parser can refuse: exit 64, and the parser's words
/// said once (they are the error's source, not in its message: `lockrun`
/// prints the chain).
#[test]
fn an_unreadable_node_url_is_a_usage_error_with_the_parsers_words_once() {
    let out = run(Command::new(lockrun_bin())
        .args(["--nodes", "redis://127.0.0.1/notadb"])
        .args(["lock:url", "--", "true"])
        .env_remove("REDLOCK_NODES")
        .stdin(Stdio::null()));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("cannot read node URL"), "{err}");
    assert_eq!(err.matches("database").count(), 1, "{err}");
}

/// One server given twice under two spellings: exit 64 at once, naming
/// both, instead of waiting --wait out on a phantom holder.
#[test]
fn one_server_under_two_names_is_a_usage_error() {
    let cluster = Nodes::start(1).unwrap();
    let port = cluster.servers[0].port();
    let out = run(Command::new(lockrun_bin())
        .args([
            "--nodes",
            &format!("redis://127.0.0.1:{port},redis://localhost:{port}"),
        ])
        .args(["--wait", "10s", "lock:twice", "--", "true"])
        .env_remove("REDLOCK_NODES")
        .stdin(Stdio::null()));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(err.contains(&format!("localhost:{port}")), "{err}");
}

/// A lock taken while a member is down runs the command, with one warning
/// line naming the member and its cause (not with -q).
#[test]
fn a_lock_taken_with_a_member_down_warns_once() {
    let mut cluster = Nodes::start(3).unwrap();
    cluster.servers[0].kill();
    let port = format!(":{}", cluster.servers[0].port());
    let out = run(&mut lockrun(
        &cluster,
        &[],
        "lock:redundancy-warned",
        "echo ran",
    ));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("redundancy lost"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("2 of 3 members") && warnings[0].contains(&port),
        "{err}"
    );
    let quiet = run(&mut lockrun(
        &cluster,
        &["-q"],
        "lock:redundancy-quiet",
        "true",
    ));
    assert_eq!(quiet.status.code(), Some(0));
    assert!(!stderr(&quiet).contains("redundancy"), "{}", stderr(&quiet));
}

/// A waiting exclusive run holds off --shared runs that arrive after it
/// began waiting, for the whole of its wait (before, lockrun waited in
/// 100 ms attempts and the writer's flag went between them: in 4 of 4
/// trials later readers ran first). Order: the first reader, the writer,
/// the late reader.
#[test]
fn a_waiting_exclusive_run_holds_off_later_shared_runs() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-writer-waits");
    let log = scratch("writer-waits.log");
    let line =
        |name: &str, hold: &str| format!("echo {name} >> {log}; sleep {hold}", log = log.display());
    let mut first = spawn(&mut lockrun(
        &cluster,
        &["--shared", "--wait", "20s"],
        &key,
        &line("reader", "2"),
    ));
    assert!(wait_for(Duration::from_secs(20), || log.exists()).is_some());
    let mut writer = spawn(&mut lockrun(
        &cluster,
        &["--wait", "30s"],
        &key,
        &line("writer", "0"),
    ));
    // The writer has tried and waits (its first attempt met the reader).
    thread::sleep(Duration::from_millis(700));
    let late = run(&mut lockrun(
        &cluster,
        &["--shared", "--wait", "30s"],
        &key,
        &line("late-reader", "0"),
    ));
    assert_eq!(late.status.code(), Some(0), "{}", stderr(&late));
    assert!(first.wait().unwrap().success());
    assert!(writer.wait().unwrap().success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        ["reader", "writer", "late-reader"],
        "a reader that came after the writer began waiting ran first"
    );
}

/// `--conflict-exit-code N`: the status when the lock stays taken, like
/// flock's -E; anything else is unchanged. A bad value is a usage error.
#[test]
fn conflict_exit_code_sets_the_status_of_a_taken_lock() {
    let cluster = Nodes::start(3).unwrap();
    let key = resource("lockrun-conflict-code");
    let dlm = support::manager(&cluster, Duration::from_millis(500));
    let held = dlm.lock(&key, Duration::from_secs(30)).unwrap();
    let out = run(&mut lockrun(
        &cluster,
        &["--wait", "0", "--conflict-exit-code", "3"],
        &key,
        "echo ran",
    ));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    drop(held);
    let out = run(&mut lockrun(
        &cluster,
        &["--conflict-exit-code", "3"],
        &key,
        "exit 0",
    ));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for bad in ["0", "256", "x"] {
        let out = run(&mut lockrun(
            &cluster,
            &["--conflict-exit-code", bad],
            &key,
            "true",
        ));
        assert_eq!(out.status.code(), Some(64), "{bad}: {}", stderr(&out));
    }
}

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

/// Whether every node of `cluster` has `n` fair waiters queued for `key`.
fn fair_queued(cluster: &Nodes, key: &str, n: usize) -> bool {
    support::queued(cluster, key).iter().all(|q| *q == n)
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
