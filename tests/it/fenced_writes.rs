//! Fenced writes (`redlock_sync::fence`): the storage refuses a token
//! lower than one it has seen, atomically with the write; the paused
//! holder's scenario run whole (the `fenced_write` example); and the SQL
//! pattern of the manual, on SQLite.

use crate::support;

use std::path::PathBuf;
use std::process::Command;

use redis::Commands;
use redlock_sync::fence::{Fence, FenceError};
use support::{Nodes, Server, admin, resource};

fn body(server: &Server, key: &str) -> Option<String> {
    admin(server).get(key).unwrap()
}

#[test]
fn a_token_below_the_highest_seen_is_refused_and_writes_nothing() {
    let server = Server::start().unwrap();
    let mut con = admin(&server);
    let name = resource("fence-order");
    let (fence, key) = (Fence::new(&name), format!("{name}:body"));
    assert_eq!(fence.highest(&mut con).unwrap(), None);
    fence.set(&mut con, &key, "by 5", 5).unwrap();
    fence.set(&mut con, &key, "by 7", 7).unwrap();
    // The same holder writes again.
    fence.set(&mut con, &key, "by 7 again", 7).unwrap();
    let err = fence.set(&mut con, &key, "by 6", 6).unwrap_err();
    assert!(err.is_stale(), "{err}");
    match &err {
        FenceError::Stale { token, highest, .. } => assert_eq!((*token, *highest), (6, 7)),
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("token 6"), "{err}");
    assert_eq!(body(&server, &key).as_deref(), Some("by 7 again"));
    assert_eq!(fence.highest(&mut con).unwrap(), Some(7));
    // Another data key of the same resource is fenced by the same token.
    let other = format!("{name}:other");
    assert!(
        fence
            .set(&mut con, &other, "by 6", 6)
            .unwrap_err()
            .is_stale()
    );
    assert_eq!(body(&server, &other), None);
    // Tokens as the library hands them out (microseconds since 1970).
    let big = 1_795_000_000_000_001;
    fence.set(&mut con, &key, "by big", big).unwrap();
    assert!(
        fence
            .set(&mut con, &key, "x", big - 1)
            .unwrap_err()
            .is_stale()
    );
    assert_eq!(fence.highest(&mut con).unwrap(), Some(big));
}

#[test]
fn a_fence_key_that_holds_no_token_is_a_typed_error_and_writes_nothing() {
    let server = Server::start().unwrap();
    let mut con = admin(&server);
    let fence = Fence::new(resource("fence-garbage"));
    for junk in ["not a token", "-3", "12abc"] {
        let _: () = con.set(fence.seen_key(), junk).unwrap();
        let err = fence
            .set(&mut con, "fence-garbage:body", "x", 9)
            .unwrap_err();
        assert!(
            matches!(&err, FenceError::NotAToken { found, .. } if found == junk),
            "{err:?}"
        );
        assert!(matches!(
            fence.highest(&mut con),
            Err(FenceError::NotAToken { .. })
        ));
    }
    assert_eq!(body(&server, "fence-garbage:body"), None);
    // A server that refuses (the key of another type) is a Redis error.
    let _: () = con.del(fence.seen_key()).unwrap();
    let _: () = con.rpush(fence.seen_key(), "x").unwrap();
    let err = fence
        .set(&mut con, "fence-garbage:body", "x", 9)
        .unwrap_err();
    assert!(matches!(err, FenceError::Redis { .. }), "{err:?}");
}

/// The paused holder: the `fenced_write` example run whole on three
/// nodes started here (A pauses past its validity, B takes the lock and
/// writes, A's late write is refused). It exits 0 only when it went so.
#[test]
fn the_paused_holders_late_write_is_refused_as_the_example_shows() {
    let nodes = Nodes::start(3).unwrap();
    let out = Command::new(example("fenced_write"))
        .env("REDLOCK_NODES", nodes.urls().join(","))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("A's write was refused"), "{stdout}");
    assert_eq!(
        body(&nodes.servers[0], "fenced-write-example:report:body").as_deref(),
        Some("B's report")
    );
}

/// The example's binary, built beside this test's: `cargo build` runs
/// here as well, so that a run of this test target alone does not run a
/// stale build (after `cargo test`, which builds the examples, it has
/// nothing to do).
fn example(name: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "--all-features", "--example", name])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap();
    assert!(status.success(), "could not build the example {name}");
    let exe = std::env::current_exe().unwrap();
    let debug = exe.parent().and_then(|deps| deps.parent()).unwrap();
    debug.join("examples").join(name)
}

/// The manual's SQL pattern (an upsert whose update is conditional on the
/// token), run by SQLite's command line: a write with a lower token than
/// the row holds changes nothing.
#[test]
fn the_sql_pattern_of_the_manual_refuses_a_stale_token_on_sqlite() {
    if Command::new("sqlite3").arg("--version").output().is_err() {
        let why = "sqlite3 is not installed (apt-get install sqlite3)".to_owned();
        eprintln!("{}", support::server::skip(why));
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(resource("fence-sql"));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("reports.db");
    let _ = std::fs::remove_file(&db);
    let sql = |args: &[String]| {
        let out = Command::new("sqlite3")
            .arg(&db)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    sql(&[CREATE.into()]);
    let write = |token: u64, text: &str| -> u64 {
        let changed = sql(&[
            ".param set :id 'daily'".into(),
            format!(".param set :body '{text}'"),
            format!(".param set :token {token}"),
            FENCED_UPSERT.into(),
            "SELECT changes();".into(),
        ]);
        changed.trim().parse().unwrap()
    };
    assert_eq!(write(7, "by 7"), 1, "the first write inserts");
    assert_eq!(write(9, "by 9"), 1, "a newer holder updates");
    assert_eq!(write(9, "by 9 again"), 1, "the same holder updates");
    assert_eq!(write(8, "by 8"), 0, "a stale holder changes nothing");
    assert_eq!(
        sql(&["SELECT body, fence FROM reports WHERE id = 'daily';".into()]).trim(),
        "by 9 again|9"
    );
}

/// The manual's table (see "Fencing tokens").
const CREATE: &str =
    "CREATE TABLE reports (id TEXT PRIMARY KEY, body TEXT NOT NULL, fence INTEGER NOT NULL);";

/// The manual's fenced write, word for word.
const FENCED_UPSERT: &str = "INSERT INTO reports (id, body, fence) VALUES (:id, :body, :token)
    ON CONFLICT (id) DO UPDATE SET body = excluded.body, fence = excluded.fence
    WHERE excluded.fence >= reports.fence;";
