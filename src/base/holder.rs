//! Holders that name themselves: the host and process (and an optional
//! label) that a lock token carries after its random part, so that
//! operators see who holds a lock (`inspect`, `lockrun --inspect`, the
//! `Taken` error) without a registry of tokens.
//!
//! A token is 32 random hex digits (128 bits from the operating system),
//! and, unless [`Builder::name_holders`](crate::Builder::name_holders) is
//! off, `@`, the host name, `/`, the process id, and `/` and the label
//! when one is given: `3f2a…c1@web-3/4121/nightly-report`. The random part
//! alone makes it unguessable, as before; the name is for people. Names
//! keep to letters, digits and `.-_+=,`; anything else is written `_`, so
//! that a token never holds the `:` and `~` that release messages use as
//! separators, nor spaces or control characters.
//!
//! Other Redlock clients sharing the keys see a longer value and compare
//! it whole, as they compare any token: they exclude ours, and ours
//! theirs.

use std::fmt;

/// The longest label kept, in bytes (a longer one is cut).
pub const MAX_LABEL: usize = 64;

/// The longest host name kept, in bytes.
const MAX_HOST: usize = 64;

/// What follows the random part of this process's tokens: `@host/pid`,
/// and `/label` when a label is given.
pub(crate) fn suffix(label: Option<&str>) -> Vec<u8> {
    let mut s = format!("@{}/{}", clean(&host(), MAX_HOST), std::process::id());
    if let Some(label) = label.filter(|l| !l.is_empty()) {
        s.push('/');
        s.push_str(&clean(label, MAX_LABEL));
    }
    s.into_bytes()
}

/// This machine's host name: the kernel's (Linux), or `$HOSTNAME`, or
/// `/etc/hostname`; `unknown` when none says.
fn host() -> String {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    read("/proc/sys/kernel/hostname")
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| read("/etc/hostname"))
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// `s` in the characters a name keeps (others become `_`), at most `max`
/// bytes.
fn clean(s: &str, max: usize) -> String {
    s.chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' | '_' | '+' | '=' | ',' => c,
            _ => '_',
        })
        .take(max)
        .collect()
}

/// What separates an acquisition's token from its attempt's number in the
/// value an attempt writes. Holder names never hold it (see [`clean`]).
pub(crate) const ATTEMPT_MARK: u8 = b'#';

/// What starts the servers a token names (see [`server_names`]). Holder
/// names never hold it (see [`clean`]), nor the random part.
pub(crate) const SERVERS_MARK: u8 = b'!';

/// How many hex digits of a server's `run_id` a token names it by (32
/// bits: two starts of one server share them once in four billion).
pub(crate) const RUN_DIGITS: usize = 8;

/// What follows a token's holder name: [`SERVERS_MARK`] and the servers
/// this manager knew when the acquisition began, each by the first
/// [`RUN_DIGITS`] hex digits of its `run_id`, separated by `.`
/// (`!3fa01c2e.9b04d7aa.c0ffee12`); empty when it knew none. The lock's
/// value so says which server incarnations its grant was asked of: a
/// later acquisition that finds the value on one member, and a yes on
/// another member whose server it does not name, knows that server may
/// have restarted since and forgotten the grant (see the crate docs,
/// "Restarts").
pub(crate) fn server_names<'a>(digests: impl IntoIterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for digest in digests {
        out.push(if out.is_empty() { SERVERS_MARK } else { b'.' });
        out.extend_from_slice(digest);
    }
    out
}

/// Whether the value `value` (a token, or an attempt's value) names the
/// server whose `run_id` digest is `digest` (see [`server_names`]); `None`
/// when it names no server at all (a token of an earlier version,
/// another client's value), which says nothing either way.
pub(crate) fn names_server(value: &[u8], digest: &[u8]) -> Option<bool> {
    let value = waiter_of(value);
    let at = value.iter().position(|&b| b == SERVERS_MARK)?;
    // Only this form names servers: groups of RUN_DIGITS hex digits (so
    // that another client's random bytes that hold a `!` say nothing).
    let mut named = value[at + 1..].split(|&b| b == b'.');
    let well_formed = named
        .clone()
        .all(|d| d.len() == RUN_DIGITS && d.iter().all(u8::is_ascii_hexdigit));
    well_formed.then(|| named.any(|d| d == digest))
}

/// The value the `n`-th attempt of the acquisition whose token is
/// `waiter` writes: the token, [`ATTEMPT_MARK`], and `n`.
///
/// Each attempt writes a value of its own, so that the clean-up of a
/// failed attempt, which deletes only what holds that attempt's value,
/// can never delete a later attempt's grant: a clean-up the network
/// holds back past the client's timeout (sent on a connection then
/// dropped, it still reaches the server) may be executed after a later
/// attempt of the same acquisition, sent on another connection, was
/// granted there. With one value for every attempt it deleted that
/// grant, and the holder counted a vote that was gone (the schedule
/// checker's cross-process run found two holders so; the test
/// `safety::a_clean_up_delivered_late_deletes_no_later_grant_of_a_lock`
/// replays it). The acquisition keeps its token as the waiter's name in
/// the members' queues (the fair scripts read it back with
/// [`waiter_of`]) and in this manager's own bookkeeping.
pub(crate) fn attempt_token(waiter: &[u8], n: u64) -> Vec<u8> {
    let n = crate::base::text::Decimal::of(n);
    let n = n.as_bytes();
    let mut token = Vec::with_capacity(waiter.len() + 1 + n.len());
    token.extend_from_slice(waiter);
    token.push(ATTEMPT_MARK);
    token.extend_from_slice(n);
    token
}

/// The acquisition's token in an attempt's value (see [`attempt_token`]):
/// everything before [`ATTEMPT_MARK`], or the whole value when it has
/// none.
pub(crate) fn waiter_of(value: &[u8]) -> &[u8] {
    match value.iter().position(|&b| b == ATTEMPT_MARK) {
        Some(at) => &value[..at],
        None => value,
    }
}

/// Who holds a lock, as its token names it (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderName {
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// The label its manager was given, if any
    /// ([`Builder::holder_label`](crate::Builder::holder_label); `lockrun`
    /// gives its command's name).
    pub label: Option<String>,
}

impl HolderName {
    /// The name a lock key's value (a token) carries, if it carries one
    /// (tokens of managers with [`name_holders`](crate::Builder::name_holders)
    /// off, and other Redlock clients' values, carry none).
    pub fn parse(token: &[u8]) -> Option<HolderName> {
        let token = std::str::from_utf8(token).ok()?;
        // An attempt's value: the token, `#` and the attempt's number; the
        // servers it names after `!`.
        let token = token.split_once('#').map_or(token, |(token, _)| token);
        let token = token.split_once('!').map_or(token, |(token, _)| token);
        let (random, name) = token.split_once('@')?;
        if random.len() != 32 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut parts = name.splitn(3, '/');
        let host = parts.next().filter(|h| !h.is_empty())?.to_owned();
        let pid = parts.next()?.parse().ok()?;
        let label = parts.next().map(str::to_owned);
        Some(HolderName { host, pid, label })
    }
}

impl fmt::Display for HolderName {
    /// `web-3 pid 4121`, and ` (label)` when it has one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} pid {}", self.host, self.pid)?;
        if let Some(label) = &self.label {
            write!(f, " ({label})")?;
        }
        Ok(())
    }
}

/// How messages name a holder whose value is `value`: its name and its
/// token's first 8 hex digits (`web-3 pid 4121, token 3f2a9c01…`), or,
/// when it names no holder (another client's), the value itself, cut as
/// long names are and escaped (`\n`, `\u{0}`), so that a message stays
/// on one line.
pub(crate) fn describe(value: &[u8]) -> String {
    match HolderName::parse(value) {
        Some(name) => format!("{name}, token {}…", String::from_utf8_lossy(&value[..8])),
        None => crate::base::text::shorten(value, crate::base::text::SHOWN)
            .escape_debug()
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_names_its_host_process_and_label_and_parses_back() {
        let s = suffix(Some("nightly report: v2"));
        let token = [&b"0123456789abcdef0123456789abcdef"[..], &s].concat();
        let name = HolderName::parse(&token).unwrap();
        assert_eq!(name.pid, std::process::id());
        assert_eq!(name.label.as_deref(), Some("nightly_report__v2"));
        assert!(!name.host.is_empty());
        // Never the separators of release messages, spaces or controls.
        assert!(!token.iter().any(|b| b":~ \n\t".contains(b)), "{token:?}");
        assert!(describe(&token).contains(&format!("pid {}", std::process::id())));
        let plain = [&b"0123456789abcdef0123456789abcdef"[..], &suffix(None)].concat();
        assert_eq!(HolderName::parse(&plain).unwrap().label, None);
    }

    #[test]
    fn each_attempt_writes_its_own_value_naming_its_waiter() {
        let waiter = [&b"0123456789abcdef0123456789abcdef"[..], b"@host/7/job"].concat();
        let (first, second) = (attempt_token(&waiter, 1), attempt_token(&waiter, 2));
        assert_ne!(first, second);
        assert_eq!(waiter_of(&first), &waiter[..]);
        assert_eq!(waiter_of(&second), &waiter[..]);
        assert_eq!(&first[waiter.len()..], b"#1");
        // Another client's value, without the mark, is its own waiter.
        assert_eq!(waiter_of(b"someone-else"), b"someone-else");
    }

    #[test]
    fn a_token_names_its_servers_after_its_holder_and_they_are_read_back() {
        let names = server_names([&b"3fa01c2e"[..], b"9b04d7aa"]);
        assert_eq!(names, b"!3fa01c2e.9b04d7aa");
        assert_eq!(server_names(std::iter::empty()), b"");
        let token = [
            &b"0123456789abcdef0123456789abcdef"[..],
            &suffix(Some("job")),
            &names,
        ]
        .concat();
        let value = attempt_token(&token, 3);
        assert_eq!(names_server(&value, b"3fa01c2e"), Some(true));
        assert_eq!(names_server(&value, b"9b04d7aa"), Some(true));
        assert_eq!(names_server(&value, b"3fa01c2f"), Some(false));
        assert_eq!(names_server(&value, b"3fa01c2"), Some(false));
        // The holder's name reads as before.
        assert_eq!(
            HolderName::parse(&value).unwrap().label.as_deref(),
            Some("job")
        );
        // Values that name no server say nothing, nor ones whose `!` is
        // not followed by run_id digests (another client's bytes).
        for v in [
            &b"someone-else"[..],
            b"0123456789abcdef0123456789abcdef@h/1#2",
            b"x!y",
            b"x!3fa01c2e.zz",
            b"x!",
        ] {
            assert_eq!(names_server(v, b"3fa01c2e"), None, "{v:?}");
        }
        // Never the separators of release messages, spaces or controls.
        assert!(!value.iter().any(|b| b":~ \n\t".contains(b)), "{value:?}");
    }

    #[test]
    fn values_that_name_no_holder_parse_to_none() {
        for v in [
            &b"0123456789abcdef0123456789abcdef"[..],
            b"redlock:readers",
            b"xyz@host/1",
            b"0123456789abcdef0123456789abcdef@/1",
            b"0123456789abcdef0123456789abcdef@host/notapid",
            b"\xff\xfe",
        ] {
            assert_eq!(HolderName::parse(v), None, "{v:?}");
        }
    }

    #[test]
    fn labels_and_hosts_are_cut_and_cleaned() {
        assert_eq!(clean("a b:c~d/e", 100), "a_b_c_d_e");
        assert_eq!(clean(&"x".repeat(200), MAX_LABEL).len(), MAX_LABEL);
        assert_eq!(clean("été", 10), "_t_");
    }
}
