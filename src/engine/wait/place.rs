//! A thread's hold on this manager's queues: its place in a name's queue
//! ([`Place`]), the mark that it waits ([`Own`]), a set's watch over the
//! hand-offs of its names ([`Watch`]), and what its grant means to the
//! others ([`Grant`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Condvar;

use crate::base::cancel::{Cancel, LOOK};

use super::{Registry, Release, Waiters};

/// An acquisition under way (see [`Waiters::start`]).
pub(crate) struct Own<'a> {
    pub(super) waiters: &'a Waiters,
    pub(super) token: &'a [u8],
}

impl Drop for Own<'_> {
    fn drop(&mut self) {
        let mut reg = self.waiters.shared.reg.lock();
        reg.own.remove(self.token);
    }
}

/// A watch of some names (see [`Waiters::watch`]).
pub(crate) struct Watch<'a> {
    pub(super) waiters: &'a Waiters,
    pub(super) names: Vec<Vec<u8>>,
}

impl Watch<'_> {
    /// How many messages were heard on the watched names so far: read
    /// before looking at what they announce, and pass it to
    /// [`wait`](Self::wait), so that news in between is not missed.
    pub(crate) fn heard(&self) -> u64 {
        let reg = self.waiters.shared.reg.lock();
        self.count(&reg)
    }

    fn count(&self, reg: &Registry) -> u64 {
        self.names
            .iter()
            .filter_map(|n| reg.resources.get(n))
            .map(|e| e.heard)
            .sum()
    }

    /// Waits until a message was heard since `heard` (true), or until
    /// `deadline` (false).
    pub(crate) fn wait(&self, heard: u64, deadline: Instant) -> bool {
        let shared = &self.waiters.shared;
        let mut reg = shared.reg.lock();
        loop {
            if self.count(&reg) != heard {
                return true;
            }
            if shared.news.wait_until(&mut reg, deadline).timed_out() {
                return self.count(&reg) != heard;
            }
        }
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let mut reg = self.waiters.shared.reg.lock();
        for name in &self.names {
            if let Some(entry) = reg.resources.get_mut(name) {
                entry.watchers -= 1;
                if entry.watchers == 0 && entry.queue.is_empty() {
                    entry.idle_since = Some(Instant::now());
                }
            }
        }
    }
}

/// What a grant means to this manager's other waiters of the name: the
/// one difference between shapes that the waiting stage knows of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grant {
    /// It holds the name alone (a lock, a set, a leadership, a writer):
    /// the releases heard so far are used up.
    Alone,
    /// It shares the name (a reader): once in, it wakes the next waiter of
    /// this manager, who may share too.
    Shared,
    /// One of K permits: each release frees one, so it uses up one
    /// release heard, not all of them.
    Permit,
}

/// A thread's place in a resource's queue; leaving it (by drop) lets the
/// next one move up.
pub(crate) struct Place<'a> {
    pub(super) waiters: &'a Waiters,
    pub(super) resource: Vec<u8>,
    pub(super) id: u64,
    pub(super) cv: Arc<Condvar>,
}

impl Place<'_> {
    /// Waits for a release or `pause`, whichever comes first. True when it
    /// is this thread's turn to ask: it is the longest waiter and a
    /// release was heard or the pause is over, or a fair release handed
    /// the lock to it, or it is next after a fair hand-off whose
    /// reservation has lapsed. False when the pause is
    /// over and others wait ahead of it, or a `cancel` switch (looked at
    /// every [`LOOK`]) was thrown.
    pub(crate) fn wait(&self, pause: Duration, cancel: Option<&Cancel>) -> bool {
        let deadline = Instant::now().checked_add(pause);
        let mut reg = self.waiters.shared.reg.lock();
        loop {
            if cancel.is_some_and(Cancel::is_cancelled) {
                return false;
            }
            let Some(entry) = reg.resources.get_mut(&self.resource) else {
                return true;
            };
            let first = entry.queue.front().is_some_and(|w| w.id == self.id);
            if first && entry.wake {
                entry.wake = false;
                return true;
            }
            let me = entry.queue.iter_mut().find(|w| w.id == self.id);
            let mut due = None;
            if let Some(me) = me {
                let now = Instant::now();
                if std::mem::take(&mut me.called) || me.due.is_some_and(|at| now >= at) {
                    me.due = None;
                    return true;
                }
                due = me.due;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return first;
            }
            let look = cancel.and_then(|_| Instant::now().checked_add(LOOK));
            match deadline.into_iter().chain(look).chain(due).min() {
                Some(until) => drop(self.cv.wait_until(&mut reg, until)),
                None => self.cv.wait(&mut reg),
            }
        }
    }

    /// It has a place in the members' queues (a fair waiter): hand-offs
    /// may name it, and one announced before the listeners subscribed is
    /// made up for by a call once they have (see `listen.rs`).
    pub(crate) fn placed(&self) {
        let mut reg = self.waiters.shared.reg.lock();
        if let Some(me) = reg
            .resources
            .get_mut(&self.resource)
            .and_then(|e| e.queue.iter_mut().find(|w| w.id == self.id))
        {
            me.placed = true;
        }
    }

    /// Whether this thread is the longest waiter (its turn to ask).
    pub(crate) fn is_first(&self) -> bool {
        let reg = self.waiters.shared.reg.lock();
        reg.resources
            .get(&self.resource)
            .is_none_or(|entry| entry.queue.front().is_some_and(|w| w.id == self.id))
    }

    /// Leaves the queue holding the lock: releases heard meanwhile were
    /// before this acquisition, so nobody is woken for them.
    /// A shared one (a reader) wakes the next waiter instead, who may get
    /// in beside it; a permit uses up one release heard (see [`Grant`]).
    pub(crate) fn acquired(self, grant: Grant) {
        self.leave(true, grant == Grant::Permit);
        if grant == Grant::Shared {
            let mut reg = self.waiters.shared.reg.lock();
            if let Some(entry) = reg.resources.get_mut(&self.resource) {
                entry.wake_first();
            }
        }
    }

    fn leave(&self, acquired: bool, permit: bool) {
        let mut reg = self.waiters.shared.reg.lock();
        let Some(entry) = reg.resources.get_mut(&self.resource) else {
            return;
        };
        let was_first = entry.queue.front().is_some_and(|w| w.id == self.id);
        entry.queue.retain(|w| w.id != self.id);
        if acquired && permit {
            // One release freed the permit taken; the others heard still
            // free one each: the next waiter asks at once.
            entry.wake = false;
            let unspent = |r: &Release| !r.spent && (r.messages > 0 || r.local);
            if let Some(used) = entry.seen.iter_mut().find(|r| unspent(r)) {
                used.spent = true;
            }
            if entry.seen.iter().any(unspent) {
                entry.wake_first();
            }
        } else if acquired {
            entry.wake = false;
            for release in &mut entry.seen {
                release.spent = true;
            }
        } else if was_first && entry.wake {
            // A release this thread did not act on: the next one does.
            entry.wake_first();
        }
        if entry.queue.is_empty() {
            entry.wake = false;
            if entry.watchers == 0 {
                entry.idle_since = Some(Instant::now());
            }
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.leave(false, false);
    }
}
