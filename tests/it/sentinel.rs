//! Redis Sentinel groups as members (`redis-sentinel://...#master`): the
//! master asked of the Sentinels, a majority of them deciding; a
//! failover followed; a promoted replica that lacks a grant gives no
//! second holder.

use std::time::{Duration, Instant};

use redlock_sync::{LockManager, Wait};

use crate::support::sentinel::{Group, MASTER};
use crate::support::{Nodes, admin, get, resource};

/// A manager over `urls`, with a node timeout a loaded machine keeps
/// (a group's resolution asks three Sentinels within it).
fn manager(urls: Vec<String>) -> LockManager {
    LockManager::builder()
        .nodes(urls)
        .node_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

#[test]
fn a_sentinel_member_locks_on_its_master_and_follows_a_failover() {
    let _heavy = crate::support::heavy();
    let mut group = Group::start().unwrap();
    let dlm = manager(vec![group.url()]);
    let name = resource("sentinel-follow");
    let first = group.agreed_master(Duration::from_secs(5)).unwrap();
    let ttl = Duration::from_secs(2);
    let guard = dlm.lock(&name, ttl).unwrap();
    assert!(get(group.server(first), name.as_bytes()).is_some());
    guard.release().unwrap();
    group.until_watched();

    let promoted = group.fail_over(first).expect("a failover");
    // The manager saw its member's server change: the new master is kept
    // out for its longest TTL (2 s, from its first connection there),
    // then votes, on the new master.
    let start = Instant::now();
    let guard = dlm
        .lock_with(&name, ttl, Wait::For(Duration::from_secs(20)))
        .unwrap_or_else(|e| panic!("no lock on the promoted master: {e}"));
    assert!(
        get(group.server(promoted), name.as_bytes()).is_some(),
        "the key is not on the new master ({promoted})"
    );
    assert!(
        start.elapsed() >= ttl,
        "not kept out: {:?}",
        start.elapsed()
    );
    drop(guard);
}

#[test]
fn a_promoted_replica_that_lacks_a_grant_gives_no_second_holder() {
    let why = "a refusal names its holder from Redis 7.0 on (SET ... NX GET)";
    if crate::support::server::skipped_before(7, 0, why) {
        return;
    }
    let _heavy = crate::support::heavy();
    let mut group = Group::start().unwrap();
    let mut nodes = Nodes::start(2).unwrap();
    let mut urls = vec![group.url()];
    urls.extend(nodes.urls());
    let a = manager(urls.clone());
    let name = resource("sentinel-lagging");
    // A holds the lock granted by the group's master and the first node;
    // the second node, paused, never saw it.
    let first = group.agreed_master(Duration::from_secs(5)).unwrap();
    nodes[1].pause();
    let held = a.try_lock(&name, Duration::from_secs(30)).unwrap();
    nodes[1].resume();
    // The replicas lag: A's key never reached them.
    for server in group.servers.iter().filter(|s| s.port() != first) {
        let mut con = admin(server);
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("replica-read-only")
            .arg("no")
            .query(&mut con)
            .unwrap();
        let _: () = redis::cmd("DEL").arg(&name).query(&mut con).unwrap();
    }
    group.until_watched();
    let promoted = group.fail_over(first).expect("a failover");
    assert!(get(group.server(promoted), name.as_bytes()).is_none());

    // B never met the group: the promoted master says yes, and so does the
    // second node; the first refuses with A's value, which names the
    // servers A asked, not the promoted one.
    let b = manager(urls);
    let until = Instant::now() + Duration::from_secs(3);
    let mut held_back = 0;
    while Instant::now() < until {
        match b.try_lock(&name, Duration::from_secs(30)) {
            Ok(second) => assert!(
                !held.is_valid(),
                "two holders: {} while A holds until {:?}",
                second.fencing_token().unwrap_or(0),
                held.validity()
            ),
            // The promoted master's yes, seen and not counted: the rule at
            // work (not a member that never answered).
            Err(e) if e.to_string().contains("is not counted") => held_back += 1,
            Err(_) => {}
        }
    }
    assert!(held_back > 0, "the promoted master's yes was never seen");
    assert!(held.is_valid());
    // A's release finds its key on the first node only: the others lost it.
    match held.release() {
        Err(redlock_sync::Error::NotHeld { lost_on, .. }) => assert_eq!(lost_on, 2),
        other => panic!("A's release: {other:?}"),
    }
}

#[test]
fn with_replica_acks_a_failover_keeps_the_holders_key_on_the_promoted_master() {
    let _heavy = crate::support::heavy();
    let mut group = Group::start().unwrap();
    // The group alone (replica_acks applies to every member: plain nodes
    // have no replica to acknowledge). Both replicas acknowledge every
    // grant: whichever is promoted has it.
    let urls = vec![group.url()];
    let a = LockManager::builder()
        .nodes(urls.clone())
        .node_timeout(Duration::from_secs(1))
        .replica_acks(2)
        .build()
        .unwrap();
    let name = resource("sentinel-acked");
    let first = group.agreed_master(Duration::from_secs(5)).unwrap();
    // (Right after the start the replicas may still be syncing: WAIT then
    // counts none, and the attempt fails until they are.)
    let held = a
        .lock_with(
            &name,
            Duration::from_secs(30),
            Wait::For(Duration::from_secs(20)),
        )
        .unwrap();
    group.until_watched();
    let promoted = group.fail_over(first).expect("a failover");
    assert!(
        get(group.server(promoted), name.as_bytes()).is_some(),
        "the acknowledged grant is not on the promoted master"
    );
    // A manager that never met the group is refused by the promoted
    // master itself, which has A's key.
    let b = manager(urls);
    let e = b
        .try_lock(&name, Duration::from_secs(30))
        .expect_err("a second holder");
    assert!(e.is_taken(), "{e}");
    assert!(held.is_valid());
}

#[test]
fn a_majority_of_the_sentinels_decides_and_a_minority_is_not_enough() {
    let _heavy = crate::support::heavy();
    let mut group = Group::start().unwrap();
    let name = resource("sentinel-majority");
    // One Sentinel down: two of three still agree.
    group.sentinels[2].kill();
    let dlm = manager(vec![group.url()]);
    drop(dlm.try_lock(&name, Duration::from_secs(1)).unwrap());
    let report = &dlm.check()[0];
    assert_eq!(report.verdict, redlock_sync::Verdict::Warning, "{report:#}");
    let full = format!("{report:#}");
    assert!(full.contains("1 of 3 Sentinels do not answer"), "{full}");
    // Two down: one Sentinel's word is not the group's. A new manager
    // must ask (the first one's connection is still open).
    group.sentinels[1].kill();
    let report = &dlm.check()[0];
    assert_eq!(report.verdict, redlock_sync::Verdict::Unsafe, "{report:#}");
    assert!(report.to_string().contains("no majority"), "{report}");
    let fresh = manager(vec![group.url()]);
    let e = fresh
        .try_lock(&name, Duration::from_secs(1))
        .expect_err("one Sentinel of three decided");
    let text = e.to_string();
    assert!(
        text.contains(MASTER) && text.contains("no majority of the 3"),
        "{text}"
    );
}

#[test]
fn every_shape_and_lockrun_work_on_a_sentinel_member() {
    let _heavy = crate::support::heavy();
    let group = Group::start().unwrap();
    let dlm = manager(vec![group.url()]);
    let ttl = Duration::from_secs(5);
    let name = resource("sentinel-shapes");
    let set = [format!("{name}:a"), format!("{name}:b")];
    dlm.try_lock_all(&set, ttl).unwrap().release().unwrap();
    let sem = dlm.semaphore(format!("{name}:sem"), 2).unwrap();
    let (p1, p2) = (sem.try_acquire(ttl).unwrap(), sem.try_acquire(ttl).unwrap());
    assert!(sem.try_acquire(ttl).is_err(), "a third permit of two");
    drop((p1, p2));
    let rw = dlm.rwlock(format!("{name}:rw")).unwrap();
    let (r1, r2) = (rw.try_read(ttl).unwrap(), rw.try_read(ttl).unwrap());
    assert!(rw.try_write(ttl).is_err(), "a writer beside readers");
    drop((r1, r2));
    rw.try_write(ttl).unwrap().release().unwrap();
    let election = dlm.election(format!("{name}:el")).unwrap();
    let leader = election.try_campaign(ttl).unwrap();
    assert!(leader.term() > 0);
    drop(leader);
    // `check()` reports the group as its master, by the group's name,
    // with its Sentinels and its master's replication.
    let report = dlm.check();
    assert_eq!(report.len(), 1);
    assert!(report[0].reachable, "{:?}", report[0]);
    assert!(report[0].node.starts_with(MASTER), "{}", report[0].node);
    assert_eq!(report[0].role.as_deref(), Some("master"));
    let found = report[0].sentinels.clone().expect("the group's report");
    let read = (found.given, found.answered, found.known, found.quorum);
    assert_eq!(read, (3, 3, Some(3), Some(2)), "{found:?}");
    assert_eq!(found.replicas, Some(2), "{found:?}");
    assert_eq!(found.min_replicas_to_write, Some(0), "{found:?}");
    let line = report[0].to_string();
    assert!(
        line.contains("sentinels 3/3 (quorum 2), 2 replicas"),
        "{line}"
    );
    let full = format!("{:#}", report[0]);
    assert!(full.contains("min-replicas-to-write 0"), "{full}");
    // Two of the three Sentinels given: their majority may be the group's
    // minority, which is said.
    let two = group
        .url()
        .replacen(&format!("127.0.0.1:{},", group.sentinels[0].port), "", 1);
    let report = manager(vec![two]).check();
    let full = format!("{:#}", report[0]);
    assert!(
        full.contains("2 of the group's 3 Sentinels given"),
        "{full}"
    );
    // lockrun takes the group in --nodes, its commas and all.
    let lockrun = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_lockrun"))
            .arg("--nodes")
            .arg(group.url())
            .args(["--node-timeout", "500ms"])
            .args(args)
            .env_remove("REDLOCK_NODES")
            .output()
            .unwrap()
    };
    let ran = lockrun(&[&name, "--", "true"]);
    assert!(
        ran.status.success(),
        "lockrun on a Sentinel member: {ran:?}"
    );
    let checked = lockrun(&["--check"]);
    let said = String::from_utf8_lossy(&checked.stdout);
    assert!(said.contains("sentinels 3/3"), "{said}");
    // An operator's --inspect and --force-unlock reach the group's master.
    let held = dlm.try_lock(&name, Duration::from_secs(30)).unwrap();
    let inspected = lockrun(&["--inspect", &name]);
    assert_eq!(inspected.status.code(), Some(0), "{inspected:?}");
    let forced = lockrun(&["--force-unlock", &name]);
    assert_eq!(forced.status.code(), Some(0), "{forced:?}");
    let inspected = lockrun(&["--inspect", &name]);
    assert_eq!(inspected.status.code(), Some(1), "{inspected:?}");
    manager(vec![group.url()])
        .try_lock(&name, ttl)
        .expect("free after --force-unlock")
        .release()
        .unwrap();
    drop(held);
}

#[test]
fn a_sentinel_that_names_another_server_is_outvoted() {
    let _heavy = crate::support::heavy();
    let mut group = Group::start().unwrap();
    // One of the three Sentinels given watches another server under the
    // same name (a misconfigured or stale Sentinel): it answers at once,
    // with an address that is not the group's master.
    let other = crate::support::Server::start().unwrap();
    // First in the URL: the first answer read is its.
    group.sentinels[0].kill();
    group.sentinels[0] = crate::support::sentinel::Sentinel::start(MASTER, other.port()).unwrap();
    assert_eq!(group.sentinels[0].master_port(MASTER), Some(other.port()));
    let master = group.sentinels[1].master_port(MASTER).unwrap();
    let dlm = manager(vec![group.url()]);
    let name = resource("sentinel-liar");
    // The liar answers first: the others, stopped, answer 300 ms later
    // (within the 1 s node timeout).
    group.sentinels[1].pause(true);
    group.sentinels[2].pause(true);
    let resume = std::thread::spawn({
        let pids: Vec<u32> = group.sentinels[1..]
            .iter()
            .filter_map(|s| s.pid())
            .collect();
        move || {
            std::thread::sleep(Duration::from_millis(300));
            for pid in pids {
                crate::support::server::signal("-CONT", pid);
            }
        }
    });
    let guard = dlm.try_lock(&name, Duration::from_secs(5));
    resume.join().unwrap();
    let guard = guard.unwrap();
    assert!(get(group.server(master), name.as_bytes()).is_some());
    assert!(
        get(&other, name.as_bytes()).is_none(),
        "the liar's server voted"
    );
    drop(guard);
}

#[test]
fn sentinels_that_require_a_password_are_asked_with_theirs() {
    let _heavy = crate::support::heavy();
    let group = Group::start_with(Some("sentinel-pw")).unwrap();
    let name = resource("sentinel-auth");
    let ttl = Duration::from_secs(2);
    let with = |query: &str| group.url().replace('#', &format!("?{query}#"));
    // Without their password the Sentinels tell nothing, and that is said.
    let e = manager(vec![group.url()])
        .try_lock(&name, ttl)
        .expect_err("the Sentinels told the master without their password");
    assert!(e.to_string().contains("NOAUTH"), "{e}");
    // A wrong one: refused, said, and never shown.
    let e = manager(vec![with("sentinel_password=wrong-pw")])
        .try_lock(&name, ttl)
        .expect_err("the Sentinels took a wrong password");
    let text = e.to_string();
    assert!(
        text.contains("AUTH") && !text.contains("wrong-pw"),
        "{text}"
    );
    // With theirs: the master's lock, and the watchers listen (they
    // authenticate too), so that a failover is followed.
    let dlm = manager(vec![with("sentinel_password=sentinel-pw")]);
    let master = group.agreed_master(Duration::from_secs(5)).unwrap();
    let mut group = group;
    let guard = dlm.try_lock(&name, ttl).unwrap();
    assert!(get(group.server(master), name.as_bytes()).is_some());
    guard.release().unwrap();
    group.until_watched();
}

#[test]
fn one_group_given_twice_is_refused() {
    for (a, b) in [
        (
            "redis-sentinel://127.0.0.1:1,127.0.0.1:2#m",
            "redis-sentinel://127.0.0.1:2#m",
        ),
        (
            "redis-sentinel://127.0.0.1:1#m",
            "valkey-sentinel://127.0.0.1:1/3#m",
        ),
    ] {
        let e = LockManager::builder()
            .sentinel(a)
            .sentinel(b)
            .build()
            .expect_err("one group, two votes");
        assert!(e.is_invalid(), "{e}");
        assert!(e.to_string().contains("given twice"), "{e}");
    }
    // Two groups of one master's name on separate Sentinels are two.
    LockManager::builder()
        .sentinel("redis-sentinel://127.0.0.1:1#m")
        .sentinel("redis-sentinel://127.0.0.1:2#m")
        .build()
        .unwrap();
}

/// Measures (not a check): the uncontended cycle on a group against the
/// same master given as a node, and the time from the master's death
/// (SIGKILL) to the member's vote again, for a manager that never met the
/// group and for one that knew the old master, with and without
/// `replica_acks(1)`. Run: `cargo test --release --all-features --test it
/// sentinel::measure -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: see its docs for the command"]
fn measure_cycle_and_failover_to_vote() {
    let _heavy = crate::support::heavy();
    let group = Group::start().unwrap();
    let master = group.agreed_master(Duration::from_secs(5)).unwrap();
    let cycle = |dlm: &LockManager, name: &str| {
        let start = Instant::now();
        for _ in 0..2000 {
            dlm.lock(name, Duration::from_secs(5))
                .unwrap()
                .release()
                .unwrap();
        }
        start.elapsed() / 2000
    };
    let by_group = manager(vec![group.url()]);
    let by_node = manager(vec![format!("redis://127.0.0.1:{master}")]);
    for round in 0..3 {
        let (g, n) = (cycle(&by_group, "m:g"), cycle(&by_node, "m:n"));
        println!(
            "round {round}: group {g:?}, node {n:?}, group / node {:.3}",
            g.as_secs_f64() / n.as_secs_f64()
        );
    }
    drop((by_group, by_node));
    for acks in [0, 1] {
        let mut group = Group::start().unwrap();
        let url = group.url();
        let build = || {
            let b = LockManager::builder()
                .node(&url)
                .node_timeout(Duration::from_secs(1));
            match acks {
                0 => b.build().unwrap(),
                n => b.replica_acks(n).build().unwrap(),
            }
        };
        let seen = build();
        // (Right after the start the replicas may still be syncing: WAIT
        // then counts none.)
        let first_lock = seen.lock_with(
            "m:seen",
            Duration::from_secs(2),
            Wait::For(Duration::from_secs(20)),
        );
        drop(first_lock.unwrap());
        group.until_watched();
        let first = group.agreed_master(Duration::from_secs(5)).unwrap();
        let killed = Instant::now();
        group.server(first).kill();
        let (mut fresh_at, mut seen_at) = (None, None);
        while (fresh_at.is_none() || seen_at.is_none())
            && killed.elapsed() < Duration::from_secs(60)
        {
            if fresh_at.is_none() && build().try_lock("m:fresh", Duration::from_secs(2)).is_ok() {
                fresh_at = Some(killed.elapsed());
            }
            if seen_at.is_none() {
                match seen.try_lock("m:seen", Duration::from_secs(2)) {
                    Ok(_) => seen_at = Some(killed.elapsed()),
                    Err(e) => {
                        if std::env::var("MEASURE_TRACE").is_ok()
                            && e.to_string().contains(" 0.0s ago")
                        {
                            let clients: Vec<String> = group
                                .servers
                                .iter()
                                .filter(|s| s.pid().is_some())
                                .map(|s| {
                                    let list: String = redis::cmd("CLIENT")
                                        .arg("LIST")
                                        .query(&mut admin(s))
                                        .unwrap_or_default();
                                    let role = crate::support::sentinel::role_field(s, "role")
                                        .unwrap_or_default();
                                    format!(
                                        "{}:{role}:{}",
                                        s.port(),
                                        list.lines()
                                            .filter(|l| l.contains("lib-name=redlock-sync"))
                                            .count()
                                    )
                                })
                                .collect();
                            let said: Vec<Option<u16>> = group
                                .sentinels
                                .iter()
                                .map(|s| s.master_port(MASTER))
                                .collect();
                            println!(
                                "{:?} seen: {e} | {clients:?} sentinels say {said:?}",
                                killed.elapsed()
                            );
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        println!(
            "replica_acks({acks}): a fresh manager votes again {fresh_at:?} after the kill, \
             one that knew the old master {seen_at:?} (its longest TTL: 2 s)"
        );
    }
}
