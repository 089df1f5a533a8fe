//! What errors say, as `{e}` (what `eprintln!` and logs print) and `{e:?}`
//! (what returning the error from `main` prints): every failing node with
//! its cause on one line, no bookkeeping, and an expired lock told apart
//! from one taken over.

use crate::support;

use std::error::Error as _;
use std::time::Duration;

use redlock_sync::{Error, HolderName, LockManager, NodeErrorKind};
use support::{Nodes, Server, admin, resource};

const TTL: Duration = Duration::from_secs(10);

fn manager(urls: &[String]) -> LockManager {
    support::manager_over(urls.to_vec(), Duration::from_secs(2))
}

/// One node, one cause: the message of a lock attempt on it.
fn failure(url: String) -> (Error, String) {
    let err = manager(&[url]).lock(resource("causes"), TTL).unwrap_err();
    let msg = err.to_string();
    (err, msg)
}

#[test]
fn each_failing_node_is_named_with_its_cause_on_one_line() {
    let secured = Server::start_with(&["--requirepass", "s3cret"]).unwrap();
    let open = Server::start().unwrap();
    let mut dead = Server::start().unwrap();
    dead.kill();
    let cases = [
        (
            format!("redis://:wrong@127.0.0.1:{}", secured.port()),
            NodeErrorKind::Auth,
            "wrong user name or password (WRONGPASS",
        ),
        (
            format!("redis://127.0.0.1:{}", secured.port()),
            NodeErrorKind::Auth,
            "requires a password and none was given (NOAUTH",
        ),
        (
            format!("redis://:s3cret@127.0.0.1:{}", open.port()),
            NodeErrorKind::Auth,
            "a password was given but the server has none set",
        ),
        (
            format!("redis://127.0.0.1:{}", dead.port()),
            NodeErrorKind::Connect,
            "connection refused",
        ),
    ];
    for (url, kind, says) in cases {
        let (err, msg) = failure(url.clone());
        assert!(matches!(err, Error::NoQuorum { .. }), "{url}: {err:?}");
        assert_eq!(err.failures()[0].kind(), kind, "{url}: {msg}");
        let port = url.rsplit(':').next().unwrap();
        assert!(
            msg.contains(&format!("(failed: 127.0.0.1:{port}: ")),
            "{url}: {msg}"
        );
        assert!(msg.contains(says), "{url}: expected {says:?} in {msg}");
        assert!(!msg.contains('\n'), "{msg}");
        assert!(!msg.contains("s3cret") && !msg.contains("wrong@"), "{msg}");
    }
}

#[test]
fn a_host_that_does_not_resolve_says_so() {
    let dlm = LockManager::builder()
        .node("redis://cache.example.test:6390")
        .resolver(|_, _| {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no such host",
            ))
        })
        .retry(1, Duration::ZERO)
        .build()
        .unwrap();
    let err = dlm.lock(resource("unresolved"), TTL).unwrap_err();
    assert_eq!(err.failures()[0].kind(), NodeErrorKind::Resolve);
    let msg = err.to_string();
    assert!(
        msg.contains(
            "cache.example.test:6390: name resolution failed (cache.example.test: no such host)"
        ),
        "{msg}"
    );
    // A name with no address at all is a resolution failure too.
    let dlm = LockManager::builder()
        .node("redis://empty.example.test:6390")
        .resolver(|_, _| Ok(Vec::new()))
        .retry(1, Duration::ZERO)
        .build()
        .unwrap();
    let err = dlm.lock(resource("unresolved"), TTL).unwrap_err();
    assert_eq!(err.failures()[0].kind(), NodeErrorKind::Resolve, "{err}");
    assert!(err.to_string().contains("has no address"), "{err}");
}

#[test]
fn debug_is_readable_and_taken_has_no_empty_source() {
    let cluster = Nodes::start(3).unwrap();
    let mut urls = cluster.urls();
    let mut dead = Server::start().unwrap();
    dead.kill();
    urls.push(format!("redis://127.0.0.1:{}", dead.port()));
    let r = resource("debug");
    let holder = manager(&cluster.urls());
    let _held = holder.lock(&r, TTL).unwrap();

    // Taken, every node answered: no source, nothing about failures.
    let err = manager(&cluster.urls()).lock(&r, TTL).unwrap_err();
    assert!(matches!(err, Error::Taken { .. }), "{err:?}");
    assert!(err.source().is_none(), "{:?}", err.source());
    assert!(!err.to_string().contains("failed"), "{err}");

    // Taken with a dead node among four: the dead node and its cause,
    // in Display and in Debug, and no bookkeeping fields in Debug.
    let err = manager(&urls).lock(&r, TTL).unwrap_err();
    assert!(matches!(err, Error::Taken { .. }), "{err:?}");
    let cause = format!("127.0.0.1:{}: connection refused", dead.port());
    assert!(err.to_string().contains(&cause), "{err}");
    let debug = format!("{err:?}");
    assert!(debug.contains(&cause), "{debug}");
    for internal in ["settled", "connecting", "timeout"] {
        assert!(!debug.contains(internal), "{internal} in {debug}");
    }
    // Each cause printed once: the message names it, so it is no source
    // too. A reporter that walks the chain (as `anyhow`'s `{:#}` does)
    // prints the dead node once; the node's socket error is still there
    // for programs.
    assert!(err.source().is_none(), "{:?}", err.source());
    let mut chain = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        chain.push_str(&format!(": {e}"));
        next = e.source();
    }
    assert_eq!(chain.matches(&cause).count(), 1, "{chain}");
    let io = err.failures()[0].io_error().map(std::io::Error::kind);
    assert_eq!(io, Some(std::io::ErrorKind::ConnectionRefused), "{err:?}");
}

/// Holders name themselves (issue 42): the lock key's value carries the
/// host, the process id and the label after the random part, and a
/// refused acquisition names the holder, also after a fair wait (whose
/// claims name nobody: the first refusal's holder is kept). With naming
/// off the value is the 32 hex digits alone, and the error names the
/// token whole.
#[test]
fn a_taken_lock_names_its_holder_unless_naming_is_off() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("named-holder");
    let labelled = LockManager::builder()
        .nodes(cluster.urls())
        .holder_label("nightly report")
        .build()
        .unwrap();
    let guard = labelled.lock(&r, TTL).unwrap();
    let token = String::from_utf8(guard.token().to_vec()).unwrap();
    let name = HolderName::parse(guard.token()).expect("the token names its holder");
    assert_eq!(name.pid, std::process::id());
    assert_eq!(name.label.as_deref(), Some("nightly_report"));
    assert!(
        token[..32].bytes().all(|b| b.is_ascii_hexdigit()),
        "{token}"
    );
    let stored: String = redis::cmd("GET")
        .arg(&r)
        .query(&mut admin(&cluster.servers[0]))
        .unwrap();
    assert_eq!(stored, token);
    let shown = format!("{name}, token {}…", &token[..8]);
    // Servers before Redis 7.0 take no `SET ... NX GET`: a refusal there
    // names nobody (as documented).
    let names = support::server::server_at_least(7, 0);
    for waits in [false, true] {
        let other = manager(&cluster.urls());
        let err = match waits {
            false => other.try_lock(&r, TTL),
            true => other.try_lock_for(&r, TTL, Duration::from_millis(400)),
        }
        .unwrap_err();
        match &err {
            Error::Taken { holder, .. } => {
                assert_eq!(holder.as_deref(), names.then_some(&shown[..]))
            }
            other => panic!("{other:?}"),
        }
        let msg = err.to_string();
        let owner = match names {
            true => format!("another owner ({shown})"),
            false => "another owner".to_owned(),
        };
        assert!(
            msg.contains(&format!("locked by {owner} on 3 of 3 nodes")),
            "{msg}"
        );
    }
    guard.release().unwrap();

    let anonymous = LockManager::builder()
        .nodes(cluster.urls())
        .name_holders(false)
        .build()
        .unwrap();
    let guard = anonymous.lock(&r, TTL).unwrap();
    // 32 random hex digits, `!` and the servers it asked (8 hex digits
    // of each one's run_id), then `#` and the attempt's number (each
    // attempt writes a value of its own).
    let (random, rest) = guard.token().split_at(32);
    assert!(
        random.iter().all(u8::is_ascii_hexdigit),
        "{:?}",
        guard.token()
    );
    let rest = std::str::from_utf8(rest).unwrap();
    let servers = rest
        .strip_prefix('!')
        .and_then(|r| r.strip_suffix("#1"))
        .unwrap_or_else(|| panic!("{rest}"));
    let servers: Vec<&str> = servers.split('.').collect();
    assert_eq!(servers.len(), 3, "{rest}");
    assert!(
        servers
            .iter()
            .all(|d| d.len() == 8 && d.bytes().all(|b| b.is_ascii_hexdigit())),
        "{rest}"
    );
    assert_eq!(HolderName::parse(guard.token()), None);
    let err = manager(&cluster.urls()).try_lock(&r, TTL).unwrap_err();
    let token = String::from_utf8(guard.token().to_vec()).unwrap();
    let owner = match names {
        true => format!("another owner ({token}) on"),
        false => "another owner on".to_owned(),
    };
    assert!(err.to_string().contains(&owner), "{err}");
}

/// Another Redlock client on the same keys (the `redlock` crate, which
/// writes 20 random bytes with `SET NX PX` and deletes by comparing them,
/// as node-redlock and redsync do): it is refused while our named token
/// holds the key, and we while its value does; our error shows its value
/// whole (it names nobody); each release deletes only its own value.
#[test]
fn another_redlock_client_and_named_tokens_exclude_each_other() {
    let cluster = Nodes::start(3).unwrap();
    let r = resource("named-and-rival");
    let ours = manager(&cluster.urls());
    let rival = redlock::RedLock::new(cluster.urls());
    let guard = ours.lock(&r, TTL).unwrap();
    assert!(HolderName::parse(guard.token()).is_some());
    assert!(rival.lock(r.as_bytes(), 10_000).unwrap().is_none());
    guard.release().unwrap();
    let theirs = rival.lock(r.as_bytes(), 10_000).unwrap().expect("free");
    let err = ours.try_lock(&r, TTL).unwrap_err();
    // Its 20 random bytes, lossy and escaped: one line.
    let shown = String::from_utf8_lossy(&theirs.val)
        .escape_debug()
        .to_string();
    // Before Redis 7.0 no refusal names a holder.
    let names = support::server::server_at_least(7, 0);
    match &err {
        Error::Taken { holder, .. } => {
            assert_eq!(holder.as_deref(), names.then_some(&shown[..]))
        }
        other => panic!("{other:?}"),
    }
    rival.unlock(&theirs);
    ours.try_lock(&r, TTL).unwrap().release().unwrap();
}

#[test]
fn an_expired_lock_a_removed_one_and_a_taken_over_one_each_say_so() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster.urls());
    let r = resource("expired");

    // Expired: the keys are gone on every node, nobody else holds it.
    let mut guard = dlm.lock(&r, Duration::from_millis(200)).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let err = guard.extend(TTL).unwrap_err();
    assert!(err.to_string().contains("validity ran out"), "{err}");
    let err = guard.release().unwrap_err();
    match &err {
        Error::NotHeld {
            lost_on: 3,
            taken_over: 0,
            removed: false,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("it expired or was removed") && !msg.contains("taken over"),
        "{msg}"
    );

    // Removed while its validity ran (a force unlock): not "expired".
    let mut guard = dlm.lock(&r, TTL).unwrap();
    dlm.force_unlock(&r).unwrap();
    let err = guard.extend(TTL).unwrap_err();
    match &err {
        Error::NotHeld {
            lost_on: 3,
            taken_over: 0,
            removed: true,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("its key was removed before it could expire")
            && msg.contains("a force unlock")
            && !msg.contains("expired or"),
        "{msg}"
    );
    assert!(
        guard
            .ensure_held()
            .unwrap_err()
            .to_string()
            .contains("removed before")
    );
    // The same from a release (a DEL on each node, while the validity runs).
    let guard = dlm.lock(&r, TTL).unwrap();
    for server in &cluster.servers {
        let _: () = redis::cmd("DEL").arg(&r).query(&mut admin(server)).unwrap();
    }
    let msg = guard.release().unwrap_err().to_string();
    assert!(msg.contains("removed before it could expire"), "{msg}");

    // Taken over: another owner's token on two nodes, none on the third.
    let mut guard = dlm.lock(&r, TTL).unwrap();
    for (i, server) in cluster.servers.iter().enumerate() {
        let mut con = admin(server);
        if i < 2 {
            let _: () = redis::cmd("SET")
                .arg(&r)
                .arg("other")
                .query(&mut con)
                .unwrap();
        } else {
            let _: () = redis::cmd("DEL").arg(&r).query(&mut con).unwrap();
        }
    }
    let err = guard.extend(TTL).unwrap_err();
    match &err {
        Error::NotHeld {
            lost_on: 3,
            taken_over: 2,
            ..
        } => {}
        other => panic!("{other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("taken over: 2 of 3 nodes hold another owner's token, and 1 more"),
        "{msg}"
    );
    assert!(
        guard
            .ensure_held()
            .unwrap_err()
            .to_string()
            .contains("taken over")
    );
}

/// A name of 60 kB (the longest are 64 KiB) makes a short message: its
/// first 100 bytes and its length, in `Taken`'s field, the message and a
/// set's list. A longer one is refused before any network call.
#[test]
fn a_long_resource_name_is_cut_in_messages() {
    let cluster = Nodes::start(3).unwrap();
    let dlm = manager(&cluster.urls());
    let name = format!("{}{}", resource("long"), "x".repeat(60_000));
    let _held = dlm.try_lock(&name, TTL).unwrap();
    let shown = format!("{}... ({} bytes)", &name[..100], name.len());
    match dlm.try_lock(&name, TTL) {
        Err(Error::Taken { resource, .. }) => assert_eq!(resource, shown),
        other => panic!("{other:?}"),
    }
    let message = dlm.try_lock(&name, TTL).unwrap_err().to_string();
    assert!(message.len() < 400, "{} bytes: {message}", message.len());
    let set = dlm
        .try_lock_all(&[resource("long-free"), name.clone()], TTL)
        .unwrap_err()
        .to_string();
    assert!(set.len() < 400, "{} bytes: {set}", set.len());
    // 64 MB (before: 1.5 s, "no connection within" blamed on three
    // healthy nodes, and the next lock slowed): refused at once, saying
    // why, and the manager unharmed.
    let huge = "y".repeat(64 << 20);
    let (refused, took) = support::timed(|| dlm.try_lock(&huge, TTL));
    match refused {
        Err(Error::InvalidArgument { reason, .. }) => {
            assert!(reason.contains("at most 65536 bytes"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert!(took < Duration::from_millis(500), "{took:?}");
    for refused in [
        dlm.semaphore(&huge, 2).err(),
        dlm.rwlock(&huge).err(),
        dlm.election(&huge).err(),
        dlm.inspect(&huge).err(),
    ] {
        assert!(
            matches!(refused, Some(Error::InvalidArgument { .. })),
            "{refused:?}"
        );
    }
    let (next, took) = support::timed(|| dlm.try_lock(resource("after-huge"), TTL));
    next.unwrap().release().unwrap();
    assert!(took < Duration::from_millis(500), "{took:?}");
}

/// One server under two spellings is two members in name only: its vote
/// would count twice (before, a lock then waited its whole budget and
/// blamed "another owner on 1 of 2 nodes", the lock's own key). The first
/// contact that shows it fails with `InvalidConfig` naming both spellings,
/// at once, and every later call too.
#[test]
fn one_server_under_two_names_is_refused_naming_both() {
    let server = Server::start().unwrap();
    let other = Server::start().unwrap();
    let port = server.port();
    let (a, b) = (format!("127.0.0.1:{port}"), format!("localhost:{port}"));
    let dlm = LockManager::builder()
        .nodes([format!("redis://{a}"), format!("redis://{b}"), other.url()])
        .node_timeout(Duration::from_secs(2))
        .retry(5, Duration::from_millis(500))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let err = dlm.lock(resource("twice"), TTL).unwrap_err();
    assert!(
        matches!(err, Error::InvalidConfig { .. }) && err.is_invalid(),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&a) && msg.contains(&b), "{msg}");
    assert!(msg.contains("same server"), "{msg}");
    // No retries: a configuration error is not waited out.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(
        dlm.try_lock(resource("twice-again"), TTL),
        Err(Error::InvalidConfig { .. })
    ));
    // Nothing of the attempt is left behind.
    assert_eq!(support::get(&server, resource("twice").as_bytes()), None);
    assert_eq!(support::get(&other, resource("twice").as_bytes()), None);
    // `check()` calls both spellings unsafe, and the third server not.
    let reports = dlm.check_resource("lock:check");
    let verdicts: Vec<_> = reports.iter().map(|r| r.verdict).collect();
    assert_eq!(
        verdicts[..2],
        [redlock_sync::Verdict::Unsafe, redlock_sync::Verdict::Unsafe],
        "{reports:#?}"
    );
    assert_ne!(verdicts[2], redlock_sync::Verdict::Unsafe, "{}", reports[2]);
    assert!(
        reports[0]
            .to_string()
            .contains("the same server as another member"),
        "{}",
        reports[0]
    );
}

/// A peer on a node's port that is no Redis server: `answer` is what it
/// writes on each connection before `then` (`close`: closes it; else
/// keeps it open, silent, until the test ends).
fn peer(answer: &'static [u8], close: bool) -> (u16, std::thread::JoinHandle<()>) {
    use std::io::{Read, Write};
    let listener = support::server::claimed_listener().unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        let mut open = Vec::new();
        listener.set_nonblocking(true).unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while std::time::Instant::now() < until {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_millis(200)))
                        .unwrap();
                    // Read the request first, as a real server would.
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf);
                    let _ = s.write_all(answer);
                    if !close {
                        open.push(s);
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    (port, handle)
}

/// What a node that is not a Redis server is said to be: the peer that
/// answered something else, the one that said nothing, the one that
/// closed at once. Each points at the peer, not at the network (before,
/// all three were "could not connect" or "no connection within").
#[test]
fn a_peer_that_is_not_a_redis_server_is_said_to_be_one() {
    let timeout = Duration::from_millis(300);
    let cases: [(&'static [u8], bool, NodeErrorKind, &str); 3] = [
        (
            b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
            true,
            NodeErrorKind::Protocol,
            "not a Redis server: it answered \"HTTP/1.1 400 Bad Request\"",
        ),
        (
            b"",
            false,
            NodeErrorKind::Timeout,
            "connected, no answer within 300ms",
        ),
        (
            b"",
            true,
            NodeErrorKind::Connect,
            "connected, then closed without an answer",
        ),
    ];
    for (answer, close, kind, says) in cases {
        let (port, _peer) = peer(answer, close);
        let dlm = support::manager_over(vec![format!("redis://127.0.0.1:{port}")], timeout);
        let started = std::time::Instant::now();
        let err = dlm.try_lock(resource("peer"), TTL).unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        let f = &err.failures()[0];
        assert_eq!(f.kind(), kind, "{f}");
        assert_eq!(f.to_string(), format!("127.0.0.1:{port}: {says}"));
    }
}

/// Waiting stops at once when the members left once those refusing our
/// credentials are counted out cannot make a quorum (the message names
/// each); it goes on while the cause may pass (a node down), even beside
/// a refusal.
#[test]
fn waiting_stops_at_once_when_a_majority_refuses_the_credentials() {
    let secured = [
        Server::start_with(&["--requirepass", "s3cret"]).unwrap(),
        Server::start_with(&["--requirepass", "s3cret"]).unwrap(),
    ];
    let open = Server::start().unwrap();
    let mut dead = Server::start().unwrap();
    dead.kill();
    let wait = Duration::from_secs(20);

    // Two of three refuse: no quorum is possible until a setting changes.
    let dlm = manager(&[secured[0].url(), secured[1].url(), open.url()]);
    let started = std::time::Instant::now();
    let err = dlm
        .try_lock_for(resource("hopeless"), TTL, wait)
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "waited {:?} for {err}",
        started.elapsed()
    );
    assert!(err.is_misconfigured() && !err.is_retryable(), "{err:?}");
    let msg = err.to_string();
    assert_eq!(
        msg.matches("requires a password and none was given")
            .count(),
        2,
        "{msg}"
    );

    // One refuses, one is down: the down one may come back, so it waits
    // (a short wait, all of it).
    let short = Duration::from_millis(1500);
    let dlm = manager(&[secured[0].url(), dead.url(), open.url()]);
    let started = std::time::Instant::now();
    let err = dlm
        .try_lock_for(resource("hopeless"), TTL, short)
        .unwrap_err();
    assert!(started.elapsed() >= short, "{:?}: {err}", started.elapsed());
    assert!(!err.is_misconfigured() && err.is_retryable(), "{err:?}");
}

/// A TTL too short for the node timeout is accepted (it works while every
/// member answers quickly); while one member hangs, the attempt fails
/// saying that the TTL is the cause, and the TTL that would do.
#[test]
fn a_ttl_too_short_for_the_node_timeout_is_named_when_a_member_hangs() {
    let nodes = Nodes::start(2).unwrap();
    let timeout = Duration::from_millis(300);
    let ttl = Duration::from_millis(200);
    let quick = support::manager_over(nodes.urls(), timeout);
    quick
        .try_lock(resource("short-ttl"), ttl)
        .unwrap()
        .release()
        .unwrap();
    // A third member that answers at first (the manager meets it), then
    // hangs: a proxy that black-holes from then on.
    let third = Server::start().unwrap();
    let hangs = support::proxy::Proxy::start(third.addr()).unwrap();
    let mut urls = nodes.urls();
    urls.push(hangs.url());
    let dlm = support::manager_over(urls, timeout);
    dlm.try_lock(resource("short-ttl-met"), Duration::from_secs(5))
        .unwrap()
        .release()
        .unwrap();
    hangs.set(support::proxy::Mode::Blackhole);
    let err = dlm.try_lock(resource("short-ttl"), ttl).unwrap_err();
    match &err {
        Error::NoValidity {
            shortest: Some(shortest),
            ..
        } => assert!(*shortest > timeout, "{shortest:?}"),
        other => panic!("{other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("the TTL is too short for the node timeout")
            && msg.contains("give a TTL of at least 30"),
        "{msg}"
    );
}
