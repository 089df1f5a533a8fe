//! Restart-safe votes, on the scenario every Redlock client leaves open:
//! 5 nodes without persistence; A holds R on nodes 0, 1 and 2 (3 and 4
//! unreachable from A); node 2 restarts empty; B reaches nodes 2, 3 and 4.
//! Without restart safety B wins R while A's guard is valid.

use crate::support;

use std::time::{Duration, Instant};

use redlock_sync::{Error, LockManager, NodeErrorKind};
use support::{Nodes, Server, resource, wait_for};

const TTL: Duration = Duration::from_secs(10);

/// A URL where nothing listens: a node this client cannot reach.
fn unreachable() -> (Server, String) {
    let mut dead = Server::start().unwrap();
    dead.kill();
    let url = format!("redis://127.0.0.1:{}", dead.port());
    (dead, url)
}

/// A manager that reaches the nodes `reach` of `cluster` and none other
/// (the rest are unreachable URLs in their place).
fn partial(
    cluster: &Nodes,
    reach: &[usize],
    strict: Option<Duration>,
) -> (LockManager, Vec<Server>) {
    let mut dead = Vec::new();
    let urls: Vec<String> = (0..cluster.servers.len())
        .map(|i| {
            if reach.contains(&i) {
                cluster.servers[i].url()
            } else {
                let (server, url) = unreachable();
                dead.push(server);
                url
            }
        })
        .collect();
    let mut builder = LockManager::builder()
        .nodes(urls)
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::ZERO);
    if let Some(q) = strict {
        builder = builder.restart_quarantine(q);
    }
    (builder.build().unwrap(), dead)
}

/// A holds R on 0, 1, 2; node 2 restarts; returns A's guard.
fn a_holds_and_node_2_restarts(
    cluster: &mut Nodes,
    a: &LockManager,
    r: &str,
) -> redlock_sync::LockGuard {
    let guard = a.lock(r, TTL).unwrap();
    for i in 0..3 {
        assert_eq!(
            support::get(&cluster.servers[i], r.as_bytes()).as_deref(),
            Some(guard.token())
        );
    }
    cluster.servers[2].restart().unwrap();
    assert_eq!(support::get(&cluster.servers[2], r.as_bytes()), None);
    guard
}

fn assert_kept_out(result: redlock_sync::Result<redlock_sync::LockGuard>, node: &Server) {
    let err = match result {
        Ok(_) => panic!("B took the lock A still holds"),
        Err(e) => e,
    };
    assert!(
        matches!(err, Error::NoQuorum { .. } | Error::Taken { .. }),
        "{err:?}"
    );
    let port = node.port().to_string();
    let failure = err
        .failures()
        .iter()
        .find(|f| f.node().ends_with(&port))
        .unwrap_or_else(|| panic!("node 2 not among the failures: {err}"));
    assert_eq!(failure.kind(), NodeErrorKind::Restarted, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("restarted") && msg.contains("in restart quarantine, not voting for"),
        "{msg}"
    );
}

#[test]
fn a_witnessed_restart_keeps_the_node_out_for_the_longest_ttl() {
    let mut cluster = Nodes::start(5).unwrap();
    let r = resource("witnessed");
    let (a, _dead_a) = partial(&cluster, &[0, 1, 2], None);
    let (b, _dead_b) = partial(&cluster, &[2, 3, 4], None);
    // B has talked to the nodes before, with the same TTL as A.
    b.lock(resource("witnessed-warmup"), TTL)
        .unwrap()
        .release()
        .unwrap();
    let guard = a_holds_and_node_2_restarts(&mut cluster, &a, &r);
    assert_kept_out(b.lock(&r, TTL), &cluster.servers[2]);
    assert!(guard.is_valid());
    // And A, which also saw the restart, cannot count node 2 to extend:
    // nodes 0 and 1 are two of its five, so extend misses the quorum.
    let mut guard = guard;
    let err = guard.extend(TTL).unwrap_err();
    assert!(err.to_string().contains("not voting"), "{err}");
}

#[test]
fn strict_mode_keeps_out_a_node_started_recently_even_unseen() {
    let mut cluster = Nodes::start(5).unwrap();
    let r = resource("strict");
    let (a, _dead_a) = partial(&cluster, &[0, 1, 2], None);
    let _guard = a_holds_and_node_2_restarts(&mut cluster, &a, &r);
    // A new process (a lockrun) never saw node 2 before its restart.
    let (unseen, _d) = partial(&cluster, &[2, 3, 4], None);
    assert!(
        unseen.lock(&r, TTL).is_ok(),
        "the hole without strict mode: an unwitnessed restart votes"
    );
    let mut cluster = cluster;
    let r = resource("strict-2");
    let (a, _dead_a) = partial(&cluster, &[0, 1, 2], None);
    let _guard = a_holds_and_node_2_restarts(&mut cluster, &a, &r);
    let (strict, _d) = partial(&cluster, &[2, 3, 4], Some(TTL));
    let started = Instant::now();
    assert_kept_out(strict.lock(&r, TTL), &cluster.servers[2]);
    // Once node 2 has been up longer than the quarantine it votes again:
    // a short quarantine shows it within the test.
    let (short, _d) = partial(&cluster, &[2, 3, 4], Some(Duration::from_secs(2)));
    let other = resource("strict-later");
    // Node 2 kept out (up less than 2 s), nodes 0 and 1 unreachable.
    let err = short.lock(&other, TTL).unwrap_err();
    assert!(
        err.failures()
            .iter()
            .any(|f| f.kind() == NodeErrorKind::Restarted),
        "up less than 2 s: {err}"
    );
    std::thread::sleep(Duration::from_millis(3200).saturating_sub(started.elapsed()));
    short.lock(&other, TTL).unwrap().release().unwrap();
}

#[test]
fn a_fresh_deployment_locks_at_once() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = support::manager(&cluster, Duration::from_millis(500));
    // Servers started a moment ago, never seen, no strict mode.
    dlm.lock(resource("fresh"), TTL).unwrap().release().unwrap();
}

/// A server that syncs every write reloads its keys after a restart, so a
/// manager that never knew it before (strict mode) counts it at once; a
/// manager that saw its run_id change cannot tell that restart from
/// another server behind the address, and keeps it out (the safe side).
#[test]
fn a_node_that_syncs_every_write_keeps_its_vote_where_no_change_was_witnessed() {
    let mut cluster =
        Nodes::start_with(5, &["--appendonly", "yes", "--appendfsync", "always"]).unwrap();
    let r = resource("durable");
    let (a, _dead_a) = partial(&cluster, &[0, 1, 2], None);
    let (b, _dead_b) = partial(&cluster, &[2, 3, 4], Some(TTL));
    b.lock(resource("durable-warmup"), TTL)
        .unwrap()
        .release()
        .unwrap();
    let guard = a.lock(&r, TTL).unwrap();
    cluster.servers[2].restart().unwrap();
    // The key came back from the append-only file.
    assert_eq!(
        support::get(&cluster.servers[2], r.as_bytes()).as_deref(),
        Some(guard.token())
    );
    // B saw the change: node 2 is kept out, and R is not B's.
    assert_kept_out(b.lock(&r, TTL), &cluster.servers[2]);
    // C never knew the old server: in strict mode the durable node 2 votes
    // at once, and finds R taken.
    let (c, _dead_c) = partial(&cluster, &[2, 3, 4], Some(TTL));
    let err = c.lock(&r, TTL).unwrap_err();
    assert!(
        err.failures()
            .iter()
            .all(|f| f.kind() != NodeErrorKind::Restarted),
        "{err}"
    );
    c.lock(resource("durable-other"), TTL)
        .unwrap()
        .release()
        .unwrap();
}

/// A durable server is seen as durable even by a connection made while
/// it still loads its append-only file (when `INFO` says
/// `aof_enabled:0`): once loaded it votes at once.
#[test]
fn a_durable_node_seen_while_loading_keeps_its_vote() {
    if !support::server::server_at_least(7, 0) {
        eprintln!(
            "{}",
            support::server::skip(
                "skipped: needs --loading-process-events-interval-bytes (Redis 7.0+)".into()
            )
        );
        return;
    }
    let mut cluster =
        Nodes::start_with(3, &["--appendonly", "yes", "--appendfsync", "always"]).unwrap();
    let dlm = support::manager(&cluster, Duration::from_millis(500));
    dlm.lock(resource("loading-warmup"), TTL)
        .unwrap()
        .release()
        .unwrap();
    let mut admin = support::admin(&cluster.servers[0]);
    let _: () = redis::cmd("DEBUG")
        .arg("POPULATE")
        .arg(20000)
        .query(&mut admin)
        .unwrap();
    let _: () = redis::cmd("BGREWRITEAOF").query(&mut admin).unwrap();
    assert!(
        wait_for(Duration::from_secs(20), || {
            support::info_field(
                &mut support::admin(&cluster.servers[0]),
                "persistence",
                "aof_rewrite_in_progress",
            )
            .unwrap()
            .as_deref()
                == Some("0")
        })
        .is_some()
    );
    drop(admin);
    cluster.servers[0]
        .restart_with(&[
            "--key-load-delay",
            "20",
            "--loading-process-events-interval-bytes",
            "1024",
        ])
        .unwrap();
    // A manager in strict mode whose first connection to the new process
    // is made while it loads (its lock commands answer LOADING). (The
    // manager above saw the restart: it keeps node 0 out whatever its
    // persistence.)
    // Every write is fsynced (`appendfsync always`): on a shared machine
    // a node's reply can take longer than half a second (a CI run saw
    // the untouched node 2 miss 500 ms along with node 0). The node
    // timeout is generous; what the test checks is the vote, and a
    // quarantined node refuses at once, whatever the timeout.
    let dlm = LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_secs(3))
        .retry(1, Duration::ZERO)
        .restart_quarantine(TTL)
        .build()
        .unwrap();
    let r = resource("loading");
    // The first attempt meets node 0 loading: it answers LOADING (the
    // lock is had from nodes 1 and 2).
    let port0 = format!(":{}", cluster.servers[0].port());
    let first = dlm.lock(&r, TTL).unwrap();
    let loading = first
        .failures()
        .iter()
        .find(|f| f.node().ends_with(&port0))
        .unwrap_or_else(|| panic!("node 0 did not fail: {:?}", first.failures()));
    assert_eq!(loading.code(), Some("LOADING"), "{loading}");
    first.release().unwrap();
    let loaded = wait_for(Duration::from_secs(30), || {
        support::info_field(
            &mut support::admin(&cluster.servers[0]),
            "persistence",
            "loading",
        )
        .ok()
        .flatten()
        .as_deref()
            == Some("0")
    });
    assert!(loaded.is_some(), "never loaded");
    // Node 1 down: node 0 must vote (with node 2) for the lock to be had.
    cluster.servers[1].kill();
    let guard = dlm.lock(&r, TTL);
    let guard = guard.unwrap_or_else(|e| panic!("the durable node did not vote: {e}"));
    guard.release().unwrap();
}
