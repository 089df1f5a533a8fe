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

use crate::error::{Error, Result};
use crate::guard::{LockGuard, Shape};
use crate::manager::{Budget, LockManager, Wait};
use crate::rounds::Rounds;

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
        let rounds = self.rounds();
        let ttl_ms = rounds.check_ttl(ttl)?;
        let names: Vec<&[u8]> = owned.iter().map(|r| &r[..]).collect();
        let wait = Wait {
            names: &names,
            writer: false,
            shared: false,
        };
        self.attempts_on(wait, budget, |token, blocked| {
            let granted = rounds.acquire_set(&names, token, ttl_ms, blocked)?;
            let all = owned.iter().map(|r| r[..].into()).collect();
            Ok(LockGuard::shaped(
                rounds.clone(),
                Shape::Set(all),
                &owned[0],
                &owned[0],
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
        Rounds::check_resource(r)?;
        if !seen.insert(&r[..]) {
            return Err(Error::invalid_argument(format!(
                "resource {:?} is given twice in the set",
                String::from_utf8_lossy(r)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
