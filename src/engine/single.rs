//! One key holding the token ([`OneKey`]), which the lock's shape
//! (`engine/fair/key.rs`, which a leadership wraps) and a semaphore's
//! permit wrap, and its scripts. Each of those shapes is a room of its own (`shapes/lock.rs`,
//! `shapes/semaphore.rs`, `shapes/election.rs`) that says what it adds:
//! a check ahead of the `SET` (a permit's count), companion keys kept
//! alive with the key (a permit's count, a leadership's record), its own
//! release script (a leadership's resignation). Fair waiting wraps it
//! as a stage of its own (`engine/fair/key.rs`): nothing here queues.
//!
//! The acquisition is `SET key token NX GET PX ttl` on every member (the
//! safety argument is in the crate docs, "Why the lock is safe"), with
//! the fencing counter's commands pipelined behind it.

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::Value;

use crate::base::holder::waiter_of;
use crate::base::keys::{RESERVED_PREFIX, fence_key, readers_key, release_channel};
use crate::base::text::Decimal;
use crate::engine::pipeline::{
    Announce, Answer, DECIDE, Engine, PUBLISH, RELEASE, Removal, Vote, announced_on, counter_start,
};
use crate::engine::quorum::{self, Tally};
use crate::members::op::{Call, Fence, Op, Take};
use crate::members::request::{Request, Said};
use crate::members::script::{Lua, scripts};

scripts! {
    /// Release and clean-up of one key holding the token (a lock, a
    /// permit), and of a read lock's key.
    UNLOCK, "unlock", "lock/unlock.lua",
        keys ["key", "queue?"], args ["token", "publish?", "message?", "channel?"];
    /// Extend of one key holding the token, with its companions.
    EXTEND, "extend", "lock/extend.lua" after "lock/expiry.lua",
        keys ["key", "companion*"], args ["token", "ttl", "keep?"];
    /// Raises fencing counters to a token (every fenced shape).
    RAISE, "raise", "lock/raise.lua",
        keys ["key*", "fence*"], args ["token", "to", "keep"];
    /// Counts a fencing counter up for an acquisition attempt, from the
    /// larger of its value and the attempt's clock reading.
    COUNT, "count", "lock/count.lua" after "lock/counter.lua",
        keys ["fence"], args ["start", "keep"];
    /// The readers that hold a read-write lock's key (for the restart
    /// rule, after a refusal by their mark).
    READERS_OF, "readers", "rwlock/readers.lua",
        keys ["readers"], args [];
}

pub(crate) use crate::members::op::Ahead;

/// A companion key deleted with the key by a release script of the
/// shape's own (a leadership's record, with the resign script).
#[derive(Clone, Copy)]
pub(crate) struct Record<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) unlock: &'static Lua,
}

/// One key holding the token, and the name whose waiters its release
/// wakes.
pub(crate) struct OneKey {
    pub(crate) key: Box<[u8]>,
    /// The name whose waiters a release wakes, when it is not the key (a
    /// permit's semaphore).
    wakes: Option<Box<[u8]>>,
    /// The value a member that refused the last ordinary attempt said the
    /// key holds (`SET ... NX GET`): who holds it, for the `Taken` error.
    seen: Mutex<Option<Vec<u8>>>,
}

impl OneKey {
    /// The key `key`, whose releases wake the waiters of `wakes`.
    pub(crate) fn new(key: &[u8], wakes: &[u8]) -> OneKey {
        OneKey {
            key: key.into(),
            wakes: (wakes != key).then(|| wakes.into()),
            seen: Mutex::default(),
        }
    }

    /// The name whose waiters a release wakes: the key, or a permit's
    /// semaphore.
    pub(crate) fn wakes(&self) -> &[u8] {
        self.wakes.as_deref().unwrap_or(&self.key)
    }

    /// Who holds the key, as the last ordinary attempt's refusals said.
    pub(crate) fn holder(&self) -> Option<Vec<u8>> {
        self.seen.lock().clone()
    }

    /// The acquisition (a fair waiter queued claims instead: see
    /// `engine/fair/key.rs`).
    ///
    /// Fencing off: `SET key token NX GET PX ttl`, nothing else (`GET`:
    /// a refusal answers the holder's value, so that a waiting writer
    /// knows whether readers hold it; plain `NX` on servers before Redis
    /// 7.0, see `members/lower.rs`, and behind a check `ahead`).
    ///
    /// Fencing on: the same, pipelined in one write with the count script
    /// on the key's counter (sent by hash, loaded with the handshake): the
    /// counter goes to one more than the larger of its value and this
    /// attempt's clock reading in µs, and its expiry is raised to the keep,
    /// never lowered. A member's count is its counter's value.
    ///
    /// A check `ahead` goes first in the same write: a member where it
    /// fails answers that, and grants nothing.
    pub(crate) fn take(
        &self,
        engine: &Engine,
        token: &[u8],
        ttl_ms: u64,
        keep: Option<&str>,
        ahead: Option<Ahead<'_>>,
    ) -> Vec<Vote> {
        let votes = self.set(engine, token, ttl_ms, keep, ahead);
        self.name_readers(engine, token, votes)
    }

    /// Where readers' mark refused the acquisition on some members and
    /// the others' yes votes make a quorum: gives each no and failure the
    /// tokens of the readers those members hold (their grants name their
    /// servers, as a holder's value does: see `give_holders`), read in one
    /// more round, only then. A read lock's refusals name no reader, and
    /// without this a server that restarted and forgot a reader's grant
    /// would count its yes beside the readers a member still shows.
    pub(crate) fn name_readers(
        &self,
        engine: &Engine,
        token: &[u8],
        mut votes: Vec<Vote>,
    ) -> Vec<Vote> {
        let yes = votes.iter().filter(|v| v.yes.is_some()).count();
        if yes < quorum::quorum(engine.members.len()) || !votes.iter().any(|v| v.shared) {
            return votes;
        }
        let only: Vec<bool> = votes.iter().map(|v| v.shared).collect();
        let readers = readers_key(&self.key);
        // Not a deciding round: a server kept out of votes after a
        // restart answers too (its readers are evidence all the same).
        let (_, kept) = engine
            .script(&READERS_OF, &[&readers], &[])
            .only(Some(&only))
            .read(RELEASE);
        let tokens: Vec<Value> = kept
            .into_iter()
            .flat_map(|v| match v {
                Value::Array(tokens) => tokens,
                _ => Vec::new(),
            })
            .collect();
        give_holders(&mut votes, &tokens, token);
        votes
    }

    /// The acquisition's `SET` round (see [`take`](Self::take)).
    fn set(
        &self,
        engine: &Engine,
        token: &[u8],
        ttl_ms: u64,
        keep: Option<&str>,
        ahead: Option<Ahead<'_>>,
    ) -> Vec<Vote> {
        let key = &self.key[..];
        let fence_key = fence_key(key);
        let fence = keep.map(|keep| Fence {
            key: &fence_key,
            count: &COUNT,
            // One clock reading for every member's counter, whichever
            // form its write takes: counters behind the clock count on
            // from the same reading, and no raise round follows to even
            // them out. (No clock read without a counter.)
            start: Decimal::of(counter_start()),
            keep,
            keep_ms: Duration::from_millis(keep.parse().unwrap_or(0)),
            at: Instant::now(),
            // Not in strict mode, which is for servers that may lose data
            // without a visible restart: the script counts every time.
            incr: engine.restart.strict.is_none(),
        });
        // Queued behind an attempt that times out: removes the key right
        // after a late execution, and announces that only if it did (the
        // arguments `announced_on` gives, on the stack: every attempt
        // makes them).
        let message = engine.message(token);
        let channel = message.as_ref().map(|_| release_channel(self.wakes()));
        let announced: [&[u8]; 4];
        let args: &[&[u8]] = match (&message, &channel) {
            (Some(message), Some(channel)) => {
                announced = [token, PUBLISH, message, channel];
                &announced
            }
            _ => std::slice::from_ref(&token),
        };
        let keys: [&[u8]; 1] = [key];
        let clean_up = Call::new(&UNLOCK, &keys, args);
        let take = Take {
            key,
            token,
            px: Decimal::of(ttl_ms),
            fence,
            ahead,
            clean_up,
        };
        // A refusal says who holds the key with `NX GET` (Redis 7.0+,
        // Valkey), so that a waiting writer asks readers to queue only
        // where readers hold it, and so that the restart rule reads which
        // servers the holder's grant was asked of (`decide::forgetful`;
        // a permit's slot too, which never meets readers).
        let seen = Mutex::new(Vec::new());
        // An acquisition's yes counts once replicas acknowledged it.
        let req = Request::new(Op::Take(take), true, engine.waits(DECIDE), Some(&seen));
        let answers = crate::members::fanout::round(&engine.members, None, &req);
        let seen = seen.into_inner();
        let mut votes: Vec<Vote> = answers.into_iter().map(take_vote).collect();
        give_holders(&mut votes, &seen, token);
        self.note_holder(seen);
        votes
    }

    /// Who holds the key, as this attempt's refusals said (`seen`; a
    /// reservation names nobody). A fair waiter's claims, which do not
    /// say, leave what its last ordinary attempt found.
    fn note_holder(&self, seen: Vec<Value>) {
        *self.seen.lock() = seen.into_iter().find_map(|v| match v {
            Value::BulkString(v) if !v.starts_with(RESERVED_PREFIX) => Some(v),
            _ => None,
        });
    }

    /// The answer of the first member whose check ahead failed (see
    /// [`Ahead`]), if any.
    pub(crate) fn differs(votes: &[Vote]) -> Option<u64> {
        votes.iter().find_map(|v| match v.answer {
            Some(Ok(Said::Differs(c))) => Some(c),
            _ => None,
        })
    }

    /// Raises the key's fencing counter to `to` on the members `only`
    /// selects, where the key holds `token` (a yes only there), and, with
    /// [`replica_acks`](crate::Builder::replica_acks), only once replicas
    /// acknowledged it: a replica promoted after the grant must hold the
    /// raised counter, not only the key (a counter left below the token
    /// there let a later quorum count below it).
    pub(crate) fn raise(
        &self,
        engine: &Engine,
        only: &[bool],
        token: &[u8],
        to: u64,
        keep: &str,
    ) -> Tally {
        let to = to.to_string();
        let fence = fence_key(&self.key);
        let args: [&[u8]; 3] = [token, to.as_bytes(), keep.as_bytes()];
        Tally::count(
            engine
                .script(&RAISE, &[&self.key, &fence], &args)
                .only(Some(only))
                .run(DECIDE),
        )
    }

    /// Raises the key's expiry to `ttl_ms` where it holds `token` (sets it
    /// exactly when `last`: see [`ttl_arg`](crate::engine::pipeline::ttl_arg)); with
    /// fencing on, also keeps the counter alive at least as long (raising
    /// its expiry to the idle period when it has less than the TTL left),
    /// and the shape's `companions` (a permit's count) with it (see
    /// [`Engine::companion_keep`]).
    pub(crate) fn extend(
        &self,
        engine: &Engine,
        token: &[u8],
        ttl_ms: u64,
        last: bool,
        companions: &[&[u8]],
    ) -> Tally {
        let ttl = crate::engine::pipeline::ttl_arg(ttl_ms, last);
        let fence = fence_key(&self.key);
        let keep = engine.companion_keep(ttl_ms).to_string();
        let mut keys: Vec<&[u8]> = vec![&self.key];
        if engine.fencing {
            keys.push(&fence);
        }
        keys.extend_from_slice(companions);
        let args: Vec<&[u8]> = if keys.len() > 1 {
            vec![token, ttl.as_bytes(), keep.as_bytes()]
        } else {
            vec![token, ttl.as_bytes()]
        };
        // Always the script, on Valkey 8.1+ too (not `SET ... IFEQ ... PX`):
        // it raises the expiry and never lowers it, so that an extend
        // delivered late (sent on a connection that timed out) cannot cut
        // a later, longer one (see the manual's "How it works").
        Tally::count(engine.script(&EXTEND, &keys, &args).run(DECIDE))
    }

    /// A release, or the clean-up of an attempt, as `removal` says: the
    /// key deleted where it holds `token` (with a `record`, by the shape's
    /// own script, which deletes the record too), announced. A release
    /// pipelines its `PUBLISH` (`SPUBLISH` on a Redis Cluster) behind the
    /// script (or behind the server's own compare-and-delete, `DELIFEQ`
    /// or `DELEX ... IFEQ`, where it has one), whose answer is ignored (a
    /// server or user refusing it changes nothing); a clean-up, and the
    /// release of a key with a record, have the script announce only
    /// where it deleted our key. (A fair manager's release hands the key
    /// on instead: `engine/fair/key.rs`.)
    pub(crate) fn unlock(
        &self,
        engine: &Engine,
        token: &[u8],
        removal: Removal<'_>,
        record: Option<Record<'_>>,
    ) -> Vec<Answer> {
        let Removal {
            only,
            message,
            release,
        } = removal;
        let channel = release_channel(self.wakes());
        let with_record;
        let (lua, keys): (&Lua, &[&[u8]]) = match record {
            Some(record) => {
                with_record = [&self.key[..], record.key];
                (record.unlock, &with_record)
            }
            None => (&UNLOCK, &[&self.key[..]]),
        };
        match message {
            // Not with a record: its script is not loaded with the
            // handshake, and a `PUBLISH` behind an `EVALSHA` refused with
            // `NOSCRIPT` would announce the release before the reload
            // deletes anything, waking waiters too early (and counting
            // every release twice).
            Some(message) if release && record.is_none() => {
                // Servers with their own compare-and-delete (`DELIFEQ` on
                // Valkey 9+, `DELEX ... IFEQ` on Redis 8.4+) release
                // without the script: the same rule, one command.
                engine
                    .script(lua, &[&self.key], &[token])
                    .only(only)
                    .or_plain_delete(token)
                    .tail(Some(Announce {
                        channel: &channel,
                        message,
                    }))
                    .run(RELEASE)
            }
            // A release not announced (`wake_on_release(false)`).
            None if release && record.is_none() => engine
                .script(lua, &[&self.key], &[token])
                .only(only)
                .or_plain_delete(token)
                .run(RELEASE),
            _ => {
                let args = announced_on(vec![token], message, &channel);
                engine.script(lua, keys, &args).only(only).run(RELEASE)
            }
        }
    }
}

/// Gives each no and failure among `votes` the holders the round's
/// refusals found (`seen`), for the restart rule (`decide::forgetful`):
/// every value that holds a key but a waiter's reservation (no holder's)
/// and this acquisition's own earlier attempts' (`token`'s). A refusal
/// from a server kept out of votes (its answer a failure) is evidence
/// all the same.
pub(crate) fn give_holders(votes: &mut [Vote], seen: &[Value], token: &[u8]) {
    let ours = waiter_of(token);
    let holders: Vec<Vec<u8>> = seen
        .iter()
        .filter_map(|v| match v {
            Value::BulkString(v) if !v.starts_with(RESERVED_PREFIX) && waiter_of(v) != ours => {
                Some(v.clone())
            }
            _ => None,
        })
        .collect();
    if holders.is_empty() {
        return;
    }
    for vote in votes.iter_mut().filter(|v| v.yes.is_none()) {
        vote.held.clone_from(&holders);
    }
}

/// A member's vote on the acquisition, from its answer (the model
/// checker reads its clients' votes with it too).
pub(crate) fn take_vote(answer: Answer) -> Vote {
    match answer {
        // The check ahead failed: no grant (the acquisition behind it may
        // have written: cleaned up as a yes).
        Some(Ok(Said::Differs(c))) => Vote {
            yes: None,
            ..Vote::of(Some(Ok(Said::Differs(c))))
        },
        // A no where readers may hold the key (or a holder, on a server
        // before Redis 7.0, which does not say who).
        Some(Ok(Said::MaybeShared)) => Vote {
            shared: true,
            ..Vote::of(Some(Ok(Said::No)))
        },
        // Another owner's value holding it: a no.
        answer => Vote::naming(answer),
    }
}
