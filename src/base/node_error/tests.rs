use super::*;

#[test]
fn tls_and_resolve_failures_are_causes_of_their_own() {
    let tls = NodeError::classify(
        "n:1".into(),
        std::io::Error::other(TlsFailure("bad certificate".into())),
        true,
        Duration::from_millis(50),
    );
    assert_eq!(tls.kind(), NodeErrorKind::Tls);
    assert_eq!(tls.to_string(), "n:1: TLS failed: bad certificate");
    assert!(std::error::Error::source(&tls).is_none());
    let resolve = NodeError::classify(
        "n:1".into(),
        Cause::Resolve("db.local has no address".into()),
        true,
        Duration::from_millis(50),
    );
    assert_eq!(resolve.kind(), NodeErrorKind::Resolve);
    assert_eq!(
        resolve.to_string(),
        "n:1: name resolution failed (db.local has no address)"
    );
    let refused = NodeError::classify(
        "n:1".into(),
        std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        true,
        Duration::from_millis(50),
    );
    assert_eq!(refused.kind(), NodeErrorKind::Connect);
    assert_eq!(refused.to_string(), "n:1: connection refused");
    assert!(refused.is_transient());
    assert!(std::error::Error::source(&refused).is_none());
    assert_eq!(
        refused.io_error().map(std::io::Error::kind),
        Some(std::io::ErrorKind::ConnectionRefused)
    );
    assert!(!tls.is_transient() && !resolve.is_transient());
}

/// Error replies by their code: an ACL refusal, a wrong password, any
/// other reply; a timeout and a lost connection by the socket's words.
#[test]
fn causes_are_classified_by_what_they_say() {
    let kind = |cause: Cause| {
        NodeError::classify("n:1".into(), cause, false, Duration::from_millis(50)).kind()
    };
    let reply = |code: &str, detail: &str| Cause::Reply {
        code: code.into(),
        detail: detail.into(),
    };
    assert_eq!(kind(reply("NOPERM", "no")), NodeErrorKind::Permission);
    assert_eq!(
        kind(reply("ERR", "ACL failure in script: no")),
        NodeErrorKind::Permission
    );
    assert_eq!(kind(reply("WRONGPASS", "bad")), NodeErrorKind::Auth);
    assert_eq!(kind(reply("LOADING", "wait")), NodeErrorKind::Server);
    assert_eq!(kind(Cause::timed_out()), NodeErrorKind::Timeout);
    assert_eq!(
        kind(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
        NodeErrorKind::Disconnected
    );
    assert_eq!(
        kind(Cause::Unexpected("Int(7)".into())),
        NodeErrorKind::Protocol
    );
    let e = NodeError::classify(
        "n:1".into(),
        reply("LOADING", "Redis is loading"),
        false,
        Duration::from_millis(50),
    );
    assert_eq!(e.code(), Some("LOADING"));
    assert_eq!(e.to_string(), "n:1: error reply LOADING: Redis is loading");
}
