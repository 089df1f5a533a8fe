//! A request's per-server forms ([`Forms`]), and the servers' own
//! compare-and-delete that one of them is ([`PlainDelete`]).

use super::Request;
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
    /// Its bit in a set of forms (see `Node::plain_deletes`).
    pub(crate) fn bit(self) -> u8 {
        match self {
            PlainDelete::DelIfEq => 1,
            PlainDelete::DelEx => 2,
        }
    }

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

/// A request's other forms, each for the servers that take it so, when
/// it differs: the members' layer chooses (a member's form by
/// [`Member::request`](crate::members::member::Member::request), a
/// connection's by [`Request::on`]), so that the layers above state the
/// forms and never branch on servers.
#[derive(Clone, Copy, Default)]
pub(crate) struct Forms<'a> {
    /// As Redis Cluster members take it (its announcement by `SPUBLISH`,
    /// its late clean-up's too; a set's keys grouped by slot).
    pub(crate) cluster: Option<&'a Request<'a>>,
    /// As a server without `SET ... NX GET` and `PEXPIRE ... GT` (before
    /// Redis 7.0, or one whose version is unknown) takes it; chosen per
    /// connection.
    pub(crate) legacy: Option<&'a Request<'a>>,
    /// As a server that takes `DELIFEQ` takes it, when it has that plain
    /// form (a script's work in a plain command); chosen per connection.
    pub(crate) ifeq: Option<&'a Request<'a>>,
    /// The same for a server that takes `DELEX ... IFEQ`.
    pub(crate) delex: Option<&'a Request<'a>>,
    /// As a connection that counted the request's fencing counter takes
    /// it: by `INCR` in the count script's place (see
    /// [`Counts`](super::Counts)); chosen per connection, on servers that
    /// take the current form.
    pub(crate) counted: Option<&'a Request<'a>>,
}

impl<'a> Forms<'a> {
    /// A form for servers before Redis 7.0 only (when there is one).
    pub(crate) fn legacy(legacy: Option<&'a Request<'a>>) -> Forms<'a> {
        Forms {
            legacy,
            ..Forms::default()
        }
    }

    /// The plain compare-and-delete forms only (those there are).
    pub(crate) fn plain(
        ifeq: Option<&'a Request<'a>>,
        delex: Option<&'a Request<'a>>,
    ) -> Forms<'a> {
        Forms {
            ifeq,
            delex,
            ..Forms::default()
        }
    }

    /// These forms, with `counted` as the form of a connection that
    /// counted the request's counter.
    pub(crate) fn with_counted(self, counted: Option<&'a Request<'a>>) -> Forms<'a> {
        Forms { counted, ..self }
    }

    /// These forms, with `cluster` as Redis Cluster members' form.
    pub(crate) fn with_cluster(self, cluster: Option<&'a Request<'a>>) -> Forms<'a> {
        Forms { cluster, ..self }
    }
}
