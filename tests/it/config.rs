//! Bad input is a typed error that says what is wrong, never a panic.

use crate::support;

use std::time::Duration;

use redlock_sync::{Error, LockManager, MAX_TTL};

fn config_error(result: redlock_sync::Result<LockManager>) -> String {
    match result {
        Err(Error::InvalidConfig { reason, .. }) => reason,
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

fn argument_error<T: std::fmt::Debug>(result: redlock_sync::Result<T>) -> String {
    match result {
        Err(Error::InvalidArgument { reason, .. }) => reason,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn no_nodes() {
    let reason = config_error(LockManager::new(Vec::<String>::new()));
    assert!(reason.contains("no Redis nodes"), "{reason}");
    config_error(LockManager::builder().build());
}

#[test]
fn url_mistakes_are_named() {
    for (url, says) in [
        ("", "no scheme"),
        ("not a url", "no scheme"),
        ("127.0.0.1:6379", "no scheme: write redis://127.0.0.1:6379"),
        ("http://127.0.0.1:6379", "unknown scheme \"http\""),
        ("redis://", "no host"),
        ("redis://host:notaport", "bad port \"notaport\""),
        ("redis://host:70000", "bad port \"70000\""),
    ] {
        let reason = config_error(LockManager::new([url]));
        assert!(reason.contains("URL"), "{url:?}: {reason}");
        assert!(reason.contains(says), "{url:?}: {reason}");
    }
    // What only the URL parser finds: its words are the error's source,
    // not also in its message (each cause printed once).
    let err = LockManager::new(["redis://host/notadb"]).unwrap_err();
    match &err {
        Error::InvalidConfig { reason, source, .. } => {
            let parser = source.as_ref().expect("the parser's error is kept");
            assert_eq!(reason, "cannot read node URL \"redis://host/notadb\"");
            assert!(!parser.to_string().is_empty());
            let from = std::error::Error::source(&err).map(|e| e.to_string());
            assert_eq!(from, Some(parser.to_string()));
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[test]
fn url_errors_hide_passwords() {
    let err = LockManager::new(["redis://user:hunter2@host:notaport"]).unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(!text.contains("hunter2"), "{text}");
}

#[test]
#[cfg(not(feature = "tls"))]
fn tls_urls_are_refused_with_an_explanation_without_the_tls_feature() {
    let reason = config_error(LockManager::new(["rediss://127.0.0.1:6380"]));
    assert!(reason.contains("TLS"), "{reason}");
    assert!(reason.contains("`tls` feature"), "{reason}");
}

#[test]
#[cfg(feature = "tls")]
fn unreadable_tls_material_is_a_config_error() {
    let reason = config_error(
        LockManager::builder()
            .node("rediss://127.0.0.1:6380")
            .tls_root_cert("not a certificate")
            .build(),
    );
    assert!(reason.contains("tls_root_cert"), "{reason}");
    let reason = config_error(
        LockManager::builder()
            .node("redis://127.0.0.1:6380")
            .tls_client_cert(
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                "",
            )
            .build(),
    );
    assert!(reason.contains("tls_client_cert"), "{reason}");
}

#[test]
fn the_same_node_twice() {
    let reason = config_error(LockManager::new([
        "redis://127.0.0.1:7001",
        "redis://127.0.0.1:7002",
        "redis://127.0.0.1:7001/2",
    ]));
    assert!(reason.contains("127.0.0.1:7001"), "{reason}");
    assert!(reason.contains("twice"), "{reason}");
    config_error(LockManager::new([
        "unix:///tmp/a.sock",
        "redis+unix:///tmp/a.sock",
    ]));
}

#[test]
fn drift_factor_outside_zero_to_one() {
    for factor in [-0.1, 1.0, 1.5, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let reason = config_error(
            LockManager::builder()
                .node("redis://127.0.0.1:7001")
                .drift_factor(factor)
                .build(),
        );
        assert!(reason.contains("drift factor"), "{factor}: {reason}");
    }
    for factor in [0.0, 0.01, 0.999] {
        LockManager::builder()
            .node("redis://127.0.0.1:7001")
            .drift_factor(factor)
            .build()
            .unwrap();
    }
}

#[test]
fn zero_node_timeout_and_zero_attempts() {
    let base = LockManager::builder().node("redis://127.0.0.1:7001");
    let reason = config_error(base.clone().node_timeout(Duration::ZERO).build());
    assert!(reason.contains("node timeout"), "{reason}");
    let reason = config_error(base.clone().node_timeout(Duration::MAX).build());
    assert!(reason.contains("node timeout"), "{reason}");
    let reason = config_error(base.clone().retry(0, Duration::ZERO).build());
    assert!(reason.contains("at least 1"), "{reason}");
    // A yield every 0 ms would end fair waiting at every second release.
    let reason = config_error(base.clone().fair_yield(Some(Duration::ZERO)).build());
    assert!(
        reason.contains("fair_yield must be from 1 ms to") && reason.ends_with("got 0ns"),
        "{reason}"
    );
    assert!(base.fair_yield(None).build().is_ok());
}

#[test]
fn bad_lock_arguments_are_rejected_before_any_network_call() {
    // Port 1 is closed: reaching the network would give NoQuorum instead.
    let mut dlm = LockManager::new(["redis://127.0.0.1:1"]).unwrap();
    dlm.set_retry(1, Duration::ZERO).unwrap();
    let ttl = Duration::from_secs(1);
    let reason = argument_error(dlm.lock("", ttl));
    assert!(reason.contains("empty"), "{reason}");
    argument_error(dlm.try_lock(b"", ttl));
    argument_error(dlm.try_lock_for(Vec::new(), ttl, ttl));

    let reason = argument_error(dlm.lock("r", Duration::ZERO));
    assert!(reason.contains("at least 1 ms"), "{reason}");
    argument_error(dlm.lock("r", Duration::from_micros(900)));
    let reason = argument_error(dlm.lock("r", Duration::from_millis(2)));
    assert!(reason.contains("no validity"), "{reason}");
    let reason = argument_error(dlm.lock("r", MAX_TTL + Duration::from_millis(1)));
    assert!(reason.contains("maximum"), "{reason}");
    argument_error(dlm.try_lock("r", Duration::MAX));
    argument_error(dlm.try_lock_for("r", Duration::MAX, Duration::MAX));

    // A good call reaches the (closed) node and says so.
    assert!(matches!(
        dlm.try_lock("r", ttl),
        Err(Error::NoQuorum { .. })
    ));
}

#[test]
fn set_retry_rejects_zero_attempts() {
    let mut dlm = LockManager::new(["redis://127.0.0.1:1"]).unwrap();
    argument_error(dlm.set_retry(0, Duration::from_millis(10)).map(|()| 0));
    dlm.set_retry(1, Duration::MAX).unwrap();
}

#[test]
fn extend_checks_its_ttl() {
    let cluster = support::Nodes::start(1).unwrap();
    let dlm = support::manager(&cluster, Duration::from_millis(500));
    let mut guard = dlm.lock("extend-args", Duration::from_secs(5)).unwrap();
    argument_error(guard.extend(Duration::ZERO));
    argument_error(guard.extend(Duration::MAX));
    assert!(
        guard.is_valid(),
        "a rejected extend leaves the lock as it was"
    );
    guard.extend(Duration::from_secs(5)).unwrap();
}

#[test]
fn types_are_thread_safe() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<LockManager>();
    send_sync::<Error>();
    send::<redlock_sync::LockGuard>();
    fn error<T: std::error::Error + Send + Sync + 'static>() {}
    error::<Error>();
    error::<redlock_sync::NodeError>();
}
