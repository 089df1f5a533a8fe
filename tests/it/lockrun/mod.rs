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

mod cuts;
mod operators;
mod shapes;
mod signals;

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

/// Whether every node of `cluster` has `n` fair waiters queued for `key`.
fn fair_queued(cluster: &Nodes, key: &str, n: usize) -> bool {
    support::queued(cluster, key).iter().all(|q| *q == n)
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
