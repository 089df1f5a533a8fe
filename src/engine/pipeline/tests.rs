use super::*;

#[test]
fn tokens_are_hex_and_distinct() {
    let entropy = Entropy::new();
    let a = new_token(&entropy, b"").unwrap();
    let b = new_token(&Entropy::new(), b"").unwrap();
    assert_ne!(a, b);
    for t in [&a, &b] {
        assert_eq!(t.len(), 2 * TOKEN_BYTES);
        assert!(
            t.iter()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
    }
    let named = new_token(&entropy, b"@host/7").unwrap();
    assert!(named.ends_with(b"@host/7") && named.len() == 2 * TOKEN_BYTES + 7);
}

#[test]
fn a_set_waits_where_a_majority_refused_it() {
    let busy = |at: Option<usize>| Vote {
        busy: at,
        ..Vote::of(Some(Ok(crate::members::request::Said::No)))
    };
    // The first member's answer does not decide: a majority does.
    let votes = [
        busy(Some(0)),
        busy(Some(1)),
        busy(Some(1)),
        busy(Some(1)),
        busy(None),
    ];
    assert_eq!(most_busy(votes.iter().map(|v| v.busy), 2), Some(1));
    // Fewer than a majority (members that differ) name nowhere: the
    // set stays where it waits.
    let votes = [
        busy(Some(1)),
        busy(Some(1)),
        busy(Some(0)),
        busy(None),
        busy(None),
    ];
    assert_eq!(most_busy(votes.iter().map(|v| v.busy), 2), None);
    // A no that names no resource (another's token on an extend, a
    // failure) names nowhere to wait.
    let votes = [busy(Some(usize::MAX)), busy(Some(usize::MAX)), busy(None)];
    assert_eq!(most_busy(votes.iter().map(|v| v.busy), 2), None);
}

#[test]
fn counters_start_from_the_clock_in_microseconds_below_2_pow_53() {
    let start = counter_start();
    // After 2026-01-01 and far below 2^53 (exact in a JSON number).
    assert!(start > 1_767_225_600_000_000, "{start}");
    assert!(start < (1 << 53) / 4, "{start}");
    assert!(counter_start() >= start);
}
