//! The fair server's own rules, one request at a time.

use super::*;

const LEN: Lengths = Lengths {
    ttl: 300,
    ticket: 200,
    reserve: 100,
    every: Some(50),
    handing: true,
};
const RULES: ScriptRules = ScriptRules::ALL;

fn value(client: u8) -> Value {
    Value {
        client,
        acquisition: 0,
        attempt: 1,
    }
}

/// A key handed on for `every` is yielded by the next release with a
/// waiter live in line, and no claim takes it until the mark lapses.
#[test]
fn a_chain_due_is_yielded_and_the_mark_keeps_claims_out() {
    let (a, b) = (value(0), value(1));
    // A client that cannot queue says it waits.
    let mut s = FairServer {
        listening: true,
        ..FairServer::default()
    };
    let claim = |v: Value, arrival| FairRequest::Claim { value: v, arrival };
    assert_eq!(
        s.run(FairRequest::Take { value: a }, 0, LEN, RULES),
        Answer::Took {
            set: true,
            count: 0,
            named: None,
        }
    );
    // Refused by a's value, which the refusal names.
    assert_eq!(s.run(claim(b, 1), 1, LEN, RULES), Answer::Held(a));
    // The first hand-off begins the chain.
    assert_eq!(
        s.run(FairRequest::Release { value: a }, 10, LEN, RULES),
        Answer::Int(1)
    );
    assert_eq!(s.chain, Some(10));
    assert_eq!(s.run(claim(b, 1), 11, LEN, RULES), Answer::Int(1));
    assert_eq!(s.run(claim(a, 2), 12, LEN, RULES), Answer::Held(b));
    // 60 units on, with a waiter live in line: yielded.
    assert_eq!(
        s.run(FairRequest::Release { value: b }, 70, LEN, RULES),
        Answer::Int(1)
    );
    assert_eq!((s.key, s.chain, s.yielded), (None, None, Some(170)));
    // The first in line is refused until the mark lapses.
    assert_eq!(
        s.run(claim(a, 2), 80, LEN, RULES),
        Answer::Int(-(LAPSE_BASE + 90))
    );
    assert_eq!(s.run(claim(a, 2), 171, LEN, RULES), Answer::Int(1));
}

/// With no client that cannot queue saying it waits, a chain is
/// handed on until it is PROBE times `every` old (50 units: 400), then
/// yielded: a yield for clients that cannot say so.
#[test]
fn with_nobody_listening_a_chain_yields_only_at_the_probe() {
    let (a, b) = (value(0), value(1));
    let mut s = FairServer::default();
    let claim = |v: Value, arrival| FairRequest::Claim { value: v, arrival };
    s.run(FairRequest::Take { value: a }, 0, LEN, RULES);
    s.run(claim(b, 1), 1, LEN, RULES);
    // The chain begins at 10; both keep handing the key on.
    let mut t = 10;
    let (mut holder, mut waiter, mut arrival) = (a, b, 2);
    while t < 400 {
        assert_eq!(
            s.run(FairRequest::Release { value: holder }, t, LEN, RULES),
            Answer::Int(1)
        );
        assert_eq!(s.chain, Some(10), "handed on at {t}");
        assert_eq!(s.run(claim(waiter, 1), t + 1, LEN, RULES), Answer::Int(1));
        assert_eq!(
            s.run(claim(holder, arrival), t + 2, LEN, RULES),
            Answer::Held(waiter)
        );
        (holder, waiter, arrival) = (waiter, holder, arrival + 1);
        t += 40;
    }
    assert_eq!(
        s.run(FairRequest::Release { value: holder }, 410, LEN, RULES),
        Answer::Int(1)
    );
    assert_eq!((s.key, s.chain, s.yielded), (None, None, Some(510)));
    assert!(!s.passed_over);
}
