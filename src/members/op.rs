//! What a round asks of every member, in no server's words: the engine
//! states an operation ([`Op`]: take a key, or call a declared script,
//! perhaps a release a server may run as its own compare-and-delete),
//! and this layer lowers it for each server (`lower.rs`): the form that
//! server takes, packed once per round, and how its reply reads.
//!
//! Every operation answers whatever a late delivery does: a take that
//! runs after its sender gave up is cleaned up by the operation's own
//! [`clean_up`](Take::clean_up), written behind it on the same
//! connection; a script's effects are the script's (each shape's proof
//! says why a late one is harmless).

use std::time::{Duration, Instant};

use crate::base::text::Decimal;
use crate::members::script::Lua;

/// A script's keys (`KEYS`).
pub(crate) type Keys<'a> = &'a [&'a [u8]];

/// A script's arguments (`ARGV`).
pub(crate) type Args<'a> = &'a [&'a [u8]];

/// A script argument that stands for the server's publish verb (a
/// release's announcement, made by the script where it deleted a key):
/// in the argument a script declares as `publish`, this layer gives
/// `PUBLISH` to nodes and `SPUBLISH` to Redis Cluster members in its
/// place (see `Verbs`), so that no caller chooses. Only there: the same
/// bytes elsewhere (a user's value) go as given.
pub(crate) const PUBLISH: &[u8] = b"\0publish-verb\0";

/// One operation on every member of a round.
pub(crate) enum Op<'a> {
    /// Take a key for a token (`SET key token NX PX ttl`, and the fencing
    /// counter's count behind it).
    Take(Take<'a>),
    /// Call a declared script.
    Call(Call<'a>),
}

/// Take `key` for `token` for `px` milliseconds, where nobody holds it.
///
/// Answers ([`Said`](crate::members::request::Said)): a yes with the
/// fencing count (1 without fencing); a no naming the holder's value
/// ([`Said::Held`](crate::members::request::Said::Held), into the
/// request's kept values), or a no that may be shared holders'
/// ([`Said::MaybeShared`](crate::members::request::Said::MaybeShared):
/// the readers' mark, or a server that cannot say who holds the key);
/// [`Said::Differs`](crate::members::request::Said::Differs) when the
/// check ahead found the member differs.
pub(crate) struct Take<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) token: &'a [u8],
    pub(crate) px: Decimal,
    /// The fencing counter counted behind the take, if fencing is on.
    pub(crate) fence: Option<Fence<'a>>,
    /// A check sent ahead of the take, in the same write.
    pub(crate) ahead: Option<Ahead<'a>>,
    /// Written behind the take on its connection when its reply does not
    /// come in time: deletes the key right after a late execution (run
    /// by its source: it must not depend on a script cache).
    pub(crate) clean_up: Call<'a>,
}

/// An acquisition's fencing counter: counted by its script from the
/// larger of its value and the attempt's clock reading (`start`), kept
/// `keep` at least.
pub(crate) struct Fence<'a> {
    pub(crate) key: &'a [u8],
    /// The count script (`KEYS[1]` the counter, `ARGV` start and keep).
    pub(crate) count: &'static Lua,
    pub(crate) start: Decimal,
    /// The keep, in milliseconds, as the script takes it.
    pub(crate) keep: &'a str,
    pub(crate) keep_ms: Duration,
    /// An instant before the round was first written (see `Counts`).
    pub(crate) at: Instant,
    /// An `INCR` may count in the script's place on a connection that
    /// counted this counter by the script lately (see `Counts`): not in
    /// strict restart mode, where the script counts every time.
    pub(crate) incr: bool,
}

/// A check a shape sends ahead of its take, in the same write: a script
/// sent by hash (loaded with the handshake), whose answer `n > 0` says
/// the member differs (the take behind it runs anyway, and is cleaned up
/// as a yes would be).
pub(crate) struct Ahead<'a> {
    pub(crate) lua: &'static Lua,
    pub(crate) keys: Keys<'a>,
    pub(crate) args: Args<'a>,
}

/// A call of a declared script on every member, sent by hash (its source
/// once more after `NOSCRIPT`).
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    pub(crate) lua: &'a Lua,
    /// Keys and arguments as nodes take them.
    pub(crate) node: (Keys<'a>, Args<'a>),
    /// As Redis Cluster members take them, where they differ (a set's
    /// keys in one slot). Their first key routes the call.
    pub(crate) cluster: Option<(Keys<'a>, Args<'a>)>,
    /// An announcement written right behind the script, whose answer is
    /// read and ignored (a release's).
    pub(crate) tail: Option<Announce<'a>>,
    /// A release of the one key for this token: a server with its own
    /// compare-and-delete (`DELIFEQ`, `DELEX ... IFEQ`) runs that in the
    /// script's place, the same rule in one command.
    pub(crate) release: Option<&'a [u8]>,
    /// What its answers are.
    pub(crate) reads: Reads,
}

/// What a script's answer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reads {
    /// `1` (or the unlock's `2`) yes, `0` no, `-1` gone.
    Verdict,
    /// A count of 0 or more; a negative `-i` is the first busy key, `i -
    /// 1`; with a kept store, a value alone names who holds the key.
    Count,
    /// Any reply but an error, kept whole (a read).
    Whole,
}

/// The announcement written behind a release in the same write (a
/// script's tail): `PUBLISH channel message` on nodes, `SPUBLISH` on Redis
/// Cluster members (see `Verbs`).
#[derive(Clone, Copy)]
pub(crate) struct Announce<'a> {
    pub(crate) channel: &'a [u8],
    pub(crate) message: &'a [u8],
}

impl<'a> Call<'a> {
    /// A call of `lua` with `keys` and `args`, answering a verdict.
    pub(crate) fn new(lua: &'a Lua, keys: Keys<'a>, args: Args<'a>) -> Call<'a> {
        Call {
            lua,
            node: (keys, args),
            cluster: None,
            tail: None,
            release: None,
            reads: Reads::Verdict,
        }
    }

    /// Its keys and arguments as a node (`cluster` false) or a Redis
    /// Cluster member takes them.
    pub(crate) fn on(&self, cluster: bool) -> (Keys<'a>, Args<'a>) {
        match (cluster, self.cluster) {
            (true, Some(on_clusters)) => on_clusters,
            _ => self.node,
        }
    }
}

impl Op<'_> {
    /// The key whose hash slot routes the operation on a Redis Cluster
    /// member.
    pub(crate) fn key(&self) -> &[u8] {
        match self {
            Op::Take(take) => take.key,
            Op::Call(call) => call.on(true).0.first().copied().unwrap_or_default(),
        }
    }

    /// The check ahead of a take, whose answer is read first.
    pub(crate) fn check(&self) -> Option<&'static Lua> {
        match self {
            Op::Take(take) => take.ahead.as_ref().map(|a| a.lua),
            Op::Call(_) => None,
        }
    }

    /// A Redis Cluster member may follow an `ASK` for it: it touches one
    /// key, or is a script (for which the servers themselves refuse keys
    /// split by a migration; see the crate docs, "Why slot migrations are
    /// safe").
    pub(crate) fn follow_ask(&self) -> bool {
        match self {
            Op::Take(take) => take.fence.is_none() && take.ahead.is_none(),
            Op::Call(_) => true,
        }
    }
}
