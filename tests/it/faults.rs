//! Nodes that are dead, hung (SIGSTOP), restarted or stripped of their
//! scripts: a minority is survived, a majority is a prompt `NoQuorum`.

use crate::support;

use std::time::Duration;

use redlock_sync::{Error, NodeErrorKind};
use support::{Nodes, get, manager, resource, timed};

const TIMEOUT: Duration = Duration::from_millis(300);
/// Slack for a shared, noisy 2-core machine, on top of the promise (a
/// faulty node costs at most the node timeout per round): a call that
/// spends three node timeouts where one is promised misses the bound.
const SLACK: Duration = Duration::from_millis(500);

#[test]
fn one_of_three_nodes_down_still_locks_and_releases() {
    let mut cluster = Nodes::start(3).unwrap();
    cluster[1].kill();
    let dlm = manager(&cluster, TIMEOUT);
    let key = resource("one-down");
    let guard = dlm.try_lock(&key, Duration::from_secs(10)).unwrap();
    assert_eq!(
        get(&cluster[0], key.as_bytes()).as_deref(),
        Some(guard.token())
    );
    assert_eq!(
        get(&cluster[2], key.as_bytes()).as_deref(),
        Some(guard.token())
    );
    let mut guard = guard;
    guard.extend(Duration::from_secs(20)).unwrap();
    guard.release().unwrap();
    assert_eq!(get(&cluster[0], key.as_bytes()), None);
    assert_eq!(get(&cluster[2], key.as_bytes()), None);
}

#[test]
fn two_of_three_nodes_down_is_no_quorum_naming_both_nodes() {
    let mut cluster = Nodes::start(3).unwrap();
    cluster[0].kill();
    cluster[2].kill();
    let mut dlm = manager(&cluster, TIMEOUT);
    dlm.set_retry(3, Duration::from_millis(50)).unwrap();
    let key = resource("two-down");
    let (result, took) = timed(|| dlm.lock(&key, Duration::from_secs(10)));
    let err = result.unwrap_err();
    match &err {
        Error::NoQuorum {
            agreed,
            nodes,
            quorum,
            ..
        } => {
            assert_eq!((*agreed, *nodes, *quorum), (1, 3, 2));
            let failures = err.failures();
            let failed: Vec<&str> = failures.iter().map(|f| f.node()).collect();
            assert_eq!(
                failed,
                [
                    format!("127.0.0.1:{}", cluster[0].port()),
                    format!("127.0.0.1:{}", cluster[2].port())
                ]
            );
            assert!(failures.iter().all(|f| f.kind() == NodeErrorKind::Connect));
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&cluster[0].port().to_string()), "{msg}");
    // Each node's cause is in the message, once (no source repeats it).
    assert!(msg.contains("connection refused"), "{msg}");
    assert!(std::error::Error::source(&err).is_none(), "{msg}");
    // 3 attempts x (timeout + cleanup timeout + max delay), and then some.
    assert!(
        took < 3 * (2 * TIMEOUT + Duration::from_millis(50)) + SLACK,
        "{took:?}"
    );
    // The failed attempts left nothing on the healthy node.
    assert_eq!(get(&cluster[1], key.as_bytes()), None);
}

#[test]
fn a_paused_node_costs_at_most_the_node_timeout() {
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, TIMEOUT);
    let key = resource("paused-one");
    // Warm the pool, so the hung node's failure is a reply timeout.
    dlm.try_lock(&key, Duration::from_secs(10))
        .unwrap()
        .release()
        .unwrap();
    cluster[2].pause();
    let (guard, took) = timed(|| dlm.try_lock(&key, Duration::from_secs(10)));
    let guard = guard.unwrap();
    assert!(took >= TIMEOUT, "waited {took:?} for the paused node");
    assert!(took < TIMEOUT + SLACK, "{took:?}");
    let (released, took) = timed(|| guard.release());
    released.unwrap();
    assert!(took < TIMEOUT + SLACK, "{took:?}");
    // A fresh connection to the paused node (connect succeeds in the
    // kernel, the handshake hangs) is bounded the same way.
    let fresh = manager(&cluster, TIMEOUT);
    let (guard, took) = timed(|| fresh.try_lock(&key, Duration::from_secs(10)));
    drop(guard.unwrap());
    assert!(took < TIMEOUT + SLACK, "{took:?}");
    cluster[2].resume();
}

#[test]
fn a_paused_majority_is_a_bounded_no_quorum_with_timeouts() {
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, TIMEOUT);
    let key = resource("paused-two");
    dlm.try_lock(&key, Duration::from_secs(10))
        .unwrap()
        .release()
        .unwrap();
    cluster[0].pause();
    cluster[1].pause();
    let (result, took) = timed(|| dlm.try_lock(&key, Duration::from_secs(10)));
    match result {
        Err(err @ Error::NoQuorum { .. }) => {
            let failures = err.failures();
            assert_eq!(failures.len(), 2);
            for f in failures {
                assert_eq!(f.kind(), NodeErrorKind::Timeout, "{f}");
                assert!(f.to_string().contains("300ms"), "{f}");
            }
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    // One round plus the cleanup round, each bounded by the timeout.
    assert!(took < 2 * TIMEOUT + SLACK, "{took:?}");
    assert_eq!(get(&cluster[2], key.as_bytes()), None);
    cluster[0].resume();
    cluster[1].resume();
    // Once resumed the cluster works again (the timed-out connections were
    // dropped, no late reply is mistaken for a new answer).
    for _ in 0..20 {
        let guard = dlm.try_lock(&key, Duration::from_secs(10)).unwrap();
        for server in &cluster.servers {
            assert_eq!(get(server, key.as_bytes()).as_deref(), Some(guard.token()));
        }
        guard.release().unwrap();
    }
}

#[test]
fn a_restarted_node_is_reconnected_within_the_call_and_kept_out_of_the_vote() {
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, TIMEOUT);
    let key = resource("restart");
    dlm.try_lock(&key, Duration::from_secs(10))
        .unwrap()
        .release()
        .unwrap();
    // The pooled connections to node 0 now lead nowhere, and its script
    // cache is empty.
    cluster[0].restart().unwrap();
    let (guard, took) = timed(|| dlm.try_lock(&key, Duration::from_secs(10)));
    let guard = guard.unwrap();
    assert!(took < TIMEOUT + Duration::from_millis(500), "{took:?}");
    // Reached within the same call (the key is there), but no vote: it
    // forgot what it granted (tests/restart.rs).
    assert_eq!(
        get(&cluster[0], key.as_bytes()).as_deref(),
        Some(guard.token()),
        "the restarted node must be reconnected within the very next lock"
    );
    assert!(dlm.check()[0].quarantine.is_some());
    guard.release().unwrap();
    assert_eq!(get(&cluster[0], key.as_bytes()), None);
}

#[test]
fn script_flush_is_survived() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, TIMEOUT);
    let key = resource("flush");
    let mut guard = dlm.try_lock(&key, Duration::from_secs(10)).unwrap();
    guard.extend(Duration::from_secs(10)).unwrap();
    for server in &cluster.servers {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut support::admin(server))
            .unwrap();
    }
    guard.extend(Duration::from_secs(20)).unwrap();
    for server in &cluster.servers {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut support::admin(server))
            .unwrap();
    }
    guard.release().unwrap();
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()), None);
    }
}

/// A semaphore's count check is sent by hash: after a `SCRIPT FLUSH` one
/// attempt gets no vote, the script is loaded again, and the next attempt
/// takes a permit (one `acquire` does, within its retries).
#[test]
fn script_flush_costs_a_permit_one_attempt_at_most() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, TIMEOUT);
    let sem = dlm.semaphore(resource("flush-permit"), 2).unwrap();
    sem.try_acquire(Duration::from_secs(10))
        .unwrap()
        .release()
        .unwrap();
    for server in &cluster.servers {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut support::admin(server))
            .unwrap();
    }
    let first = sem.try_acquire(Duration::from_secs(10));
    let err = first.map(drop).unwrap_err();
    assert!(err.to_string().contains("NOSCRIPT"), "{err}");
    let permit = sem.try_acquire(Duration::from_secs(10)).unwrap();
    // Nothing of the failed attempt is left beside the permit: each slot
    // key is absent or holds the new permit's token.
    let mine = String::from_utf8(permit.resource().to_vec()).unwrap();
    let here = format!(":permit:{}", permit.slot());
    for slot in 0..2 {
        let key = mine.replace(&here, &format!(":permit:{slot}"));
        for server in &cluster.servers {
            let held = get(server, key.as_bytes());
            assert!(
                held.is_none() || held.as_deref() == Some(permit.token()),
                "{key} holds {held:?}"
            );
        }
    }
    permit.release().unwrap();
}

#[test]
fn dropping_a_guard_with_every_node_dead_returns_promptly() {
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, TIMEOUT);
    let guard = dlm.try_lock("drop-dead", Duration::from_secs(10)).unwrap();
    for server in &mut cluster.servers {
        server.kill();
    }
    let ((), took) = timed(|| drop(guard));
    assert!(took < TIMEOUT + SLACK, "{took:?}");
}

#[test]
fn dropping_a_guard_with_every_node_hung_is_bounded_by_the_node_timeout() {
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, TIMEOUT);
    let guard = dlm.try_lock("drop-hung", Duration::from_secs(10)).unwrap();
    for server in &mut cluster.servers {
        server.pause();
    }
    let ((), took) = timed(|| drop(guard));
    assert!(took >= TIMEOUT, "{took:?}");
    assert!(took < TIMEOUT + SLACK, "{took:?}");
    for server in &mut cluster.servers {
        server.resume();
    }
}

#[test]
fn a_node_that_comes_back_is_used_again() {
    let mut cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, TIMEOUT);
    let key = resource("back");
    cluster[1].kill();
    cluster[2].kill();
    assert!(matches!(
        dlm.try_lock(&key, Duration::from_secs(10)),
        Err(Error::NoQuorum { .. })
    ));
    cluster[1].start_again().unwrap();
    let guard = dlm.try_lock(&key, Duration::from_secs(10)).unwrap();
    assert_eq!(
        get(&cluster[1], key.as_bytes()).as_deref(),
        Some(guard.token())
    );
}

fn config_set(server: &support::Server, name: &str, value: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query(&mut support::admin(server))
        .unwrap();
}

#[test]
fn error_replies_are_votes_against_with_their_code() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster, TIMEOUT);
    let key = resource("oom");
    // Warm the pools, then make node 0 refuse writes (out of memory).
    dlm.try_lock(&key, Duration::from_secs(10))
        .unwrap()
        .release()
        .unwrap();
    config_set(&cluster[0], "maxmemory", "1");
    let guard = dlm.try_lock(&key, Duration::from_secs(10)).unwrap();
    assert_eq!(get(&cluster[0], key.as_bytes()), None);
    guard.release().unwrap();

    config_set(&cluster[1], "maxmemory", "1");
    let err = dlm.try_lock(&key, Duration::from_secs(10)).unwrap_err();
    let failures = err.failures();
    assert_eq!(failures.len(), 2, "{err}");
    for f in failures {
        assert_eq!(f.kind(), NodeErrorKind::Server, "{f}");
        assert_eq!(f.code(), Some("OOM"), "{f}");
        // The message names the command and key refused.
        let expected = format!("error reply OOM to SET {key:?}");
        assert!(f.to_string().contains(&expected), "{f}");
        assert!(
            f.to_string().contains("maxmemory"),
            "the server's words: {f}"
        );
        assert_eq!(f.command(), Some(&format!("SET {key:?}")[..]), "{f}");
    }
    assert_eq!(get(&cluster[2], key.as_bytes()), None, "cleaned up");
    // The connections stayed in step: the next lock works everywhere.
    config_set(&cluster[0], "maxmemory", "0");
    config_set(&cluster[1], "maxmemory", "0");
    let guard = dlm.try_lock(&key, Duration::from_secs(10)).unwrap();
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()).as_deref(), Some(guard.token()));
    }
}

/// A connection that breaks after some replies of the acquisition's
/// pipeline ran the request: it is that node's failure, cleaned up as
/// one, never sent again (before, the whole pipeline went again on a new
/// connection, where the lock key, ours, refused it: a plain no, never
/// cleaned up, so the key blocked the resource on that node until its
/// TTL).
#[test]
fn a_connection_cut_after_part_of_the_pipeline_is_not_sent_again() {
    use support::faults::Rig;
    use support::proxy::Mode;
    let rig = Rig::start(3, None);
    let dlm = rig.manager(1, Duration::ZERO);
    let r = resource("cut-pipeline");
    // A pooled connection through the proxy.
    dlm.lock(resource("cut-warm"), Duration::from_secs(5))
        .unwrap()
        .release()
        .unwrap();
    // The two other nodes are held by another owner: the attempt fails,
    // and must clean up what it wrote.
    for node in &rig.nodes[1..] {
        let _: () = redis::Commands::set(&mut node.admin(), &r, "another-owner").unwrap();
    }
    // The first reply (`+OK` of the SET) goes through; then the end.
    rig.nodes[0].proxy.set(Mode::CutOnce(5));
    let ttl = Duration::from_secs(60);
    let err = dlm.try_lock(&r, ttl).unwrap_err();
    assert!(matches!(err, Error::Taken { .. }), "{err:?}");
    rig.nodes[0].proxy.set(Mode::Pass);
    assert_eq!(
        rig.nodes[0].get(&r),
        None,
        "the attempt's key was left on the node: {err}"
    );
}
