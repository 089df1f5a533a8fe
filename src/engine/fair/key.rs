//! One key that waits fairly ([`FairKey`]): the lock's shape, and a
//! leadership's key. A [`OneKey`] with its place in the queues: a queued
//! waiter's attempt is a claim, the clean-up of a queued attempt puts
//! back its reservation, and a fair manager's release hands the key to
//! the first live waiter. Everything a lock adds for fair waiting is
//! here; `single.rs` knows nothing of queues.

use super::*;
use crate::base::keys::queue_key;
use crate::engine::pipeline::{Announce, Names, Removal};
use crate::engine::single::{OneKey, Record, UNLOCK};

/// One key holding the token, waiting fairly when its acquisition has a
/// place in the queues.
pub(crate) struct FairKey {
    /// The key itself.
    pub(crate) one: OneKey,
    /// Its place in the queues (a fair manager's acquisition that waits),
    /// or `None`.
    fair: Option<Fair>,
}

impl FairKey {
    /// The key `one`, waiting fairly with `fair`.
    pub(crate) fn new(one: OneKey, fair: Option<Fair>) -> FairKey {
        FairKey { one, fair }
    }

    /// Whether this waiter is queued fairly.
    fn queued(&self) -> bool {
        self.fair.as_ref().is_some_and(Fair::queued)
    }

    /// The acquisition: a queued waiter's claim from the queue (see
    /// [`Fair::claim`]), else the key's own attempt ([`OneKey::take`]);
    /// either way, readers found holding it are named (see
    /// [`OneKey::name_readers`]).
    pub(crate) fn take(
        &self,
        engine: &Engine,
        token: &[u8],
        ttl_ms: u64,
        keep: Option<&str>,
    ) -> Vec<Vote> {
        let one = &self.one;
        match self.fair.as_ref().filter(|f| f.queued()) {
            Some(fair) => {
                let votes = fair.claim(engine, &one.key, one.wakes(), token, ttl_ms, keep);
                one.name_readers(engine, token, votes)
            }
            None => one.take(engine, token, ttl_ms, keep, None),
        }
    }

    /// A release, or the clean-up of an attempt, as [`route`] decides: a
    /// fair manager's release hands the key to the first fair waiter
    /// queued (the others' releases delete it: their users' ACL rules
    /// need not cover the queue's keys); the clean-up of a queued
    /// waiter's attempt puts back the reservation it took; anything else
    /// is the key's own unlock ([`OneKey::unlock`]), with a leadership's
    /// `record`.
    pub(crate) fn unlock(
        &self,
        engine: &Engine,
        token: &[u8],
        removal: Removal<'_>,
        record: Option<Record<'_>>,
    ) -> Tally {
        let Removal { only, message, .. } = removal;
        let one = &self.one;
        match route(engine, removal.release, self.queued()) {
            Route::HandOff => {
                let answers = self.hand_off(engine, only, token, message, record);
                // A member that refused the queue (an ACL rule without the
                // fair additions, a key pattern that misses the queue's
                // keys) is released as an unfair manager releases.
                release_or_unfair(engine, answers, |refused| {
                    let removal = Removal {
                        only: Some(refused),
                        ..removal
                    };
                    Tally::count(one.unlock(engine, token, removal, record))
                })
            }
            Route::Unclaim => unclaim(engine, only, &one.key, one.wakes(), token, message),
            Route::Plain => Tally::count(one.unlock(engine, token, removal, record)),
        }
    }

    /// A fair manager's release. One that knows of no waiter (it did not
    /// queue, and its manager's threads did not wait for the name lately)
    /// sends the plain unlock, which deletes nothing where a queue stands;
    /// the hand-off follows there, in a second round (see the manual's
    /// "What it costs"). One that knows of waiters hands off at once.
    fn hand_off(
        &self,
        engine: &Engine,
        only: Option<&[bool]>,
        token: &[u8],
        message: Option<&[u8]>,
        record: Option<Record<'_>>,
    ) -> Vec<Answer> {
        let one = &self.one;
        let knows = self.queued() || engine.waiters.lately(one.wakes());
        let record = record.map(|r| r.key);
        match (knows, record, message) {
            (false, None, Some(message)) => self.unlock_unless_queued(engine, only, token, message),
            _ => release(engine, only, &one.key, record, one.wakes(), token, message),
        }
    }

    /// A fair manager's release of a key that knows of no waiter: the
    /// unlock script with the queue's key, and the release's `PUBLISH`
    /// pipelined behind it, as an unfair release costs. A member where a
    /// queue stands deletes nothing (it answers 2: a waiter came while it
    /// was held); the hand-off release then runs there, and its answer is
    /// that member's.
    fn unlock_unless_queued(
        &self,
        engine: &Engine,
        only: Option<&[bool]>,
        token: &[u8],
        message: &[u8],
    ) -> Vec<Answer> {
        let one = &self.one;
        let channel = release_channel(one.wakes());
        let queue = queue_key(&one.key);
        let keys: [&[u8]; 2] = [&one.key, &queue];
        let mut answers = engine
            .script(&UNLOCK, &keys, &[token])
            .only(only)
            .tail(Some(Announce {
                channel: &channel,
                message,
            }))
            .run(RELEASE);
        let waited = |a: &Answer| matches!(a, Some(Ok(Said::Yes(2))));
        // (The members' list only when some waiter came: not on every
        // release.)
        if answers.iter().any(waited) {
            let queued: Vec<bool> = answers.iter().map(waited).collect();
            // A message of its own: listeners count a hand-off's messages
            // apart from the release announced above.
            let handing = engine.message(token);
            let handed = release(
                engine,
                Some(&queued),
                &one.key,
                None,
                one.wakes(),
                token,
                handing.as_deref().or(Some(message)),
            );
            for (answer, handed) in answers.iter_mut().zip(handed) {
                if matches!(answer, Some(Ok(Said::Yes(2)))) {
                    *answer = handed;
                }
            }
        }
        answers
    }
}

/// The plain lock's shape: one key holding the token, handed to the
/// first fair waiter on release (with fair waiting). Leaderships wrap a
/// `FairKey`, permits a `OneKey`, in shapes of their own.
impl Shape for FairKey {
    fn resources(&self) -> Names<'_> {
        Names::One(&self.one.key)
    }

    fn hands_off(&self) -> bool {
        true
    }

    fn holder(&self) -> Option<Vec<u8>> {
        self.one.holder()
    }

    /// `SET key token NX GET PX ttl`, with the fencing counter's commands
    /// behind it (see [`OneKey::take`]), or a queued waiter's claim.
    fn take(&self, engine: &Engine, token: &[u8], ttl_ms: u64, keep: Option<&str>) -> Vec<Vote> {
        FairKey::take(self, engine, token, ttl_ms, keep)
    }

    fn raise(&self, engine: &Engine, only: &[bool], token: &[u8], to: u64, keep: &str) -> Tally {
        self.one.raise(engine, only, token, to, keep)
    }

    fn extend(&self, engine: &Engine, token: &[u8], ttl_ms: u64, last: bool) -> Tally {
        self.one.extend(engine, token, ttl_ms, last, &[])
    }

    fn unlock(&self, engine: &Engine, token: &[u8], removal: Removal<'_>) -> Tally {
        FairKey::unlock(self, engine, token, removal, None)
    }
}

impl Queued for FairKey {
    fn place(&self) -> Option<&Fair> {
        self.fair.as_ref()
    }
}
