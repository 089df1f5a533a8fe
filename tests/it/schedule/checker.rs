//! The schedule checker itself, on made-up spans.

use super::*;

#[test]
fn the_checker_finds_overlaps_backward_tokens_and_too_many_permits() {
    // The checker itself, on made-up spans: it must be able to fail.
    let t0 = Instant::now();
    let ms = |n: u64| t0 + Duration::from_millis(n);
    let span = |holds: Vec<Hold>, token, a, b| Span {
        worker: 0,
        what: "lock a",
        holds,
        token,
        start: ms(a),
        end: ms(b),
    };
    let ex = |c: &str| vec![Hold::Exclusive(vec![c.into()])];
    assert!(
        violations(
            &[
                span(ex("a"), Some(1), 0, 10),
                span(ex("a"), Some(2), 11, 20)
            ],
            t0
        )
        .is_empty()
    );
    assert_eq!(
        violations(
            &[
                span(ex("a"), Some(1), 0, 10),
                span(ex("a"), Some(2), 10, 20)
            ],
            t0
        )
        .len(),
        1
    );
    assert_eq!(
        violations(
            &[
                span(ex("a"), Some(3), 0, 10),
                span(ex("a"), Some(2), 11, 20)
            ],
            t0
        )
        .len(),
        1
    );
    let read = vec![Hold::Read("rw".into())];
    assert_eq!(
        violations(
            &[
                span(ex("rw"), Some(1), 0, 10),
                span(read.clone(), None, 5, 20)
            ],
            t0
        )
        .len(),
        1
    );
    assert!(
        violations(
            &[span(read.clone(), None, 0, 10), span(read, None, 5, 20)],
            t0
        )
        .is_empty()
    );
    let permit = |slot: &str| {
        vec![
            Hold::Permit("sem".into()),
            Hold::Exclusive(vec![slot.into()]),
        ]
    };
    let three = [
        span(permit("s0"), Some(1), 0, 10),
        span(permit("s1"), Some(1), 0, 10),
        span(permit("s2"), Some(1), 5, 10),
    ];
    assert_eq!(violations(&three, t0).len(), 1);
    // Exactly K (2) permits at once is allowed.
    assert!(violations(&three[..2], t0).is_empty());
    // A set against a single lock of one of its resources.
    let set = vec![Hold::Exclusive(vec!["a".into(), "b".into()])];
    assert_eq!(
        violations(
            &[
                span(set.clone(), Some(1), 0, 10),
                span(ex("b"), Some(2), 5, 20)
            ],
            t0
        )
        .len(),
        1
    );
    assert!(
        violations(
            &[span(set, Some(1), 0, 10), span(ex("b"), Some(2), 11, 20)],
            t0
        )
        .is_empty()
    );
    // Two leaderships at once, and a later leader with the same term.
    let lead = |term, a, b| Span {
        what: "lead e",
        ..span(ex("e"), Some(term), a, b)
    };
    assert_eq!(violations(&[lead(4, 0, 10), lead(5, 8, 20)], t0).len(), 1);
    let equal = violations(&[lead(4, 0, 10), lead(4, 11, 20)], t0);
    assert_eq!(equal.len(), 1, "{equal:?}");
    assert!(equal[0].contains("fencing ran backwards"), "{equal:?}");
}
