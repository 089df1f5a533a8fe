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

/// The failure `err` gives for `node`: the restart rule's ("restarted"),
/// else the test fails.
fn assert_not_counted<'e>(err: &'e Error, node: &Server) -> &'e redlock_sync::NodeError {
    let port = format!(":{}", node.port());
    let failure = err
        .failures()
        .iter()
        .find(|f| f.node().ends_with(&port))
        .unwrap_or_else(|| panic!("{port} not among the failures: {err}"));
    assert_eq!(failure.kind(), NodeErrorKind::Restarted, "{err}");
    failure
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
    assert_not_counted(&err, node);
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
    // at once, and finds R taken. (Nodes 3 and 4, which A's value does not
    // name, A never having reached them, have their yes not counted while
    // node 2 shows A's value: see the next test.)
    let (c, _dead_c) = partial(&cluster, &[2, 3, 4], Some(TTL));
    let err = c.lock(&r, TTL).unwrap_err();
    let port2 = format!(":{}", cluster.servers[2].port());
    assert!(
        err.failures().iter().all(|f| !f.node().ends_with(&port2)),
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

/// Whether the server's refusal of `SET ... NX GET` says who holds the key
/// (Redis 7.0 and later): the first attempt's evidence for the rule
/// below; before it, only strict mode covers a restart no manager saw
/// (skipped there, as documented).
fn names_holders() -> bool {
    let yes = support::server::server_at_least(7, 0);
    if !yes {
        eprintln!(
            "{}",
            support::server::skip(
                "skipped: before Redis 7.0 a refusal does not say who holds the key".into()
            )
        );
    }
    yes
}

/// Issue 66, the restart no manager witnessed: three nodes; Q holds R,
/// granted by nodes 0 and 1 (node 2 unreachable for it); node 0 restarts
/// empty; a fresh manager (a new `lockrun`, say), which never met node 0
/// before, reaches all three: nodes 0 and 2 would grant it R. Node 1
/// refuses with Q's value, which names the servers Q's grant was asked
/// of: node 0's server is not among them, so its yes is not counted, by
/// the first attempt (`SET NX GET`) and by the fair claims after it.
/// Once Q releases, the fresh manager takes R with node 0's vote.
#[test]
fn a_restart_no_manager_witnessed_does_not_vote_against_a_holder_a_member_shows() {
    if !names_holders() {
        return;
    }
    for q_met_the_servers in [true, false] {
        let mut cluster = Nodes::start(3).unwrap();
        let r = resource("unwitnessed");
        let (q, _dead) = partial(&cluster, &[0, 1], None);
        if q_met_the_servers {
            // Q's token names the servers it knows when it asks (a
            // manager's first acquisition, as a `lockrun` run's, meets
            // them first: the other round of this loop).
            q.lock(resource("unwitnessed-warmup"), TTL)
                .unwrap()
                .release()
                .unwrap();
        }
        let guard = q.lock(&r, TTL).unwrap();
        cluster.servers[0].restart().unwrap();
        assert_eq!(support::get(&cluster.servers[0], r.as_bytes()), None);
        for fair in [false, true] {
            let fresh = LockManager::builder()
                .nodes(cluster.urls())
                .node_timeout(Duration::from_millis(500))
                .fair(fair)
                .build()
                .unwrap();
            let err = match fresh.try_lock_for(&r, TTL, Duration::from_millis(1500)) {
                Ok(_) => panic!("a fresh manager took the lock Q holds (fair {fair})"),
                Err(e) => e,
            };
            let failure = assert_not_counted(&err, &cluster.servers[0]);
            assert!(
                failure.to_string().contains("its yes is not counted"),
                "{failure}"
            );
            // Its key there was cleaned up.
            assert_eq!(support::get(&cluster.servers[0], r.as_bytes()), None);
        }
        assert!(guard.is_valid());
        // Q's release deletes its key on node 1 (node 0 forgot it, node 2
        // is out of Q's reach): it says so, as a release short of a
        // quorum does.
        let _ = guard.release();
        // Nobody holds R: the fresh manager takes it at once, node 0
        // voting.
        let fresh = support::manager(&cluster, Duration::from_millis(500));
        let started = Instant::now();
        let guard = fresh.lock(&r, TTL).unwrap();
        assert!(guard.failures().is_empty(), "{:?}", guard.failures());
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}

/// The rule above for a set (`lock_all`), whose refusals name the value
/// holding their busy key: Q holds the set {R1, R2}, granted by nodes 0
/// and 1; node 0 restarts empty; a fresh manager (plain, then fair)
/// asks all three for the same set and for one that shares R2 only:
/// node 0's yes is not counted beside node 1's refusal, which names Q's
/// servers. Without the rule (sets' refusals saying nothing), nodes 0
/// and 2 grant the set while Q holds it.
#[test]
fn a_restart_no_manager_witnessed_does_not_vote_a_set_against_a_holder_a_member_shows() {
    if !names_holders() {
        return;
    }
    let mut cluster = Nodes::start(3).unwrap();
    let (r1, r2, r3) = (
        resource("unwitnessed-set-1"),
        resource("unwitnessed-set-2"),
        resource("unwitnessed-set-3"),
    );
    let (q, _dead) = partial(&cluster, &[0, 1], None);
    let guard = q.lock_all([&r1, &r2], TTL).unwrap();
    cluster.servers[0].restart().unwrap();
    assert_eq!(support::get(&cluster.servers[0], r1.as_bytes()), None);
    for fair in [false, true] {
        let fresh = LockManager::builder()
            .nodes(cluster.urls())
            .node_timeout(Duration::from_millis(500))
            .fair(fair)
            .build()
            .unwrap();
        for set in [[&r1, &r2], [&r3, &r2]] {
            let err = match fresh.try_lock_all_for(set, TTL, Duration::from_millis(1500)) {
                Ok(_) => {
                    panic!("a fresh manager took {set:?}, which Q holds in part (fair {fair})")
                }
                Err(e) => e,
            };
            assert_not_counted(&err, &cluster.servers[0]);
            // Its keys there were cleaned up.
            for r in set {
                assert_eq!(support::get(&cluster.servers[0], r.as_bytes()), None);
            }
        }
    }
    assert!(guard.is_valid());
    let _ = guard.release();
    let fresh = support::manager(&cluster, Duration::from_millis(500));
    let guard = fresh.lock_all([&r1, &r2], TTL).unwrap();
    assert!(guard.failures().is_empty(), "{:?}", guard.failures());
}

/// The rule above for a read-write lock, both ways: Q holds R (a read
/// lock, then a write lock), granted by nodes 0 and 1; node 0 restarts
/// empty; a fresh manager (plain, then fair) asks all three for the
/// other side. A reader refused by a writer's key is answered the
/// writer's value; a writer refused by readers' mark (which names
/// nobody) asks those members for their readers, in one more round only
/// when the other yes votes make a quorum: their tokens name Q's
/// servers, so node 0's yes is not counted. (With the readers round
/// removed by hand, a fresh writer took R beside Q's valid read lock.)
#[test]
fn a_restart_no_manager_witnessed_does_not_vote_a_reader_or_writer_against_the_other_side() {
    if !names_holders() {
        return;
    }
    for q_reads in [true, false] {
        let mut cluster = Nodes::start(3).unwrap();
        let r = resource("unwitnessed-rw");
        let (q, _dead) = partial(&cluster, &[0, 1], None);
        let rw = q.rwlock(&r).unwrap();
        let read_guard;
        let write_guard;
        if q_reads {
            read_guard = Some(rw.read(TTL).unwrap());
            write_guard = None;
        } else {
            write_guard = Some(rw.write(TTL).unwrap());
            read_guard = None;
        }
        cluster.servers[0].restart().unwrap();
        assert_eq!(support::get(&cluster.servers[0], r.as_bytes()), None);
        for fair in [false, true] {
            let fresh = LockManager::builder()
                .nodes(cluster.urls())
                .node_timeout(Duration::from_millis(500))
                .fair(fair)
                .build()
                .unwrap();
            let other = fresh.rwlock(&r).unwrap();
            let wait = Duration::from_millis(1500);
            let err = if q_reads {
                match other.try_write_for(TTL, wait) {
                    Ok(_) => {
                        panic!("a fresh writer took R beside Q's valid read lock (fair {fair})")
                    }
                    Err(e) => e,
                }
            } else {
                match other.try_read_for(TTL, wait) {
                    Ok(_) => {
                        panic!("a fresh reader took R beside Q's valid write lock (fair {fair})")
                    }
                    Err(e) => e,
                }
            };
            assert_not_counted(&err, &cluster.servers[0]);
        }
        let valid = match (&read_guard, &write_guard) {
            (Some(g), _) => g.is_valid(),
            (_, Some(g)) => g.is_valid(),
            _ => unreachable!(),
        };
        assert!(valid, "Q's guard lapsed during the test: it proves nothing");
        drop(read_guard);
        drop(write_guard);
        // Nobody holds R: the fresh manager takes both sides at once.
        let fresh = support::manager(&cluster, Duration::from_millis(500));
        let rw = fresh.rwlock(&r).unwrap();
        let guard = rw.write(TTL).unwrap();
        assert!(guard.failures().is_empty(), "{:?}", guard.failures());
        guard.release().unwrap();
        let guard = rw.read(TTL).unwrap();
        drop(guard);
    }
}

/// The rule on an election's read: Q leads, elected by nodes 0 and 1
/// (node 2 unreachable for it); node 1 restarts empty; a fresh manager
/// (which never saw the restart) reads who leads. Node 0 shows Q, node 1
/// and node 2 nothing, and neither of their servers is one Q's value
/// names: their views are no answers, and the read fails rather than say
/// nobody leads while Q does. (Counted, they read "nobody leads": with
/// the rule removed by hand, `Ok(None)`.) Once Q resigns, the read says
/// nobody leads.
#[test]
fn a_read_does_not_count_a_restarted_servers_view_beside_a_leader_a_member_shows() {
    if !names_holders() {
        return;
    }
    let mut cluster = Nodes::start(3).unwrap();
    let e = resource("unwitnessed-election");
    let (q, _dead) = partial(&cluster, &[0, 1], None);
    let leadership = q.election(&e).unwrap().campaign(TTL).unwrap();
    cluster.servers[1].restart().unwrap();
    let fresh = support::manager(&cluster, Duration::from_millis(500));
    let read = fresh.election(&e).unwrap().leader();
    assert!(leadership.is_leader());
    match read {
        Ok(None) => panic!("a fresh reader read that nobody leads while Q does"),
        Ok(Some(leader)) => assert_eq!(leader.term(), leadership.term()),
        Err(err) => {
            assert_not_counted(&err, &cluster.servers[1]);
        }
    }
    // Node 1 forgot it and node 2 is out of Q's reach: the resignation
    // reaches node 0 alone, and says so.
    let _ = leadership.resign();
    assert_eq!(fresh.election(&e).unwrap().leader().unwrap(), None);
}

/// The rule on an operator's inspection: Q holds R, granted by nodes 0
/// and 1 (node 2 unreachable for it); node 1 restarts empty; a fresh
/// manager inspects R. Nodes 1 and 2 show nothing, and neither server is
/// one Q's value names: their views are no answers, and the inspection
/// fails (too few members to tell, as `lockrun --inspect`'s 69) rather
/// than report R free while Q holds it. (Counted, `held` was false: with
/// the rule removed by hand, it reported R free.)
#[test]
fn an_inspection_does_not_count_a_restarted_servers_view_beside_a_holder() {
    if !names_holders() {
        return;
    }
    let mut cluster = Nodes::start(3).unwrap();
    let r = resource("unwitnessed-inspect");
    let (q, _dead) = partial(&cluster, &[0, 1], None);
    let guard = q.lock(&r, TTL).unwrap();
    cluster.servers[1].restart().unwrap();
    let fresh = support::manager(&cluster, Duration::from_millis(500));
    match fresh.inspect(&r) {
        Ok(info) => assert!(
            info.held,
            "an inspection reported R free while Q holds it: {info:?}"
        ),
        Err(err) => {
            assert_not_counted(&err, &cluster.servers[1]);
        }
    }
    assert!(guard.is_valid());
    let _ = guard.release();
    assert!(!fresh.inspect(&r).unwrap().held);
}

/// The same rule leaves a member that kept the grant alone: Q holds R
/// and leads an election on three durable nodes (AOF, fsync always);
/// node 2 restarts (a new `run_id`, Q's key and record kept) and node 1
/// goes down. Node 2's server is not one Q's value names, but it shows
/// that value itself: counted, so that an inspection and a read from a
/// fresh manager still find Q (nodes 0 and 2 agree). (Discounting every
/// member the value does not name, both failed for as long as Q renewed.)
#[test]
fn a_member_that_kept_the_grant_under_a_new_run_still_counts_in_reads() {
    if !names_holders() {
        return;
    }
    let mut cluster = Nodes::persistent(3).unwrap();
    let (r, e) = (resource("kept-inspect"), resource("kept-election"));
    let q = support::manager(&cluster, Duration::from_millis(500));
    let guard = q.lock(&r, TTL).unwrap();
    let leadership = q.election(&e).unwrap().campaign(TTL).unwrap();
    cluster.servers[2].restart().unwrap();
    assert!(support::get(&cluster.servers[2], r.as_bytes()).is_some());
    cluster.servers[1].kill();
    let fresh = support::manager(&cluster, Duration::from_millis(500));
    let info = fresh.inspect(&r).unwrap();
    assert!(info.held, "{info:?}");
    let leader = fresh.election(&e).unwrap().leader().unwrap();
    assert_eq!(leader.map(|l| l.term()), Some(leadership.term()));
    assert!(guard.is_valid());
}

/// The rule above on a queued fair waiter's claims, which say who holds
/// the key they are refused: three nodes all hold a value for R whose
/// grant names servers other than these (as a holder's does whose
/// servers all restarted since), so a fair waiter is refused and queues.
/// The value goes from nodes 0 and 2 (by hand), stays on node 1 for a
/// while: the waiter's claims get yes from nodes 0 and 2 and node 1's
/// refusal names neither server, so no yes counts until that key is gone;
/// then the waiter takes R at its next claim. (Counted, the two yes votes
/// would grant R at once.)
#[test]
fn a_fair_claim_counts_no_yes_beside_a_holder_that_names_other_servers() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("claim-names");
    let foreign_for = Duration::from_millis(2500);
    for server in &cluster.servers {
        let _: () = redis::cmd("SET")
            .arg(&r)
            .arg("0123456789abcdef0123456789abcdef@host/1!deadbeef.feedface#1")
            .arg("PX")
            .arg(20_000)
            .query(&mut support::admin(server))
            .unwrap();
    }
    let waiter = LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let started = Instant::now();
    std::thread::scope(|s| {
        let taken = s.spawn(|| waiter.try_lock_for(&r, TTL, Duration::from_secs(15)));
        // Queued: its first attempt was refused everywhere.
        std::thread::sleep(Duration::from_millis(600));
        for i in [0, 2] {
            let _: () = redis::cmd("DEL")
                .arg(&r)
                .query(&mut support::admin(&cluster.servers[i]))
                .unwrap();
        }
        let _: () = redis::cmd("PEXPIRE")
            .arg(&r)
            .arg(foreign_for.as_millis() as u64)
            .query(&mut support::admin(&cluster.servers[1]))
            .unwrap();
        let cut = started.elapsed();
        let guard = taken.join().unwrap().unwrap();
        let waited = started.elapsed();
        assert!(
            waited >= cut + foreign_for - Duration::from_millis(100),
            "granted {waited:?} after the start, while node 1 still held a value naming other \
             servers (until {:?})",
            cut + foreign_for
        );
        // Granted by all three once the key was gone.
        assert!(guard.failures().is_empty(), "{:?}", guard.failures());
    });
}

/// The same through `lockrun`, a new manager at every run: as the one
/// that asks (it never met node 0 before its restart) and as the holder
/// (its first acquisition names the servers, having met them first).
#[cfg(feature = "cli")]
#[test]
fn lockrun_neither_takes_nor_loses_a_lock_to_a_restart_no_run_saw() {
    if !names_holders() {
        return;
    }
    use std::process::{Command, Stdio};
    let lockrun = |urls: &[String], wait: &str, r: &str, script: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockrun"));
        cmd.arg("--nodes")
            .arg(urls.join(","))
            .args(["--node-timeout", "500ms", "--ttl", "10s", "--wait", wait])
            .arg(r)
            .args(["--", "sh", "-c", script])
            .env_remove("REDLOCK_NODES")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    };
    // lockrun asks: Q holds R on nodes 0 and 1, node 0 restarts empty.
    let mut cluster = Nodes::start(3).unwrap();
    let r = resource("lockrun-unwitnessed");
    let (q, _dead) = partial(&cluster, &[0, 1], None);
    let guard = q.lock(&r, TTL).unwrap();
    cluster.servers[0].restart().unwrap();
    let out = lockrun(&cluster.urls(), "500ms", &r, "echo ran")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(out.stdout.is_empty(), "the command ran beside Q's lock");
    assert!(err.contains("its yes is not counted"), "{err}");
    assert!(guard.is_valid());
    drop(guard);

    // lockrun holds: nodes 0 and 1 (node 2 out of its reach) grant it R,
    // node 0 restarts empty, a manager that never met node 0 asks.
    let mut cluster = Nodes::start(3).unwrap();
    let (_gone, dead) = unreachable();
    let urls = [cluster.servers[0].url(), cluster.servers[1].url(), dead];
    let ran = scratch_file("lockrun-holds");
    let mut holder = lockrun(&urls, "0", &r, &format!("touch {ran}; sleep 6"))
        .spawn()
        .unwrap();
    let started = wait_for(Duration::from_secs(10), || {
        std::path::Path::new(&ran).exists()
    });
    assert!(started.is_some(), "lockrun did not take the lock");
    cluster.servers[0].restart().unwrap();
    let fresh = support::manager(&cluster, Duration::from_millis(500));
    let err = match fresh.lock(&r, TTL) {
        Ok(_) => panic!("a fresh manager took the lock lockrun holds"),
        Err(e) => e,
    };
    assert!(err.to_string().contains("its yes is not counted"), "{err}");
    let _ = holder.kill();
    let _ = holder.wait();
}

/// A fresh path under the temporary directory.
#[cfg(feature = "cli")]
fn scratch_file(name: &str) -> String {
    let path = std::env::temp_dir().join(format!("redlock-sync-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path.to_string_lossy().into_owned()
}
