//! The rounds of the other shapes, beside the lock's own in `rounds.rs`:
//! sets of resources taken all or nothing, read locks, and the flag of a
//! waiting writer. The safety arguments are in `set.rs` and `rwlock.rs`.
//!
//! A set's script needs all its keys in one hash slot on a Redis Cluster,
//! so a Redis Cluster member takes a set in one script per slot: a round
//! per slot group (the first also carries the nodes' call), all run at
//! once. Its vote is yes only when every group took its part.

use std::thread;
use std::time::{Duration, Instant};

use crate::error::{NodeError, Result};
use crate::member::Member;
use crate::node::{
    BUSY, EXTEND_READ, EXTEND_SET, GONE, LOCK_SET, Lua, RAISE, READ, UNLOCK, UNLOCK_SET, UNREAD,
    WRITER_WAITS,
};
use crate::quorum::{self, Tally};
use crate::redis_cluster::{self, companion};
use crate::rounds::{
    Call, Granted, Mode, READERS_SUFFIX, RELEASE, Rounds, WRITER_SUFFIX, announce_args,
    attempt_error, counter_start, fence_key, may_hold,
};

/// The value the lock key holds while readers hold the lock. It is no
/// token (tokens are 32 hex digits), so no writer's unlock deletes it.
pub(crate) const READERS_MARK: &[u8] = b"redlock:readers";

type Answer = Option<std::result::Result<u64, NodeError>>;

/// The keys and arguments of a set script for a group of a set's
/// indexes, on a Redis Cluster member or not.
type SetCall<'a> = &'a (dyn Fn(&[usize], bool) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) + Sync);

/// Acquisitions and extends decide a holder, and wait for replicas.
const DECIDE: Mode = Mode {
    count: false,
    replicated: true,
    decides: true,
};

/// The indexes of `resources` grouped by hash slot, each group in the
/// order given, groups in order of their first resource.
fn slot_groups(resources: &[&[u8]]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
    for (i, r) in resources.iter().enumerate() {
        let slot = redis_cluster::slot(r);
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, group)) => group.push(i),
            None => groups.push((slot, vec![i])),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

/// How a member answered a set round, all its groups taken together.
struct Vote {
    /// Every group said yes: the highest answer.
    yes: Option<u64>,
    /// The lowest yes among the groups (a Redis Cluster member counts each
    /// slot group's counters up to that group's own top): with `yes`, the
    /// member's counters of this set are all between the two.
    low: u64,
    /// The set index of a key held by another owner, when a group said so.
    busy: Option<usize>,
    /// Some group may have written: it said yes, or failed unsettled.
    dirty: bool,
    /// The answer as one: the highest yes, 0 for a busy key, the first
    /// failure otherwise.
    answer: Answer,
}

impl Rounds {
    /// Runs `lua` over a set: on nodes once with every key, on Redis
    /// Cluster members once per slot group. `call(group, cluster)` gives
    /// the keys and arguments for the indexes of `group`. Answers per
    /// group, per member.
    fn set_round(
        &self,
        lua: &Lua,
        only: Option<&[bool]>,
        resources: &[&[u8]],
        call: SetCall<'_>,
        mode: Mode,
    ) -> (Vec<Vec<usize>>, Vec<Vec<Answer>>) {
        let all: Vec<usize> = (0..resources.len()).collect();
        let groups = if self.has_clusters {
            slot_groups(resources)
        } else {
            vec![all.clone()]
        };
        let (node_keys, node_args) = call(&all, false);
        let (nk, na) = (refs(&node_keys), refs(&node_args));
        let one = |g: usize, group: &[usize]| -> Vec<Answer> {
            let selected: Vec<bool> = self
                .members
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    only.is_none_or(|only| only[i]) && (g == 0 || matches!(m, Member::Cluster(_)))
                })
                .collect();
            if !selected.contains(&true) {
                return self.members.iter().map(|_| None).collect();
            }
            let (keys, args) = call(group, true);
            let (ck, ca) = (refs(&keys), refs(&args));
            let node = Call {
                args: &na,
                tail: None,
            };
            let cluster = Call {
                args: &ca,
                tail: None,
            };
            self.script_split(lua, Some(&selected), (&nk, node), (&ck, cluster), mode)
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
                        self.members
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
        (groups, answers)
    }

    /// Each member's groups taken together (see [`Vote`]). `groups` maps
    /// a cluster's group-local busy index back to the set; a node's
    /// answer (group 0 covers the whole set on nodes) is its own.
    fn votes(&self, groups: &[Vec<usize>], answers: Vec<Vec<Answer>>) -> Vec<Vote> {
        let n = self.members.len();
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
                let cluster = matches!(self.members[i], Member::Cluster(_));
                if got.is_empty() {
                    return Vote {
                        yes: None,
                        low: 0,
                        busy: None,
                        dirty: false,
                        answer: None,
                    };
                }
                let mut vote = Vote {
                    yes: Some(0),
                    low: u64::MAX,
                    busy: None,
                    dirty: false,
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
                vote
            })
            .collect()
    }

    /// One attempt at a set, all or nothing on each member (see
    /// `LockManager::lock_all`): the set script on every member, then,
    /// with fencing, the counters of granting members below the highest
    /// token raised to it. On failure everything taken is removed again
    /// and `blocked` is set to the index of a resource found held by
    /// another owner, if any.
    pub(crate) fn acquire_set(
        &self,
        resources: &[&[u8]],
        token: &[u8],
        ttl_ms: u64,
        blocked: &mut Option<usize>,
    ) -> Result<Granted> {
        self.check_members()?;
        self.restart.note_ttl(ttl_ms);
        let ttl = Duration::from_millis(ttl_ms);
        let px = ttl_ms.to_string();
        let keep = self.counter_keep(ttl_ms);
        let start_at = counter_start().to_string();
        let call = |group: &[usize], _: bool| {
            let mut args = vec![token.to_vec(), px.clone().into_bytes()];
            if let Some(keep) = &keep {
                args.push(start_at.clone().into_bytes());
                args.push(keep.clone().into_bytes());
            }
            (set_keys(resources, group, keep.is_some()), args)
        };
        let mode = Mode {
            count: true,
            ..DECIDE
        };
        let start = Instant::now();
        let (groups, answers) = self.set_round(&LOCK_SET, None, resources, &call, mode);
        let votes = self.votes(&groups, answers);
        let quorum = quorum::quorum(self.members.len());
        let granted = votes.iter().filter(|v| v.yes.is_some()).count();
        let highest = votes.iter().filter_map(|v| v.yes).max().unwrap_or(0);
        let mut failed = None;
        if let (true, Some(keep)) = (granted >= quorum, &keep) {
            // Every counter of the set on every granting member must
            // reach the token, not just the member's highest: a Redis
            // Cluster member whose hottest slot group made the token has
            // its other groups below it (each group counts up on its own).
            let lagging: Vec<bool> = votes
                .iter()
                .map(|v| v.yes.is_some() && v.low < highest)
                .collect();
            let behind = lagging.iter().filter(|l| **l).count();
            if behind > 0 {
                let to = highest.to_string();
                let call = |group: &[usize], _: bool| {
                    let keys = group.iter().map(|&i| fence_key(resources[i])).collect();
                    (
                        keys,
                        vec![to.clone().into_bytes(), keep.clone().into_bytes()],
                    )
                };
                let (groups, answers) = self.set_round(
                    &RAISE,
                    Some(&lagging),
                    resources,
                    &call,
                    Mode {
                        replicated: false,
                        ..DECIDE
                    },
                );
                let raised =
                    Tally::count(self.votes(&groups, answers).into_iter().map(|v| v.answer));
                if granted - behind + raised.yes < quorum {
                    failed = Some(raised);
                }
            }
        }
        let elapsed = start.elapsed();
        let (valid_until, conflict) =
            self.settle(start, elapsed, ttl, granted >= quorum && failed.is_none());
        if let Some(valid_until) = valid_until {
            // A member that took part of the set (a cluster whose other
            // slots were busy) gives it back now.
            let partial: Vec<bool> = votes.iter().map(|v| v.dirty && v.yes.is_none()).collect();
            if partial.contains(&true) {
                self.unlock_set_on(Some(&partial), resources, token);
            }
            return Ok(Granted {
                valid_until,
                fencing: keep.is_some().then_some(highest),
            });
        }
        let dirty: Vec<bool> = votes.iter().map(|v| v.dirty).collect();
        if dirty.contains(&true) {
            self.unlock_set_on(Some(&dirty), resources, token);
        }
        *blocked = votes
            .iter()
            .find_map(|v| v.busy)
            .filter(|&i| i < resources.len());
        if let Some(conflict) = conflict {
            return Err(conflict);
        }
        Err(attempt_error(
            &quorum::joined(resources),
            failed,
            granted >= quorum,
            elapsed,
            ttl,
            Tally::count(votes.into_iter().map(|v| v.answer)),
            || resources.iter().any(|r| self.held_here(r)),
        ))
    }

    /// Releases a set on the members `only` selects: deletes each key
    /// holding `token` and announces each release, in one script per
    /// member (per slot group on a Redis Cluster). Returns the tally and
    /// the message the releases were announced with, if any.
    fn unlock_set_on(
        &self,
        only: Option<&[bool]>,
        resources: &[&[u8]],
        token: &[u8],
    ) -> (Tally, Option<Vec<u8>>) {
        let message = self
            .wake_on_release
            .then(|| self.announcement(resources[0], token).1);
        let call = |group: &[usize], cluster: bool| {
            let keys: Vec<Vec<u8>> = group.iter().map(|&i| resources[i].to_vec()).collect();
            let mut args = vec![token.to_vec()];
            if let Some(message) = &message {
                let verb: &[u8] = if cluster { b"SPUBLISH" } else { b"PUBLISH" };
                args.push(verb.to_vec());
                args.push(message.clone());
                args.extend(group.iter().map(|&i| crate::wait::channel(resources[i])));
            }
            (keys, args)
        };
        let (groups, answers) = self.set_round(&UNLOCK_SET, only, resources, &call, RELEASE);
        let tally = Tally::count(self.votes(&groups, answers).into_iter().map(|v| v.answer));
        (tally, message)
    }

    /// Releases a held set on every member and wakes this manager's
    /// waiters of each resource once the round is over.
    pub(crate) fn unlock_set(&self, resources: &[&[u8]], token: &[u8]) -> Tally {
        let (tally, message) = self.unlock_set_on(None, resources, token);
        if let (true, Some(message)) = (tally.yes > 0, &message) {
            for r in resources {
                self.waiters.released(r, message);
            }
        }
        tally
    }

    /// Extends a held set: every key's expiry to `ttl_ms` on each member
    /// where all of them hold `token` (see the extend-set script).
    pub(crate) fn extend_set(&self, resources: &[&[u8]], token: &[u8], ttl_ms: u64) -> Tally {
        let ttl = ttl_ms.to_string();
        let keep = self.counter_keep(ttl_ms);
        let call = |group: &[usize], _: bool| {
            let mut args = vec![token.to_vec(), ttl.clone().into_bytes()];
            if let Some(keep) = &keep {
                args.push(keep.clone().into_bytes());
            }
            (set_keys(resources, group, keep.is_some()), args)
        };
        self.restart.note_ttl(ttl_ms);
        let (groups, answers) = self.set_round(&EXTEND_SET, None, resources, &call, DECIDE);
        Tally::count(self.votes(&groups, answers).into_iter().map(|v| v.answer))
    }

    /// One read-lock attempt on every member (see the read script). On
    /// failure removes this reader wherever it may have been added.
    pub(crate) fn acquire_read(&self, name: &[u8], token: &[u8], ttl_ms: u64) -> Result<Granted> {
        self.check_members()?;
        self.restart.note_ttl(ttl_ms);
        let ttl = Duration::from_millis(ttl_ms);
        let px = ttl_ms.to_string();
        let (readers, flag) = (
            companion(name, READERS_SUFFIX),
            companion(name, WRITER_SUFFIX),
        );
        let args: [&[u8]; 3] = [token, px.as_bytes(), READERS_MARK];
        let call = Call {
            args: &args,
            tail: None,
        };
        let start = Instant::now();
        let answers = self.script_then(&READ, None, &[name, &readers, &flag], call, None, DECIDE);
        let elapsed = start.elapsed();
        let quorum = quorum::quorum(self.members.len());
        let granted = answers
            .iter()
            .filter(|a| matches!(a, Some(Ok(c)) if *c > 0))
            .count();
        let (valid_until, conflict) = self.settle(start, elapsed, ttl, granted >= quorum);
        if let Some(valid_until) = valid_until {
            return Ok(Granted {
                valid_until,
                fencing: None,
            });
        }
        let dirty = may_hold(&answers);
        if dirty.contains(&true) {
            self.unread_on(Some(&dirty), name, token);
        }
        if let Some(conflict) = conflict {
            return Err(conflict);
        }
        Err(attempt_error(
            name,
            None,
            granted >= quorum,
            elapsed,
            ttl,
            Tally::count(answers),
            || self.held_here(name),
        ))
    }

    /// Removes a reader on the members `only` selects; the last reader
    /// out deletes the lock key and announces the release.
    fn unread_on(&self, only: Option<&[bool]>, name: &[u8], token: &[u8]) -> (Tally, Vec<u8>) {
        let (channel, message) = self.cleanup_announcement(name, token);
        let readers = companion(name, READERS_SUFFIX);
        let mut node_args = vec![token, READERS_MARK];
        let mut cluster_args = node_args.clone();
        node_args.extend(
            announce_args(token, &channel, &message, b"PUBLISH")
                .into_iter()
                .skip(1),
        );
        cluster_args.extend(
            announce_args(token, &channel, &message, b"SPUBLISH")
                .into_iter()
                .skip(1),
        );
        let tally = Tally::count(self.script_then(
            &UNREAD,
            only,
            &[name, &readers],
            Call {
                args: &node_args,
                tail: None,
            },
            Some(Call {
                args: &cluster_args,
                tail: None,
            }),
            RELEASE,
        ));
        (tally, message)
    }

    /// Releases a held read lock on every member, and wakes this
    /// manager's waiters once the round is over.
    pub(crate) fn unread(&self, name: &[u8], token: &[u8]) -> Tally {
        let (tally, message) = self.unread_on(None, name, token);
        if tally.yes > 0 && !message.is_empty() {
            self.waiters.released(name, &message);
        }
        tally
    }

    /// Extends a held read lock to `ttl_ms` from now.
    pub(crate) fn extend_read(&self, name: &[u8], token: &[u8], ttl_ms: u64) -> Tally {
        let ttl = ttl_ms.to_string();
        let readers = companion(name, READERS_SUFFIX);
        let args: [&[u8]; 3] = [token, ttl.as_bytes(), READERS_MARK];
        self.restart.note_ttl(ttl_ms);
        Tally::count(self.script_then(
            &EXTEND_READ,
            None,
            &[name, &readers],
            Call {
                args: &args,
                tail: None,
            },
            None,
            DECIDE,
        ))
    }

    /// A writer that found `name` busy and will wait: where readers hold
    /// it, sets the flag that makes new readers queue behind the writer,
    /// for `ms`. True when some member set it.
    pub(crate) fn writer_waits(&self, name: &[u8], token: &[u8], ms: u64) -> bool {
        let flag = companion(name, WRITER_SUFFIX);
        let ms = ms.max(1).to_string();
        let args: [&[u8]; 3] = [token, ms.as_bytes(), READERS_MARK];
        let call = Call {
            args: &args,
            tail: None,
        };
        // Decides no holder, waits for no replica: as a release.
        self.script_then(&WRITER_WAITS, None, &[name, &flag], call, None, RELEASE)
            .into_iter()
            .any(|a| matches!(a, Some(Ok(1))))
    }

    /// The writer is done waiting (it got the lock, or gave up): removes
    /// its flag where it is still its own.
    pub(crate) fn writer_done(&self, name: &[u8], token: &[u8]) {
        let flag = companion(name, WRITER_SUFFIX);
        self.script_then(
            &UNLOCK,
            None,
            &[&flag],
            Call {
                args: &[token],
                tail: None,
            },
            None,
            RELEASE,
        );
    }
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
}
