//! Property tests: arbitrary input never panics, and every guard handed
//! out has 0 < validity <= TTL (and extends, for TTLs of a second or more).

use crate::support;

use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use redlock_sync::{Error, LockManager};

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        (0u64..10).prop_map(Duration::from_millis),
        (0u64..100_000).prop_map(Duration::from_micros),
        (0u64..1_000_000).prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn any_factor() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(-0.0),
        0.0f64..1.0,
        any::<f64>(),
    ]
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

#[test]
fn locks_never_panic_and_guards_have_validity_within_the_ttl() {
    let cluster = support::Nodes::start(3).unwrap();
    let dlm = support::manager(&cluster, Duration::from_millis(500));
    let strategy = (prop::collection::vec(any::<u8>(), 0..64), any_duration());
    runner(300)
        .run(&strategy, |(resource, ttl)| {
            // Distinct names, so that a lock is never simply taken.
            let mut key = b"prop:".to_vec();
            key.extend_from_slice(&resource);
            match dlm.try_lock(if resource.is_empty() { &[][..] } else { &key }, ttl) {
                Ok(mut guard) => {
                    let validity = guard.validity();
                    prop_assert!(validity <= ttl, "{validity:?} > {ttl:?}");
                    // A guard is handed out valid; with a TTL of a second
                    // or more (rounds take milliseconds) it still is, and
                    // its extend succeeds. Shorter ones may run out
                    // between two lines of this test.
                    let long = ttl >= Duration::from_secs(1);
                    if long {
                        prop_assert!(validity > Duration::ZERO && guard.is_valid());
                    }
                    if guard.is_valid() {
                        let extended = guard.extend(ttl);
                        if long {
                            prop_assert!(extended.is_ok(), "extend: {extended:?}");
                        }
                        prop_assert!(guard.validity() <= ttl);
                    }
                    match guard.release() {
                        Ok(()) => {}
                        // A TTL of a few ms can run out before the release
                        // reaches the nodes: then the key is gone already.
                        Err(Error::NotHeld { .. }) if ttl < Duration::from_secs(1) => {}
                        Err(e) => return Err(TestCaseError::fail(format!("release: {e}"))),
                    }
                }
                Err(Error::InvalidArgument { .. }) => {
                    prop_assert!(
                        resource.is_empty()
                            || ttl < Duration::from_millis(3)
                            || ttl > redlock_sync::MAX_TTL
                    );
                }
                // A round slower than a very short TTL.
                Err(Error::NoValidity { .. }) => prop_assert!(ttl < Duration::from_secs(1)),
                Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn settings_never_panic() {
    let strategy = (
        any_factor(),
        any_duration(),
        any::<u32>(),
        any_duration(),
        0usize..100,
    );
    runner(2000)
        .run(&strategy, |(factor, timeout, count, delay, idle)| {
            let built = LockManager::builder()
                .node("redis://127.0.0.1:1")
                .drift_factor(factor)
                .node_timeout(timeout)
                .retry(count, delay)
                .max_idle_per_node(idle)
                .build();
            let valid = (0.0..1.0).contains(&factor)
                && !timeout.is_zero()
                && timeout <= redlock_sync::MAX_TTL
                && count > 0;
            match built {
                Ok(mut dlm) => {
                    prop_assert!(valid);
                    prop_assert_eq!(dlm.set_retry(count, delay).is_ok(), count > 0);
                }
                Err(Error::InvalidConfig { .. }) => prop_assert!(!valid),
                Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn url_strings_never_panic() {
    let strategy = prop_oneof![
        any::<String>(),
        "(redis|rediss|unix|redis\\+unix|valkey|http)://[a-z:@/0-9.%#?\\[\\]]{0,30}",
        "redis://[^ ]{0,40}",
    ];
    runner(3000)
        .run(&strategy, |url| {
            match LockManager::new([url.as_str()]) {
                Ok(dlm) => prop_assert_eq!(dlm.nodes().len(), 1),
                Err(Error::InvalidConfig { reason, .. }) => prop_assert!(!reason.is_empty()),
                Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
            }
            Ok(())
        })
        .unwrap();
}
