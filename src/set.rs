//! Several resources locked at once, all or nothing:
//! [`LockManager::lock_all`] and its `try_` forms, returning one
//! [`LockGuard`] for the whole set.
//!
//! # Design
//!
//! Each resource of a set is an ordinary lock key (the resource's name
//! holding the set's token), so a resource held in a set is
//! [`Error::Taken`] for `lock` and for other sets, and the other way
//! round. A member takes a set in one script: when any of the keys exists
//! it writes nothing and names the first busy key; otherwise it sets them
//! all, with the same TTL. The set is held when a majority of members
//! took all of it within the validity, as for one lock; on failure it is
//! removed from every member that may have taken any of it.
//!
//! A Redis Cluster member runs the script once per hash slot of the set
//! (a script's keys must share a slot), one round per slot group, all at
//! once (so a release, in `Drop` too, still ends within one node
//! timeout), and votes yes only when every group took its part; a member
//! left with part of the set gives that part back at once. A set whose
//! resources share a hash tag (`{account}:a`, `{account}:b`) is one
//! group: one script, as on plain nodes.
//!
//! # Why it is safe
//!
//! Mutual exclusion holds per resource, by the mutex's own argument: a
//! set that holds resource `r` is granted by a majority of members, each
//! of which holds the key `r` with the set's token until the validity
//! ends; any other holder of `r` (a lock or another set) needs a
//! majority too, and the two majorities share a member, which grants `r`
//! to one of them only while it holds no key `r`. On a Redis Cluster
//! member, "holds the key" means the master of `r`'s slot holds it, and
//! the member's yes means every slot's master took its part.
//!
//! # Why crossing sets never deadlock
//!
//! Nothing is held while waiting: on each member a set is all or nothing,
//! and an attempt that misses the quorum removes what it took before it
//! pauses. So no attempt holds `a` while it waits for `b`; two threads
//! locking `(a, b)` and `(b, a)` at worst both fail one attempt, and then
//! pause for random times, like two contenders for one lock. The waiting
//! thread queues on the resource that held it up (a release of it wakes
//! the thread).
//!
//! # Fencing
//!
//! With fencing on, each member counts every resource's counter up as one
//! lock does, then sets all of them to the highest (on a Redis Cluster
//! member, each slot group to that group's highest: the groups run
//! separate scripts). The set's token `T` is the highest answer among the
//! granting members. Before the guard is returned, every granting member
//! on which any counter of the set may be below `T` (a plain node whose
//! answer is below it; a cluster member whose *lowest* group answer is
//! below it) is raised to `T` on every counter of the set, so that on a
//! quorum of members every counter of every resource is at least `T`.
//!
//! Why that makes `T` below every later token of each resource `r`: a
//! later acquisition of `r` (a lock or another set) is granted by a
//! majority, which shares a member `m` with the set's quorum. On `m`, the
//! counter of `r` was at least `T` when the set was granted, counters only
//! grow (increments, raises that never lower; an expired counter starts
//! again from the clock in microseconds, above every earlier count), and
//! the later acquisition counts it up past that: its token, the highest
//! among its granting members, is above `T`. And `T` is above every
//! earlier token of each of its resources by the same argument run the
//! other way. A raise that misses the quorum fails the attempt.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use std::sync::Arc;
use std::thread;

use crate::error::{Error, NodeError, Result};
use crate::guard::LockGuard;
use crate::keys::{self, fence_key, release_channel};
use crate::manager::{Budget, LockManager, Wait};
use crate::member::Member;
use crate::pipeline::{DECIDE, Mode, Pipeline, RELEASE, Shape, Vote, announce_args, counter_start};
use crate::quorum::Tally;
use crate::script::{BUSY, EXTEND_SET, GONE, LOCK_SET, Lua, RAISE, UNLOCK_SET};

impl LockManager {
    /// Locks every resource of `resources` for `ttl`, all or nothing,
    /// with [`lock`](Self::lock)'s retries and waiting, and returns one
    /// guard for the whole set: it extends, keeps alive and releases all
    /// of them together. Each resource is locked as by `lock` (the key is
    /// the resource's name), so it is [`Error::Taken`] for `lock` and for
    /// other sets while the set is held. Sets that cross (`[a, b]` and
    /// `[b, a]`) never deadlock: nothing is held while waiting.
    ///
    /// On a Redis Cluster member the set may span slots: one script per
    /// slot, the slots' rounds at once (a thread each beyond the first);
    /// give the resources one hash tag (`{order:42}:stock`,
    /// `{order:42}:payment`) for one script and no thread.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), for the set as a whole; `Taken` when some
    /// resource of it is held by another owner.
    /// [`Error::InvalidArgument`] for an empty set, one of more than
    /// [`MAX_SET`](crate::MAX_SET) resources, a resource given twice, or a
    /// resource or TTL that `lock` would reject.
    pub fn lock_all<I, R>(&self, resources: I, ttl: Duration) -> Result<LockGuard>
    where
        I: IntoIterator<Item = R>,
        R: AsRef<[u8]>,
    {
        self.acquire_all(resources, ttl, self.lock_budget())
    }

    /// As [`lock_all`](Self::lock_all), with exactly one attempt.
    ///
    /// # Errors
    ///
    /// As [`lock_all`](Self::lock_all), from the single attempt.
    pub fn try_lock_all<I, R>(&self, resources: I, ttl: Duration) -> Result<LockGuard>
    where
        I: IntoIterator<Item = R>,
        R: AsRef<[u8]>,
    {
        self.acquire_all(resources, ttl, Budget::Once)
    }

    /// As [`lock_all`](Self::lock_all), trying until `timeout` has passed
    /// (as [`try_lock_for`](Self::try_lock_for) does).
    ///
    /// # Errors
    ///
    /// As [`lock_all`](Self::lock_all), from the last attempt.
    pub fn try_lock_all_for<I, R>(
        &self,
        resources: I,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<LockGuard>
    where
        I: IntoIterator<Item = R>,
        R: AsRef<[u8]>,
    {
        let budget = Budget::Until(Instant::now().checked_add(timeout));
        self.acquire_all(resources, ttl, budget)
    }

    fn acquire_all<I, R>(&self, resources: I, ttl: Duration, budget: Budget) -> Result<LockGuard>
    where
        I: IntoIterator<Item = R>,
        R: AsRef<[u8]>,
    {
        let owned: Vec<Vec<u8>> = resources.into_iter().map(|r| r.as_ref().to_vec()).collect();
        check_set(&owned)?;
        let pipeline = self.pipeline();
        let ttl_ms = pipeline.check_ttl(ttl)?;
        let names: Vec<&[u8]> = owned.iter().map(|r| &r[..]).collect();
        let wait = Wait {
            names: &names,
            writer: None,
            shared: false,
        };
        let shape = Arc::new(Set {
            resources: owned.iter().map(|r| r[..].into()).collect(),
        });
        self.attempts_on(wait, budget, |token, blocked| {
            let granted = pipeline.acquire(&*shape, token, ttl_ms, blocked)?;
            Ok(LockGuard::new(
                pipeline.clone(),
                shape.clone(),
                *token,
                Duration::from_millis(ttl_ms),
                granted,
            ))
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
}

type Answer = Option<std::result::Result<u64, NodeError>>;

/// The keys and arguments of a set script for a group of a set's
/// indexes, on a Redis Cluster member or not.
type SetCall<'a> = &'a (dyn Fn(&[usize], bool) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) + Sync);

impl Set {
    fn refs(&self) -> Vec<&[u8]> {
        self.resources.iter().map(|r| &r[..]).collect()
    }

    /// Runs `lua` over the set: on nodes once with every key, on Redis
    /// Cluster members once per slot group. `call(group, cluster)` gives
    /// the keys and arguments for the indexes of `group`. Each member's
    /// groups are taken together as its vote.
    fn round(
        &self,
        p: &Pipeline,
        lua: &Lua,
        only: Option<&[bool]>,
        call: SetCall<'_>,
        mode: Mode,
    ) -> Vec<Vote> {
        let resources = &self.refs()[..];
        let all: Vec<usize> = (0..resources.len()).collect();
        let groups = if p.has_clusters {
            slot_groups(resources)
        } else {
            vec![all.clone()]
        };
        let (node_keys, node_args) = call(&all, false);
        let (nk, na) = (refs(&node_keys), refs(&node_args));
        let one = |g: usize, group: &[usize]| -> Vec<Answer> {
            let selected: Vec<bool> = p
                .members
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    only.is_none_or(|only| only[i]) && (g == 0 || matches!(m, Member::Cluster(_)))
                })
                .collect();
            if !selected.contains(&true) {
                return p.members.iter().map(|_| None).collect();
            }
            let (keys, args) = call(group, true);
            let (ck, ca) = (refs(&keys), refs(&args));
            let node = &na;
            let cluster = &ca;
            p.script_split(lua, Some(&selected), (&nk, node), (&ck, cluster), mode)
        };
        // The slot groups' rounds run at once, each on a thread of its own
        // but the first, so that the whole takes one node timeout at most.
        let answers = thread::scope(|scope| {
            let rest: Vec<_> = groups
                .iter()
                .enumerate()
                .skip(1)
                .map(|(g, group)| {
                    let one = &one;
                    let spawned = thread::Builder::new()
                        .name("redlock-slot-group".into())
                        .spawn_scoped(scope, move || one(g, group));
                    (g, spawned)
                })
                .collect();
            let mut answers = vec![one(0, &groups[0])];
            for (g, spawned) in rest {
                answers.push(match spawned {
                    Ok(handle) => handle.join().unwrap_or_else(|_| {
                        p.members
                            .iter()
                            .map(|m| match m {
                                Member::Cluster(_) => Some(Err(m.panicked())),
                                Member::Node(_) => None,
                            })
                            .collect()
                    }),
                    // No thread to be had: here, after the others.
                    Err(_) => one(g, &groups[g]),
                });
            }
            answers
        });
        self.votes(p, &groups, answers)
    }

    /// Each member's groups taken together (see [`Vote`]; a member that
    /// took part of the set and voted no is `partial`). `groups` maps
    /// a cluster's group-local busy index back to the set; a node's
    /// answer (group 0 covers the whole set on nodes) is its own.
    fn votes(&self, p: &Pipeline, groups: &[Vec<usize>], answers: Vec<Vec<Answer>>) -> Vec<Vote> {
        let n = p.members.len();
        let mut per: Vec<Vec<(usize, std::result::Result<u64, NodeError>)>> =
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
                let cluster = matches!(p.members[i], Member::Cluster(_));
                if got.is_empty() {
                    return Vote::of(None);
                }
                let mut vote = Vote {
                    yes: Some(0),
                    low: u64::MAX,
                    busy: None,
                    dirty: false,
                    partial: false,
                    answer: None,
                };
                let mut failure = None;
                let mut gone = false;
                for (g, a) in got {
                    match a {
                        Ok(c) if c & BUSY != 0 && c != GONE => {
                            let local = (c & !BUSY) as usize;
                            let at = if cluster {
                                groups[g].get(local).copied()
                            } else {
                                Some(local)
                            };
                            vote.busy = vote.busy.or(at).or(Some(0));
                            vote.yes = None;
                        }
                        Ok(0) => {
                            // Another owner's token (extend, release,
                            // raise): a no that names no resource.
                            vote.busy = vote.busy.or(Some(usize::MAX));
                            vote.yes = None;
                        }
                        Ok(GONE) => {
                            gone = true;
                            vote.yes = None;
                        }
                        Ok(c) => {
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
                    (Some(y), _, _) => Ok(y),
                    (None, Some(_), _) => Ok(0),
                    (None, None, Some(e)) => Err(e),
                    (None, None, None) if gone => Ok(GONE),
                    (None, None, None) => Ok(0),
                });
                // Took part of the set, and voted no: given back on a grant.
                vote.partial = vote.dirty && vote.yes.is_none();
                vote
            })
            .collect()
    }
}

impl Shape for Set {
    fn resources(&self) -> Vec<&[u8]> {
        self.refs()
    }

    /// The set script on every member (see its docs).
    fn take(&self, p: &Pipeline, token: &[u8], ttl_ms: u64, keep: Option<&str>) -> Vec<Vote> {
        let resources = &self.refs()[..];
        let px = ttl_ms.to_string();
        let start_at = counter_start().to_string();
        let call = |group: &[usize], _: bool| {
            let mut args = vec![token.to_vec(), px.clone().into_bytes()];
            if let Some(keep) = keep {
                args.push(start_at.clone().into_bytes());
                args.push(keep.as_bytes().to_vec());
            }
            (set_keys(resources, group, keep.is_some()), args)
        };
        let mode = Mode {
            count: true,
            ..DECIDE
        };
        self.round(p, &LOCK_SET, None, &call, mode)
    }

    /// Every counter of the set, on each member `only` selects.
    fn raise(&self, p: &Pipeline, only: &[bool], to: u64, keep: &str) -> Tally {
        let resources = &self.refs()[..];
        let to = to.to_string();
        let call = |group: &[usize], _: bool| {
            let keys = group.iter().map(|&i| fence_key(resources[i])).collect();
            (
                keys,
                vec![to.clone().into_bytes(), keep.as_bytes().to_vec()],
            )
        };
        let mode = Mode {
            replicated: false,
            ..DECIDE
        };
        Tally::count(
            self.round(p, &RAISE, Some(only), &call, mode)
                .into_iter()
                .map(|v| v.answer),
        )
    }

    /// Every key's expiry to `ttl_ms` on each member where all of them
    /// hold `token` (see the extend-set script).
    fn extend(&self, p: &Pipeline, token: &[u8], ttl_ms: u64) -> Tally {
        let resources = &self.refs()[..];
        let ttl = ttl_ms.to_string();
        let keep = p.counter_keep(ttl_ms);
        let call = |group: &[usize], _: bool| {
            let mut args = vec![token.to_vec(), ttl.clone().into_bytes()];
            if let Some(keep) = &keep {
                args.push(keep.clone().into_bytes());
            }
            (set_keys(resources, group, keep.is_some()), args)
        };
        Tally::count(
            self.round(p, &EXTEND_SET, None, &call, DECIDE)
                .into_iter()
                .map(|v| v.answer),
        )
    }

    /// Deletes each key holding `token` and announces each release, in
    /// one script per member (per slot group on a Redis Cluster).
    fn unlock(
        &self,
        p: &Pipeline,
        only: Option<&[bool]>,
        token: &[u8],
        message: Option<&[u8]>,
    ) -> Tally {
        let resources = &self.refs()[..];
        let call = |group: &[usize], cluster: bool| {
            let keys: Vec<Vec<u8>> = group.iter().map(|&i| resources[i].to_vec()).collect();
            let mut args = vec![token.to_vec()];
            let announce = announce_args(message, cluster);
            if !announce.is_empty() {
                args.extend(announce.into_iter().map(<[u8]>::to_vec));
                args.extend(group.iter().map(|&i| release_channel(resources[i])));
            }
            (keys, args)
        };
        Tally::count(
            self.round(p, &UNLOCK_SET, only, &call, RELEASE)
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
