//! Claims: a key that fell free is handed to the first waiter, a failed
//! claim puts its reservation back, a waiter asks again when a
//! reservation lapses, on nodes and on a cluster member.

use super::*;

/// A holder that dies leaves its key to expire, and no release tells the
/// waiters. The first waiter pauses long (10 to 20 s), a later one
/// briefly: the later one's claim that finds the key free reserves it for
/// the first and tells it, as a release would. Before, the later waiter
/// was refused (the first is ahead) and the first slept through its
/// pause, so the lock stayed free for 10 s or more.
#[test]
fn a_key_that_expired_is_reserved_for_the_first_waiter_and_it_is_told() {
    let nodes = Nodes::start(3).unwrap();
    let name = resource("fair-expired");
    let servers: Vec<&Server> = nodes.servers.iter().collect();
    a_dead_holder(&nodes, &name);
    let (first, later) = (vec![name.clone()], vec![name.clone()]);
    the_first_is_told(&nodes, first, later, |n| until_queued(&servers, &name, n));
}

#[test]
fn fair_waiters_on_a_cluster_member_are_served_in_arrival_order() {
    if let Some(why) = unsupported() {
        eprintln!("{why}");
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let build = || {
        LockManager::builder()
            .cluster(cluster.seeds())
            .node_timeout(NODE_TIMEOUT)
            .retry(3, Duration::from_millis(200))
            .fair(true)
            .build()
            .unwrap()
    };
    let name = resource("fair-cluster");
    let owner = &cluster.masters[cluster.master_of(name.as_bytes())];
    let holder = build();
    let waiters: Vec<LockManager> = (0..4).map(|_| build()).collect();
    let got = order(&holder, waiters, &[owner], &name);
    assert_eq!(got, [0, 1, 2, 3], "served out of arrival order");
}

#[test]
fn a_waiter_granted_by_a_majority_keeps_the_lock_when_it_leaves_the_others_queues() {
    let nodes = Nodes::start(3).unwrap();
    let name = resource("fair-partial");
    // The third node's key is another client's for a minute: every
    // acquisition is granted by two members of three.
    let _: () = redis::cmd("SET")
        .arg(&name)
        .arg("foreign")
        .arg("PX")
        .arg(60_000)
        .query(&mut admin(&nodes.servers[2]))
        .unwrap();
    let holder = fair(nodes.urls());
    let guard = holder.lock(&name, TTL).unwrap();
    assert_eq!(guard.agreed(), 2);
    let waiter = fair(nodes.urls());
    let name2 = name.clone();
    let waiting = thread::spawn(move || {
        let g = waiter
            .try_lock_for(&name2, TTL, Duration::from_secs(30))
            .unwrap();
        let token = g.token().to_vec();
        (waiter, g, token)
    });
    until_queued(&nodes.servers.iter().collect::<Vec<_>>(), &name, 1);
    guard.release().unwrap();
    // Claimed where it was handed the lock, refused by the third node: it
    // then leaves the third node's queue, and keeps what it holds.
    let (_waiter, g, token) = waiting.join().unwrap();
    assert_eq!(g.agreed(), 2);
    for s in &nodes.servers[..2] {
        assert_eq!(get(s, &name).as_deref(), Some(&token[..]));
        assert_eq!(queued(s, &name), 0);
    }
    assert_eq!(
        queued(&nodes.servers[2], &name),
        0,
        "still queued on the third node"
    );
    assert_eq!(
        get(&nodes.servers[2], &name).as_deref(),
        Some(&b"foreign"[..])
    );
    g.release().unwrap();
}

#[test]
fn a_failed_claim_puts_its_reservation_back_and_the_first_waiter_goes_first() {
    let nodes = Nodes::start(3).unwrap();
    let name = resource("fair-unclaim");
    // A node timeout of 1 s: reservations last 2 s.
    let build = || fair_with(&nodes, Duration::from_secs(1), Duration::from_millis(100));
    let holder = build();
    let guard = holder.lock(&name, TTL).unwrap();
    let servers: Vec<&Server> = nodes.servers.iter().collect();
    let won = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for i in 0..2 {
        let (dlm, won, mine) = (build(), won.clone(), name.clone());
        threads.push(thread::spawn(move || {
            let g = dlm
                .try_lock_for(&mine, TTL, Duration::from_secs(30))
                .unwrap();
            won.lock().unwrap().push(i);
            g.release().unwrap();
        }));
        until_queued(&servers, &name, i + 1);
    }
    let first = head(&nodes.servers[0], &name);
    // The holder's key on the second and third nodes becomes another
    // client's: its release hands the key to the first waiter on the
    // first node only, and that waiter's claims fail (one member of
    // three) while the second node's keeps refusing.
    for s in &nodes.servers[1..] {
        let _: () = redis::cmd("SET")
            .arg(&name)
            .arg("foreign")
            .arg("PX")
            .arg(60_000)
            .query(&mut admin(s))
            .unwrap();
    }
    guard.release().unwrap_err();
    // Handed to the first waiter: its reservation, or already its token
    // for the moment of a claim (the holder knew of no waiter, so its
    // release was the plain unlock first, announced as a release, and the
    // hand-off followed where the queue stood).
    let reserved = [&b"redlock:next:"[..], &first].concat();
    // A claim's value: the waiter's token, `#` and the attempt's number.
    let claimed = |v: &[u8]| v.starts_with(&[&first[..], b"#"].concat());
    let now = get(&nodes.servers[0], &name);
    assert!(
        now.as_deref() == Some(&reserved[..]) || now.as_deref().is_some_and(claimed),
        "the first node's key is {:?} after the release",
        now.map(|v| String::from_utf8_lossy(&v).into_owned())
    );
    let before = ticket(&nodes.servers[1], &name, &first);
    // Within the reservation (2 s), however many claims fail, the first
    // node's key stays the first waiter's: its reservation, or its token
    // for the moment of a claim; never free, never the second waiter's.
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(1200) {
        let now = get(&nodes.servers[0], &name);
        assert!(
            now.as_deref() == Some(&reserved[..]) || now.as_deref().is_some_and(claimed),
            "the first node's key became {:?} after a failed claim",
            now.map(|v| String::from_utf8_lossy(&v).into_owned())
        );
        thread::sleep(Duration::from_millis(5));
    }
    // The first waiter kept claiming (its ticket on the second node was
    // refreshed by its claims since the release).
    assert!(ticket(&nodes.servers[1], &name, &first) > before);
    // The other client leaves: the first waiter goes first, though the
    // two nodes freed hold no reservation for anyone.
    for s in &nodes.servers[1..] {
        let _: () = redis::cmd("DEL").arg(&name).query(&mut admin(s)).unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(*won.lock().unwrap(), [0, 1], "served out of arrival order");
}

#[test]
fn a_waiter_that_finds_another_waiters_reservation_asks_again_when_it_lapses() {
    let nodes = Nodes::start(3).unwrap();
    let name = resource("fair-lapse");
    let holder = fair(nodes.urls());
    let guard = holder.lock(&name, TTL).unwrap();
    // Pauses of 10 to 20 s: only the reservation's lapse brings the next
    // attempt within seconds.
    let waiter = patient(&nodes, Duration::from_secs(1), 3);
    let name2 = name.clone();
    let waiting = thread::spawn(move || {
        let g = waiter
            .try_lock_for(&name2, TTL, Duration::from_secs(30))
            .unwrap();
        let at = Instant::now();
        drop(g);
        at
    });
    until_queued(&nodes.servers.iter().collect::<Vec<_>>(), &name, 1);
    // The lock becomes a reservation for a waiter queued behind it that
    // never comes, for 1.5 s (a reservation whose waiter is not queued
    // keeps the key from nobody), and a release is announced: the waiter
    // asks, finds it, and asks again once it has lapsed, not at the end
    // of its pause.
    let behind = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    a_dead_waiter_queued_at(&nodes, &name, behind);
    for s in &nodes.servers {
        let _: () = redis::cmd("SET")
            .arg(&name)
            .arg("redlock:next:dead")
            .arg("PX")
            .arg(1500)
            .query(&mut admin(s))
            .unwrap();
    }
    let heard = Instant::now();
    let _: i64 = redis::cmd("PUBLISH")
        .arg(redlock_sync::release_channel(&name))
        .arg("0123456789abcdef:1")
        .query(&mut admin(&nodes.servers[0]))
        .unwrap();
    let took = waiting.join().unwrap() - heard;
    assert!(
        took >= Duration::from_secs(1),
        "taken after {took:?}, within another waiter's reservation"
    );
    assert!(
        took < Duration::from_secs(6),
        "taken {took:?} after the release: the reservation lapsed after 1.5 s"
    );
    drop(guard);
}
