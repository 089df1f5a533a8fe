//! The schedules a review found to break the lock's promise (two holders
//! at once, or a fencing token that runs backwards), each replayed on real
//! servers. Every test here failed before its fix.

use crate::support;

use std::time::Duration;

use redlock_sync::mode::Mode;
use redlock_sync::{Error, Guard, LockManager};
use support::proxy::{Mode as Net, Proxy};
use support::{Nodes, resource};

const TIMEOUT: Duration = Duration::from_millis(50);

fn manager(urls: Vec<String>) -> LockManager {
    support::manager_over(urls, TIMEOUT)
}

/// A holds R with a long TTL; one node stalls; A extends to a short TTL.
/// The round takes the stalled node's timeout, longer than the new TTL,
/// so it fails: yet the two nodes that answered let the key go after the
/// short TTL. B must not find A still believing it holds R. `take` is how
/// A holds `name`, `rival` how B tries for it (true when B got it).
fn a_failed_shorter_extend_bounds_the_validity<M: Mode>(
    name: &str,
    take: impl Fn(&LockManager, &str) -> Guard<M>,
    rival: impl Fn(&LockManager, &str) -> bool,
) {
    let mut cluster = Nodes::start(3).unwrap();
    let a = manager(cluster.urls());
    let b = manager(cluster.urls());
    let key = resource(name);
    let mut held = take(&a, &key);
    cluster.servers[2].pause();
    let err = held.extend(Duration::from_millis(30)).unwrap_err();
    assert!(
        matches!(err, Error::NoValidity { .. } | Error::NoQuorum { .. }),
        "{err:?}"
    );
    std::thread::sleep(Duration::from_millis(100));
    let b_has_it = rival(&b, &key);
    let a_believes = held.ensure_held();
    cluster.servers[2].resume();
    assert!(
        !(b_has_it && a_believes.is_ok()),
        "two holders: B took {key} while A's guard said it still held it"
    );
    assert!(
        a_believes.is_err(),
        "A kept a validity the nodes no longer grant"
    );
    assert!(!held.is_valid());
}

const LONG: Duration = Duration::from_secs(30);

#[test]
fn a_lock_extended_shorter_in_a_failed_round_is_not_held_past_its_new_ttl() {
    a_failed_shorter_extend_bounds_the_validity(
        "short-extend",
        |dlm, key| dlm.try_lock(key, LONG).unwrap(),
        |dlm, key| dlm.try_lock(key, LONG).is_ok(),
    );
}

#[test]
fn a_set_extended_shorter_in_a_failed_round_is_not_held_past_its_new_ttl() {
    a_failed_shorter_extend_bounds_the_validity(
        "short-extend-set",
        |dlm, key| {
            dlm.try_lock_all([key.to_owned(), format!("{key}:other")], LONG)
                .unwrap()
        },
        |dlm, key| dlm.try_lock(key, LONG).is_ok(),
    );
}

#[test]
fn a_permit_extended_shorter_in_a_failed_round_is_not_held_past_its_new_ttl() {
    // A semaphore of one permit: two holders would be two permits.
    let permit = |dlm: &LockManager, name: &str| dlm.semaphore(name, 1).unwrap().try_acquire(LONG);
    a_failed_shorter_extend_bounds_the_validity(
        "short-extend-permit",
        |dlm, name| permit(dlm, name).unwrap().into_guard(),
        |dlm, name| permit(dlm, name).is_ok(),
    );
}

#[test]
fn a_read_lock_extended_shorter_in_a_failed_round_is_not_held_past_its_new_ttl() {
    // B is a writer: it must not write beside a reader that still reads.
    a_failed_shorter_extend_bounds_the_validity(
        "short-extend-read",
        |dlm, key| dlm.rwlock(key).unwrap().try_read(LONG).unwrap(),
        |dlm, key| dlm.rwlock(key).unwrap().try_write(LONG).is_ok(),
    );
}

#[test]
fn a_no_quorum_extend_that_reached_some_nodes_bounds_the_validity() {
    // Two of three nodes stall: the round misses the quorum, but the one
    // node that answered now lets the key go in 30 ms.
    let mut cluster = Nodes::start(3).unwrap();
    let a = manager(cluster.urls());
    let key = resource("short-extend-noquorum");
    let mut guard = a.try_lock(&key, Duration::from_secs(30)).unwrap();
    cluster.servers[1].pause();
    cluster.servers[2].pause();
    let err = guard.extend(Duration::from_millis(30)).unwrap_err();
    cluster.servers[1].resume();
    cluster.servers[2].resume();
    assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
    std::thread::sleep(Duration::from_millis(60));
    assert!(guard.ensure_held().is_err());
    assert!(guard.validity().is_zero());
}

/// A name that moves, after a failover, to a server that has been up for
/// longer than the TTL and never had A's key: the manager saw the new
/// run_id, so that server must not vote until the longest TTL has passed
/// since the change was seen, whatever its uptime.
#[test]
fn a_name_moved_to_a_long_running_server_is_kept_out_from_the_move() {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU16, Ordering};

    let ttl = Duration::from_secs(2);
    let cluster = Nodes::start(2).unwrap();
    let old = support::Server::start().unwrap();
    // Up well over the TTL before the move.
    let spare = support::Server::start().unwrap();
    let spare_up = std::time::Instant::now();
    let target = Arc::new(AtomicU16::new(old.port()));
    // A does not reach node 1 (a partition: its connections there are
    // black-holed); B reaches every node.
    let cut = support::proxy::Proxy::start(
        format!("127.0.0.1:{}", cluster.servers[1].port())
            .parse()
            .unwrap(),
    )
    .unwrap();
    cut.set(support::proxy::Mode::Blackhole);
    let manager = |second: String| {
        let target = target.clone();
        LockManager::builder()
            .node(cluster.servers[0].url())
            .node(second)
            .node("redis://moving.test:6379")
            .node_timeout(Duration::from_millis(200))
            .retry(1, Duration::ZERO)
            .resolver(move |_, _| {
                Ok(vec![SocketAddr::from((
                    [127, 0, 0, 1],
                    target.load(Ordering::SeqCst),
                ))])
            })
            .build()
            .unwrap()
    };
    let a = manager(cut.url());
    let b = manager(cluster.servers[1].url());
    let key = resource("moved-name");
    // B knows the old server behind the name, and has used the TTL.
    b.try_lock(resource("moved-warmup"), ttl)
        .unwrap()
        .release()
        .unwrap();
    // The spare has been up longer than the TTL (uptime is whole seconds).
    std::thread::sleep((ttl + Duration::from_millis(1100)).saturating_sub(spare_up.elapsed()));
    // A holds the key on node 0 and the old server behind the name.
    let guard = a.try_lock(&key, ttl).unwrap();
    // The failover: the old server is gone, the name reaches the spare,
    // which never had A's key.
    target.store(spare.port(), Ordering::SeqCst);
    drop(old);
    let b_has_it = b.try_lock(&key, ttl);
    let a_believes = guard.ensure_held();
    assert!(
        !(b_has_it.is_ok() && a_believes.is_ok()),
        "two holders: the server now behind the moved name voted for B at once"
    );
    let err = b_has_it.unwrap_err();
    assert!(
        err.failures()
            .iter()
            .any(|f| f.kind() == redlock_sync::NodeErrorKind::Restarted),
        "{err}"
    );
}

/// A set over resources in different slots, granted by a plain node and a
/// Redis Cluster member whose counter for one resource ("hot") is far
/// ahead: the set's token comes from that counter. Later a lock of the
/// other resource ("cold") through a quorum that shares only the cluster
/// member with the set's must get a larger token.
#[test]
fn a_sets_token_is_below_every_later_token_of_each_resource_with_a_cluster_member() {
    if let Some(why) = support::redis_cluster::unsupported() {
        eprintln!("{why}");
        return;
    }
    let rc = support::redis_cluster::RedisCluster::start(3, 0).unwrap();
    let nodes = Nodes::start(2).unwrap();
    let mut dead = support::Server::start().unwrap();
    dead.kill();
    let dead_url = format!("redis://127.0.0.1:{}", dead.port());
    let over = |first: String, second: String| {
        LockManager::builder()
            .node(first)
            .node(second)
            .cluster(rc.seeds())
            .node_timeout(Duration::from_millis(500))
            .retry(1, Duration::ZERO)
            .build()
            .unwrap()
    };
    // Two resources in different slots (and on different masters).
    let hot = resource("set-fence-hot");
    let cold = (0..)
        .map(|i| resource(&format!("set-fence-cold-{i}")))
        .find(|c| rc.master_of(c.as_bytes()) != rc.master_of(hot.as_bytes()))
        .unwrap();
    // Many earlier locks of "hot" on the cluster: its counter there is
    // far ahead of the clock every new counter starts from.
    let ahead = 1_000_000_000_000u64
        + std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64;
    let hot_master = rc.server(rc.master_of(hot.as_bytes()));
    let _: () = redis::cmd("SET")
        .arg(redlock_sync::fence_key(&hot))
        .arg(ahead)
        .arg("PX")
        .arg(600_000)
        .query(&mut support::admin(hot_master))
        .unwrap();
    // The set, granted by node 0 and the cluster (node 1 unreachable).
    let a = over(nodes.servers[0].url(), dead_url.clone());
    let set = a
        .try_lock_all([&hot, &cold], Duration::from_secs(10))
        .unwrap();
    let set_token = set.fencing_token().unwrap();
    assert!(set_token > ahead, "{set_token} <= {ahead}");
    set.release().unwrap();
    // "cold" through node 1 and the cluster (node 0 unreachable).
    let b = over(dead_url, nodes.servers[1].url());
    let later = b.try_lock(&cold, Duration::from_secs(10)).unwrap();
    let later_token = later.fencing_token().unwrap();
    assert!(
        later_token > set_token,
        "fencing ran backwards: {cold} got {later_token} after the set's {set_token}"
    );
}

/// Two clients that give one semaphore different counts: the count is
/// stored with the semaphore, and the second is refused, naming both, in
/// either order. Before, 3 could hold a 1-permit semaphore.
#[test]
fn a_semaphore_given_another_count_is_refused_naming_both() {
    let cluster = Nodes::start(3).unwrap();
    let a = manager(cluster.urls());
    let b = manager(cluster.urls());
    for (first, second, name) in [(1, 3, "count-1-then-3"), (3, 1, "count-3-then-1")] {
        let name = resource(name);
        let held = a
            .semaphore(&name, first)
            .unwrap()
            .try_acquire(Duration::from_secs(10))
            .unwrap();
        let sem = b.semaphore(&name, second).unwrap();
        for _ in 0..3 {
            match sem.try_acquire(Duration::from_secs(10)) {
                Err(e @ Error::InvalidArgument { .. }) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains(&format!("made with {second} permits"))
                            && msg.contains(&format!("store {first}")),
                        "{msg}"
                    );
                }
                other => {
                    panic!("a client giving {second} permits where {first} are stored: {other:?}")
                }
            }
        }
        // Nothing of the refused client is left on the slots: each slot
        // key is absent or holds the holder's token.
        let mine = String::from_utf8(held.resource().to_vec()).unwrap();
        let here = format!(":permit:{}", held.slot());
        for slot in 0..first.max(second) {
            let key = mine.replace(&here, &format!(":permit:{slot}"));
            for server in &cluster.servers {
                let value = support::get(server, key.as_bytes());
                assert!(
                    value.is_none() || value.as_deref() == Some(held.token()),
                    "{key} holds {value:?} on {}",
                    server.port()
                );
            }
        }
        held.release().unwrap();
    }
}

/// Three nodes, and a forwarder in front of the third (to hold requests
/// back).
fn third_behind_a_forwarder() -> (Nodes, Proxy) {
    let nodes = Nodes::start(3).unwrap();
    let late = Proxy::start(nodes.servers[2].addr()).unwrap();
    (nodes, late)
}

/// Three nodes, the third behind a forwarder (to hold a request back),
/// and two managers over them: a node timeout of 100 ms, and fencing off,
/// so that an attempt is a plain `SET NX` and the scripts the forwarder
/// sees are the clean-ups and the extends.
fn late_rig(fair: bool) -> (Nodes, Proxy, LockManager, LockManager) {
    let (nodes, late) = third_behind_a_forwarder();
    let urls = vec![nodes.servers[0].url(), nodes.servers[1].url(), late.url()];
    let manager = || {
        LockManager::builder()
            .nodes(urls.clone())
            .node_timeout(Duration::from_millis(100))
            .retry(1, Duration::from_millis(100))
            .fencing(false)
            .fair(fair)
            .build()
            .unwrap()
    };
    let (a, b) = (manager(), manager());
    (nodes, late, a, b)
}

/// Another client's value at `key` on `server`, for `ms`.
fn held_by_another(server: &support::Server, key: &str, ms: u64) {
    redis::cmd("SET")
        .arg(key)
        .arg("another-holder")
        .arg("PX")
        .arg(ms)
        .query::<()>(&mut support::admin(server))
        .unwrap();
}

/// A clean-up that the network delays past the holder's next attempts
/// (CI of stop 49: the cross-process schedule run saw "two holders
/// of a" with tokens in order, on a loaded machine where a forwarder
/// held a write back): an acquisition's first attempt is refused on two
/// of three nodes and granted on the third, whose clean-up is held back
/// in the network until after a later attempt of the same acquisition
/// was granted there. That late clean-up must not delete the later
/// grant: a second client then takes the lock on the node it freed and
/// another, while the first still holds it.
fn a_clean_up_delivered_late_deletes_no_later_grant(fair: bool) {
    let ttl = Duration::from_millis(3000);
    let (nodes, late, a, b) = late_rig(fair);
    let key = resource(if fair {
        "late-clean-up-fair"
    } else {
        "late-clean-up"
    });
    // Connections made (and scripts loaded) before the delay.
    a.try_lock(resource("late-warmup"), ttl)
        .unwrap()
        .release()
        .unwrap();
    // Node 0 is held past the end of A's wait; node 1 until 1 s.
    held_by_another(&nodes.servers[0], &key, 4500);
    held_by_another(&nodes.servers[1], &key, 1000);
    late.set(Net::DelayScriptOnce(Duration::from_millis(3800)));
    let start = std::time::Instant::now();
    // A's first attempt: refused on nodes 0 and 1, granted on node 2,
    // whose clean-up is held back 3.8 s. That grant lapses at 3 s; A's
    // attempt after that is granted by nodes 1 and 2.
    let mut held = a
        .try_lock_for(&key, ttl, Duration::from_millis(4000))
        .unwrap();
    let taken_at = start.elapsed();
    // Held past the late clean-up and B's try. (A fair waiter's claim takes
    // node 2 at once, its first attempt's value there being its own: it
    // is granted after about 1 s, not 3 s, and its first TTL ends before
    // B tries.)
    held.extend(Duration::from_secs(5)).unwrap();
    // The late clean-up reaches node 2 (3.8 s), and node 0 is free (4.5 s).
    std::thread::sleep(Duration::from_millis(4600).saturating_sub(start.elapsed()));
    let left = held.validity();
    assert!(
        left > Duration::from_millis(300),
        "A's guard, taken at {taken_at:?}, should still be valid: {left:?} left"
    );
    let b_has_it = b.try_lock_for(&key, ttl, left.saturating_sub(Duration::from_millis(200)));
    assert!(
        !(b_has_it.is_ok() && held.ensure_held().is_ok()),
        "two holders: A's first attempt's clean-up, delivered late, deleted its later grant \
         on node 2 (A taken at {taken_at:?})"
    );
    assert!(b_has_it.is_err());
}

#[test]
fn a_clean_up_delivered_late_deletes_no_later_grant_of_a_lock() {
    a_clean_up_delivered_late_deletes_no_later_grant(false);
}

#[test]
fn a_clean_up_delivered_late_deletes_no_later_grant_of_a_fair_waiter() {
    a_clean_up_delivered_late_deletes_no_later_grant(true);
}

/// An extend that the network delays past the holder's next extend: a
/// holder granted by two nodes of three extends to a short TTL, and the
/// round's request to one of its two nodes is held back in the network
/// (the round fails there, and the validity is bounded by the short TTL,
/// as [`a_failed_shorter_extend_bounds_the_validity`] requires); it then
/// extends to a long TTL, granted by both. The first round's request,
/// delivered late, must not cut the second's expiry on that node: a
/// second client would take the lock there and on the third node while
/// the holder's validity still runs.
#[test]
fn an_extend_delivered_late_cuts_no_later_extend() {
    let (nodes, late, a, b) = late_rig(false);
    let key = resource("late-extend");
    // Node 0 is another's until 1.5 s: A holds nodes 1 and 2.
    held_by_another(&nodes.servers[0], &key, 1500);
    let start = std::time::Instant::now();
    let mut held = a.try_lock(&key, Duration::from_secs(3)).unwrap();
    assert_eq!(held.agreed(), 2);
    late.set(Net::DelayScriptOnce(Duration::from_millis(1000)));
    // Node 2's request is held back 1 s: the round fails there.
    let _ = held.extend(Duration::from_millis(300));
    // Then a long extend, granted by nodes 1 and 2.
    held.extend(Duration::from_secs(4)).unwrap();
    // The first extend reaches node 2 (1 s after it was sent), and node
    // 0 is free (1.5 s).
    std::thread::sleep(Duration::from_millis(1900).saturating_sub(start.elapsed()));
    let left = held.validity();
    assert!(
        left > Duration::from_millis(1500),
        "A's guard should still be valid: {left:?} left"
    );
    let b_has_it = b.try_lock_for(&key, Duration::from_secs(3), Duration::from_millis(1000));
    assert!(
        !(b_has_it.is_ok() && held.ensure_held().is_ok()),
        "two holders: A's short extend, delivered late, cut its long extend's expiry on node 2"
    );
    assert!(b_has_it.is_err());
}

/// Three nodes; a waiter W reaches the third through a forwarder of its
/// own (to hold its requests back), a holder H and a rival Q reach it
/// directly. Node timeout 100 ms, default settings otherwise (fair
/// waiting, fencing). Node 1 holds another client's value for 3 s.
fn late_claim_rig() -> (Nodes, Proxy, LockManager, LockManager, LockManager) {
    let (nodes, late) = third_behind_a_forwarder();
    let manager = |third: String| {
        LockManager::builder()
            .nodes(vec![nodes.servers[0].url(), nodes.servers[1].url(), third])
            .node_timeout(Duration::from_millis(100))
            .build()
            .unwrap()
    };
    let w = manager(late.url());
    let (h, q) = (
        manager(nodes.servers[2].url()),
        manager(nodes.servers[2].url()),
    );
    (nodes, late, w, h, q)
}

/// A fair claim and its clean-up, both held back in the network past the
/// waiter's next attempt (issue 56, flaws 1 and 4): H holds `keys` on
/// nodes 0 and 2 (node 1 holds another client's value of the first key);
/// W waits for them. While H releases, every script of W's to node 2 is
/// held back 1 s: W's claim there times out (granted on node 0 alone),
/// and so does its clean-up. W's next attempt, once the network lets
/// scripts through, is granted on nodes 0 and 2. Then the held claim
/// reaches node 2, and its clean-up after it. Node 1 comes free at 3 s,
/// and Q tries for the keys on nodes 1 and 2 while W's guard still runs:
/// a late claim of an earlier attempt must not have replaced W's later
/// grant on node 2 (its clean-up then deleted it). `take(m, ttl, wait)`
/// is how each asks for `keys`.
fn a_late_fair_claim_takes_no_later_grant(
    keys: &[String],
    take: impl Fn(&LockManager, Duration, Duration) -> redlock_sync::Result<redlock_sync::LockGuard>
    + Sync,
) {
    let (nodes, late, w, h, q) = late_claim_rig();
    let ttl = Duration::from_secs(10);
    // Connections made and scripts loaded before anything is held.
    take(&w, ttl, Duration::ZERO)
        .expect("W's first lock, before anything is held")
        .release()
        .unwrap();
    let start = std::time::Instant::now();
    held_by_another(&nodes.servers[1], &keys[0], 3000);
    let held = take(&h, ttl, Duration::ZERO).unwrap();
    assert_eq!(held.agreed(), 2);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| take(&w, ttl, Duration::from_secs(2)));
        // W is queued (its claims refused on every node).
        std::thread::sleep(Duration::from_millis(300));
        let delayed = std::time::Instant::now();
        late.set(Net::DelayScripts(Duration::from_millis(1000)));
        drop(held);
        // W's claim right after the release, and its clean-up, are held.
        std::thread::sleep(Duration::from_millis(250));
        late.set(Net::Pass);
        let mut mine = waiter
            .join()
            .unwrap()
            .expect("W should take the lock once the network lets it through");
        let taken_at = start.elapsed();
        // Granted before anything held could be delivered (each held
        // request waits 1 s from when the forwarder read it, after the
        // delay began), and something was held: the claim and its
        // clean-up.
        let after_delay = delayed.elapsed();
        assert!(
            after_delay < Duration::from_millis(950),
            "W took the lock {after_delay:?} after the delay began: the held claim may have \
             run first, the schedule did not happen"
        );
        assert!(
            late.held() >= 2,
            "{} of W's scripts held: the schedule did not happen",
            late.held()
        );
        // The held claim and clean-up reach node 2 (about 1.6 s); node 1 is
        // free at 3 s.
        std::thread::sleep(Duration::from_millis(3100).saturating_sub(start.elapsed()));
        // What W's grant rests on: its value on node 2 (the late claim
        // put an earlier attempt's value there; its clean-up, when it
        // follows, deletes that).
        for key in keys {
            let there = support::get(&nodes.servers[2], key.as_bytes());
            assert_eq!(
                there.as_deref().map(String::from_utf8_lossy),
                Some(String::from_utf8_lossy(mine.token())),
                "a late claim of W's earlier attempt replaced W's grant of {key} on node 2"
            );
        }
        let left = mine.validity();
        assert!(
            left > Duration::from_secs(5),
            "W's guard should still be valid: {left:?} left"
        );
        let q_has_it = take(&q, ttl, Duration::from_millis(500));
        assert!(
            !(q_has_it.is_ok() && mine.ensure_held().is_ok()),
            "two holders: W's earlier claim and its clean-up, delivered late to node 2, \
             took W's later grant there (W taken at {taken_at:?})"
        );
        assert!(q_has_it.is_err());
        mine.extend(ttl)
            .expect("W still holds the nodes it was granted");
    });
}

#[test]
fn a_fair_claim_and_its_clean_up_delivered_late_take_no_later_grant() {
    let key = resource("late-fair-claim");
    a_late_fair_claim_takes_no_later_grant(std::slice::from_ref(&key), |m, ttl, wait| {
        m.try_lock_for(&key, ttl, wait)
    });
}

#[test]
fn a_late_fair_claim_takes_no_later_grant_of_a_write_lock() {
    let key = resource("late-fair-write");
    a_late_fair_claim_takes_no_later_grant(std::slice::from_ref(&key), |m, ttl, wait| {
        m.rwlock(&key)?.try_write_for(ttl, wait)
    });
}

#[test]
fn a_late_fair_claim_takes_no_later_grant_of_a_set() {
    let keys = [resource("late-fair-set-a"), resource("late-fair-set-b")];
    a_late_fair_claim_takes_no_later_grant(&keys, |m, ttl, wait| {
        m.try_lock_all_for(&keys, ttl, wait)
    });
}

/// A fencing raise answered by a server that never voted (issue 56, flaw
/// 2): A reaches node 0 through a forwarder that re-points A's live
/// connection to an empty spare server right after A's acquisition is
/// answered (an L4 proxy or managed endpoint re-pointing its upstream
/// after a failover, keeping client connections up), and node 2 not at
/// all. Node 0 votes with a low counter, node 1 with the highest; node
/// 0's raise then reaches the spare, which holds neither A's token nor
/// its counter. Counted, A was granted a token that no quorum's counters
/// hold: B, on nodes 0 and 2, was then granted a lower one. `take` is how
/// A and B ask for `resources`.
fn a_raise_counts_only_where_the_token_is_held(
    resources: &[String],
    take: impl Fn(&LockManager) -> redlock_sync::Result<redlock_sync::LockGuard>,
) {
    let nodes = Nodes::start(3).unwrap();
    let spare = support::Server::start().unwrap();
    let moving = Proxy::start(nodes.servers[0].addr()).unwrap();
    let dead = |n: u16| format!("redis://127.0.0.1:{n}");
    let manager = |urls: Vec<String>| {
        LockManager::builder()
            .nodes(urls)
            .node_timeout(Duration::from_millis(100))
            .retry(1, Duration::from_millis(100))
            .fair(false)
            .build()
            .unwrap()
    };
    let free = support::server::free_port().unwrap();
    let a = manager(vec![moving.url(), nodes.servers[1].url(), dead(free)]);
    let b = manager(vec![
        nodes.servers[0].url(),
        dead(free),
        nodes.servers[2].url(),
    ]);
    // A's connection to node 0 is made, and its scripts loaded, before the
    // move: the reply after which the connection moves is the attempt's
    // own. (Were the acquisition itself re-pointed, the spare, empty,
    // would vote: the library's stated assumption that an address reaches
    // one server for the life of a connection, see the manual's
    // "Late requests and moved servers".)
    take(&a)
        .expect("A's first lock, before the move")
        .release()
        .unwrap();
    // Counters that differ, so that A's grant raises node 0's: ahead of
    // the clock, since counts go on from the larger of a counter and the
    // attempt's clock reading (counters behind it, as these were before
    // counting from the clock, all count to the same reading and need no
    // raise).
    let ahead = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
        + 1_000_000_000_000;
    for r in resources {
        for (server, count) in nodes
            .servers
            .iter()
            .zip([ahead + 100, ahead + 1000, ahead + 100])
        {
            redis::cmd("SET")
                .arg(redlock_sync::fence_key(r))
                .arg(count)
                .arg("PX")
                .arg(60_000)
                .query::<()>(&mut support::admin(server))
                .unwrap();
        }
    }
    let scripts = |s: &support::Server| support::calls(s, "evalsha") + support::calls(s, "eval");
    let spare_before = scripts(&spare);
    moving.repoint_after_reply(spare.addr());
    let first = take(&a);
    assert!(
        scripts(&spare) > spare_before,
        "the raise did not reach the spare: the schedule did not happen ({first:?})"
    );
    let a_token = match &first {
        Ok(g) => g.fencing_token(),
        Err(e) => {
            // Refused: the raise reached a server that holds nothing of A's.
            assert!(
                matches!(
                    e,
                    Error::NoQuorum {
                        agreed: 1,
                        nodes: 3,
                        ..
                    }
                ),
                "A should fail as one of three nodes agreeing: {e:?}"
            );
            None
        }
    };
    drop(first);
    if let Some(a_token) = a_token {
        // Granted: both voters' counters must hold the token (they do not:
        // node 0's raise went to the spare).
        for (i, server) in nodes.servers[..2].iter().enumerate() {
            for r in resources {
                let count: u64 = support::get(server, &redlock_sync::fence_key(r))
                    .and_then(|v| String::from_utf8(v).ok()?.parse().ok())
                    .unwrap_or(0);
                assert!(
                    count >= a_token,
                    "A was granted {a_token}, but node {i}'s counter of {r} is {count}: \
                     the raise was counted from a server that never voted"
                );
            }
        }
    }
    // A's keys on node 0 lapse (a release that went to the spare left them).
    std::thread::sleep(Duration::from_millis(800));
    let second = take(&b).expect("B takes the lock on nodes 0 and 2");
    if let (Some(a_token), Some(b_token)) = (a_token, second.fencing_token()) {
        assert!(
            b_token > a_token,
            "fencing ran backwards: A was granted {a_token} with node 0's raise answered by \
             a server that never voted, then B {b_token} on nodes 0 and 2"
        );
    }
    assert!(
        a_token.is_none(),
        "A was granted {a_token:?} on a raise that only the spare ran"
    );
}

#[test]
fn a_lock_raise_counts_only_where_the_token_is_held() {
    let key = resource("raise-moved");
    let ttl = Duration::from_millis(500);
    a_raise_counts_only_where_the_token_is_held(std::slice::from_ref(&key), |m| {
        m.try_lock(&key, ttl)
    });
}

#[test]
fn a_set_raise_counts_only_where_the_token_is_held() {
    let keys = [resource("raise-moved-a"), resource("raise-moved-b")];
    let ttl = Duration::from_millis(500);
    a_raise_counts_only_where_the_token_is_held(&keys, |m| m.try_lock_all(&keys, ttl));
}
