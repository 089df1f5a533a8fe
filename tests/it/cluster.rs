//! Redis Cluster members: every key of a lock in the resource's slot on
//! the master that owns it, redirects followed under slot moves, a killed
//! master's slots found on the promoted replica, waiters woken with
//! sharded pub/sub, mixed quorums of nodes and clusters, and the
//! configuration mistakes said plainly. Real clusters of `redis-server`
//! processes (Redis 7.0+ or Valkey; skipped, saying why, on older ones).

use crate::support;

use std::thread;
use std::time::{Duration, Instant};

use redlock_sync::{Error, LockManager, NodeErrorKind, fence_key, release_channel};
use support::redis_cluster::{RedisCluster, cmd, keyslot, shard_subscribers, unsupported};
use support::{Nodes, Server, admin, assert_woken, resource, timed, wait_for};

const TTL: Duration = Duration::from_secs(10);

pub(crate) fn skip() -> bool {
    match unsupported() {
        Some(why) => {
            eprintln!("{why}");
            true
        }
        None => false,
    }
}

/// A manager whose one member is `cluster`.
pub(crate) fn manager(cluster: &RedisCluster) -> LockManager {
    LockManager::builder()
        .cluster(cluster.seeds())
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::ZERO)
        .build()
        .unwrap()
}

/// A manager whose members are `nodes` and `cluster`.
pub(crate) fn mixed(nodes: &Nodes, cluster: &RedisCluster) -> LockManager {
    LockManager::builder()
        .nodes(nodes.urls())
        .cluster(cluster.seeds())
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::ZERO)
        .build()
        .unwrap()
}

/// A manager whose one member is `cluster`, pausing 60 s between
/// attempts: a waiter acquiring within a second was woken.
fn waiter(cluster: &RedisCluster) -> LockManager {
    LockManager::builder()
        .cluster(cluster.seeds())
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::from_secs(60))
        .build()
        .unwrap()
}

/// Creates the user `locker` (password `s3cret`) with the ACL `rule` on
/// every server of `cluster`; returns seeds that log in as it.
fn locker(cluster: &RedisCluster, rule: &str) -> Vec<String> {
    for s in cluster.servers() {
        let mut c = redis::cmd("ACL");
        c.arg("SETUSER").arg("locker");
        for part in rule.split_whitespace() {
            c.arg(part);
        }
        let _: () = c.query(&mut admin(s)).unwrap();
    }
    cluster
        .masters
        .iter()
        .map(|s| format!("redis://locker:s3cret@127.0.0.1:{}", s.port()))
        .collect()
}

/// What `server` holds at `key`; `None` when absent or not its slot.
fn get(server: &Server, key: &[u8]) -> Option<Vec<u8>> {
    let mut con = admin(server);
    redis::cmd("GET").arg(key).query(&mut con).ok().flatten()
}

/// `key` as `server` has it, asked after `first` on the same connection
/// (`ASKING`: what an importing server holds; `READONLY`: what a replica
/// holds).
fn get_after(server: &Server, first: &str, key: &[u8]) -> Option<Vec<u8>> {
    let mut con = admin(server);
    let ((), value): ((), Option<Vec<u8>>) = redis::pipe()
        .cmd(first)
        .cmd("GET")
        .arg(key)
        .query(&mut con)
        .unwrap();
    value
}

/// What an importing `server` holds at `key` (asked after `ASKING`).
fn get_asking(server: &Server, key: &[u8]) -> Option<Vec<u8>> {
    get_after(server, "ASKING", key)
}

/// `key` as the replica `server` has it (`READONLY`, then `GET`).
fn read_replica(server: &Server, key: &[u8]) -> Option<Vec<u8>> {
    get_after(server, "READONLY", key)
}

/// Waits until `server` has a sharded subscriber for the release channel
/// of `resource` (a waiter's listener), asserting it happens.
fn until_shard_listening(server: &Server, resource: &[u8]) {
    let channel = release_channel(resource);
    let subscribed = wait_for(Duration::from_secs(10), || {
        shard_subscribers(server, &channel) == 1
    });
    assert!(
        subscribed.is_some(),
        "no sharded subscriber on {}",
        server.port()
    );
}

fn pttl(server: &Server, key: &[u8]) -> i64 {
    let mut con = admin(server);
    redis::cmd("PTTL").arg(key).query(&mut con).unwrap_or(-3)
}

#[test]
fn names_on_every_shard_and_with_hash_tags_lock_on_their_slots_master() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let dlm = manager(&cluster);
    assert_eq!(dlm.quorum(), 1);
    let mut names: Vec<Vec<u8>> = (0..30).map(|i| format!("job:{i}").into_bytes()).collect();
    names.extend(
        [
            &b"{user:42}:profile"[..],
            b"{user:42}:cart",
            b"a{b",
            b"a{}b",
            b"}{",
            b"\xff\x00bin",
        ]
        .map(<[u8]>::to_vec),
    );
    let mut shards = [0usize; 3];
    for name in &names {
        // The server agrees: the counter and the channel share the slot.
        let slot = keyslot(&cluster.masters[0], name);
        assert_eq!(keyslot(&cluster.masters[0], &fence_key(name)), slot);
        assert_eq!(keyslot(&cluster.masters[0], &release_channel(name)), slot);
        let owner = cluster.master_of(name);
        shards[owner] += 1;
        let guard = dlm
            .lock(name, TTL)
            .unwrap_or_else(|e| panic!("{name:?}: {e}"));
        let master = &cluster.masters[owner];
        assert_eq!(
            get(master, name).as_deref(),
            Some(guard.token()),
            "{name:?}"
        );
        assert!(pttl(master, &fence_key(name)) > 0, "{name:?}: counter");
        let token = guard.fencing_token().unwrap();
        guard.release().unwrap();
        assert_eq!(get(master, name), None);
        // Tokens keep growing on the member.
        let again = dlm.lock(name, TTL).unwrap();
        assert!(again.fencing_token().unwrap() > token);
    }
    assert!(
        shards.iter().all(|&n| n > 0),
        "names on every shard: {shards:?}"
    );
    // Hash-tagged names share their tag's slot (and master).
    assert_eq!(
        cluster.master_of(b"{user:42}:profile"),
        cluster.master_of(b"{user:42}:cart")
    );
}

#[test]
fn a_slot_moved_under_a_held_lock_keeps_extend_and_release_working() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let dlm = manager(&cluster);
    let unfenced = LockManager::builder()
        .cluster(cluster.seeds())
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::ZERO)
        .fencing(false)
        .build()
        .unwrap();
    let r = resource("moving");
    let slot = keyslot(&cluster.masters[0], r.as_bytes());
    let from = cluster.master_of(r.as_bytes());
    let to = (from + 1) % 3;
    let mut guard = dlm.lock(&r, TTL).unwrap();
    // Other resources in the same slot, locked while the slot is being
    // migrated: their keys are not on the source.
    let other = format!("{{{r}}}:other");
    let plain = format!("{{{r}}}:plain");
    assert_eq!(keyslot(&cluster.masters[0], other.as_bytes()), slot);
    let mut during = None;
    cluster.move_slot(slot, from, to, || {
        // Without fencing the lock is one key: ASK is followed and the key
        // lands on the target.
        let g = unfenced.lock(&plain, TTL).unwrap();
        assert_eq!(
            get_asking(&cluster.masters[to], plain.as_bytes()).as_deref(),
            Some(g.token())
        );
        during = Some(g);
        // With fencing it is two keys: taken once the migration is over
        // (said plainly), never a counter on one master and the lock on
        // the other.
        let err = dlm.lock(&other, TTL).unwrap_err();
        assert_eq!(err.failures()[0].kind(), NodeErrorKind::Cluster, "{err}");
        assert!(err.to_string().contains("being migrated"), "{err}");
        assert_eq!(get_asking(&cluster.masters[to], other.as_bytes()), None);
        assert_eq!(
            get_asking(&cluster.masters[to], &fence_key(&other)),
            None,
            "no counter created on the target"
        );
        // The held lock's keys are all still on the source: it extends.
        guard.extend(TTL).unwrap();
    });
    // The slot has moved: MOVED is followed, and the map is refreshed.
    assert_eq!(cluster.master_of(r.as_bytes()), to);
    guard.extend(TTL).unwrap();
    assert_eq!(
        get(&cluster.masters[to], r.as_bytes()).as_deref(),
        Some(guard.token())
    );
    guard.release().unwrap();
    during.unwrap().release().unwrap();
    assert_eq!(get(&cluster.masters[to], r.as_bytes()), None);
    assert_eq!(get(&cluster.masters[to], plain.as_bytes()), None);
    // New locks land on the new owner, with fencing too.
    let again = dlm.lock(&r, TTL).unwrap();
    assert_eq!(
        get(&cluster.masters[to], r.as_bytes()).as_deref(),
        Some(again.token())
    );
    let g = dlm.lock(&other, TTL).unwrap();
    assert_eq!(
        get(&cluster.masters[to], other.as_bytes()).as_deref(),
        Some(g.token())
    );
}

#[test]
fn a_killed_master_is_bounded_and_its_replica_keeps_the_lock_after_promotion() {
    if skip() {
        return;
    }
    // A master is failed over after 2 s unreachable, not 1 s: a loaded
    // machine must not fail one over on its own before the kill.
    let mut cluster = RedisCluster::start_with(3, 3, || {
        vec!["--cluster-node-timeout".into(), "2000".into()]
    })
    .unwrap();
    let timeout = Duration::from_millis(200);
    let dlm = LockManager::builder()
        .cluster(cluster.seeds())
        .node_timeout(timeout)
        .retry(1, Duration::ZERO)
        .build()
        .unwrap();
    let r = resource("failover");
    let mut guard = dlm.lock(&r, TTL).unwrap();
    let owner = cluster.master_of(r.as_bytes());
    // A second lock on the same master, to be dropped while it is dead.
    let same = (0..)
        .map(|i| format!("{r}:{i}"))
        .find(|n| cluster.master_of(n.as_bytes()) == owner)
        .unwrap();
    let doomed = dlm.lock(&same, TTL).unwrap();
    // Replication is asynchronous: the replica keeps the lock only if it
    // has it when its master dies (replica_acks makes the acquisition
    // wait for that). Wait until the owner's replica holds both tokens
    // (asked of it: a `WAIT 1` on a connection of its own proves nothing,
    // since WAIT counts from that connection's own last write), and for
    // the owner to be the slot's master still, then kill it.
    cluster.wait_ok().unwrap();
    let replica = &cluster.replicas[owner];
    let copied = wait_for(Duration::from_secs(10), || {
        read_replica(replica, r.as_bytes()).as_deref() == Some(guard.token())
            && read_replica(replica, same.as_bytes()).as_deref() == Some(doomed.token())
    });
    assert!(copied.is_some(), "the replica holds both locks");
    assert_eq!(
        cluster.master_of(r.as_bytes()),
        owner,
        "no failover before the kill"
    );
    cluster.masters[owner].kill();
    let ((), took) = timed(|| drop(doomed));
    assert!(
        took < timeout + Duration::from_millis(300),
        "drop took {took:?}"
    );
    let (result, took) = timed(|| guard.extend(TTL));
    assert!(result.is_err());
    assert!(
        took < timeout + Duration::from_millis(300),
        "extend took {took:?}"
    );
    // Once a replica is promoted (the map refreshed on the failures), the
    // lock is there: it extends and releases, and others find it taken.
    let started = Instant::now();
    let mut last = None;
    // Each new error, with when it was first seen: on a failure, the
    // story of the failover as the lock saw it.
    let mut seen: Vec<(Duration, String)> = Vec::new();
    let back = wait_for(Duration::from_secs(30), || match guard.extend(TTL) {
        Ok(()) => true,
        Err(e) => {
            let e = e.to_string();
            if seen.last().is_none_or(|(_, l)| *l != e) {
                seen.push((started.elapsed(), e.clone()));
            }
            last = Some(e);
            false
        }
    });
    assert!(
        back.is_some(),
        "no extend after the failover: {last:?}\nerrors seen: {seen:#?}\n{}",
        cluster.describe()
    );
    eprintln!(
        "extended again {:?} after the kill ({last:?})",
        started.elapsed()
    );
    assert!(
        cluster.master_of(r.as_bytes()) >= 3,
        "a replica serves the slot now"
    );
    assert!(matches!(dlm.lock(&r, TTL), Err(Error::Taken { .. })));
    guard.release().unwrap();
    dlm.lock(&r, TTL).unwrap().release().unwrap();
}

#[test]
fn standalone_nodes_and_a_cluster_make_one_quorum() {
    if skip() {
        return;
    }
    let mut nodes = Nodes::start(2).unwrap();
    let cluster = RedisCluster::start(3, 0).unwrap();
    let dlm = mixed(&nodes, &cluster);
    assert_eq!(dlm.quorum(), 2);
    let names: Vec<&str> = dlm.nodes().collect();
    assert_eq!(names.len(), 3);
    assert!(names[2].starts_with("cluster 127.0.0.1:"), "{names:?}");
    let r = resource("mixed");
    let guard = dlm.lock(&r, TTL).unwrap();
    let first = guard.fencing_token().unwrap();
    for s in &nodes.servers {
        assert_eq!(
            support::get(s, r.as_bytes()).as_deref(),
            Some(guard.token())
        );
    }
    let owner = cluster.master_of(r.as_bytes());
    assert_eq!(
        get(&cluster.masters[owner], r.as_bytes()).as_deref(),
        Some(guard.token())
    );
    guard.release().unwrap();
    // One standalone node down: the other and the cluster still make 2.
    nodes.servers[0].kill();
    let guard = dlm.lock(&r, TTL).unwrap();
    assert!(guard.fencing_token().unwrap() > first);
    guard.release().unwrap();
    // Both down: the cluster alone is one vote of three.
    nodes.servers[1].kill();
    match dlm.lock(&r, TTL) {
        Err(e @ Error::NoQuorum { .. }) => {
            assert_eq!(e.failures().len(), 2, "{e}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_waiter_on_a_cluster_is_woken_by_the_release_with_sharded_pubsub() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let holder = manager(&cluster);
    let waiter = waiter(&cluster);
    let r = resource("cluster-woken");
    let owner = &cluster.masters[cluster.master_of(r.as_bytes())];
    let guard = holder.lock(&r, TTL).unwrap();
    let got = assert_woken(
        || waiter.try_lock_for(&r, TTL, Duration::from_secs(120)),
        // The waiter's listener subscribes on the slot's master.
        || until_shard_listening(owner, r.as_bytes()),
        || guard.release().unwrap(),
    );
    assert!(got.is_ok(), "{got:?}");
}

#[test]
fn a_cluster_node_given_as_a_plain_node_says_to_use_cluster() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let dlm = LockManager::builder()
        .node(cluster.masters[0].url())
        .retry(1, Duration::ZERO)
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    // A name whose slot another master owns.
    let name = (0..)
        .map(|i| format!("plain:{i}"))
        .find(|n| cluster.master_of(n.as_bytes()) != 0)
        .unwrap();
    let err = dlm.lock(&name, TTL).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("Redis Cluster node"), "{msg}");
    assert!(msg.contains("Builder::cluster"), "{msg}");
    // The same for a name whose slot that node owns: never a plain vote.
    let own = (0..)
        .map(|i| format!("plain:{i}"))
        .find(|n| cluster.master_of(n.as_bytes()) == 0)
        .unwrap();
    let err = dlm.lock(&own, TTL).unwrap_err();
    assert!(err.to_string().contains("in cluster mode"), "{err}");
    assert_eq!(get(&cluster.masters[0], own.as_bytes()), None, "cleaned up");
}

#[test]
fn the_same_cluster_twice_is_refused_at_first_contact() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let other = Server::start().unwrap();
    let dlm = LockManager::builder()
        .cluster([cluster.masters[0].url()])
        .cluster([cluster.masters[1].url()])
        .node(other.url())
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::ZERO)
        .build()
        .unwrap();
    let r = resource("twice");
    match dlm.lock(&r, TTL) {
        Err(Error::InvalidConfig { reason, .. }) => {
            assert!(reason.contains("same Redis Cluster"), "{reason}");
            let (a, b) = (cluster.masters[0].port(), cluster.masters[1].port());
            assert!(
                reason.contains(&a.to_string()) && reason.contains(&b.to_string()),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Nothing is left behind, and the manager keeps refusing.
    assert!(matches!(
        dlm.lock(&r, TTL),
        Err(Error::InvalidConfig { .. })
    ));
    assert_eq!(support::get(&other, r.as_bytes()), None);
    // A seed given twice is refused at once.
    let err = LockManager::builder()
        .cluster([cluster.masters[0].url()])
        .node(cluster.masters[0].url())
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("given twice"), "{err}");
    let _: String = cmd(&cluster.masters[0], &["PING"]);
}

/// The manual's ACL rule, with its cluster additions, runs the whole
/// lifecycle on a cluster member: slot map, lock with fencing, extend,
/// waking through sharded pub/sub, release.
#[test]
fn the_readme_acl_rule_with_its_cluster_additions_is_enough() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let rule = "on >s3cret resetkeys ~lock:* resetchannels &lock:* -@all +set +incr +pexpire \
                +eval +evalsha +get +mget +del +pttl +script|load +publish +subscribe +unsubscribe \
                +ping +cluster|slots +asking +spublish +ssubscribe +sunsubscribe";
    let seeds = locker(&cluster, rule);
    let dlm = LockManager::builder()
        .cluster(&seeds)
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::from_secs(60))
        .build()
        .unwrap();
    let r = "lock:cluster-acl";
    let mut guard = dlm.lock(r, TTL).unwrap();
    guard.extend(TTL).unwrap();
    let token = guard.fencing_token().unwrap();
    thread::scope(|s| {
        let waiting = s.spawn(|| dlm.try_lock_for(r, TTL, Duration::from_secs(120)));
        until_shard_listening(
            &cluster.masters[cluster.master_of(r.as_bytes())],
            r.as_bytes(),
        );
        thread::sleep(Duration::from_millis(300));
        let (released, took) = timed(|| guard.release());
        released.unwrap();
        let (got, waited) = timed(|| waiting.join().unwrap());
        let got = got.unwrap();
        assert!(got.fencing_token().unwrap() > token);
        assert!(
            waited + took < Duration::from_secs(2),
            "woken after {waited:?}"
        );
    });
}

/// `check_resource` tries a release's announcement as a cluster's
/// masters take it, `SPUBLISH`: a user with the manual's cluster rule but
/// `+spublish` passes; without it, every master's report names
/// `SPUBLISH` as refused (waiters would poll), though `PUBLISH` is
/// allowed.
#[test]
fn check_tries_the_sharded_announcement_on_a_clusters_masters() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let rule = "on >s3cret resetkeys ~lock:* resetchannels &lock:* -@all +set +incr +pexpire \
                +eval +evalsha +get +mget +del +pttl +script|load +publish +subscribe +unsubscribe \
                +ping +cluster|slots +asking +ssubscribe +sunsubscribe";
    let refused = |rule: &str| {
        let seeds = locker(&cluster, rule);
        let dlm = LockManager::builder().cluster(&seeds).build().unwrap();
        let reports = dlm.check_resource("lock:check-spublish");
        assert_eq!(reports.len(), 3, "{reports:?}");
        reports
            .iter()
            .map(|r| r.missing_permissions.clone())
            .collect::<Vec<_>>()
    };
    for missing in refused(rule) {
        assert!(missing.iter().any(|m| m == "SPUBLISH"), "{missing:?}");
        assert!(!missing.iter().any(|m| m == "PUBLISH"), "{missing:?}");
    }
    for missing in refused(&format!("{rule} +spublish")) {
        assert!(
            !missing.iter().any(|m| m.contains("PUBLISH")),
            "{missing:?}"
        );
    }
}

/// A user refused `ASKING` (the manual's rule without `+asking`) while a
/// slot migrates: the lock on that slot gets no vote, and the connection
/// whose replies were left unread is dropped, never pooled: later locks on
/// the importing master read their own replies (before, one read the
/// previous request's `+OK` as a yes on a key held by another owner).
/// `check()` says that `ASKING` is refused.
#[test]
fn a_refused_asking_never_leaves_a_connection_out_of_step() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let rule = "on >s3cret resetkeys ~lock:* resetchannels &lock:* -@all +set +incr +pexpire \
                +eval +evalsha +get +mget +del +pttl +script|load +publish +subscribe +unsubscribe \
                +ping +info +cluster|slots +spublish +ssubscribe +sunsubscribe";
    let seeds = locker(&cluster, rule);
    // Fencing off: a one-key lock follows an ASK to the importing master.
    let dlm = LockManager::builder()
        .cluster(&seeds)
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::ZERO)
        .fencing(false)
        .max_idle_per_node(1)
        .build()
        .unwrap();
    let other = manager(&cluster);
    let migrating = "lock:asking-migrating";
    let slot = keyslot(&cluster.masters[0], migrating.as_bytes());
    let from = cluster.master_of(migrating.as_bytes());
    let to = (from + 1) % 3;
    // Two keys whose slots the importing master owns: one free, one held
    // by another owner.
    let on_target = |name: &str| {
        (0..)
            .map(|i| format!("lock:asking-{name}-{i}"))
            .find(|k| cluster.master_of(k.as_bytes()) == to)
            .unwrap()
    };
    let (free, held) = (on_target("free"), on_target("held"));
    let _owner = other.try_lock(&held, TTL).unwrap();
    // A connection to the importing master in the pool.
    dlm.try_lock(&free, TTL).unwrap().release().unwrap();
    cluster.move_slot(slot, from, to, || {
        let err = dlm.try_lock(migrating, TTL).unwrap_err();
        eprintln!("{err}");
        assert!(
            err.to_string().contains("ASKING") || err.to_string().contains("NOPERM"),
            "{err}"
        );
        // Whatever connection served the refused ASKING is not reused
        // with a reply unread: each lock reads its own answer.
        let free_again = dlm.try_lock(&free, TTL);
        assert!(free_again.is_ok(), "{free_again:?}");
        drop(free_again);
        match dlm.try_lock(&held, TTL) {
            Err(Error::Taken { .. }) => {}
            other => panic!("a key held by another owner: {other:?}"),
        }
        let reports = dlm.check_resource("lock:asking-check");
        let target = format!(":{}", cluster.masters[to].port());
        let report = reports.iter().find(|r| r.node.ends_with(&target)).unwrap();
        assert!(
            format!("{report:#}").contains("ASKING refused"),
            "{report:#}"
        );
    });
}

/// `check()` reports on every master of a cluster member, trying the
/// lock's commands on keys of each master's own slots.
#[test]
fn check_reports_every_master_of_a_cluster_member() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let reports = manager(&cluster).check_resource("lock:check");
    for r in &reports {
        eprintln!("{r}");
    }
    assert_eq!(reports.len(), 3);
    for master in &cluster.masters {
        let port = format!(":{}", master.port());
        assert!(reports.iter().any(|r| r.node.ends_with(&port)), "{port}");
    }
    for report in &reports {
        assert_eq!(report.cluster_enabled, Some(true), "{report}");
        assert!(report.missing_permissions.is_empty(), "{report}");
        // No persistence in the test cluster: a warning, nothing unsafe,
        // and nothing else (before, every trial command on two of the
        // three masters was reported MOVED, the trial keys being in
        // another master's slots).
        assert_eq!(report.verdict, redlock_sync::Verdict::Warning, "{report}");
        assert_eq!(report.problems.len(), 1, "{report:#}");
        assert!(
            report.problems[0].text.contains("no persistence"),
            "{report}"
        );
        assert!(report.to_string().len() <= 200, "{report}");
    }
}

/// A node of a Redis Cluster given as a plain node votes only on keys of
/// its own slots: `check()` calls it unsafe, once, and says to give the
/// cluster.
#[test]
fn check_calls_a_cluster_node_given_as_a_plain_node_unsafe() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let dlm = LockManager::builder()
        .nodes(cluster.masters.iter().map(|m| m.url()))
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let reports = dlm.check_resource("lock:check");
    assert_eq!(reports.len(), 3);
    for report in &reports {
        eprintln!("{report}");
        assert_eq!(report.verdict, redlock_sync::Verdict::Unsafe, "{report}");
        let text = report.to_string();
        assert!(text.contains("give the cluster"), "{text}");
        assert!(!text.contains("MOVED"), "{text}");
        assert!(text.len() <= 200, "{text}");
    }
}

/// A slot moving away from a master does not stop the listening on that
/// master's other slots: the listener's first `SSUBSCRIBE` after the move
/// may reach the old master before the map is refreshed, and its `MOVED`
/// is no refusal (before: the master's link was dropped for 30 s, and a
/// waiter on another of its slots paid its whole pause, 60 s here).
#[test]
fn a_slot_moving_away_keeps_the_other_slots_of_its_master_heard() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let holder = manager(&cluster);
    let waiter = waiter(&cluster);
    let moving = resource("moving-away");
    let from = cluster.master_of(moving.as_bytes());
    let to = (from + 1) % 3;
    let slot = keyslot(&cluster.masters[0], moving.as_bytes());
    // Another resource on the same master, in another slot.
    let staying = (0..)
        .map(|i| resource(&format!("staying-{i}")))
        .find(|r| {
            cluster.master_of(r.as_bytes()) == from
                && keyslot(&cluster.masters[0], r.as_bytes()) != slot
        })
        .unwrap();
    let moving_guard = holder.lock(&moving, TTL).unwrap();
    let staying_guard = holder.lock(&staying, TTL).unwrap();
    let moving_waiter = {
        let (waiter, moving) = (waiter.clone(), moving.clone());
        thread::spawn(move || waiter.try_lock_for(&moving, TTL, Duration::from_secs(120)))
    };
    let channel = release_channel(&staying);
    let got = assert_woken(
        || waiter.try_lock_for(&staying, TTL, Duration::from_secs(120)),
        || {
            let on = || shard_subscribers(&cluster.masters[from], &channel) == 1;
            assert!(wait_for(Duration::from_secs(10), on).is_some());
            cluster.move_slot(slot, from, to, || {});
            // The listener has had time to act on the move.
            thread::sleep(Duration::from_millis(500));
        },
        || staying_guard.release().unwrap(),
    );
    assert!(got.is_ok(), "{got:?}");
    moving_guard.release().unwrap();
    assert!(moving_waiter.join().unwrap().is_ok());
}

/// A waiter's listener follows its resource's slot when it moves to
/// another master (the server drops the sharded subscription; the map is
/// refreshed and the channel subscribed on the new owner), and the
/// release there still wakes it.
#[test]
fn listeners_follow_a_slot_move_and_still_wake_the_waiter() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let holder = manager(&cluster);
    let waiter = waiter(&cluster);
    let r = resource("follow-move");
    let slot = keyslot(&cluster.masters[0], r.as_bytes());
    let from = cluster.master_of(r.as_bytes());
    let to = (from + 1) % 3;
    let channel = release_channel(&r);
    let guard = holder.lock(&r, TTL).unwrap();
    let on = |i: usize| shard_subscribers(&cluster.masters[i], &channel) == 1;
    let got = assert_woken(
        || waiter.try_lock_for(&r, TTL, Duration::from_secs(120)),
        || {
            assert!(wait_for(Duration::from_secs(10), || on(from)).is_some());
            cluster.move_slot(slot, from, to, || {});
            assert!(
                wait_for(Duration::from_secs(10), || on(to)).is_some(),
                "the listener never subscribed on the new owner"
            );
        },
        || guard.release().unwrap(),
    );
    assert!(got.is_ok(), "{got:?}");
}

#[test]
fn a_set_spanning_the_shards_is_taken_whole_or_given_back() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let dlm = manager(&cluster);
    // One name per master, and a second one on the first name's slot.
    let mut set: Vec<Vec<u8>> = Vec::new();
    for i in 0.. {
        let name = resource(&format!("span:{i}")).into_bytes();
        if !set
            .iter()
            .any(|s| cluster.master_of(s) == cluster.master_of(&name))
        {
            set.push(name);
        }
        if set.len() == 3 {
            break;
        }
    }
    let tagged = [b"{".as_slice(), &set[0], b"}:more"].concat();
    let first = [b"{".as_slice(), &set[0], b"}"].concat();
    set.push(tagged);
    set.push(first);
    let guard = dlm.try_lock_all(&set, TTL).unwrap();
    for name in &set {
        let master = &cluster.masters[cluster.master_of(name)];
        assert_eq!(
            get(master, name).as_deref(),
            Some(guard.token()),
            "{name:?}"
        );
        assert!(pttl(master, &fence_key(name)) > 0, "{name:?}: counter");
    }
    let token = guard.fencing_token().unwrap();
    guard.release().unwrap();
    for name in &set {
        assert_eq!(get(&cluster.masters[cluster.master_of(name)], name), None);
    }
    // Another owner holds the third name on its shard: the member takes
    // the other shards' parts, sees the busy one, and gives them back.
    let busy = &set[2];
    let mut con = admin(&cluster.masters[cluster.master_of(busy)]);
    let _: () = redis::cmd("SET")
        .arg(busy)
        .arg("other")
        .arg("PX")
        .arg(60_000)
        .query(&mut con)
        .unwrap();
    assert!(matches!(
        dlm.try_lock_all(&set, TTL),
        Err(Error::Taken { .. })
    ));
    for name in set.iter().filter(|n| *n != busy) {
        assert_eq!(
            get(&cluster.masters[cluster.master_of(name)], name),
            None,
            "{name:?} left behind"
        );
    }
    let _: () = redis::cmd("DEL").arg(busy).query(&mut con).unwrap();
    let again = dlm.try_lock_all(&set, TTL).unwrap();
    assert!(again.fencing_token().unwrap() > token);
}

#[test]
fn read_locks_on_a_cluster_member_live_in_the_names_slot_and_wake_writers() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let dlm = manager(&cluster);
    let waiter = waiter(&cluster);
    let name = resource("cluster-rw");
    let owner = &cluster.masters[cluster.master_of(name.as_bytes())];
    let rw = dlm.rwlock(&name).unwrap();
    let r1 = rw.try_read(TTL).unwrap();
    let mut r2 = rw.try_read(TTL).unwrap();
    r2.extend(TTL).unwrap();
    assert_eq!(
        get(owner, name.as_bytes()).as_deref(),
        Some(&b"redlock:readers"[..])
    );
    assert!(matches!(rw.try_write(TTL), Err(Error::Taken { .. })));
    let got = assert_woken(
        || {
            waiter
                .rwlock(&name)
                .unwrap()
                .try_write_for(TTL, Duration::from_secs(120))
        },
        || {
            until_shard_listening(owner, name.as_bytes());
            r1.release().unwrap();
        },
        // The last reader's release announces (SPUBLISH in its script).
        || r2.release().unwrap(),
    );
    assert!(!got.unwrap().is_shared(), "the writer holds a write guard");
    // The writer is gone: readers again, and nothing left behind.
    drop(rw.try_read(TTL).unwrap());
    assert_eq!(get(owner, name.as_bytes()), None);
}

/// A cluster member whose master for the resource sits in the restart
/// quarantine says so, naming the master and the quarantine, for a lock
/// and for a set spread over its slot groups.
#[test]
fn a_quarantined_cluster_master_is_named_with_the_quarantine() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let dlm = LockManager::builder()
        .cluster(cluster.seeds())
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::ZERO)
        .restart_quarantine(Duration::from_secs(3600))
        .build()
        .unwrap();
    let err = dlm
        .try_lock(resource("cluster-quarantine"), TTL)
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("in restart quarantine, not voting for"),
        "{msg}"
    );
    assert_eq!(err.failures()[0].kind(), NodeErrorKind::Restarted, "{msg}");
    let names = [
        resource("cluster-quarantine-a"),
        resource("cluster-quarantine-b"),
    ];
    let err = dlm.try_lock_all(&names, TTL).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("in restart quarantine, not voting for"),
        "{msg}"
    );
}
