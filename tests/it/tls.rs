//! `rediss://` nodes (feature `tls`) against real `redis-server --tls-port`
//! processes with certificates made at test time.

use crate::support;

use std::net::SocketAddr;
use std::thread;
use std::time::Duration;

use redis::Commands;
use redlock_sync::{Error, LockManager, NodeErrorKind, release_channel};
use support::proxy::{Mode, Proxy};
use support::redis_cluster::{RedisCluster, keyslot, shard_subscribers};
use support::sentinel::tls_group;
use support::tls::{Certs, tls_cluster, tls_redis_cluster, tls_server, tls_url};
use support::{Nodes, admin, assert_woken, get, resource, timed, wait_for};

const TTL: Duration = Duration::from_secs(10);

const TIMEOUT: Duration = Duration::from_millis(200);

fn builder(urls: impl IntoIterator<Item = String>) -> redlock_sync::Builder {
    LockManager::builder()
        .nodes(urls)
        .node_timeout(TIMEOUT)
        .retry(1, Duration::ZERO)
}

fn connections_received(server: &support::Server) -> u64 {
    support::info_field(&mut admin(server), "stats", "total_connections_received")
        .unwrap()
        .unwrap()
        .parse()
        .unwrap()
}

/// The one failure of a single-node error, checked to be a TLS failure
/// returned quickly.
fn tls_failure(dlm: &LockManager) -> String {
    let (result, took) = timed(|| dlm.lock(resource("tls-fail"), Duration::from_secs(5)));
    let err = result.unwrap_err();
    assert!(took < Duration::from_secs(2), "{took:?}");
    let failures = err.failures();
    assert_eq!(failures.len(), 1, "{err}");
    assert_eq!(failures[0].kind(), NodeErrorKind::Tls, "{err}");
    println!("{}", failures[0]);
    failures[0].to_string()
}

#[test]
fn lock_extend_keep_alive_and_release_over_tls_with_pooled_connections() {
    let certs = Certs::make();
    let Some((cluster, ports)) = tls_cluster(&certs, 3, false) else {
        return;
    };
    let dlm = builder(ports.iter().map(|p| tls_url(*p)))
        .tls_root_cert(certs.read("ca.pem"))
        .build()
        .unwrap();
    let key = resource("tls");
    let mut guard = dlm.lock(&key, Duration::from_secs(5)).unwrap();
    guard.extend(Duration::from_secs(10)).unwrap();
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()).as_deref(), Some(guard.token()));
    }
    guard.release().unwrap();
    let guard = dlm
        .lock(&key, Duration::from_millis(300))
        .unwrap()
        .keep_alive();
    thread::sleep(Duration::from_millis(800));
    guard.ensure_held().unwrap();
    drop(guard);
    for server in &cluster.servers {
        assert_eq!(get(server, key.as_bytes()), None);
    }
    // Pooled: 100 more cycles open no new connection.
    let before: Vec<u64> = cluster.servers.iter().map(connections_received).collect();
    for _ in 0..100 {
        dlm.lock(&key, Duration::from_secs(5))
            .unwrap()
            .release()
            .unwrap();
    }
    for (server, before) in cluster.servers.iter().zip(before) {
        // The admin connection that reads the figure is one of them.
        let grew = connections_received(server) - before;
        assert!(grew <= 2, "{grew} new connections for 100 cycles");
    }
}

#[test]
fn an_untrusted_certificate_is_a_tls_failure_naming_the_node() {
    let certs = Certs::make();
    let Some((_server, port)) = tls_server(&certs, false) else {
        return;
    };
    // Mozilla's roots do not know our private CA...
    let dlm = builder([tls_url(port)]).build().unwrap();
    let text = tls_failure(&dlm);
    assert!(text.contains(&port.to_string()), "{text}");
    assert!(text.contains("UnknownIssuer"), "{text}");
    // ...nor does another private CA.
    let dlm = builder([tls_url(port)])
        .tls_root_cert(certs.read("other-ca.pem"))
        .build()
        .unwrap();
    assert!(tls_failure(&dlm).contains("UnknownIssuer"));
}

#[test]
fn the_server_name_is_verified_against_the_url_host() {
    let certs = Certs::make();
    let Some((_server, port)) = tls_server(&certs, false) else {
        return;
    };
    // Names in the certificate, resolved to the server, are accepted...
    let to_server = move |_: &str, p: u16| Ok(vec![SocketAddr::from(([127, 0, 0, 1], p))]);
    for host in ["localhost", "redis.test"] {
        let dlm = builder([format!("rediss://{host}:{port}")])
            .tls_root_cert(certs.read("ca.pem"))
            .resolver(to_server)
            .build()
            .unwrap();
        dlm.lock(resource("tls-name"), Duration::from_secs(5))
            .unwrap()
            .release()
            .unwrap();
    }
    // ...another name for the same address is not.
    let dlm = builder([format!("rediss://elsewhere.test:{port}")])
        .tls_root_cert(certs.read("ca.pem"))
        .resolver(to_server)
        .build()
        .unwrap();
    let text = tls_failure(&dlm);
    assert!(text.contains("not valid for name"), "{text}");
}

#[test]
fn insecure_urls_skip_verification() {
    let certs = Certs::make();
    let Some((server, port)) = tls_server(&certs, false) else {
        return;
    };
    let dlm = builder([format!("{}#insecure", tls_url(port))])
        .build()
        .unwrap();
    let key = resource("tls-insecure");
    let guard = dlm.lock(&key, Duration::from_secs(5)).unwrap();
    assert_eq!(get(&server, key.as_bytes()).as_deref(), Some(guard.token()));
}

#[test]
fn mutual_tls_with_and_without_a_client_certificate() {
    let certs = Certs::make();
    let Some((_server, port)) = tls_server(&certs, true) else {
        return;
    };
    let dlm = builder([tls_url(port)])
        .tls_root_cert(certs.read("ca.pem"))
        .tls_client_cert(certs.read("client.pem"), certs.read("client.key"))
        .build()
        .unwrap();
    dlm.lock(resource("mtls"), Duration::from_secs(5))
        .unwrap()
        .release()
        .unwrap();
    // Without one, the server refuses: a TLS failure, quickly.
    let dlm = builder([tls_url(port)])
        .tls_root_cert(certs.read("ca.pem"))
        .build()
        .unwrap();
    let text = tls_failure(&dlm);
    assert!(text.to_lowercase().contains("certificate"), "{text}");
}

#[test]
fn a_plain_server_behind_a_tls_url_fails_that_node_within_the_node_timeout() {
    let cluster = Nodes::start(1).unwrap();
    let port = cluster.servers[0].port();
    let dlm = builder([tls_url(port)])
        .tls_root_cert(Certs::make().read("ca.pem"))
        .build()
        .unwrap();
    // Redis reads the ClientHello as an inline command: it either answers
    // an error (not TLS: a TLS failure) or waits for a newline (the node
    // timeout), depending on the random bytes; never longer.
    for _ in 0..5 {
        let (result, took) = timed(|| dlm.lock(resource("plain"), Duration::from_secs(5)));
        assert!(took < TIMEOUT + Duration::from_millis(500), "{took:?}");
        let err = result.unwrap_err();
        let f = &err.failures()[0];
        assert!(
            matches!(
                f.kind(),
                NodeErrorKind::Tls | NodeErrorKind::Timeout | NodeErrorKind::Connect
            ),
            "{f}"
        );
        assert!(f.to_string().contains(&port.to_string()), "{f}");
        // Each way of failing says TLS (never "no connection within").
        assert!(f.to_string().contains("TLS"), "{f}");
    }
}

/// A plain server that answers the ClientHello with a RESP error (as
/// Redis does to a request it cannot read) is said to speak no TLS.
#[test]
fn a_plain_answer_to_the_tls_handshake_says_the_server_speaks_no_tls() {
    use std::io::{Read, Write};
    let listener = support::server::claimed_listener().unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let mut hello = [0u8; 512];
            let _ = s.read(&mut hello);
            let _ = s.write_all(b"-ERR Protocol error: unbalanced quotes in request\r\n");
            thread::sleep(Duration::from_millis(500));
        }
    });
    let dlm = builder([tls_url(port)])
        .tls_root_cert(Certs::make().read("ca.pem"))
        .build()
        .unwrap();
    let text = tls_failure(&dlm);
    assert!(text.contains("answered without TLS"), "{text}");
    assert!(text.contains("-ERR Protocol error"), "{text}");
    assert!(text.contains("redis://"), "{text}");
}

/// The killed, paused and black-holed rows of the fault matrix, over TLS:
/// a minority costs at most the node timeout and the lock is taken; a
/// majority is `NoQuorum` naming each node, within the node timeout.
#[test]
fn killed_paused_and_black_holed_nodes_over_tls() {
    const QUARANTINE: Duration = Duration::from_secs(3);
    let certs = Certs::make();
    let Some((mut cluster, ports)) = tls_cluster(&certs, 3, false) else {
        return;
    };
    let proxies: Vec<Proxy> = ports
        .iter()
        .map(|p| Proxy::start(SocketAddr::from(([127, 0, 0, 1], *p))).unwrap())
        .collect();
    let urls: Vec<String> = proxies
        .iter()
        .map(|p| format!("rediss://{}", p.url().trim_start_matches("redis://")))
        .collect();
    let dlm = builder(urls)
        .tls_root_cert(certs.read("ca.pem"))
        .build()
        .unwrap();
    let key = resource("tls-faults");
    let cycle = |expect_ok: bool, kinds: &[NodeErrorKind]| {
        // A 3 s TTL: the restarted nodes below are kept out that long
        // (room for restarts slowed by a loaded machine: CI once took
        // over a second to restart both).
        let (result, took) = timed(|| dlm.lock(&key, QUARANTINE));
        // Generous: the bench measures the precision.
        assert!(took < TIMEOUT * 2 + Duration::from_millis(500), "{took:?}");
        match result {
            Ok(guard) if expect_ok => guard.release().map(|_| ()).unwrap_or(()),
            Err(err @ Error::NoQuorum { .. }) if !expect_ok => {
                let failures = err.failures();
                assert_eq!(failures.len(), 2, "{err}");
                for f in failures {
                    assert!(kinds.contains(&f.kind()), "{f}");
                }
            }
            other => panic!("expected ok={expect_ok}, got {other:?}"),
        }
    };
    cycle(true, &[]); // warm the pools
    // Killed.
    cluster.servers[0].kill();
    cycle(true, &[]);
    cluster.servers[1].kill();
    cycle(
        false,
        &[NodeErrorKind::Connect, NodeErrorKind::Disconnected],
    );
    cluster.servers[0].start_again().unwrap();
    cluster.servers[1].start_again().unwrap();
    // Restarted empty: kept out of votes for the longest TTL used.
    cycle(false, &[NodeErrorKind::Restarted]);
    // The TTL, and uptime rounding (whole seconds).
    thread::sleep(QUARANTINE + Duration::from_millis(1100));
    cycle(true, &[]);
    // Paused.
    cluster.servers[0].pause();
    cycle(true, &[]);
    cluster.servers[1].pause();
    cycle(false, &[NodeErrorKind::Timeout]);
    cluster.servers[0].resume();
    cluster.servers[1].resume();
    thread::sleep(Duration::from_millis(100));
    cycle(true, &[]);
    // Black-holed by the proxy.
    proxies[0].set(Mode::Blackhole);
    cycle(true, &[]);
    proxies[1].set(Mode::Blackhole);
    cycle(false, &[NodeErrorKind::Timeout]);
    proxies[0].set(Mode::Pass);
    proxies[1].set(Mode::Pass);
    cycle(true, &[]);
    // Nothing of ours is left anywhere.
    thread::sleep(Duration::from_millis(300));
    for server in &cluster.servers {
        let left: Option<Vec<u8>> = admin(server).get(&key).unwrap();
        assert_eq!(left, None);
    }
}

/// A name that `cluster` keeps on master `i`.
fn name_on(cluster: &RedisCluster, i: usize, prefix: &str) -> String {
    (0..)
        .map(|n| resource(&format!("{prefix}-{n}")))
        .find(|r| cluster.master_of(r.as_bytes()) == i)
        .unwrap()
}

/// A Redis Cluster served over TLS, as MemoryDB and ElastiCache with
/// in-transit encryption are, given by one `rediss://` seed: the slot map
/// and the redirects name TLS ports, reached with the seed's scheme and
/// trust. Locks land on each shard, a set spans the shards, a moved slot
/// is followed, and a waiter is woken by the release's sharded message.
#[test]
fn a_redis_cluster_over_tls_from_one_seed() {
    let certs = Certs::make();
    let Some((cluster, ports)) = tls_redis_cluster(&certs, 3, 0) else {
        return;
    };
    let builder = || {
        LockManager::builder()
            .cluster([tls_url(ports[0])])
            .tls_root_cert(certs.read("ca.pem"))
            .node_timeout(Duration::from_millis(500))
    };
    let dlm = builder().retry(1, Duration::ZERO).build().unwrap();
    let names: Vec<String> = (0..3).map(|i| name_on(&cluster, i, "tls-shard")).collect();
    for (i, name) in names.iter().enumerate() {
        let guard = dlm.lock(name, TTL).unwrap();
        let held: Option<Vec<u8>> = admin(&cluster.masters[i]).get(name).unwrap();
        assert_eq!(held.as_deref(), Some(guard.token()), "{name}");
        guard.release().unwrap();
    }
    let set = dlm.lock_all(&names, TTL).unwrap();
    for (i, name) in names.iter().enumerate() {
        let held: Option<Vec<u8>> = admin(&cluster.masters[i]).get(name).unwrap();
        assert_eq!(held.as_deref(), Some(set.token()), "{name}");
    }
    set.release().unwrap();
    // A slot moved under a held lock: MOVED names the TLS port.
    let moving = &names[0];
    let slot = keyslot(&cluster.masters[0], moving.as_bytes());
    let mut guard = dlm.lock(moving, TTL).unwrap();
    cluster.move_slot(slot, 0, 1, || {});
    guard.extend(TTL).unwrap();
    let held: Option<Vec<u8>> = admin(&cluster.masters[1]).get(moving).unwrap();
    assert_eq!(held.as_deref(), Some(guard.token()));
    // Its release wakes a waiter pausing 60 s, over a TLS listener.
    let waiter = builder().retry(1, Duration::from_secs(60)).build().unwrap();
    let channel = release_channel(moving.as_bytes());
    let got = assert_woken(
        || waiter.try_lock_for(moving, TTL, Duration::from_secs(120)),
        || {
            let subscribed = wait_for(Duration::from_secs(10), || {
                shard_subscribers(&cluster.masters[1], &channel) == 1
            });
            assert!(subscribed.is_some(), "no TLS listener on the new owner");
        },
        || guard.release().unwrap(),
    );
    assert!(got.is_ok(), "{got:?}");
}

#[test]
fn a_sentinel_group_over_tls_is_asked_watched_and_locked_over_tls() {
    let _heavy = support::heavy();
    let certs = Certs::make();
    let Some((group, url)) = tls_group(&certs) else {
        return;
    };
    let name = resource("tls-sentinel");
    let manager = |root: &str| {
        LockManager::builder()
            .node(&url)
            .node_timeout(Duration::from_secs(1))
            .tls_root_cert(certs.read(root))
            .build()
            .unwrap()
    };
    // The Sentinels' certificates are checked: under another root they
    // are not believed, and that is said.
    let e = manager("other-ca.pem")
        .try_lock(&name, TTL)
        .expect_err("Sentinels believed under an untrusted root");
    assert!(e.to_string().contains("TLS"), "{e}");
    // Under the right root: asked over TLS, their answer (the master's
    // TLS port) dialled over TLS, the master's certificate naming the
    // address announced (127.0.0.1).
    let dlm = manager("ca.pem");
    let guard = dlm.try_lock(&name, TTL).unwrap();
    assert!(get(&group.servers[0], name.as_bytes()).is_some());
    guard.release().unwrap();
    group.until_watched();
}
