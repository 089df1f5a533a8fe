//! One request on one connection: what it is ([`Request`]), how its
//! reply reads ([`Reply`]), and the reading itself on a pooled connection
//! ([`Pooled`]), which keeps the connection in step or says it is not.

use std::time::Instant;

use redis::Value;

use crate::base::node_error::Cause;
use crate::members::conn::{Conn, pack};
use crate::members::script::Lua;

mod counts;
mod forms;
pub(crate) use counts::{Counter, Counts};
pub(crate) use forms::{Forms, PlainDelete};

/// The index a [`Failure`] of a plain command's fallback script (see
/// [`Reply::DelIfEq`]) gives its request's `describe`.
pub(crate) const FALLBACK: usize = usize::MAX;

/// What one member's reply said, as its request's [`Reply`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Said {
    /// No (the scripts' 0): another owner holds the key, or it is not
    /// this token's; a count of 0.
    No,
    /// Yes, with its number above 0: 1; a fencing counter; a count; the
    /// unlock's 2, "a fair queue stands" (see `single.rs`).
    Yes(u64),
    /// No such key: expired or deleted (the scripts' -1, to an unlock,
    /// extend or raise).
    Gone,
    /// A negative count `-(i + 1)`, read as `i`: the set script's first
    /// busy key; a fair claim's refusal code (read back by the fair
    /// stage, `engine/fair.rs`).
    Busy(u64),
    /// The check ahead of the request found the member differs (a
    /// permit's count): the check's answer, above 0. The request behind
    /// it ran anyway, and is cleaned up as a yes would be.
    Differs(u64),
    /// An acquisition's no where shared holders may hold the key: it
    /// holds the mark its request named ([`Reply::SetGet`]), or the
    /// server could not say (`SET NX` without `GET`).
    MaybeShared,
    /// A reply kept whole: its index in the request's
    /// [`kept`](Request::kept) store ([`Reply::Kept`]).
    Kept(usize),
    /// A no: the key holds another owner's value, kept at this index in
    /// the request's [`kept`](Request::kept) store (an acquisition's
    /// refusal that says who holds the key: `SET ... NX GET`, the fair
    /// claim).
    Held(usize),
}

impl Said {
    /// The number an answer carries: a yes's, a busy or differing
    /// answer's, a kept reply's index; 0 for a no, a gone key, a shared key.
    pub(crate) fn number(self) -> u64 {
        match self {
            Said::Yes(n) | Said::Busy(n) | Said::Differs(n) => n,
            Said::Kept(i) => i as u64,
            Said::No | Said::Gone | Said::MaybeShared | Said::Held(_) => 0,
        }
    }

    /// A count of 0 or more: 0 is no.
    pub(crate) fn count(n: u64) -> Said {
        match n {
            0 => Said::No,
            n => Said::Yes(n),
        }
    }

    /// The answer as a tally counts it: a no (a shared key's too), a gone
    /// key, or else a yes (any answer that may have written: a busy or
    /// differing one too, which the shapes read before they tally).
    pub(crate) fn tallied(self) -> Tallied {
        match self {
            Said::No | Said::MaybeShared | Said::Held(_) => Tallied::No,
            Said::Gone => Tallied::Gone,
            Said::Yes(_) | Said::Busy(_) | Said::Differs(_) | Said::Kept(_) => Tallied::Yes,
        }
    }
}

/// How a tally counts an answer (see [`Said::tallied`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tallied {
    /// Yes.
    Yes,
    /// No.
    No,
    /// The key is gone.
    Gone,
}

/// How a reply reads, as a [`Said`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Reply {
    /// The server's own compare-and-delete ([`PlainDelete`]: `DELIFEQ key
    /// token` on Valkey 9+, `DELEX key IFEQ token` on Redis 8.4+: a
    /// release without a script), with a second reply behind it (the release's `PUBLISH`, read and ignored)
    /// when `true`: 1 is yes; 0 (another token, or no key) is told apart
    /// by an `EXISTS key` sent then, on the same connection: a key is no
    /// ([`Said::No`]), none is gone ([`Said::Gone`]). Refused by an ACL rule (`NOPERM`) or
    /// unknown to the server (`ERR unknown command`), the script ([`Request::reload`]) runs in its place, read as
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
    /// [`kept`](Request::kept) store if there is one; with a store, a
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
    /// [`kept`](Request::kept) store; the answer is its index there (a
    /// read, such as an election's, whose answers are not numbers).
    Kept,
}

/// One request, the same for every node of a round.
pub(crate) struct Request<'a> {
    /// The command(s), packed; empty when they are packed only if used
    /// (see [`lazy`](Self::lazy)).
    pub(crate) packed: &'a [u8],
    /// Packs the command(s) when `packed` is empty: a variant not packed
    /// for every round, only by each member that takes it (the pre-7.0
    /// acquisition; the current one where no member was seen to take it;
    /// the unlock script where the members take a plain
    /// compare-and-delete).
    pub(crate) lazy: Option<&'a (dyn Fn() -> Vec<u8> + Sync)>,
    /// The key whose hash slot routes the request on a Redis Cluster
    /// member (the resource).
    pub(crate) key: &'a [u8],
    /// `packed` starts with `ASKING`, whose `OK` is read first.
    pub(crate) asking: bool,
    /// After any `ASKING`, `packed` starts with this script, sent by hash
    /// (a check ahead of the request: a permit's count), whose answer is
    /// read next: 0 passes, `n > 0` reads as [`Said::Differs`] of `n` (the
    /// request behind it ran anyway, and is cleaned up as a yes would
    /// be).
    pub(crate) check: Option<&'a Lua>,
    /// A Redis Cluster member may follow an `ASK` for it: it touches one
    /// key, or is a script (for which the servers themselves refuse keys
    /// split by a migration).
    pub(crate) follow_ask: bool,
    /// The answers decide a holder (acquire, extend, raise): a server kept
    /// out after a restart (see `restart.rs`) gives none.
    pub(crate) decides: bool,
    /// `packed` (and the reload) end with `WAIT <replicas> <ms>`: a yes
    /// counts only when this many replicas acknowledged the write.
    pub(crate) wait: Option<u32>,
    /// How to read its reply.
    pub(crate) reply: Reply,
    /// Names the command (by its index among the request's commands) and
    /// key that an error reply concerns, for messages.
    pub(crate) describe: &'a (dyn Fn(usize) -> String + Sync),
    /// The request's other forms, for the servers that take it otherwise.
    pub(crate) forms: Forms<'a>,
    /// For a script sent by hash: the command that sends its source, for a
    /// node that answers `NOSCRIPT`.
    pub(crate) reload: Option<&'a (dyn Fn() -> Vec<u8> + Sync)>,
    /// Written behind the command on the same connection when its reply
    /// does not come in time, before the connection is dropped.
    pub(crate) on_timeout: Option<&'a (dyn Fn() -> Vec<u8> + Sync)>,
    /// Where a [`Reply::Kept`] reply goes; for [`Reply::SetGet`] and
    /// [`Reply::SetGetCount`], the value a refusal found (who holds the
    /// key), for the `Taken` error.
    pub(crate) kept: Option<&'a parking_lot::Mutex<Vec<Value>>>,
    /// The fencing counter an acquisition counts, for [`Counts`]: its
    /// form by `INCR` ([`Forms::counted`]) where the connection may send
    /// it, and the count each reply gives.
    pub(crate) counter: Option<Counter<'a>>,
}

impl<'a> Request<'a> {
    /// The bytes to write: `packed`, or what `lazy` packs.
    pub(crate) fn bytes(&self) -> std::borrow::Cow<'a, [u8]> {
        match self.lazy {
            Some(pack) if self.packed.is_empty() => std::borrow::Cow::Owned(pack()),
            _ => std::borrow::Cow::Borrowed(self.packed),
        }
    }

    /// The request as the server of `pooled` takes it: its plain form
    /// where the server has one, its `legacy` form on a server without
    /// `SET ... NX GET` (or one whose version is unknown), else itself
    /// (see [`Forms`]). Decided per connection, so that the reply is read
    /// as the request was written even while a restart changes the
    /// server.
    pub(crate) fn on(&self, pooled: &Pooled) -> &Request<'a> {
        // A plain form is packed only where some member was seen to take
        // it: one not packed (a server seen for the first time) gets the
        // script.
        let plain = match pooled.plain_delete {
            Some(PlainDelete::DelIfEq) => self.forms.ifeq,
            Some(PlainDelete::DelEx) => self.forms.delex,
            None => None,
        };
        match (plain, self.forms.legacy, self.forms.counted) {
            (Some(plain), _, _) if matches!(plain.reply, Reply::DelIfEq(_)) => plain,
            (_, Some(legacy), _) if pooled.legacy => legacy,
            (_, _, Some(counted))
                if !pooled.legacy && counted.counter.is_some_and(|c| pooled.counts.knows(&c)) =>
            {
                counted
            }
            _ => self,
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
    /// did not say (see [`Request::on`]).
    pub(crate) legacy: bool,
    /// Its server's own compare-and-delete, if it has one and this
    /// connection's user was not refused it (see [`Reply::DelIfEq`]).
    pub(crate) plain_delete: Option<PlainDelete>,
    /// Its user was refused that command (`NOPERM`): its node sends the
    /// script on every connection from then on.
    pub(crate) plain_delete_refused: bool,
    /// The fencing counters it counted (see [`Counts`]).
    pub(crate) counts: Counts,
}

impl Pooled {
    /// Reads the reply to `req` (already written), sending the script's
    /// source once more after `NOSCRIPT` (`SCRIPT FLUSH`).
    ///
    /// A failure's `keep` says whether every reply of the request was read
    /// (the connection is in step and may go back to the pool); any path
    /// that leaves a reply unread returns `keep: false`, so that a later
    /// request never reads this one's reply as its own.
    pub(crate) fn finish(&mut self, req: &Request<'_>, deadline: Instant) -> Result<Said, Failure> {
        // The common request: nothing ahead of its reply, no `WAIT` behind.
        if !req.asking && req.check.is_none() && req.wait.is_none() {
            return self.finish_reply(req, deadline);
        }
        self.finish_around(req, deadline)
    }

    /// [`finish`](Self::finish) for a request with an `ASKING`, a check
    /// ahead or a `WAIT` behind.
    #[inline(never)]
    fn finish_around(&mut self, req: &Request<'_>, deadline: Instant) -> Result<Said, Failure> {
        if req.asking {
            self.asked(deadline)?;
        }
        // The count check's reply; the acquisition behind it ran anyway.
        let check = if req.check.is_some() {
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
        match (check, answer, req.check) {
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
        req: &Request<'_>,
        deadline: Instant,
    ) -> Result<Said, Failure> {
        let answer = self.finish_reply(req, deadline);
        let Some(needed) = req.wait else {
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
        req: &Request<'_>,
        deadline: Instant,
    ) -> Result<Said, Failure> {
        match req.reply {
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
                    Ok(held) => held_by(&held, mark, req.kept),
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
        let then_any = matches!(req.reply, Reply::OneThenAny);
        let reply = match (self.read_then(then_any, deadline)?, req.reload) {
            (Err(e), Some(reload)) if is_noscript(&e) => {
                self.reload(req, reload, then_any, deadline)??
            }
            (reply, _) => reply?,
        };
        match (req.reply, reply) {
            (Reply::Kept, value) => match req.kept {
                Some(kept) => {
                    let mut kept = kept.lock();
                    kept.push(value);
                    Ok(Said::Kept(kept.len() - 1))
                }
                None => Err(unexpected(&value).into()),
            },
            (Reply::Count, Value::Int(n)) if n >= 0 => Ok(Said::count(n as u64)),
            // A refusal that names who holds the key (the fair claim's).
            (Reply::Count, held @ Value::BulkString(_)) if req.kept.is_some() => {
                held_by(&held, b"", req.kept)
            }
            (Reply::Count, Value::Int(n)) => Ok(Said::Busy(n.unsigned_abs() - 1)),
            (Reply::Count, Value::Array(pair)) => busy_held(&pair, req.kept),
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
        req: &Request<'_>,
        reload: &(dyn Fn() -> Vec<u8> + Sync),
        then_any: bool,
        deadline: Instant,
    ) -> Result<Result<Value, Cause>, Failure> {
        if req.wait.is_some() {
            // The WAIT sent behind the refused script.
            self.con.read(deadline)?;
        }
        if req.asking {
            // ASKING holds for one command: the reload needs it too.
            self.con
                .write(&[&pack(&[b"ASKING"])[..], &reload()].concat(), deadline)?;
            self.asked(deadline)?;
        } else {
            self.con.write(&reload(), deadline)?;
        }
        Ok(self.read_then(then_any, deadline)?)
    }

    /// Reads a `DELIFEQ` or `DELEX ... IFEQ` (see [`Reply::DelIfEq`]). Never sent with
    /// `ASKING` (an ASK retry sends the script) nor with a `WAIT` (a
    /// release waits for no replica).
    fn finish_delifeq(
        &mut self,
        req: &Request<'_>,
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
                self.con.write(&pack(&[b"EXISTS", req.key]), deadline)?;
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
            Err(e)
                if (e.code() == Some("NOPERM") || e.is_unknown_command())
                    && req.reload.is_some() =>
            {
                self.plain_delete = None;
                self.plain_delete_refused = true;
                let script = req.reload.map(|reload| reload()).unwrap_or_default();
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

    /// Reads the two replies of the acquisition pipeline (its `SET` and
    /// the counter's count); the first error reply fails it. A count
    /// refused `NOSCRIPT` (the server lost the script since the
    /// handshake) runs once more, with its source (`req.reload`).
    /// With a shared holders' `mark`, the lock key's command was `SET ...
    /// NX GET` (see [`Reply::SetGetCount`]).
    pub(crate) fn finish_set_count(
        &mut self,
        req: &Request<'_>,
        mark: Option<&[u8]>,
        deadline: Instant,
    ) -> Result<Said, Failure> {
        let get = mark.is_some();
        let mut replies = [Value::Okay, Value::Nil];
        let mut refused = self.read_replies(&mut replies, deadline)?;
        // The count was made again by the script (see `count_again`).
        let mut recounted = false;
        if let (Some(f), Some(reload)) = (&refused, req.reload)
            && f.at == 1
            && is_noscript(&f.error)
        {
            if req.wait.is_some() {
                // The `WAIT` sent behind the refused script: the reload
                // sends one again, which `replicated` reads (a failure
                // here leaves no reply for it: out of step).
                self.con.read(deadline).map_err(out_of_step)?;
            }
            self.con.write(&reload(), deadline)?;
            // The count's slot, read as the first read it (its index: 1).
            let second = |f: Failure| Failure { at: 1, ..f };
            refused = self
                .read_replies(&mut replies[1..], deadline)
                .map_err(second)?
                .map(second);
        }
        // `INCR` refused (an ACL rule without `+incr`, a counter that holds
        // no integer): the script counts in its place, on this connection.
        if let (Some(f), Some(counter)) = (&refused, req.counter)
            && counter.by_incr
            && f.at == 1
            && f.keep
        {
            self.counts
                .refused(&counter, f.error.code() == Some("NOPERM"));
            let why = format!("INCR was refused: {}", f.error);
            replies[1] = self.count_again(req, counter, why, false, deadline)?;
            refused = None;
            recounted = true;
        }
        match refused {
            // A key of another type holds the name: a no, as `SET NX`
            // without `GET` finds (its slot keeps the placeholder `OK`,
            // read below as taken).
            Some(refused)
                if get && refused.at == 0 && refused.error.code() == Some("WRONGTYPE") =>
            {
                replies[0] = Value::Int(0);
            }
            Some(refused) => return Err(refused),
            None => {}
        }
        if let (Some(counter), Value::Int(n)) = (req.counter, &replies[1])
            && *n > 0
            && !recounted
            && let Err(last) = self.counts.read(&counter, *n as u64)
        {
            let why = format!(
                "its fencing counter went back on this connection, from {last} to {n} \
                 (deleted or flushed by hand, or another server behind the same \
                 connection)"
            );
            replies[1] = self.count_again(req, counter, why, true, deadline)?;
        }
        match (get, replies) {
            (false, [Value::Okay, Value::Int(n)]) if n > 0 => Ok(Said::Yes(n as u64)),
            (false, [Value::Nil, Value::Int(_)]) => Ok(Said::MaybeShared),
            (true, [Value::Nil, Value::Int(n)]) if n > 0 => Ok(Said::Yes(n as u64)),
            (true, [Value::Int(0), Value::Int(_)]) => Ok(Said::No),
            (true, [ref held, Value::Int(_)]) if !matches!(held, Value::Nil) => {
                held_by(held, mark.unwrap_or_default(), req.kept)
            }
            (_, [_, other]) => Err(unexpected(&other).into()),
        }
    }

    /// After an `INCR` that counted no higher than the last count this
    /// connection saw, or was refused (`why`; see [`Counts`]): reads the
    /// `WAIT` behind it, and counts by the script (`req`'s reload, sending
    /// its source) on the same connection, whose count replaces the
    /// `INCR`'s. With `expire` (the `INCR` went back: it may have made the
    /// counter anew, without an expiry), the counter is first given its
    /// keep where it has no expiry, so that the script keeps it (the
    /// script leaves a counter without an expiry without one: one made by
    /// hand).
    #[cold]
    #[inline(never)]
    fn count_again(
        &mut self,
        req: &Request<'_>,
        counter: Counter<'_>,
        why: String,
        expire: bool,
        deadline: Instant,
    ) -> Result<Value, Failure> {
        crate::base::logging::log!(
            debug,
            "redlock_sync::node",
            "{}: counted by the script on the same connection",
            why
        );
        let Some(reload) = req.reload else {
            return Err(Failure {
                error: Cause::Restarted(why),
                at: 1,
                keep: true,
            });
        };
        if req.wait.is_some() {
            // The `WAIT` sent behind the `INCR`: the reload sends one
            // again, which `replicated` reads (a failure here leaves no
            // reply for it: out of step).
            self.con.read(deadline).map_err(out_of_step)?;
        }
        let keep = counter.keep.as_millis().to_string();
        let expiry = match expire {
            true => pack(&[b"PEXPIRE", counter.key, keep.as_bytes(), b"NX"]),
            false => Vec::new(),
        };
        self.con
            .write(&[&expiry[..], &reload()].concat(), deadline)?;
        if expire {
            // Its answer, an error reply included, changes nothing.
            let mut expired = [Value::Nil];
            self.read_replies(&mut expired, deadline)?;
        }
        let mut slot = [Value::Nil];
        if let Some(f) = self.read_replies(&mut slot, deadline)? {
            return Err(Failure { at: 1, ..f });
        }
        let [count] = slot;
        if let Value::Int(m) = count
            && m > 0
        {
            let by_script = Counter {
                by_incr: false,
                ..counter
            };
            // A script's count is always one.
            let _ = self.counts.read(&by_script, m as u64);
        }
        Ok(count)
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
fn held_by(
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
fn out_of_step(error: Cause) -> Failure {
    Failure {
        error,
        at: 0,
        keep: false,
    }
}
