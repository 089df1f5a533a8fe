//! Peers that answer with bytes no Redis server sends: each costs about
//! the node timeout and one vote, with a typed error naming the node,
//! never a panic, an abort or a hang (before: a stack overflow that
//! aborted the process, 238 s for an endless array, 18.8 s for an endless
//! line, a panic on an empty line).

use crate::support;

use std::time::Duration;

use redlock_sync::{Error, LockManager};
use support::hostile::{ALL, HostilePeer, Hostility};
use support::{Nodes, resource, timed};

const TIMEOUT: Duration = Duration::from_millis(200);

fn manager(urls: Vec<String>) -> LockManager {
    LockManager::builder()
        .nodes(urls)
        .node_timeout(TIMEOUT)
        .retry(1, Duration::ZERO)
        .build()
        .unwrap()
}

/// Alone, each hostile peer is a typed failure of that node within about
/// the node timeout.
#[test]
fn each_hostile_peer_alone_is_a_typed_error_within_the_node_timeout() {
    for hostility in ALL {
        let peer = HostilePeer::start(hostility);
        let dlm = manager(vec![peer.url()]);
        let (result, took) =
            timed(|| dlm.try_lock(resource("hostile-alone"), Duration::from_secs(5)));
        let err = match result {
            Err(e @ Error::NoQuorum { .. }) => e,
            other => panic!("{hostility:?}: {other:?}"),
        };
        let f = &err.failures()[0];
        eprintln!("{hostility:?}: {f} ({took:?}, {} bytes sent)", peer.sent());
        assert_eq!(f.node(), peer.name(), "{hostility:?}");
        let says = match hostility {
            Hostility::DeepNesting => "bad reply: a reply nested deeper than 32 arrays",
            Hostility::AbsurdArray | Hostility::AbsurdBulk => "bad reply: a reply larger than",
            Hostility::EndlessLine => "bad reply: a line longer than",
            Hostility::EmptyLine => "bad reply: an empty line",
            Hostility::OtherProtocol => "not a Redis server: it answered \"HTTP/1.1 400",
            Hostility::SlowDrip | Hostility::Silence | Hostility::WrongShape => {
                "connected, no answer within 200ms"
            }
        };
        assert!(f.to_string().contains(says), "{hostility:?}: {f}");
        assert!(
            took < TIMEOUT + Duration::from_secs(1),
            "{hostility:?}: {took:?}"
        );
        // The same again on a fresh connection: nothing was left broken.
        let (again, took) =
            timed(|| dlm.try_lock(resource("hostile-alone"), Duration::from_secs(5)));
        assert!(again.is_err(), "{hostility:?}");
        assert!(
            took < TIMEOUT + Duration::from_secs(1),
            "{hostility:?}: {took:?}"
        );
    }
}

/// Beside two real nodes, each hostile peer is one vote against: the
/// lock is taken, released, and the peer named in the guard's failures.
#[test]
fn each_hostile_peer_beside_two_nodes_costs_one_vote() {
    let nodes = Nodes::start(2).unwrap();
    for hostility in ALL {
        let peer = HostilePeer::start(hostility);
        let mut urls = nodes.urls();
        urls.push(peer.url());
        let dlm = manager(urls);
        let (guard, took) = timed(|| dlm.lock(resource("hostile-beside"), Duration::from_secs(5)));
        let guard = guard.unwrap_or_else(|e| panic!("{hostility:?}: {e}"));
        assert!(
            took < TIMEOUT + Duration::from_secs(1),
            "{hostility:?}: {took:?}"
        );
        assert_eq!(guard.agreed(), 2, "{hostility:?}");
        assert_eq!(guard.failures()[0].node(), peer.name(), "{hostility:?}");
        guard.release().unwrap();
    }
}
