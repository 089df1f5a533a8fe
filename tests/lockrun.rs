//! The `lockrun` example, run as users run it: as a separate process
//! around a shell command, against real servers.

mod support;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use support::{Cluster, get, resource};

/// `target/<profile>/examples/lockrun`, which `cargo test` builds beside
/// the test binaries (in `target/<profile>/deps`).
fn lockrun_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let bin = profile_dir.join("examples").join("lockrun");
    assert!(
        bin.exists(),
        "{} is missing: run the tests with `cargo test` (which builds examples)",
        bin.display()
    );
    bin
}

fn lockrun(cluster: &Cluster, flags: &[&str], resource: &str, script: &str) -> Command {
    let mut cmd = Command::new(lockrun_bin());
    cmd.arg("--nodes")
        .arg(cluster.urls().join(","))
        .args(flags)
        .arg(resource)
        .args(["--", "sh", "-c", script])
        .env_remove("REDLOCK_NODES")
        .stdin(Stdio::null());
    cmd
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
    let cluster = Cluster::start(3).unwrap();
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
    let cluster = Cluster::start(3).unwrap();
    let key = resource("lockrun-status");
    let out = run(&mut lockrun(
        &cluster,
        &[],
        &key,
        "echo \"$REDLOCK_RESOURCE $REDLOCK_FENCING_TOKEN\"; exit 3",
    ));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // The token is the fencing counter every node now holds.
    let counter = get(
        &cluster.servers[0],
        format!("{key}:redlock-fence").as_bytes(),
    )
    .unwrap();
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
    let cluster = Cluster::start(3).unwrap();
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
    assert!(
        stderr(&out).contains("locked by another owner"),
        "{}",
        stderr(&out)
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[test]
fn unreachable_nodes_exit_69_and_name_the_nodes() {
    let mut cluster = Cluster::start(3).unwrap();
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
    let mut cluster = Cluster::start(3).unwrap();
    let key = resource("lockrun-lost");
    let marker = scratch("terminated");
    let script = format!(
        "sleep 60 & trap 'echo term > {m}; kill $!; exit 143' TERM; wait",
        m = marker.display()
    );
    let child = lockrun(&cluster, &["--ttl", "1500ms"], &key, &script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
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
    assert!(stderr(&out).contains("no longer held"), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&marker).unwrap().trim(), "term");
    println!("lockrun exited 76 {took:?} after the majority was killed");
    // Renewal every 500 ms: far sooner than the child's 60 s.
    assert!(took < Duration::from_secs(10), "took {took:?}");
}

#[test]
fn bad_command_lines_exit_64() {
    let bin = lockrun_bin();
    for args in [
        &["res"][..],
        &["--", "true"],
        &["--ttl", "soon", "res", "--", "true"],
        &["--bogus", "res", "--", "true"],
        &[
            "--nodes",
            "redis://127.0.0.1:1",
            "--ttl",
            "0s",
            "res",
            "--",
            "true",
        ],
        &["--nodes", "not a url", "res", "--", "true"],
    ] {
        let out = Command::new(&bin).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("lockrun:"), "{args:?}");
    }
}
