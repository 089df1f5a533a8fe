//! Semaphores over several nodes: never more than K valid permits, under
//! contention, crashes and partitions; all K acquirable with a minority
//! dead; permits expire, keep alive, and wake waiters.

use crate::support;
use support::occupancy::Occupancy;

use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use redlock_sync::{Error, LockManager};
use support::{Nodes, Server, resource, wait_for};

const TTL: Duration = Duration::from_secs(10);

fn manager(urls: Vec<String>) -> LockManager {
    support::manager_over(urls, Duration::from_millis(500))
}

fn dead_url() -> (Server, String) {
    let mut dead = Server::start().unwrap();
    dead.kill();
    let url = format!("redis://127.0.0.1:{}", dead.port());
    (dead, url)
}

#[test]
fn zero_or_too_many_permits_are_refused() {
    let dlm = manager(vec!["redis://127.0.0.1:1".into()]);
    for permits in [0, redlock_sync::MAX_PERMITS + 1] {
        assert!(matches!(
            dlm.semaphore("api", permits),
            Err(Error::InvalidArgument { .. })
        ));
    }
    assert!(matches!(
        dlm.semaphore("", 2),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn k_permits_are_granted_and_the_next_is_taken_until_one_is_released() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(cluster.urls());
    let sem = dlm.semaphore(resource("k"), 3).unwrap();
    let permits: Vec<_> = (0..3).map(|_| sem.try_acquire(TTL).unwrap()).collect();
    let mut slots: Vec<u32> = permits.iter().map(|p| p.slot()).collect();
    slots.sort();
    assert_eq!(slots, [0, 1, 2]);
    match sem.try_acquire(TTL) {
        Err(e @ Error::Taken { .. }) => {
            assert!(e.to_string().contains("a semaphore of 3 permits"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    let mut permits = permits.into_iter();
    permits.next().unwrap().release().unwrap();
    let again = sem.try_acquire(TTL).unwrap();
    assert!(again.fencing_token().is_some());
}

/// A semaphore's errors name it and its count the same way for every
/// count: before, K=1 named an internal key (`nightly:permit:0{40202}`)
/// and K=3 "nightly (all 3 permits)". A long name is cut in messages.
#[test]
fn a_semaphores_errors_name_it_and_its_count_for_every_k() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(cluster.urls());
    let long = "n".repeat(60_000);
    for (name, k, shown) in [
        (
            resource("nightly-1"),
            1,
            format!("{} (a semaphore of 1 permit)", resource("nightly-1")),
        ),
        (
            resource("nightly-3"),
            3,
            format!("{} (a semaphore of 3 permits)", resource("nightly-3")),
        ),
        (
            long.clone(),
            2,
            format!(
                "{}... (60000 bytes) (a semaphore of 2 permits)",
                &long[..100]
            ),
        ),
    ] {
        let sem = dlm.semaphore(&name, k).unwrap();
        let _held: Vec<_> = (0..k).map(|_| sem.try_acquire(TTL).unwrap()).collect();
        match sem.try_acquire(TTL) {
            Err(Error::Taken { resource, .. }) => assert_eq!(resource, shown),
            other => panic!("K={k}: {other:?}"),
        }
        let message = sem.try_acquire(TTL).unwrap_err().to_string();
        assert!(message.contains(&shown), "{message}");
        assert!(message.len() < 400, "{} bytes: {message}", message.len());
    }
}

/// The partition that breaks counting semaphores: 3 nodes, 2 permits,
/// three clients each cut off from a different node. Counting holders per
/// node, each node sees only 2; with slots, the third is refused.
#[test]
fn three_clients_each_cut_off_from_a_different_node_get_only_two_permits() {
    let cluster = Nodes::start(3).unwrap();
    let name = resource("partition");
    let mut dead = Vec::new();
    let clients: Vec<LockManager> = (0..3)
        .map(|cut| {
            let urls = (0..3)
                .map(|i| {
                    if i == cut {
                        let (server, url) = dead_url();
                        dead.push(server);
                        url
                    } else {
                        cluster.servers[i].url()
                    }
                })
                .collect();
            manager(urls)
        })
        .collect();
    let a = clients[0]
        .semaphore(&name, 2)
        .unwrap()
        .try_acquire(TTL)
        .unwrap();
    let b = clients[1]
        .semaphore(&name, 2)
        .unwrap()
        .try_acquire(TTL)
        .unwrap();
    assert_ne!(a.slot(), b.slot());
    let third = clients[2].semaphore(&name, 2).unwrap().try_acquire(TTL);
    assert!(
        matches!(third, Err(Error::Taken { .. })),
        "a third permit of 2: {third:?}"
    );
    assert!(a.is_valid() && b.is_valid());
}

/// Beyond 52 permits the survey names the first free slot each node
/// sees instead of a mask: every permit is still found.
#[test]
fn many_permits_are_all_found() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(cluster.urls());
    let sem = dlm.semaphore(resource("many"), 60).unwrap();
    let permits: Vec<_> = (0..60)
        .map(|i| {
            sem.try_acquire(TTL)
                .unwrap_or_else(|e| panic!("permit {i}: {e}"))
        })
        .collect();
    let mut slots: Vec<u32> = permits.iter().map(|p| p.slot()).collect();
    slots.sort();
    slots.dedup();
    assert_eq!(slots.len(), 60);
    assert!(matches!(sem.try_acquire(TTL), Err(Error::Taken { .. })));
}

#[test]
fn with_two_of_five_nodes_dead_every_permit_is_acquirable() {
    let mut cluster = Nodes::start(5).unwrap();
    cluster.servers[0].kill();
    cluster.servers[3].kill();
    let dlm = manager(cluster.urls());
    let sem = dlm.semaphore(resource("minority-dead"), 4).unwrap();
    let permits: Vec<_> = (0..4)
        .map(|i| {
            sem.try_acquire(TTL)
                .unwrap_or_else(|e| panic!("permit {i}: {e}"))
        })
        .collect();
    assert_eq!(permits.len(), 4);
    let err = sem.try_acquire(TTL).unwrap_err();
    assert!(matches!(err, Error::Taken { .. }), "{err}");
}

/// Threads of two managers take permits of K = 3 with holds, some
/// crashing (their permit leaked, expiring with its short TTL), while a
/// minority of the 5 nodes is paused and restarted empty: a witness counts
/// concurrent holders, which never exceed K.
#[test]
fn under_contention_crashes_and_node_faults_concurrency_never_exceeds_k() {
    let mut cluster = Nodes::start(5).unwrap();
    let name = resource("contended");
    let managers = [manager(cluster.urls()), manager(cluster.urls())];
    let inside = Occupancy::at_most(3);
    let sections = AtomicU32::new(0);
    let end = Instant::now() + Duration::from_secs(3);
    thread::scope(|s| {
        for t in 0..8 {
            let sem = managers[t % 2].semaphore(&name, 3).unwrap();
            let (inside, sections) = (&inside, &sections);
            s.spawn(move || {
                let mut n = 0u32;
                while Instant::now() < end {
                    let Ok(permit) =
                        sem.try_acquire_for(Duration::from_millis(300), Duration::from_millis(500))
                    else {
                        continue;
                    };
                    let holder = inside.enter();
                    thread::sleep(Duration::from_millis(5));
                    drop(holder);
                    sections.fetch_add(1, Ordering::SeqCst);
                    n += 1;
                    if n.is_multiple_of(10) {
                        // A crash: the permit is never released; it
                        // expires with its 300 ms TTL. Its section ended
                        // before the leak, so it is not counted as inside.
                        std::mem::forget(permit);
                    }
                }
            });
        }
        // Faults on a minority (2 of 5) while they run.
        let cluster = &mut cluster;
        s.spawn(move || {
            while Instant::now() + Duration::from_millis(600) < end {
                thread::sleep(Duration::from_millis(300));
                cluster.servers[0].pause();
                cluster.servers[1].restart().unwrap();
                thread::sleep(Duration::from_millis(200));
                cluster.servers[0].resume();
            }
        });
    });
    let most = inside.most();
    eprintln!(
        "{} sections, at most {most} at once",
        sections.load(Ordering::SeqCst)
    );
    assert_eq!(inside.violations(), 0, "{most} holders at once");
    assert!(sections.load(Ordering::SeqCst) > 20);
}

#[test]
fn a_crashed_holders_permit_frees_when_its_ttl_runs_out() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(cluster.urls());
    let sem = dlm.semaphore(resource("crashed"), 1).unwrap();
    std::mem::forget(sem.try_acquire(Duration::from_millis(500)).unwrap());
    assert!(matches!(sem.try_acquire(TTL), Err(Error::Taken { .. })));
    let freed = wait_for(Duration::from_secs(5), || sem.try_acquire(TTL).is_ok());
    let freed = freed.expect("the permit never expired");
    assert!(freed >= Duration::from_millis(300), "{freed:?}");
}

#[test]
fn a_kept_alive_permit_outlives_its_ttl() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(cluster.urls());
    let sem = dlm.semaphore(resource("kept"), 1).unwrap();
    let permit = sem
        .try_acquire(Duration::from_millis(300))
        .unwrap()
        .keep_alive();
    thread::sleep(Duration::from_secs(1));
    permit.ensure_held().unwrap();
    assert!(matches!(sem.try_acquire(TTL), Err(Error::Taken { .. })));
    permit.release().unwrap();
    sem.try_acquire(TTL).unwrap().release().unwrap();
}

/// A waiter of another manager with a 60 s pause is woken by a permit's
/// release.
#[test]
fn a_released_permit_wakes_a_waiter() {
    let cluster = Nodes::start(3).unwrap();
    let name = resource("woken-permit");
    let holder = manager(cluster.urls());
    let waiter = LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::from_secs(60))
        .build()
        .unwrap();
    let sem = holder.semaphore(&name, 2).unwrap();
    let a = sem.try_acquire(TTL).unwrap();
    let _b = sem.try_acquire(TTL).unwrap();
    let slot = a.slot();
    let got = support::assert_woken(
        || {
            waiter
                .semaphore(&name, 2)
                .unwrap()
                .try_acquire_for(TTL, Duration::from_secs(120))
        },
        || support::until_listening(&cluster, &name),
        || a.release().unwrap(),
    );
    assert_eq!(got.unwrap().slot(), slot);
}

#[test]
fn a_semaphore_on_a_cluster_member() {
    if let Some(why) = support::redis_cluster::unsupported() {
        eprintln!("{why}");
        return;
    }
    let cluster = support::redis_cluster::RedisCluster::start(3, 0).unwrap();
    let dlm = LockManager::builder()
        .cluster(cluster.seeds())
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::ZERO)
        .build()
        .unwrap();
    let sem = dlm.semaphore(resource("cluster-sem"), 3).unwrap();
    let permits: Vec<_> = (0..3).map(|_| sem.try_acquire(TTL).unwrap()).collect();
    assert!(matches!(sem.try_acquire(TTL), Err(Error::Taken { .. })));
    for p in permits {
        p.release().unwrap();
    }
    sem.try_acquire(TTL).unwrap().release().unwrap();
}

/// Permits released together wake as many waiters (before, the first
/// acquisition used up every release heard: the other waiters paid their
/// whole pause, 60 s here, while permits were free).
#[test]
fn permits_released_together_wake_as_many_waiters() {
    let cluster = Nodes::start(3).unwrap();
    let name = resource("woken-permits");
    let holder = manager(cluster.urls());
    let waiter = LockManager::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .retry(1, Duration::from_secs(60))
        .build()
        .unwrap();
    let sem = holder.semaphore(&name, 3).unwrap();
    let held: Vec<_> = (0..3).map(|_| sem.try_acquire(TTL).unwrap()).collect();
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let (waiter, name) = (waiter.clone(), name.clone());
            std::thread::spawn(move || {
                let got = waiter
                    .semaphore(&name, 3)
                    .unwrap()
                    .try_acquire_for(TTL, Duration::from_secs(120));
                (got, std::time::Instant::now())
            })
        })
        .collect();
    support::until_listening(&cluster, &name);
    // Every waiter has tried and is waiting.
    std::thread::sleep(Duration::from_millis(500));
    let released = std::time::Instant::now();
    for permit in held {
        permit.release().unwrap();
    }
    for w in waiting {
        let (got, at) = w.join().unwrap();
        drop(got.unwrap());
        let after = at.duration_since(released);
        assert!(
            after < Duration::from_secs(10),
            "a waiter got its permit {after:?} after the releases"
        );
    }
}
