//! Unit tests of the waiters' queue.

use super::*;
use crate::base::keys;

/// Whether threads of `w` wait for `resource`.
fn busy(w: &Waiters, resource: &[u8]) -> bool {
    w.shared
        .reg
        .lock()
        .resources
        .get(resource)
        .is_some_and(|e| !e.queue.is_empty())
}

/// The number of listener threads running.
fn listening(w: &Waiters) -> usize {
    let reg = w.shared.reg.lock();
    reg.listening.iter().filter(|l| **l).count()
}

fn waiters() -> Waiters {
    Waiters::new(Arc::from(Vec::<Member>::new()), None)
}

#[test]
fn the_first_waiter_is_woken_and_the_others_keep_their_place() {
    let w = waiters();
    let a = w.join(b"r", b"-", None);
    let b = w.join(b"r", b"-", None);
    assert!(busy(&w, b"r"));
    assert!(!busy(&w, b"other"));
    // Pause over: the first may ask, the second may not.
    assert!(a.wait(Duration::ZERO, None));
    assert!(!b.wait(Duration::ZERO, None));
    w.released(b"r", b"t1");
    // The same release again (another node) wakes nobody more.
    w.released(b"r", b"t1");
    assert!(!b.wait(Duration::from_millis(1), None));
    assert!(a.wait(Duration::from_secs(60), None));
    // The first leaves without the lock while woken: the next moves up
    // and is woken in its place.
    w.released(b"r", b"t2");
    drop(a);
    assert!(b.wait(Duration::from_secs(60), None));
    b.acquired(Grant::Alone);
    assert!(!busy(&w, b"r"));
    assert_eq!(listening(&w), 0);
}

#[test]
fn a_waiter_acquiring_clears_stale_wakes() {
    let w = waiters();
    let a = w.join(b"r", b"-", None);
    let b = w.join(b"r", b"-", None);
    w.released(b"r", b"t1");
    a.acquired(Grant::Alone);
    // b is first now, but the release was before a's acquisition.
    let mut reg = w.shared.reg.lock();
    assert!(!reg.resources[&b"r"[..]].wake);
    reg.expire(Instant::now() + LINGER * 2);
    assert_eq!(reg.resources.len(), 1, "b still waits");
    drop(reg);
    drop(b);
}

#[test]
fn resources_nobody_waits_for_expire_after_the_linger() {
    let w = waiters();
    drop(w.join(b"r", b"-", None));
    let mut reg = w.shared.reg.lock();
    let v = reg.version;
    reg.expire(Instant::now());
    assert_eq!(reg.resources.len(), 1);
    reg.expire(Instant::now() + LINGER * 2);
    assert!(reg.resources.is_empty());
    assert!(reg.version > v);
}

#[test]
fn an_own_attempts_clean_up_wakes_nobody_but_others_do() {
    let w = waiters();
    let (own, _) = w.start(b"r", b"tok1");
    let seen = w.before_attempt(b"r");
    // The clean-up of tok1's failed attempt, heard from a node.
    w.shared.heard(b"r", b"tok1:7", false);
    let a = w.join(b"r", b"-", Some(seen));
    assert!(!w.shared.reg.lock().resources[&b"r"[..]].wake);
    w.shared.heard(b"r", b"tok1:8", false);
    assert!(!w.shared.reg.lock().resources[&b"r"[..]].wake);
    // Another owner's release wakes it.
    w.shared.heard(b"r", b"tok2:9", false);
    assert!(a.wait(Duration::from_secs(60), None));
    drop(a);
    drop(own);
    // Once the acquisition is over, tok1's messages count again.
    let b = w.join(b"r", b"-", None);
    w.shared.heard(b"r", b"tok1:10", false);
    assert!(b.wait(Duration::from_secs(60), None));
}

#[test]
fn channels_follow_the_resource_name_in_its_slot() {
    assert!(channel(b"lock:a").starts_with(b"lock:a:redlock-release{"));
    assert_eq!(channel(b"{lock}:a"), b"{lock}:a:redlock-release");
    assert_eq!(keys::slot(&channel(b"lock:a")), keys::slot(b"lock:a"));
}

#[test]
fn watchers_hear_every_message_take_no_place_and_keep_their_names() {
    let w = waiters();
    let watch = w.watch(&[b"e", b"e-news"]);
    assert!(!busy(&w, b"e"));
    let heard = watch.heard();
    // Nothing yet: the wait ends at its deadline.
    assert!(!watch.wait(heard, Instant::now() + Duration::from_millis(10)));
    // A release, then the same one again from another node: both count.
    w.shared.heard(b"e", b"t1:1", false);
    w.shared.heard(b"e", b"t1:1", false);
    assert_eq!(watch.heard(), heard + 2);
    assert!(watch.wait(heard, Instant::now() + Duration::from_secs(60)));
    // News on the other name, own tokens included.
    let (own, _) = w.start(b"e", b"mine");
    w.shared.heard(b"e-news", b"mine:2", false);
    assert_eq!(watch.heard(), heard + 3);
    drop(own);
    // Watched names never expire; once unwatched they do.
    let mut reg = w.shared.reg.lock();
    reg.expire(Instant::now() + LINGER * 2);
    assert_eq!(reg.resources.len(), 2);
    drop(reg);
    drop(watch);
    let mut reg = w.shared.reg.lock();
    reg.expire(Instant::now() + LINGER * 2);
    assert!(reg.resources.is_empty());
}

#[test]
fn release_messages_split_into_the_release_and_the_waiter_handed_to() {
    let token = b"0123456789abcdef0123456789abcdef";
    let plain = [&token[..], b":17"].concat();
    assert_eq!(split_message(&plain), (&plain[..], None));
    assert_eq!(unlock_token(split_message(&plain).0), &token[..]);
    let handed = [&plain[..], b":", b"fedcba9876543210fedcba9876543210"].concat();
    let (release, next) = split_message(&handed);
    assert_eq!(release, &plain[..]);
    assert_eq!(next, Some(&b"fedcba9876543210fedcba9876543210"[..]));
    // Whatever a peer sends: no panic, the whole as the release.
    for odd in [&b""[..], b":", b"::", b"a:b:", b":::"] {
        let (release, _) = split_message(odd);
        assert!(odd.starts_with(release));
    }
}

#[test]
fn a_fair_hand_off_wakes_the_waiter_it_names_wherever_it_stands() {
    let w = waiters();
    let (own_a, _) = w.start(b"r", b"tokA");
    let (own_b, _) = w.start(b"r", b"tokB");
    let a = w.join(b"r", b"tokA", None);
    let b = w.join(b"r", b"tokB", None);
    // Handed to b (the members queued b first): b asks, a does not.
    w.shared.heard(b"r", b"holder:1:tokB", false);
    assert!(b.wait(Duration::from_secs(60), None));
    assert!(
        !w.shared.reg.lock().resources[&b"r"[..]].wake,
        "a was woken"
    );
    // A hand-off to nobody here wakes nobody; a plain release wakes a.
    w.shared.heard(b"r", b"holder:2:tokX", false);
    assert!(!w.shared.reg.lock().resources[&b"r"[..]].wake);
    w.shared.heard(b"r", b"holder:3", false);
    assert!(a.wait(Duration::from_secs(60), None));
    drop((a, b, own_a, own_b));
}

#[test]
fn a_fair_managers_own_subscription_calls_every_waiter_placed_in_the_members_queues() {
    let w = waiters();
    let a = w.join(b"r", b"tokA", None);
    let b = w.join(b"r", b"tokB", None);
    let c = w.join(b"r", b"tokC", None);
    b.placed();
    let confirm = |own| {
        let mut reg = w.shared.reg.lock();
        let entry = reg.resources.get_mut(&b"r"[..]).unwrap();
        entry.confirmed(&w.shared.news, own);
    };
    // The release channel confirmed: the first waiter asks, nobody else.
    confirm(false);
    assert!(a.wait(Duration::from_secs(60), None));
    assert!(!b.wait(Duration::from_millis(1), None));
    // The manager's own channel confirmed: a hand-off naming b may have
    // been announced before it listened, so b asks, wherever it stands;
    // c has no place in the members' queues and keeps its turn.
    confirm(true);
    assert!(b.wait(Duration::from_secs(60), None));
    assert!(!c.wait(Duration::from_millis(1), None));
    drop((a, b, c));
}

#[test]
fn a_fair_managers_own_channel_is_told_from_the_release_channel() {
    let address = b"5f3a9c";
    let release = channel(b"lock:a");
    let own = [&release[..], b":", address].concat();
    assert!(own_channel(&own, address));
    assert!(!own_channel(&release, address));
    // Another manager's channel, and degenerate ones: no panic, no match.
    assert!(!own_channel(&[&release[..], b":other1"].concat(), address));
    for odd in [&b""[..], b":", address, b"x5f3a9c"] {
        assert!(!own_channel(odd, address));
    }
}

#[test]
fn a_notice_makes_the_next_waiter_ask_when_the_reservation_lapses() {
    let w = waiters();
    let (own_a, _) = w.start(b"r", b"tokA");
    let (own_b, _) = w.start(b"r", b"tokB");
    let a = w.join(b"r", b"tokA", None);
    let b = w.join(b"r", b"tokB", None);
    let before = w.before_attempt(b"r").0;
    // The key was handed to another waiter; b is next: it asks once that
    // reservation (300 ms) lapses, not at once and not after its pause.
    let heard = Instant::now();
    w.shared.heard(b"r", b"holder:1~300:tokB", false);
    assert!(!b.wait(Duration::from_millis(100), None), "b asked at once");
    assert!(b.wait(Duration::from_secs(60), None));
    let took = heard.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // No release: a is not woken, and the release count stands.
    assert!(!w.shared.reg.lock().resources[&b"r"[..]].wake);
    assert_eq!(w.before_attempt(b"r").0, before);
    drop((a, b, own_a, own_b));
    assert_eq!(notice(b"holder:1~300"), Some(Duration::from_millis(300)));
    for other in [&b"holder:1"[..], b"holder:1~", b"holder:1~x", b"~"] {
        assert_eq!(notice(other), None);
    }
}
