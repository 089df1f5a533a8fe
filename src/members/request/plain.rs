//! The servers' own compare-and-delete ([`PlainDelete`]), which a
//! release takes in a script's place where a server has one.

use crate::members::conn::pack_into;

/// A server's own compare-and-delete, which a release sends in place of
/// the unlock script where the server has one (read as
/// [`Reply::DelIfEq`](super::Reply::DelIfEq)): the same rule, delete the key only if it holds
/// the token, in one command. Detected at the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PlainDelete {
    /// `DELIFEQ key value` (Valkey 9.0 and later).
    DelIfEq,
    /// `DELEX key IFEQ value` (Redis 8.4 and later).
    DelEx,
}

impl PlainDelete {
    /// Appends the command deleting `key` if it holds `value`.
    pub(crate) fn pack_into(self, out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
        match self {
            PlainDelete::DelIfEq => pack_into(out, &[&[b"DELIFEQ", key, value]]),
            PlainDelete::DelEx => pack_into(out, &[&[b"DELEX", key, b"IFEQ", value]]),
        }
    }

    /// The command on `key`, for messages.
    pub(crate) fn describe(self, key: &[u8]) -> String {
        let key = String::from_utf8_lossy(key);
        match self {
            PlainDelete::DelIfEq => format!("DELIFEQ {key:?}"),
            PlainDelete::DelEx => format!("DELEX {key:?} IFEQ"),
        }
    }

    /// The command, for messages and reports.
    pub(crate) fn name(self) -> &'static str {
        match self {
            PlainDelete::DelIfEq => "DELIFEQ",
            PlainDelete::DelEx => "DELEX ... IFEQ",
        }
    }
}
