//! The room of sets: [`LockManager::lock_all`] and its forms, the set's
//! shape (one script per member, per slot group on a Redis Cluster) and
//! its scripts. Its design and safety argument: the crate docs, "How sets work, and why
//! they are safe".

use std::collections::HashSet;
use std::time::Duration;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use redis::Value;

use crate::base::error::{Error, Result};
use crate::base::keys::{self, fence_key, release_channel};
use crate::base::node_error::NodeError;
use crate::engine::fair::{self, Fair, Route};
use crate::engine::fair::{CLAIM_QUEUED, HANDOFF, LEAVE, UNCLAIM};
use crate::engine::guard::LockGuard;
use crate::engine::pipeline::{
    Answer, DECIDE, Engine, NAMING, Names, RELEASE, Removal, Round, Shape, Vote, announce_args,
    counter_start,
};
use crate::engine::quorum::Tally;
use crate::engine::single::{RAISE, give_holders};
use crate::members::request::Said;
use crate::members::script::{Lua, scripts};

scripts! {
    /// Acquisition of a set.
    LOCK_SET, "lock-set", "set/lock.lua" after "lock/counter.lua",
        keys ["key*", "fence*"], args ["token", "ttl", "start?", "keep?"];
    /// Release and clean-up of a set.
    UNLOCK_SET, "unlock-set", "set/unlock.lua",
        keys ["key*"], args ["token", "publish?", "message?", "channel*"];
    /// Extend of a set.
    EXTEND_SET, "extend-set", "set/extend.lua" after "lock/expiry.lua",
        keys ["key*", "fence*"], args ["token", "ttl", "keep?"];
}
use crate::engine::stage::WaitOn;
use crate::shapes::manager::{LockManager, Wait, waiting_family};

impl LockManager {
    waiting_family! {
        /// Locks every resource of `resources` for `ttl`, all or nothing,
        /// with [`lock`](Self::lock)'s retries and waiting, and returns one
        /// guard for the whole set: it extends, keeps alive and releases all
        /// of them together. Each resource is locked as by `lock` (the key is
        /// the resource's name), so it is [`Error::Taken`] for `lock` and for
        /// other sets while the set is held. Sets that cross (`[a, b]` and
        /// `[b, a]`) never deadlock: nothing is held while waiting.
        ///
        /// On a Redis Cluster member the set may span slots: one script per
        /// slot, each master's scripts pipelined on one connection, so a round
        /// still costs about one round trip; give the resources one hash tag
        /// (`{order:42}:stock`, `{order:42}:payment`) for one script.
        ///
        /// # Errors
        ///
        /// As [`lock`](Self::lock), for the set as a whole; `Taken` when some
        /// resource of it is held by another owner.
        /// [`Error::InvalidArgument`] for an empty set, one of more than
        /// [`MAX_SET`](crate::MAX_SET) resources, a resource given twice, or a
        /// resource or TTL that `lock` would reject.
        fn lock_all, try_lock_all, try_lock_all_for, try_lock_all_until => lock_all_with
        <I, R> (resources: I) -> LockGuard
        where [I: IntoIterator<Item = R>, R: AsRef<[u8]>]
    }

    /// As [`lock_all`](Self::lock_all), waiting as `wait` says (see
    /// [`lock_with`](Self::lock_with)).
    ///
    /// # Errors
    ///
    /// As [`lock_all`](Self::lock_all), from the last attempt.
    pub fn lock_all_with<I, R>(&self, resources: I, ttl: Duration, wait: Wait) -> Result<LockGuard>
    where
        I: IntoIterator<Item = R>,
        R: AsRef<[u8]>,
    {
        let budget = self.budget(wait);
        let owned: Vec<Vec<u8>> = resources.into_iter().map(|r| r.as_ref().to_vec()).collect();
        check_set(&owned)?;
        let engine = self.engine();
        let ttl_ms = engine.acquisition_ttl(ttl)?;
        let names: Vec<&[u8]> = owned.iter().map(|r| &r[..]).collect();
        let shape = Arc::new(Set {
            resources: owned.iter().map(|r| r[..].into()).collect(),
            fair: Fair::waiting(engine, budget.waits(), names[0], self.retry().1),
            wait_at: AtomicUsize::new(0),
        });
        self.stage()
            .acquire_shape(shape, WaitOn::names(&names), budget, ttl_ms, |guard, _| {
                Ok(guard)
            })
    }
}

/// The most resources in one set: a member takes a set in one script,
/// whose keys Lua handles on its stack.
pub const MAX_SET: usize = 1000;

/// Checks a set: not empty, not too large, no resource twice, each a
/// valid resource.
fn check_set(resources: &[Vec<u8>]) -> Result<()> {
    if resources.is_empty() {
        return Err(Error::invalid_argument("the set of resources is empty"));
    }
    if resources.len() > MAX_SET {
        return Err(Error::invalid_argument(format!(
            "a set of {} resources is more than the maximum of {MAX_SET}",
            resources.len()
        )));
    }
    let mut seen = HashSet::new();
    for r in resources {
        keys::check_resource(r)?;
        if !seen.insert(&r[..]) {
            return Err(Error::invalid_argument(format!(
                "resource {:?} is given twice in the set",
                String::from_utf8_lossy(r)
            )));
        }
    }
    Ok(())
}

/// A set of resources, all or nothing: each an ordinary lock key holding
/// the set's token.
pub(crate) struct Set {
    resources: Vec<Box<[u8]>>,
    /// A set whose waiting is fair: its place in each resource's queues.
    fair: Option<Fair>,
    /// Where it waits in line (with fair waiting): the index of the
    /// resource that refused it on a majority of members last (the first
    /// a holder keeps, or else the first it may not take; its first
    /// resource before), the same on every member (see
    /// [`wait_at`](Set::wait_at)).
    wait_at: AtomicUsize,
}

/// Where a set that waited in line at its resource `was` (its first one
/// before its first refusal) waits after a refusal that `blocked` names
/// (the resource that refused it on a majority of members, see
/// `pipeline::most_busy`): there, or where it was when no majority named
/// one (so that it does not go from queue to queue).
pub(crate) fn waits_next(was: usize, blocked: Option<usize>) -> usize {
    blocked.unwrap_or(was)
}

/// Where a set that waits in line at its resource `at` names, in a claim
/// of the resources `of` (see [`Set::wait_at`]): k for the k-th of
/// them (from 1), 0 for none of them.
pub(crate) fn named(at: usize, of: &[usize]) -> usize {
    of.iter().position(|&i| i == at).map_or(0, |k| k + 1)
}

/// The keys and arguments of a set script for a group of a set's
/// indexes, on a Redis Cluster member or not.
type SetCall<'a> = &'a (dyn Fn(&[usize]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) + Sync);

impl Set {
    fn refs(&self) -> Vec<&[u8]> {
        self.resources.iter().map(|r| &r[..]).collect()
    }

    /// Where the set waits in line, for a claim of the resources `of`
    /// (the set's indices; one group of a Redis Cluster member, or the
    /// whole set): "k" for the k-th of them (from 1), "0" for none of them
    /// (it waits at another group's key). Members must agree: a set queued
    /// at `a` on some members and at `b` on others makes them name
    /// different first waiters of each key, and then neither that set nor
    /// the locks behind it reach a majority (the liveness run of the
    /// schedule checker found such stalls). A claim granted on a member
    /// keeps the set's place there only at that key, too.
    fn wait_at(&self, of: &[usize]) -> String {
        named(self.wait_at.load(Ordering::Relaxed), of).to_string()
    }

    /// The resources at the indexes of `group`.
    fn pick(&self, group: &[usize]) -> Vec<&[u8]> {
        group.iter().map(|&i| &self.resources[i][..]).collect()
    }

    /// Runs `lua` over the set: on nodes once with every key, on Redis
    /// Cluster members once per slot group, each member's groups
    /// pipelined (one connection per master). `call(group)`
    /// gives the keys and arguments for the indexes of `group`. Each
    /// member's groups are taken together as its vote.
    fn round(
        &self,
        engine: &Engine,
        lua: &Lua,
        only: Option<&[bool]>,
        call: SetCall<'_>,
        round: Round,
    ) -> Vec<Vote> {
        let (groups, answers, _) = self.answers(engine, lua, only, call, round);
        self.votes(engine, &groups, answers)
    }

    /// An acquisition's [`round`](Self::round): each no and failure is
    /// given the holders its refusals named (see `give_holders`), for the
    /// restart rule; a queued fair waiter's claims are heeded by `fair`.
    fn take_round(
        &self,
        engine: &Engine,
        lua: &Lua,
        call: SetCall<'_>,
        token: &[u8],
        fair: Option<&Fair>,
    ) -> Vec<Vote> {
        let (groups, answers, held) = self.answers(engine, lua, None, call, NAMING);
        if let Some(fair) = fair {
            fair.heed(engine, answers.iter().flatten());
        }
        let mut votes = self.votes(engine, &groups, answers);
        give_holders(&mut votes, &held, token);
        votes
    }

    /// As [`round`](Self::round), before the answers are taken together:
    /// the slot groups, each group's answers, and (a count's round) the
    /// values its refusals found holding a key. A Redis Cluster member
    /// whose set spans slot groups names none.
    fn answers(
        &self,
        engine: &Engine,
        lua: &Lua,
        only: Option<&[bool]>,
        call: SetCall<'_>,
        round: Round,
    ) -> (Vec<Vec<usize>>, Vec<Vec<Answer>>, Vec<Value>) {
        let resources = &self.refs()[..];
        let all: Vec<usize> = (0..resources.len()).collect();
        let groups = if engine.has_clusters {
            slot_groups(resources)
        } else {
            vec![all.clone()]
        };
        let (node_keys, node_args) = call(&all);
        let (nk, na) = (refs(&node_keys), refs(&node_args));
        let answers = if groups.len() == 1 {
            // Without Redis Cluster members the cluster's call is unused.
            let owned = engine.has_clusters.then(|| call(&groups[0]));
            let (ck, ca) = match &owned {
                Some((keys, args)) => (refs(keys), refs(args)),
                None => (nk.clone(), na.clone()),
            };
            let call = engine
                .script(lua, &nk, &na)
                .only(only)
                .on_clusters(&ck, &ca);
            if round.count {
                let (answers, held) = call.run_naming(round);
                return (groups, vec![answers], held);
            }
            vec![call.run(round)]
        } else {
            let owned: Vec<_> = groups.iter().map(|group| call(group)).collect();
            let calls: Vec<_> = owned
                .iter()
                .map(|(keys, args)| (refs(keys), refs(args)))
                .collect();
            engine.script_groups(lua, only, (&nk, &na), &calls, round)
        };
        (groups, answers, Vec::new())
    }

    /// Each member's groups taken together (see [`Vote`]; a member that
    /// took part of the set and voted no is `partial`). `groups` maps
    /// a cluster's group-local busy index back to the set; a node's
    /// answer (group 0 covers the whole set on nodes) is its own.
    fn votes(
        &self,
        engine: &Engine,
        groups: &[Vec<usize>],
        answers: Vec<Vec<Answer>>,
    ) -> Vec<Vote> {
        let n = engine.members.len();
        let mut per: Vec<Vec<(usize, std::result::Result<Said, NodeError>)>> =
            (0..n).map(|_| Vec::new()).collect();
        for (g, row) in answers.into_iter().enumerate() {
            for (i, a) in row.into_iter().enumerate() {
                if let Some(a) = a {
                    per[i].push((g, a));
                }
            }
        }
        per.into_iter()
            .enumerate()
            .map(|(i, got)| {
                let cluster = engine.members[i].is_cluster();
                if got.is_empty() {
                    return Vote::of(None);
                }
                let mut vote = Vote {
                    yes: Some(0),
                    low: u64::MAX,
                    busy: None,
                    dirty: false,
                    partial: false,
                    shared: false,
                    answer: None,
                    // Given by `take_round` (see `give_holders`).
                    held: Vec::new(),
                };
                let mut failure = None;
                let mut gone = false;
                for (g, a) in got {
                    match a {
                        Ok(Said::Busy(c)) => {
                            let local = c as usize;
                            let at = if cluster {
                                groups[g].get(local).copied()
                            } else {
                                Some(local)
                            };
                            vote.busy = vote.busy.or(at).or(Some(0));
                            vote.yes = None;
                        }
                        Ok(Said::No) => {
                            // Another owner's token (extend, release,
                            // raise): a no that names no resource.
                            vote.busy = vote.busy.or(Some(usize::MAX));
                            vote.yes = None;
                        }
                        Ok(Said::Gone) => {
                            gone = true;
                            vote.yes = None;
                        }
                        // No set script answers a value alone: read as a
                        // no that names no resource, never as a grant.
                        Ok(Said::Held(_) | Said::MaybeShared) => {
                            vote.busy = vote.busy.or(Some(usize::MAX));
                            vote.yes = None;
                        }
                        Ok(said) => {
                            let c = said.number();
                            vote.dirty = true;
                            vote.yes = vote.yes.map(|y| y.max(c));
                            vote.low = vote.low.min(c);
                        }
                        Err(e) => {
                            vote.dirty |= !e.settled;
                            vote.yes = None;
                            failure.get_or_insert(e);
                        }
                    }
                }
                vote.answer = Some(match (vote.yes, vote.busy, failure) {
                    (Some(y), _, _) => Ok(Said::count(y)),
                    (None, Some(_), _) => Ok(Said::No),
                    (None, None, Some(e)) => Err(e),
                    (None, None, None) if gone => Ok(Said::Gone),
                    (None, None, None) => Ok(Said::No),
                });
                // Took part of the set, and voted no: given back on a grant.
                vote.partial = vote.dirty && vote.yes.is_none();
                vote
            })
            .collect()
    }
}

impl fair::Queued for Set {
    fn place(&self) -> Option<&Fair> {
        self.fair.as_ref()
    }

    /// At the resource a majority refused it at last (see [`waits_next`]).
    fn waits_at(&self, blocked: Option<usize>) -> usize {
        let at = waits_next(self.wait_at.load(Ordering::Relaxed), blocked);
        self.wait_at.store(at, Ordering::Relaxed);
        at
    }

    /// Leaves every resource's queue, passing on each reservation it had
    /// (see the leave script); best effort.
    fn leave(&self, engine: &Engine, _fair: &Fair, token: &[u8]) {
        let message = fair::leave_message(engine, token);
        let call = |group: &[usize]| {
            let locks = self.pick(group);
            fair::handing_call(engine, &locks, None, &locks, token, message.as_deref())
        };
        self.round(engine, &LEAVE, None, &call, RELEASE);
    }
}

impl Shape for Set {
    fn resources(&self) -> Names<'_> {
        Names::Many(self.refs())
    }

    fn hands_off(&self) -> bool {
        true
    }

    /// The set script on every member (see its docs); a queued fair
    /// waiter's is the claim script, all or nothing as well.
    fn take(&self, engine: &Engine, token: &[u8], ttl_ms: u64, keep: Option<&str>) -> Vec<Vote> {
        if let Some(fair) = self.fair.as_ref().filter(|f| f.queued()) {
            let message = fair::ahead_message(engine, token);
            // One clock reading for every group.
            let start = counter_start().to_string();
            let call = |group: &[usize]| {
                let locks = self.pick(group);
                let wait_at = self.wait_at(group);
                let counted = keep.map(|keep| (keep, &start[..]));
                let (keys, mut args) =
                    fair.claim_call(engine, &locks, token, ttl_ms, counted, &wait_at);
                let fenced = keep.is_some();
                fair::handing_args(engine, &mut args, fenced, message.as_deref(), &locks);
                (keys, args)
            };
            return self.take_round(engine, &CLAIM_QUEUED, &call, token, Some(fair));
        }
        let resources = &self.refs()[..];
        let px = ttl_ms.to_string();
        let start_at = counter_start().to_string();
        let call = |group: &[usize]| {
            let mut args = vec![token.to_vec(), px.clone().into_bytes()];
            if let Some(keep) = keep {
                args.push(start_at.clone().into_bytes());
                args.push(keep.as_bytes().to_vec());
            }
            (set_keys(resources, group, keep.is_some()), args)
        };
        self.take_round(engine, &LOCK_SET, &call, token, None)
    }

    /// Every counter of the set, on each member `only` selects.
    fn raise(&self, engine: &Engine, only: &[bool], token: &[u8], to: u64, keep: &str) -> Tally {
        let resources = &self.refs()[..];
        let to = to.to_string();
        let call = |group: &[usize]| {
            (
                set_keys(resources, group, true),
                vec![
                    token.to_vec(),
                    to.clone().into_bytes(),
                    keep.as_bytes().to_vec(),
                ],
            )
        };
        // Replicated, as the acquisition: a replica promoted after the
        // grant must hold the raised counters (see `OneKey::raise`).
        Tally::count(
            self.round(engine, &RAISE, Some(only), &call, DECIDE)
                .into_iter()
                .map(|v| v.answer),
        )
    }

    /// Every key's expiry to `ttl_ms` on each member where all of them
    /// hold `token` (see the extend-set script).
    fn extend(&self, engine: &Engine, token: &[u8], ttl_ms: u64, last: bool) -> Tally {
        let resources = &self.refs()[..];
        let ttl = crate::engine::pipeline::ttl_arg(ttl_ms, last);
        let keep = engine
            .fencing
            .then(|| engine.counter_keep(ttl_ms).to_string());
        let call = |group: &[usize]| {
            let mut args = vec![token.to_vec(), ttl.clone().into_bytes()];
            if let Some(keep) = &keep {
                args.push(keep.clone().into_bytes());
            }
            (set_keys(resources, group, keep.is_some()), args)
        };
        Tally::count(
            self.round(engine, &EXTEND_SET, None, &call, DECIDE)
                .into_iter()
                .map(|v| v.answer),
        )
    }

    /// Deletes each key holding `token` and announces each release, in
    /// one script per member (per slot group on a Redis Cluster). A fair
    /// manager's release hands each key to the first fair waiter queued
    /// for it instead; the clean-up of a queued waiter's attempt puts
    /// back the reservations it took (see `fair.rs`).
    fn unlock(&self, engine: &Engine, token: &[u8], removal: Removal<'_>) -> Tally {
        let Removal {
            only,
            message,
            release,
        } = removal;
        let queued = self.fair.as_ref().is_some_and(Fair::queued);
        if fair::route(engine, release, queued) != Route::Plain {
            let call = |group: &[usize]| {
                let locks = self.pick(group);
                match release {
                    true => fair::handing_call(engine, &locks, None, &locks, token, message),
                    false => fair::unclaim_call(&locks, &locks, token, message),
                }
            };
            let lua: &Lua = if release { &HANDOFF } else { &UNCLAIM };
            let answers: Vec<_> = self
                .round(engine, lua, only, &call, RELEASE)
                .into_iter()
                .map(|v| v.answer)
                .collect();
            if !release {
                return Tally::count(answers);
            }
            // A member that refused the queue is released as an unfair
            // manager releases (see `engine/fair/key.rs`).
            return fair::release_or_unfair(engine, answers, |refused| {
                self.plain_unlock(engine, Some(refused), token, message)
            });
        }
        self.plain_unlock(engine, only, token, message)
    }
}

impl Set {
    /// Deletes each key holding `token` and announces each release (the
    /// unlock-set script), on the members `only` selects.
    fn plain_unlock(
        &self,
        engine: &Engine,
        only: Option<&[bool]>,
        token: &[u8],
        message: Option<&[u8]>,
    ) -> Tally {
        let resources = &self.refs()[..];
        let call = |group: &[usize]| {
            let keys: Vec<Vec<u8>> = group.iter().map(|&i| resources[i].to_vec()).collect();
            let mut args = vec![token.to_vec()];
            let announce = announce_args(message);
            if !announce.is_empty() {
                args.extend(announce.into_iter().map(<[u8]>::to_vec));
                args.extend(group.iter().map(|&i| release_channel(resources[i])));
            }
            (keys, args)
        };
        Tally::count(
            self.round(engine, &UNLOCK_SET, only, &call, RELEASE)
                .into_iter()
                .map(|v| v.answer),
        )
    }
}

/// The indexes of `resources` grouped by hash slot, each group in the
/// order given, groups in order of their first resource.
fn slot_groups(resources: &[&[u8]]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
    for (i, r) in resources.iter().enumerate() {
        let slot = keys::slot(r);
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, group)) => group.push(i),
            None => groups.push((slot, vec![i])),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

fn refs(v: &[Vec<u8>]) -> Vec<&[u8]> {
    v.iter().map(|k| &k[..]).collect()
}

/// The keys of a set script for the indexes of `group`: the resources,
/// then, with fencing (`fenced`), their counters.
fn set_keys(resources: &[&[u8]], group: &[usize], fenced: bool) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = group.iter().map(|&i| resources[i].to_vec()).collect();
    if fenced {
        keys.extend(group.iter().map(|&i| fence_key(resources[i])));
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_group_by_slot_in_the_order_given() {
        let rs: [&[u8]; 5] = [b"{a}1", b"{b}1", b"{a}2", b"{c}", b"{b}2"];
        assert_eq!(slot_groups(&rs), vec![vec![0, 2], vec![1, 4], vec![3]]);
        assert_eq!(slot_groups(&[b"x"]), vec![vec![0]]);
    }

    #[test]
    fn sets_must_be_non_empty_and_without_repeats() {
        let set = |rs: &[&str]| rs.iter().map(|r| r.as_bytes().to_vec()).collect::<Vec<_>>();
        assert!(check_set(&set(&[])).is_err());
        let twice = check_set(&set(&["a", "b", "a"])).unwrap_err().to_string();
        assert!(twice.contains("\"a\" is given twice"), "{twice}");
        assert!(check_set(&set(&["a", ""])).is_err());
        assert!(check_set(&set(&["a", "b"])).is_ok());
        let many: Vec<String> = (0..=MAX_SET).map(|i| i.to_string()).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(check_set(&set(&many)).is_err());
        assert!(check_set(&set(&many[..MAX_SET])).is_ok());
    }
}
