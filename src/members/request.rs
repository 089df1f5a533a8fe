//! One request on one connection: what it is ([`Request`]), how its
//! reply reads ([`Reply`]), and the reading itself on a pooled connection
//! ([`Pooled`]), which keeps the connection in step or says it is not.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use redis::Value;

use crate::base::node_error::Cause;
use crate::members::conn::{Conn, pack};
use crate::members::lower::{FORMS, Kind, Lowered};
use crate::members::op::Op;

mod counts;
mod plain;
mod said;
mod take;
pub(crate) use counts::{Counter, Counts};
pub(crate) use plain::PlainDelete;
pub(crate) use said::{Said, Tallied};

/// The index a [`Failure`] of a plain command's fallback script (see
/// [`Reply::DelIfEq`]) gives [`Lowered::describe`].
pub(crate) const FALLBACK: usize = usize::MAX;

/// How a reply reads, as a [`Said`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Reply {
    /// The server's own compare-and-delete ([`PlainDelete`]: `DELIFEQ key
    /// token` on Valkey 9+, `DELEX key IFEQ token` on Redis 8.4+: a
    /// release without a script), with a second reply behind it (the release's `PUBLISH`, read and ignored)
    /// when `true`: 1 is yes; 0 (another token, or no key) is told apart
    /// by an `EXISTS key` sent then, on the same connection: a key is no
    /// ([`Said::No`]), none is gone ([`Said::Gone`]). Refused by an ACL rule (`NOPERM`) or
    /// unknown to the server (`ERR unknown command`), the script ([`Lowered::reload`]) runs in its place, read as
    /// [`One`](Self::One) or [`OneThenAny`](Self::OneThenAny), and the
    /// connection sends the script from then on.
    DelIfEq(bool),
    /// `1` is yes, `0` is no, `-1` is [`Said::Gone`] (unlock, extend, raise);
    /// `2` is the unlock's "a fair queue stands" (see `lock.rs`).
    One,
    /// As `One` for the first command; a second one (the `PUBLISH` after
    /// a release's unlock) is read and its answer, an error reply
    /// included, ignored.
    OneThenAny,
    /// The reply of `SET ... NX` (acquire without fencing, on a server
    /// without `NX GET`): `OK` is yes (1), nil is no, and may be shared
    /// ([`Said::MaybeShared`]: this server cannot say who holds the key).
    Set,
    /// The reply of `SET ... NX GET` (acquire without fencing): nil is yes
    /// (the key was set), the holder's value is no ([`Said::MaybeShared`]
    /// when it is the mark given here, which shared holders keep in the
    /// key), and `WRONGTYPE` is no (a key of another type holds the name,
    /// as `SET NX` without `GET` finds).
    SetGet(&'static [u8]),
    /// A count (a semaphore's survey, a set's fencing token): any number
    /// of 0 or more; a negative `-i` (the set script's first busy key)
    /// reads as [`Said::Busy`] of `i - 1`, and so does `[-i, value]`
    /// (the value holding that key), the value then going to the
    /// [`kept`](crate::members::request::Request::kept) store if there is one; with a store, a
    /// value alone (the fair claim's refusal, naming who holds the key)
    /// reads as [`Said::Held`].
    Count,
    /// Two replies, of `SET ... NX` on the lock key, then the count
    /// script on the fencing counter (acquire with fencing): nil first is
    /// no (and may be shared); `OK` first is yes, and the count.
    SetCount,
    /// As `SetCount`, with `SET ... NX GET` first: read as `SetGet` (with
    /// the same mark), and the count.
    SetGetCount(&'static [u8]),
    /// Any reply but an error, kept whole in the request's
    /// [`kept`](crate::members::request::Request::kept) store; the answer is its index there (a
    /// read, such as an election's, whose answers are not numbers).
    Kept,
}

/// One round's request: an operation, how its answers count, and its
/// forms as the servers take them, each packed once, on first use (see
/// `lower.rs`).
pub(crate) struct Request<'a> {
    pub(crate) op: Op<'a>,
    /// The answers decide a holder (acquire, extend, raise): a server kept
    /// out after a restart (see `restart.rs`) gives none.
    pub(crate) decides: bool,
    /// A yes counts only once replicas acknowledged the write (`WAIT`
    /// behind it).
    pub(crate) wait: Option<Replicas<'a>>,
    /// Where a whole reply goes ([`Reply::Kept`]), and the value a
    /// refusal found (who holds the key).
    pub(crate) kept: Option<&'a parking_lot::Mutex<Vec<Value>>>,
    /// Its forms, packed (see [`Kind`](crate::members::lower::Kind)).
    pub(crate) packed: [OnceLock<Vec<u8>>; FORMS],
}

/// The replicas a write waits for: `WAIT acks ms`.
#[derive(Clone, Copy)]
pub(crate) struct Replicas<'a> {
    pub(crate) acks: u32,
    pub(crate) ms: &'a str,
}

impl<'a> Request<'a> {
    /// A request of `op`, whose answers decide a holder when `decides`,
    /// whose yes waits for `wait`'s replicas, whose whole replies and
    /// refusals' values go to `kept`.
    pub(crate) fn new(
        op: Op<'a>,
        decides: bool,
        wait: Option<Replicas<'a>>,
        kept: Option<&'a parking_lot::Mutex<Vec<Value>>>,
    ) -> Request<'a> {
        Request {
            op,
            decides,
            wait,
            kept,
            packed: Default::default(),
        }
    }
}

/// A request as a member sends it: to a node, or a Redis Cluster member's
/// server; after `ASKING` or not.
#[derive(Clone, Copy)]
pub(crate) struct Routed<'r> {
    pub(crate) req: &'r Request<'r>,
    /// Redis Cluster members take a call's cluster keys and arguments.
    pub(crate) cluster: bool,
    /// Sent after `ASKING` (an `ASK` followed), whose `OK` is read first.
    pub(crate) asking: bool,
    /// A script refused `NOSCRIPT` gets its source on the same connection
    /// at once; in a pipeline (`batch.rs`) it is sent again instead, the
    /// replies of the requests behind it being read first.
    pub(crate) reload: bool,
    /// Sent with its script's source (each server's first request of a
    /// batch's pass that routes its open requests again: after a
    /// `NOSCRIPT`, a `MOVED`, or no pooled connection).
    pub(crate) source: bool,
}

impl<'r> Routed<'r> {
    /// `req` as a node (`cluster` false) or a Redis Cluster member sends it.
    pub(crate) fn of(req: &'r Request<'r>, cluster: bool) -> Routed<'r> {
        Routed {
            req,
            cluster,
            asking: false,
            reload: true,
            source: false,
        }
    }
}

/// A request that got no useful answer: the error, and which of the
/// request's commands it belongs to (for an error reply).
pub(crate) struct Failure {
    pub(crate) error: Cause,
    pub(crate) at: usize,
    /// The connection is still in step (the replies were all read).
    pub(crate) keep: bool,
}

impl From<Cause> for Failure {
    /// The failure of one read: an error reply was read whole (the
    /// connection is in step so far); anything else breaks it.
    fn from(error: Cause) -> Failure {
        let keep = error.is_reply();
        Failure { error, at: 0, keep }
    }
}

/// A connection, between uses kept in a node's pool.
pub(crate) struct Pooled {
    /// Boxed: a connection moves in and out of its pool on every round.
    pub(crate) con: Box<Conn>,
    /// Its server does not take `SET ... NX GET` and `PEXPIRE ... GT`, or
    /// did not say (see [`Routed::on`]).
    pub(crate) legacy: bool,
    /// Its server's own compare-and-delete, if it has one and this
    /// connection's user was not refused it (see [`Reply::DelIfEq`]).
    pub(crate) plain_delete: Option<PlainDelete>,
    /// Its user was refused that command (`NOPERM`): its node sends the
    /// script on every connection from then on.
    pub(crate) plain_delete_refused: bool,
    /// The fencing counters it counted (see [`Counts`]).
    pub(crate) counts: Counts,
    /// The forms of the requests last written, in order (see
    /// [`send`](Self::send)).
    pub(crate) written: Vec<Kind>,
    /// Its server answered `READONLY` (or `MASTERDOWN`, `LOADING`,
    /// `NOREPLICAS`) to a node that follows its group's master: not
    /// pooled again.
    pub(crate) demoted: bool,
    /// The node's switches (a Sentinel group's failovers) counted when
    /// it was opened: one opened before the last goes back to no pool.
    pub(crate) switches: u64,
}

impl Pooled {
    /// A connection just opened, its server's forms not known yet.
    pub(crate) fn new(con: Conn) -> Pooled {
        Pooled {
            con: Box::new(con),
            legacy: true,
            plain_delete: None,
            plain_delete_refused: false,
            counts: Counts::default(),
            written: Vec::new(),
            demoted: false,
            switches: 0,
        }
    }

    /// Writes `reqs` back to back (one request, or a pipeline), each in
    /// the form this connection's server takes, chosen here once and
    /// noted for reading its reply. `left`: what was left until
    /// `deadline` at a clock read just before (see `Node::send`).
    pub(crate) fn send(
        &mut self,
        reqs: &[Routed<'_>],
        deadline: Instant,
        left: Option<Duration>,
    ) -> Result<(), Cause> {
        self.written.clear();
        let one;
        let mut joined = Vec::new();
        let packed: &[u8] = match reqs {
            [req] if !req.asking && !req.source => {
                let lowered = req.on(self);
                self.written.push(lowered.kind);
                one = lowered.bytes();
                one
            }
            _ => {
                for req in reqs {
                    let lowered = req.on(self);
                    self.written.push(lowered.kind);
                    lowered.write_into(&mut joined);
                }
                &joined
            }
        };
        match left {
            Some(left) => self.con.write_within(packed, left),
            None => self.con.write(packed, deadline),
        }
    }

    /// Request `routed`, the `at`-th written by the last
    /// [`send`](Self::send), in the form it was written.
    pub(crate) fn lowered<'r>(&self, routed: Routed<'r>, at: usize) -> Lowered<'r> {
        let kind = self.written.get(at).copied().unwrap_or(Kind::Current);
        Lowered { routed, kind }
    }

    /// Reads the reply to `routed`, the `at`-th request written by the
    /// last [`send`](Self::send), sending the script's source once more
    /// after `NOSCRIPT` (`SCRIPT FLUSH`).
    ///
    /// A failure's `keep` says whether every reply of the request was read
    /// (the connection is in step and may go back to the pool); any path
    /// that leaves a reply unread returns `keep: false`, so that a later
    /// request never reads this one's reply as its own.
    pub(crate) fn finish(
        &mut self,
        routed: Routed<'_>,
        at: usize,
        deadline: Instant,
    ) -> Result<Said, Failure> {
        let req = &self.lowered(routed, at);
        // The common request: nothing ahead of its reply, no `WAIT` behind.
        if !routed.asking && req.req().op.check().is_none() && routed.req.wait.is_none() {
            return self.finish_reply(req, deadline);
        }
        self.finish_around(req, deadline)
    }

    /// [`finish`](Self::finish) for a request with an `ASKING`, a check
    /// ahead or a `WAIT` behind.
    #[inline(never)]
    fn finish_around(&mut self, req: &Lowered<'_>, deadline: Instant) -> Result<Said, Failure> {
        if req.routed.asking {
            self.asked(deadline)?;
        }
        // The count check's reply; the acquisition behind it ran anyway.
        let check = if req.req().op.check().is_some() {
            match self.con.read(deadline) {
                Ok(Value::Int(n)) if n >= 0 => Ok(n as u64),
                Ok(other) => Err(unexpected(&other)),
                Err(e) if is_reply(&e) => Err(e),
                Err(e) => return Err(e.into()),
            }
        } else {
            Ok(0)
        };
        let answer = self.replicated(req, deadline);
        match (check, answer, req.req().op.check()) {
            (Ok(0), answer, _) => answer,
            // Not in step: that failure is the answer.
            (_, Err(f), _) if !f.keep => Err(f),
            // The check is sent by hash (loaded with the handshake): after
            // a `SCRIPT FLUSH` this attempt gets no vote here, and the
            // script is loaded again on this connection for the next one.
            (Err(error), _, Some(lua)) if is_noscript(&error) => {
                let load = pack(&[b"SCRIPT", b"LOAD", lua.source()]);
                self.con.write(&load, deadline)?;
                self.con.read(deadline)?;
                Err(Failure {
                    error,
                    at: 0,
                    keep: true,
                })
            }
            (Ok(n), _, _) => Ok(Said::Differs(n)),
            (Err(error), _, _) => Err(Failure {
                error,
                at: 0,
                keep: true,
            }),
        }
    }

    /// Reads the reply to `req` past any `ASKING` and count check, then
    /// its `WAIT`: a yes counts only when enough replicas acknowledged it.
    pub(crate) fn replicated(
        &mut self,
        req: &Lowered<'_>,
        deadline: Instant,
    ) -> Result<Said, Failure> {
        let answer = self.finish_reply(req, deadline);
        let Some(needed) = req.req().wait.map(|w| w.acks) else {
            return answer;
        };
        if let Err(f) = &answer
            && !f.keep
        {
            return answer;
        }
        let acked = match self.con.read(deadline)? {
            Value::Int(acked) => u32::try_from(acked).unwrap_or(0),
            other => {
                return Err(Failure {
                    keep: true,
                    ..unexpected(&other).into()
                });
            }
        };
        match answer {
            // Only a write waits for replicas: a no (0, or a lock's no that
            // may be shared), a gone key and a set's busy key are answers
            // whatever the replicas saw.
            Ok(Said::Yes(_)) if acked < needed => Err(Failure {
                error: Cause::Replication(format!(
                    "the write reached {acked} of {needed} replicas in time (WAIT)"
                )),
                at: 0,
                keep: true,
            }),
            other => other,
        }
    }

    /// Reads the reply to `req` (after any `ASKING`), up to a `WAIT`.
    pub(crate) fn finish_reply(
        &mut self,
        req: &Lowered<'_>,
        deadline: Instant,
    ) -> Result<Said, Failure> {
        let kept = req.req().kept;
        let reply = req.reply();
        match reply {
            Reply::One | Reply::OneThenAny | Reply::Count | Reply::Kept => {}
            Reply::Set => {
                return match self.con.read(deadline)? {
                    Value::Okay => Ok(Said::Yes(1)),
                    Value::Nil => Ok(Said::MaybeShared),
                    other => Err(unexpected(&other).into()),
                };
            }
            Reply::SetGet(mark) => {
                return match self.con.read(deadline) {
                    Ok(Value::Nil) => Ok(Said::Yes(1)),
                    Ok(held) => held_by(&held, mark, kept),
                    Err(e) if e.code() == Some("WRONGTYPE") => Ok(Said::No),
                    Err(e) => Err(e.into()),
                };
            }
            Reply::DelIfEq(tail) => return self.finish_delifeq(req, tail, deadline),
            Reply::SetCount => return self.finish_set_count(req, None, deadline),
            Reply::SetGetCount(mark) => {
                return self.finish_set_count(req, Some(mark), deadline);
            }
        }
        let then_any = matches!(reply, Reply::OneThenAny);
        // The source is packed only after `NOSCRIPT`, never on the way.
        let value = match self.read_then(then_any, deadline)? {
            Err(e) if is_noscript(&e) => match req.reloads() {
                Some(reload) => self.reload(req, &reload, then_any, deadline)??,
                None => return Err(e.into()),
            },
            value => value?,
        };
        match (reply, value) {
            (Reply::Kept, value) => match kept {
                Some(kept) => {
                    let mut kept = kept.lock();
                    kept.push(value);
                    Ok(Said::Kept(kept.len() - 1))
                }
                None => Err(unexpected(&value).into()),
            },
            (Reply::Count, Value::Int(n)) if n >= 0 => Ok(Said::count(n as u64)),
            // A refusal that names who holds the key (the fair claim's).
            (Reply::Count, held @ Value::BulkString(_)) if kept.is_some() => {
                held_by(&held, b"", kept)
            }
            (Reply::Count, Value::Int(n)) => Ok(Said::Busy(n.unsigned_abs() - 1)),
            (Reply::Count, Value::Array(pair)) => busy_held(&pair, kept),
            (_, other) => one(other),
        }
    }

    /// After `NOSCRIPT` (a `SCRIPT FLUSH`, a restart): reads the `WAIT`
    /// sent behind the refused script, sends the script's source, and
    /// reads its reply (see [`read_then`](Self::read_then)).
    #[cold]
    #[inline(never)]
    fn reload(
        &mut self,
        req: &Lowered<'_>,
        reload: &[u8],
        then_any: bool,
        deadline: Instant,
    ) -> Result<Result<Value, Cause>, Failure> {
        if req.req().wait.is_some() {
            // The WAIT sent behind the refused script.
            self.con.read(deadline)?;
        }
        if req.routed.asking {
            // ASKING holds for one command: the reload needs it too.
            self.con
                .write(&[&pack(&[b"ASKING"])[..], reload].concat(), deadline)?;
            self.asked(deadline)?;
        } else {
            self.con.write(reload, deadline)?;
        }
        Ok(self.read_then(then_any, deadline)?)
    }

    /// Reads a `DELIFEQ` or `DELEX ... IFEQ` (see [`Reply::DelIfEq`]). Never sent with
    /// `ASKING` (an ASK retry sends the script) nor with a `WAIT` (a
    /// release waits for no replica).
    fn finish_delifeq(
        &mut self,
        req: &Lowered<'_>,
        tail: bool,
        deadline: Instant,
    ) -> Result<Said, Failure> {
        match self.read_then(tail, deadline)? {
            Ok(Value::Int(1)) => Ok(Said::Yes(1)),
            Ok(Value::Int(0)) => {
                // Ours it was not: another owner's, or none. Asked after
                // the fact, a key set since reads as another owner's,
                // which it is. Refused `EXISTS` (an ACL rule without it),
                // it reads as gone: lost either way.
                self.con
                    .write(&pack(&[b"EXISTS", req.req().op.key()]), deadline)?;
                match self.con.read(deadline) {
                    Ok(Value::Int(0)) => Ok(Said::Gone),
                    Ok(Value::Int(_)) => Ok(Said::No),
                    Ok(other) => Err(unexpected(&other).into()),
                    Err(e) if e.code() == Some("NOPERM") => Ok(Said::Gone),
                    Err(e) => Err(e.into()),
                }
            }
            // Refused by an ACL rule, or unknown after all (renamed away,
            // or a server claiming a version it is not): the script, here
            // and on this node from now on.
            // (Not in a pipeline, where the script would be read after
            // the replies of the requests behind it: never sent so, see
            // `Routed::taken_as`.)
            Err(e)
                if (e.code() == Some("NOPERM") || e.is_unknown_command()) && req.routed.reload =>
            {
                self.plain_delete = None;
                self.plain_delete_refused = true;
                let script = req.reload().unwrap_or_default();
                self.con.write(&script, deadline)?;
                // The script's own failure is the script's, for messages.
                match self.read_then(tail, deadline)? {
                    Ok(value) => one(value),
                    Err(error) => Err(Failure {
                        keep: error.is_reply(),
                        error,
                        at: FALLBACK,
                    }),
                }
            }
            Ok(other) => Err(unexpected(&other).into()),
            Err(e) => Err(e.into()),
        }
    }

    /// Reads the `OK` of an `ASKING` sent first. A refusal (an ACL user
    /// without `+asking`, `-BUSY`, `-LOADING`) leaves the command's
    /// replies behind it unread: the connection is out of step.
    pub(crate) fn asked(&mut self, deadline: Instant) -> Result<(), Failure> {
        let error = match self.con.read(deadline) {
            Ok(Value::Okay) => return Ok(()),
            Ok(other) => unexpected(&other),
            Err(e) => e,
        };
        Err(Failure {
            error,
            at: 0,
            keep: false,
        })
    }

    /// Reads a reply (an error reply as the inner `Err`), then, with
    /// `then_any`, the next one, whose answer is ignored. A connection
    /// that fails is the outer `Err`.
    pub(crate) fn read_then(
        &mut self,
        then_any: bool,
        deadline: Instant,
    ) -> Result<Result<Value, Cause>, Cause> {
        let first = match self.con.read(deadline) {
            Err(e) if !is_reply(&e) => return Err(e),
            first => first,
        };
        if then_any {
            match self.con.read(deadline) {
                Err(e) if !is_reply(&e) => return Err(e),
                _ => {}
            }
        }
        Ok(first)
    }

    /// Reads one reply into each slot, whatever the earlier ones were, so
    /// that the connection stays in step after an error reply. A broken
    /// connection ends it at once (`Err`); otherwise returns the first
    /// error reply, if any (its slot is left as it was).
    pub(crate) fn read_replies(
        &mut self,
        slots: &mut [Value],
        deadline: Instant,
    ) -> Result<Option<Failure>, Failure> {
        let mut refused = None;
        for (at, slot) in slots.iter_mut().enumerate() {
            match self.con.read(deadline) {
                Ok(value) => *slot = value,
                Err(error) if is_reply(&error) => {
                    refused.get_or_insert(Failure {
                        error,
                        at,
                        keep: true,
                    });
                }
                Err(error) => {
                    return Err(Failure {
                        error,
                        at,
                        keep: false,
                    });
                }
            }
        }
        Ok(refused)
    }
}

/// A refusal of `SET ... NX GET`, by the value holding the key: the shared
/// holders' `mark` is [`Said::MaybeShared`], any other value (a token) a
/// plain no.
pub(super) fn held_by(
    held: &Value,
    mark: &[u8],
    kept: Option<&parking_lot::Mutex<Vec<Value>>>,
) -> Result<Said, Failure> {
    match held {
        Value::BulkString(v) if v[..] == *mark => Ok(Said::MaybeShared),
        Value::BulkString(_) => Ok(match kept {
            Some(kept) => {
                let mut kept = kept.lock();
                kept.push(held.clone());
                Said::Held(kept.len() - 1)
            }
            None => Said::No,
        }),
        other => Err(unexpected(other).into()),
    }
}

/// A set's refusal that names who holds its busy key: `[-i, value]` is
/// [`Said::Busy`] of `i - 1`, the value kept in `kept` if given (for the
/// restart rule; the answer does not index it). Any other shape is a
/// reply this request does not take.
fn busy_held(
    pair: &[Value],
    kept: Option<&parking_lot::Mutex<Vec<Value>>>,
) -> Result<Said, Failure> {
    match pair {
        [Value::Int(n @ ..=-1), held @ Value::BulkString(_)] => {
            if let Some(kept) = kept {
                kept.lock().push(held.clone());
            }
            Ok(Said::Busy(n.unsigned_abs() - 1))
        }
        _ => Err(unexpected(&Value::Array(pair.to_vec())).into()),
    }
}

/// The node sent a complete error reply: the connection is still in step.
pub(crate) fn is_reply(e: &Cause) -> bool {
    e.is_reply()
}

pub(crate) fn is_noscript(e: &Cause) -> bool {
    e.code() == Some("NOSCRIPT")
}

/// The connection was found closed by the peer: nothing was answered.
pub(crate) fn is_stale(e: &Cause) -> bool {
    e.is_stale()
}

/// A script's number answer (see [`Reply::One`]).
fn one(value: Value) -> Result<Said, Failure> {
    match value {
        Value::Int(n @ 1..=2) => Ok(Said::Yes(n as u64)),
        Value::Int(0) => Ok(Said::No),
        Value::Int(-1) => Ok(Said::Gone),
        other => Err(unexpected(&other).into()),
    }
}

#[cold]
pub(crate) fn unexpected(value: &Value) -> Cause {
    Cause::Unexpected(format!("{value:?}"))
}

/// A failure of a read after which a reply the caller expects was taken
/// (the `WAIT` behind a request that is sent again): the connection is
/// out of step, whatever the failure.
pub(super) fn out_of_step(error: Cause) -> Failure {
    Failure {
        error,
        at: 0,
        keep: false,
    }
}
