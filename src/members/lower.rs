//! An operation lowered for one server ([`Lowered`]): the form that
//! server takes ([`Kind`], chosen once per connection, when it is
//! written), its bytes (packed once per round and form, on first use),
//! how its reply reads ([`Reply`]), its command names for messages, its
//! script's source for a server that lost it, and its clean-up.
//!
//! The forms, by what the server took at its handshake:
//!
//! | operation | server | form |
//! |---|---|---|
//! | take | Redis 7.0+, Valkey | `SET key token NX GET PX ttl`, then the count script by hash |
//! | take | before 7.0, or unknown | `SET key token NX PX ttl` (a refusal cannot say who holds it) |
//! | take | a connection that counted the counter lately | `INCR` in the count script's place (see `Counts`) |
//! | release | Valkey 9+ / Redis 8.4+, allowed | `DELIFEQ key token` / `DELEX key IFEQ token` |
//! | script | any | `EVALSHA`, its source after `NOSCRIPT` |
//!
//! On a Redis Cluster member a call takes its cluster keys and arguments
//! and a release's announcement is `SPUBLISH`; a request sent after an
//! `ASK` is preceded by `ASKING` and never takes a plain
//! compare-and-delete (the script, whose keys the server checks).

use crate::base::keys::READERS_MARK;
use crate::base::text::Decimal;
use crate::members::conn::{pack, pack_into};
use crate::members::member::Verbs;
use std::borrow::Cow;

use crate::members::op::{Announce, Args, Call, Op, PUBLISH, Reads, Take};
use crate::members::request::{
    Counter, Counts, FALLBACK, PlainDelete, Pooled, Reply, Request, Routed,
};
use crate::members::script::Lua;

/// The form of an operation a server takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The form of current servers.
    Current,
    /// A take on a server without `SET ... NX GET` (before Redis 7.0, or
    /// one whose version is unknown).
    Legacy,
    /// A take whose counter is counted by `INCR` (see `Counts`).
    Counted,
    /// A release as the server's own compare-and-delete.
    Plain(PlainDelete),
}

/// How many forms a request may be packed in: three kinds (a take's
/// current, legacy and counted forms; a call's script and two plain
/// commands), a call's as nodes and as Redis Cluster members take it.
pub(crate) const FORMS: usize = 6;

impl Kind {
    /// Its slot among one operation's forms (a take's and a call's
    /// kinds never meet in one request).
    fn index(self) -> usize {
        match self {
            Kind::Current => 0,
            Kind::Legacy | Kind::Plain(PlainDelete::DelIfEq) => 1,
            Kind::Counted | Kind::Plain(PlainDelete::DelEx) => 2,
        }
    }
}

/// How a take's fencing counter is counted in its write.
#[derive(Clone, Copy)]
enum Count {
    /// The count script, by hash (loaded with the handshake).
    ByHash,
    /// The count script with its source (after `NOSCRIPT`).
    WithSource,
    /// `INCR`.
    Incr,
}

/// A request as one server takes it: routed (node or Redis Cluster
/// member, after `ASKING` or not), in the form its connection chose.
#[derive(Clone, Copy)]
pub(crate) struct Lowered<'r> {
    pub(crate) routed: Routed<'r>,
    pub(crate) kind: Kind,
}

impl<'r> Routed<'r> {
    /// The form the server of `pooled` takes: chosen when the request is
    /// written, and read back from the connection when its reply is (see
    /// `Pooled::send`), so that the reply reads as the request was
    /// written.
    pub(crate) fn on(self, pooled: &Pooled) -> Lowered<'r> {
        self.taken_as(pooled.legacy, pooled.plain_delete, &pooled.counts)
    }

    /// The form a server takes that is `legacy` (no `SET ... NX GET`),
    /// has its own compare-and-delete `plain` (allowed), and whose
    /// connection counted the counters `counts` knows.
    pub(crate) fn taken_as(
        self,
        legacy: bool,
        plain: Option<PlainDelete>,
        counts: &Counts,
    ) -> Lowered<'r> {
        let kind = match &self.req.op {
            // Never after `ASKING`, with its source, in a pipeline (whose
            // fallback to the script could not be read in turn), nor with
            // a `WAIT` (which it does not read).
            Op::Call(call) => match (call.release, plain) {
                (Some(_), Some(plain))
                    if !self.asking && !self.source && self.reload && self.req.wait.is_none() =>
                {
                    Kind::Plain(plain)
                }
                _ => Kind::Current,
            },
            Op::Take(_) if legacy => Kind::Legacy,
            Op::Take(take) => match counter(take, false) {
                Some(c) if counts.knows(&c) => Kind::Counted,
                _ => Kind::Current,
            },
        };
        Lowered { routed: self, kind }
    }
}

impl<'r> Lowered<'r> {
    /// The request.
    pub(crate) fn req(&self) -> &'r Request<'r> {
        self.routed.req
    }

    /// The bytes of the form (without an `ASKING`), packed once per round.
    pub(crate) fn bytes(&self) -> &'r [u8] {
        let cluster = self.routed.cluster && matches!(self.req().op, Op::Call(_));
        let at = self.kind.index() + 3 * usize::from(cluster);
        self.req().packed[at].get_or_init(|| self.pack(false))
    }

    /// Appends what is written for it: `ASKING` first when asked, then
    /// its form, or its source form when the request says so.
    pub(crate) fn write_into(&self, out: &mut Vec<u8>) {
        if self.routed.asking {
            out.extend_from_slice(&pack(&[b"ASKING"]));
        }
        match self.routed.source {
            true => out.extend_from_slice(&self.pack(true)),
            false => out.extend_from_slice(self.bytes()),
        }
    }

    /// Packs the form; with `source`, scripts by their source (a take's
    /// count script only: see [`reload`](Self::reload)).
    fn pack(&self, source: bool) -> Vec<u8> {
        let req = self.req();
        let wait = |out: &mut Vec<u8>| wait_into(out, req);
        match (&req.op, self.kind) {
            (Op::Take(take), kind) => {
                let how = match (source, kind) {
                    (true, _) => Count::WithSource,
                    (false, Kind::Counted) => Count::Incr,
                    (false, _) => Count::ByHash,
                };
                let mut out = Vec::with_capacity(256 + 128 * usize::from(take.fence.is_some()));
                pack_take(&mut out, take, kind != Kind::Legacy, how);
                wait(&mut out);
                out
            }
            (Op::Call(call), Kind::Plain(plain)) if !source => {
                let mut out = Vec::with_capacity(128 + call.tail.map_or(0, |t| t.max_len()));
                let (key, token) = (call.node.0[0], call.release.unwrap_or_default());
                plain.pack_into(&mut out, key, token);
                tail(&mut out, call, self.routed.cluster);
                out
            }
            (Op::Call(call), _) => {
                let mut out = Vec::with_capacity(256 + call.tail.map_or(0, |t| t.max_len()));
                let (keys, args) = call.on(self.routed.cluster);
                let args = spoken(call.lua, args, self.routed.cluster);
                match source {
                    true => call.lua.eval_into(&mut out, keys, &args),
                    false => call.lua.evalsha_into(&mut out, keys, &args),
                }
                wait(&mut out);
                tail(&mut out, call, self.routed.cluster);
                out
            }
        }
    }

    /// For a script sent by hash: what sends its source in its place, for
    /// a server that answers `NOSCRIPT` (a take: its count script alone,
    /// with the `WAIT` behind it again).
    pub(crate) fn reload(&self) -> Option<Vec<u8>> {
        let req = self.req();
        match &req.op {
            Op::Take(take) => take.fence.as_ref().map(|_| {
                let mut out = Vec::with_capacity(256);
                count_into(&mut out, take, Count::WithSource);
                wait_into(&mut out, req);
                out
            }),
            Op::Call(_) => Some(
                Lowered {
                    kind: Kind::Current,
                    ..*self
                }
                .pack(true),
            ),
        }
    }

    /// [`reload`](Self::reload), where its route allows one in line (not
    /// in a pipeline: see [`Routed::reload`]).
    pub(crate) fn reloads(&self) -> Option<Vec<u8>> {
        self.routed.reload.then(|| self.reload()).flatten()
    }

    /// Written behind the request on its connection when its reply does
    /// not come in time (a take's clean-up), by its source.
    pub(crate) fn on_timeout(&self) -> Option<Vec<u8>> {
        match &self.req().op {
            Op::Take(take) => {
                let (keys, args) = take.clean_up.on(self.routed.cluster);
                let args = spoken(take.clean_up.lua, args, self.routed.cluster);
                Some(take.clean_up.lua.eval(keys, &args))
            }
            Op::Call(_) => None,
        }
    }

    /// How its reply reads.
    pub(crate) fn reply(&self) -> Reply {
        match (&self.req().op, self.kind) {
            (Op::Take(take), Kind::Legacy) => match take.fence {
                Some(_) => Reply::SetCount,
                None => Reply::Set,
            },
            (Op::Take(take), _) => match take.fence {
                Some(_) => Reply::SetGetCount(READERS_MARK),
                None => Reply::SetGet(READERS_MARK),
            },
            (Op::Call(call), Kind::Plain(_)) => Reply::DelIfEq(call.tail.is_some()),
            (Op::Call(call), _) => match call.reads {
                Reads::Count => Reply::Count,
                Reads::Whole => Reply::Kept,
                Reads::Verdict if call.tail.is_some() => Reply::OneThenAny,
                Reads::Verdict => Reply::One,
            },
        }
    }

    /// Names its command `at` (its index among the request's commands;
    /// [`FALLBACK`] for a plain command's script) and key, for messages.
    pub(crate) fn describe(&self, at: usize) -> String {
        match (&self.req().op, self.kind) {
            (Op::Take(take), kind) => {
                let fence = take.fence.as_ref().map_or(&b""[..], |f| f.key);
                let (verb, key) = match (at, kind) {
                    (0, _) => ("SET", take.key),
                    (_, Kind::Counted) => ("INCR", fence),
                    _ => ("the count script on", fence),
                };
                format!("{verb} {:?}", String::from_utf8_lossy(key))
            }
            (Op::Call(call), Kind::Plain(plain)) if at != FALLBACK => {
                plain.describe(call.node.0[0])
            }
            (Op::Call(call), _) => {
                let keys = call.on(self.routed.cluster).0;
                call.lua.describe(keys.first().copied().unwrap_or_default())
            }
        }
    }

    /// A take's fencing counter, for `Counts`.
    pub(crate) fn counter(&self) -> Option<Counter<'r>> {
        match &self.req().op {
            Op::Take(take) => counter(take, self.kind == Kind::Counted),
            Op::Call(_) => None,
        }
    }
}

/// A take's fencing counter, counted by `INCR` when `by_incr`: none
/// where no `INCR` may count it (see [`Fence::incr`](crate::members::op::Fence::incr)).
fn counter<'r>(take: &Take<'r>, by_incr: bool) -> Option<Counter<'r>> {
    take.fence.as_ref().filter(|f| f.incr).map(|fence| Counter {
        key: fence.key,
        keep: fence.keep_ms,
        at: fence.at,
        by_incr,
    })
}

/// Appends a take: its check ahead (by hash: the handshake loads it, and
/// a `SCRIPT FLUSH` costs one attempt, see `Pooled::finish`), `SET ... NX`
/// (with `GET` when `get`), the counter's count as `how` says.
fn pack_take(out: &mut Vec<u8>, take: &Take<'_>, get: bool, how: Count) {
    if let Some(ahead) = &take.ahead {
        ahead.lua.evalsha_into(out, ahead.keys, ahead.args);
    }
    let get: &[&[u8]] = if get { &[b"GET"] } else { &[] };
    pack_into(
        out,
        &[
            &[b"SET", take.key, take.token, b"NX"],
            get,
            &[b"PX", take.px.as_bytes()],
        ],
    );
    // The counter is counted on every member asked, whether or not it set
    // the key: only the counts of members that set it make the token; the
    // others' counts just grow, which keeps every counter monotonic. Its
    // expiry is only ever raised: an attempt with a short keep never cuts
    // the life of a counter a long-TTL holder relies on.
    count_into(out, take, how);
}

/// Appends the take's count, as `how` says (nothing without fencing).
fn count_into(out: &mut Vec<u8>, take: &Take<'_>, how: Count) {
    let Some(fence) = &take.fence else {
        return;
    };
    let args: [&[u8]; 2] = [fence.start.as_bytes(), fence.keep.as_bytes()];
    match how {
        Count::ByHash => fence.count.evalsha_into(out, &[fence.key], &args),
        Count::WithSource => fence.count.eval_into(out, &[fence.key], &args),
        Count::Incr => pack_into(out, &[&[b"INCR", fence.key]]),
    }
}

/// A call's arguments as a node (`cluster` false) or a Redis Cluster
/// member takes them: [`PUBLISH`] in the argument `lua` declares as
/// `publish` replaced by the server's publish verb (there only: any other
/// argument, a user's value among them, goes as given).
fn spoken<'x>(lua: &Lua, args: Args<'x>, cluster: bool) -> Cow<'x, [&'x [u8]]> {
    let declared = lua.takes().args;
    let at = declared
        .iter()
        .position(|name| name.trim_end_matches(['?', '*']) == "publish");
    match at {
        Some(at) if args.get(at) == Some(&PUBLISH) => {
            let mut args = args.to_vec();
            args[at] = Verbs::of(cluster).publish;
            Cow::Owned(args)
        }
        _ => Cow::Borrowed(args),
    }
}

/// Appends the request's `WAIT`, if its yes counts only once replicas
/// acknowledged the write.
fn wait_into(out: &mut Vec<u8>, req: &Request<'_>) {
    if let Some(w) = req.wait {
        let n = Decimal::of(u64::from(w.acks));
        pack_into(out, &[&[b"WAIT", n.as_bytes(), w.ms.as_bytes()]]);
    }
}

/// Appends a call's announcement, as nodes or Redis Cluster members take
/// it.
fn tail(out: &mut Vec<u8>, call: &Call<'_>, cluster: bool) {
    if let Some(tail) = call.tail {
        tail.pack_into(out, cluster);
    }
}

impl Announce<'_> {
    /// Appends the command as nodes (`cluster` false) or Redis Cluster
    /// members take it.
    pub(crate) fn pack_into(&self, out: &mut Vec<u8>, cluster: bool) {
        let verb = Verbs::of(cluster).publish;
        pack_into(out, &[&[verb, self.channel, self.message]]);
    }

    /// How many bytes it packs into, at most.
    pub(crate) fn max_len(&self) -> usize {
        self.channel.len() + self.message.len() + 96
    }
}

#[cfg(test)]
mod tests;
