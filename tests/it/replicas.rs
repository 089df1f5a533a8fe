//! `Builder::replica_acks`: a member's vote counts only once its write
//! reached that many replicas (`WAIT`), so that a failover cannot lose a
//! granted lock; otherwise the member fails, saying so, and keeps no key.

use crate::support;

use std::time::Duration;

use redlock_sync::{Error, LockManager, NodeErrorKind};
use support::{Server, admin, get, resource, wait_for};

const TTL: Duration = Duration::from_secs(10);

fn manager(url: String, acks: u32) -> LockManager {
    LockManager::builder()
        .node(url)
        .node_timeout(Duration::from_millis(400))
        .replica_acks(acks)
        .retry(1, Duration::ZERO)
        .build()
        .unwrap()
}

/// A master and a replica in sync.
fn pair() -> (Server, Server) {
    let master = Server::start().unwrap();
    let port = master.port().to_string();
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", &port]).unwrap();
    let synced = wait_for(Duration::from_secs(20), || {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut admin(&replica))
            .unwrap();
        info.contains("master_link_status:up")
    });
    assert!(synced.is_some(), "the replica never synced");
    (master, replica)
}

#[test]
fn a_write_acknowledged_by_the_replica_votes_and_is_on_the_replica() {
    let (master, replica) = pair();
    let dlm = manager(master.url(), 1);
    let r = resource("acked");
    let mut guard = dlm.lock(&r, TTL).unwrap();
    // Acknowledged before the vote counted: the replica has it already.
    assert_eq!(get(&replica, r.as_bytes()).as_deref(), Some(guard.token()));
    guard.extend(TTL).unwrap();
    guard.release().unwrap();
}

#[test]
fn a_write_no_replica_acknowledged_is_no_vote_and_leaves_no_key() {
    let (master, mut replica) = pair();
    let dlm = manager(master.url(), 1);
    let r = resource("unacked");
    replica.pause();
    let err = dlm.lock(&r, TTL).unwrap_err();
    replica.resume();
    assert!(matches!(err, Error::NoQuorum { .. }), "{err:?}");
    let failure = &err.failures()[0];
    assert_eq!(failure.kind(), NodeErrorKind::Replication, "{err}");
    assert!(
        err.to_string()
            .contains("reached 0 of 1 replicas in time (WAIT)"),
        "{err}"
    );
    assert_eq!(get(&master, r.as_bytes()), None, "the key was removed");
    // Asking for more replicas than there are fails the same way.
    let err = manager(master.url(), 2).lock(&r, TTL).unwrap_err();
    assert!(err.to_string().contains("reached 1 of 2 replicas"), "{err}");
    // Without replica acknowledgements, the same master votes.
    manager(master.url(), 0)
        .lock(&r, TTL)
        .unwrap()
        .release()
        .unwrap();
}

/// A set refused because one of its resources is taken is a no, however
/// far the replicas lag: only a write waits for them. (The busy answer
/// used to be read as a write the replicas had not seen, a failure.)
#[test]
fn a_set_refused_for_a_taken_resource_is_taken_while_the_replica_lags() {
    let (master, mut replica) = pair();
    let dlm = manager(master.url(), 1);
    let (a, b) = (resource("set-free"), resource("set-busy"));
    let _: () = redis::cmd("SET")
        .arg(&b)
        .arg("someone-else")
        .query(&mut admin(&master))
        .unwrap();
    // In sync first. This also loads the scripts: a first EVALSHA is
    // refused (NOSCRIPT) and the WAIT already sent behind it waits out its
    // time too, so with a lagging replica the two waits would fill the
    // node timeout.
    let err = dlm.try_lock_all([&a, &b], TTL).unwrap_err();
    assert!(matches!(err, Error::Taken { .. }), "{err:?}");
    replica.pause();
    let err = dlm.try_lock_all([&a, &b], TTL).unwrap_err();
    let plain = dlm.try_lock(&b, TTL).unwrap_err();
    replica.resume();
    assert!(matches!(err, Error::Taken { .. }), "{err:?}");
    assert!(err.failures().is_empty(), "{err}");
    assert!(matches!(plain, Error::Taken { .. }), "{plain:?}");
    assert_eq!(
        get(&master, a.as_bytes()),
        None,
        "nothing of the set was taken"
    );
}

/// A lock refused because readers hold its name is taken, not a write the
/// lagging replica missed: the refusal (the readers' mark, from `SET NX
/// GET`; on Redis 6.2 a plain refusal) waits for no replica.
#[test]
fn a_lock_refused_by_readers_is_taken_while_the_replica_lags() {
    let (master, mut replica) = pair();
    let dlm = manager(master.url(), 1);
    let name = resource("readers-busy");
    let reader = dlm.rwlock(&name).unwrap().try_read(TTL).unwrap();
    replica.pause();
    let err = dlm.try_lock(&name, TTL).unwrap_err();
    replica.resume();
    assert!(matches!(err, Error::Taken { .. }), "{err:?}");
    assert!(err.failures().is_empty(), "{err}");
    reader.release().unwrap();
}

/// The acquisition's count script is sent by hash (loaded with each
/// connection's handshake): after a `SCRIPT FLUSH` on a pooled
/// connection it runs once more with its source in the same attempt,
/// with the `WAIT` behind it read in step: granted at once, with a token
/// above the last, with and without replicas to wait for.
#[test]
fn a_flushed_count_script_runs_again_in_the_same_attempt() {
    let (master, _replica) = pair();
    for acks in [0, 1] {
        let dlm = manager(master.url(), acks);
        let r = resource("count-flushed");
        let first = dlm.lock(&r, TTL).unwrap();
        let before = first.fencing_token().unwrap();
        first.release().unwrap();
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut admin(&master))
            .unwrap();
        let guard = dlm
            .lock(&r, TTL)
            .unwrap_or_else(|e| panic!("acks {acks}: {e}"));
        assert!(guard.fencing_token().unwrap() > before, "acks {acks}");
        assert!(guard.failures().is_empty(), "{:?}", guard.failures());
        guard.release().unwrap();
    }
}
