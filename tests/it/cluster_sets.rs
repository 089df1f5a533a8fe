//! Sets spanning many slots on Redis Cluster members: each master's slot
//! groups go in one pipeline on one connection (not a thread and a
//! connection per slot), and the pipelines recover what a single request
//! recovers: a `SCRIPT FLUSH` (`NOSCRIPT`), a slot moved (`MOVED`), a
//! quorum mixing nodes and a cluster.

use crate::cluster::{manager, mixed, skip};
use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use support::redis_cluster::{RedisCluster, cmd, keyslot};
use support::{Nodes, Server, admin, resource};

const TTL: Duration = Duration::from_secs(10);

fn get(server: &Server, key: &[u8]) -> Option<Vec<u8>> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut admin(server))
        .ok()
        .flatten()
}

/// Connections `server` has accepted since it started (this question's
/// own included).
fn accepted(server: &Server) -> u64 {
    let info: String = cmd(server, &["INFO", "stats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("total_connections_received in INFO stats")
}

/// `n` names in `n` distinct slots.
fn spread(cluster: &RedisCluster, prefix: &str, n: usize) -> Vec<Vec<u8>> {
    let mut slots = HashSet::new();
    let mut names = Vec::new();
    for i in 0.. {
        let name = resource(&format!("{prefix}:{i}")).into_bytes();
        if slots.insert(keyslot(&cluster.masters[0], &name)) {
            names.push(name);
        }
        if names.len() == n {
            break;
        }
    }
    names
}

/// For each name, the index of the master that serves it now.
fn owners(cluster: &RedisCluster, names: &[Vec<u8>]) -> Vec<usize> {
    names.iter().map(|n| cluster.master_of(n)).collect()
}

#[test]
fn a_set_over_hundreds_of_slots_takes_one_connection_per_master() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let dlm = manager(&cluster);
    let set = spread(&cluster, "wide", 300);
    let owner = owners(&cluster, &set);
    for m in 0..3 {
        assert!(owner.iter().filter(|&&o| o == m).count() > 50, "{m}");
    }
    let before: Vec<u64> = cluster.masters.iter().map(accepted).collect();
    let mut guard = dlm.try_lock_all(&set, TTL).unwrap();
    guard.extend(TTL).unwrap();
    let after: Vec<u64> = cluster.masters.iter().map(accepted).collect();
    for m in 0..3 {
        // The slot map's fetch and one connection for the set's scripts;
        // a connection per slot group would be a hundred. (The count
        // includes the connection that asks for it.)
        let ours = after[m] - before[m] - 1;
        assert!(
            ours <= 2,
            "master {m} accepted {ours} connections for one set"
        );
    }
    for (name, &m) in set.iter().zip(&owner) {
        assert_eq!(
            get(&cluster.masters[m], name).as_deref(),
            Some(guard.token()),
            "{name:?}"
        );
    }
    let before: Vec<u64> = cluster.masters.iter().map(accepted).collect();
    guard.release().unwrap();
    let again = dlm.try_lock_all(&set, TTL).unwrap();
    drop(again);
    let after: Vec<u64> = cluster.masters.iter().map(accepted).collect();
    let ours: Vec<u64> = (0..3).map(|m| after[m] - before[m] - 1).collect();
    assert_eq!(ours, [0, 0, 0], "pooled connections are used again");
    for (name, &m) in set.iter().zip(&owner) {
        assert_eq!(get(&cluster.masters[m], name), None, "{name:?} left behind");
    }
}

#[test]
fn a_set_over_many_slots_is_taken_after_a_script_flush_and_a_slot_move() {
    if skip() {
        return;
    }
    let cluster = RedisCluster::start(3, 0).unwrap();
    let dlm = manager(&cluster);
    let set = spread(&cluster, "flushed", 40);
    let guard = dlm.try_lock_all(&set, TTL).unwrap();
    let token = guard.fencing_token().unwrap();
    guard.release().unwrap();
    // Every master forgets the scripts, and one of the set's slots moves
    // to another master (the manager's map still names the old one).
    for m in &cluster.masters {
        let _: () = cmd(m, &["SCRIPT", "FLUSH"]);
    }
    let slot = keyslot(&cluster.masters[0], &set[0]);
    let from = cluster.master_of(&set[0]);
    let to = (from + 1) % 3;
    cluster.move_slot(slot, from, to, || {});
    // One attempt: NOSCRIPT and MOVED answers are sent again within it.
    let mut guard = dlm.try_lock_all(&set, TTL).unwrap();
    assert!(guard.fencing_token().unwrap() > token);
    let owner = owners(&cluster, &set);
    assert_eq!(owner[0], to);
    for (name, &m) in set.iter().zip(&owner) {
        assert_eq!(
            get(&cluster.masters[m], name).as_deref(),
            Some(guard.token()),
            "{name:?}"
        );
    }
    for m in &cluster.masters {
        let _: () = cmd(m, &["SCRIPT", "FLUSH"]);
    }
    guard.extend(TTL).unwrap();
    guard.release().unwrap();
    for (name, &m) in set.iter().zip(&owner) {
        assert_eq!(get(&cluster.masters[m], name), None, "{name:?} left behind");
    }
}

#[test]
fn a_set_over_many_slots_in_a_quorum_of_nodes_and_a_cluster() {
    if skip() {
        return;
    }
    let nodes = Nodes::start(2).unwrap();
    let cluster = RedisCluster::start(3, 0).unwrap();
    let dlm = mixed(&nodes, &cluster);
    let set = spread(&cluster, "mixed", 50);
    let owner = owners(&cluster, &set);
    let guard = dlm.try_lock_all(&set, TTL).unwrap();
    assert_eq!(guard.agreed(), 3);
    for (name, &m) in set.iter().zip(&owner) {
        assert_eq!(
            get(&cluster.masters[m], name).as_deref(),
            Some(guard.token())
        );
        for node in &nodes.servers {
            assert_eq!(get(node, name).as_deref(), Some(guard.token()));
        }
    }
    // Another owner holds one name on one master: that member votes no,
    // the nodes' yes make the quorum, and the cluster's part is given
    // back on release.
    guard.release().unwrap();
    let busy = &set[7];
    let _: () = redis::cmd("SET")
        .arg(busy)
        .arg("other")
        .arg("PX")
        .arg(60_000)
        .query(&mut admin(&cluster.masters[owner[7]]))
        .unwrap();
    let guard = dlm.try_lock_all(&set, TTL).unwrap();
    assert_eq!(guard.agreed(), 2);
    guard.release().unwrap();
    for (name, &m) in set.iter().zip(&owner) {
        let left = get(&cluster.masters[m], name);
        if name == busy {
            assert_eq!(left.as_deref(), Some(&b"other"[..]));
        } else {
            assert_eq!(left, None, "{name:?} left behind");
        }
    }
}
