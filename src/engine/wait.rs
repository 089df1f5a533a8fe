//! Waiting for a busy lock: the waiters of one manager, queued per
//! resource in arrival order, and the listeners that hear releases.
//!
//! Every release publishes a message on the resource's channel (a
//! `PUBLISH` written behind the unlock script, on every node). While any
//! thread of a manager waits, the manager keeps one listener per node: a
//! thread with a connection of its own, subscribed to the exact channels
//! of the resources being waited on, each once however many threads wait.
//! The first message of a release (each node sends one) wakes the longest
//! waiter of that resource, and so does the message that makes a
//! majority; a release by this manager wakes it directly too. Only the
//! longest waiter asks again: the others keep their place. Every wait has
//! a timeout (the waiter's random pause), so a lost message costs one
//! pause and never a hang, and nothing is kept on the servers but the
//! subscriptions of connections that are open.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::base::counted::{Counted, hash};
use crate::base::keys::release_channel as channel;
use crate::engine::quorum;
use crate::members::listen::{self, Listening, Wanted};
use crate::members::member::Member;

/// How long a resource stays subscribed after its last waiter left, and
/// the listeners stay connected after the last resource was dropped: a
/// lock that is busy again soon finds them ready.
const LINGER: Duration = Duration::from_secs(1);
/// Release tokens remembered per resource, to count a release heard from
/// several nodes once.
const SEEN: usize = 8;
/// Release counters, each shared by the resources whose name hashes to
/// it.
const COUNTERS: usize = 64;

/// The waiters of one manager (shared by its clones and guards).
pub(crate) struct Waiters {
    shared: Arc<Shared>,
}

struct Shared {
    members: Arc<[Member]>,
    /// A fair manager's address: hand-offs to its waiters are announced
    /// on each release channel followed by `:` and this (see `fair.rs`).
    address: Option<Vec<u8>>,
    reg: Mutex<Registry>,
    /// Releases heard, counted by resource hash: a thread reads its
    /// resource's counter before an attempt, so that a release heard
    /// between that attempt and its joining the queue is not lost.
    releases: [AtomicU64; COUNTERS],
    /// Notified on every message about a watched name (see
    /// [`Waiters::watch`]).
    news: Condvar,
}

impl Shared {
    /// A release of `resource` (by `token`) was heard: from a node's
    /// message, or from this manager's own unlock round once over
    /// (`local`). Wakes the first waiter on the release's first message
    /// (the fastest news), again once a majority of nodes have sent one
    /// (a majority has deleted the key by then, in case the first try came
    /// too early for the slower nodes), and on the local news; never after
    /// one of the waiters acquired the lock since. A fair hand-off (see
    /// `fair.rs`) wakes its waiter only once a majority of nodes announced
    /// it.
    ///
    /// A node's message about an unlock by one of this manager's own
    /// waiting acquisitions (the clean-up of its failed attempt) is
    /// ignored: it must not end that thread's own pause, and this
    /// manager's other waiters queue behind that thread anyway.
    fn heard(&self, resource: &[u8], message: &[u8], local: bool) {
        let mut reg = self.reg.lock();
        // This manager's own release of a name none of its threads waits
        // for or watches: only the release count moves (what follows
        // would find no entry to wake, and a release's own message is
        // never a notice). Every uncontended release comes here. The
        // count moves under the lock, as below: a thread joining the
        // queue reads it under the lock, and so sees the release either
        // in the count or by being woken.
        if local && !reg.resources.contains_key(resource) {
            self.counter(resource).fetch_add(1, Ordering::SeqCst);
            return;
        }
        // Watchers hear everything, their own manager's news included.
        if let Some(entry) = reg.resources.get_mut(resource) {
            entry.news(&self.news);
        }
        let (token, next) = split_message(message);
        if !local
            && reg
                .own
                .contains(crate::base::holder::waiter_of(unlock_token(token)))
        {
            return;
        }
        // A notice to the waiter next after a hand-off is no release.
        // (Releases of this crate sent them from 2026-11-24 to 11-25; a
        // manager still heeds them, from a client of those versions
        // beside it during an upgrade.)
        let lapse = notice(token);
        if lapse.is_none() {
            self.counter(resource).fetch_add(1, Ordering::SeqCst);
        }
        // A fair release handed the lock to one waiter: only that waiter
        // asks (it is its manager's first for the name, see `fair.rs`). A
        // yield (it names `-`) is for managers that cannot queue: theirs
        // ask, fair waiters keep waiting for its mark's lapse.
        let for_us = next
            .is_none_or(|next| reg.own.contains(next) || (next == b"-" && self.address.is_none()));
        let quorum = quorum::quorum(self.members.len());
        let wake = reg.resources.get_mut(resource).is_some_and(|entry| {
            let release = entry.release(token);
            for_us
                && !release.spent
                && if local {
                    !std::mem::replace(&mut release.local, true)
                } else {
                    release.messages += 1;
                    // A hand-off is claimed once a majority made it: a
                    // claim before that finds the rest still held.
                    (release.messages == 1 && next.is_none()) || release.messages == quorum
                }
        });
        if !wake {
            return;
        }
        if let (Some(lapse), Some(next)) = (lapse, next) {
            // It asks when the reservation lapses (a little after, for
            // the servers' clocks), wherever it waits here: should the
            // waiter handed the key be gone, the key is free then and
            // this one is first.
            let at = Instant::now() + lapse + lapse / 100 + Duration::from_millis(2);
            let here = reg
                .resources
                .get_mut(resource)
                .is_some_and(|e| e.due(next, at));
            if !here {
                reg.resources.values_mut().any(|e| e.due(next, at));
            }
            return;
        }
        // A hand-off goes to its waiter, wherever it stands here (its
        // manager's threads may have joined the members' queues in another
        // order), or wherever it waits for another name (a set waits in the
        // queue of the name that refused it last, and watches the others).
        let called = next.is_some_and(|next| {
            let here = reg
                .resources
                .get_mut(resource)
                .is_some_and(|e| e.call(next));
            here || reg.resources.values_mut().any(|e| e.call(next))
        });
        if !called && let Some(entry) = reg.resources.get_mut(resource) {
            entry.wake_first();
        }
    }

    fn counter(&self, resource: &[u8]) -> &AtomicU64 {
        // A collision shares a counter, which costs a spurious wake.
        &self.releases[(hash(resource) % COUNTERS as u64) as usize]
    }
}

/// A resource's release count before an attempt (see
/// [`Waiters::before_attempt`]).
#[derive(Clone, Copy)]
pub(crate) struct ReleaseCount(u64);

#[derive(Default)]
struct Registry {
    resources: HashMap<Vec<u8>, Entry>,
    next_id: u64,
    /// Changes whenever a resource is added or dropped.
    version: u64,
    /// Per node: whether its listener thread runs.
    listening: Vec<bool>,
    /// The lock tokens of this manager's acquisitions under way that may
    /// wait (see [`Waiters::start`]), with how many use each.
    own: Counted,
}

/// A release message's parts: the release (`token:count`), and the
/// waiter a fair release handed the lock to (after a second `:`), if any.
fn split_message(message: &[u8]) -> (&[u8], Option<&[u8]>) {
    let mut colons = message
        .iter()
        .enumerate()
        .filter(|&(_, &b)| b == b':')
        .map(|(i, _)| i);
    match (colons.next(), colons.next()) {
        (Some(_), Some(at)) => (&message[..at], Some(&message[at + 1..])),
        _ => (message, None),
    }
}

/// How long the reservation lasts that a notice's release part announces
/// (`token:count~ms`: the waiter it names is next after a hand-off, as
/// releases of this crate's versions of 2026-11-24 and 25 said); `None`
/// for any other message.
fn notice(release: &[u8]) -> Option<Duration> {
    let at = release.iter().rposition(|&b| b == b'~')?;
    let ms: u64 = std::str::from_utf8(&release[at + 1..]).ok()?.parse().ok()?;
    Some(Duration::from_millis(ms))
}

/// The lock token an unlock's message names: the message is the token,
/// `:`, and a count.
fn unlock_token(message: &[u8]) -> &[u8] {
    match message.iter().rposition(|&b| b == b':') {
        Some(at) => &message[..at],
        None => message,
    }
}

#[derive(Default)]
struct Entry {
    /// This manager's threads waiting for the resource, longest first.
    queue: VecDeque<Waiter>,
    /// A release was heard that the first waiter has not acted on yet.
    wake: bool,
    /// The last releases heard.
    seen: VecDeque<Release>,
    /// A node has confirmed the subscription.
    subscribed: bool,
    /// Since when the queue is empty and nobody watches.
    idle_since: Option<Instant>,
    /// Watchers of the name (see [`Waiters::watch`]).
    watchers: usize,
    /// Messages heard on the name's channel (and confirmations of its
    /// subscription), for watchers.
    heard: u64,
}

struct Waiter {
    id: u64,
    cv: Arc<Condvar>,
    /// The acquisition's token (a fair hand-off names it).
    token: Vec<u8>,
    /// A fair release handed the lock to this waiter: it asks at once,
    /// wherever it stands in this manager's queue.
    called: bool,
    /// It has a place in the members' queues (a fair waiter): a hand-off
    /// may name it.
    placed: bool,
    /// It is next after a hand-off to another waiter: it asks when that
    /// reservation lapses (see `hand.lua`).
    due: Option<Instant>,
}

impl Waiter {
    /// Makes it ask at once, wherever it stands in the queue.
    fn call(&mut self) {
        self.called = true;
        self.cv.notify_one();
    }
}

/// What was heard of one release.
struct Release {
    token: Vec<u8>,
    /// Messages from nodes.
    messages: usize,
    /// The releasing unlock round was this manager's, and is over.
    local: bool,
    /// A waiter acquired the lock after it: it wakes nobody any more.
    spent: bool,
}

impl Entry {
    /// Counts a message (or a subscription confirmed) for the watchers.
    fn news(&mut self, news: &Condvar) {
        self.heard += 1;
        if self.watchers > 0 {
            news.notify_all();
        }
    }

    /// Wakes the waiter of the acquisition `token`, if it waits here, to
    /// ask at once; false if it does not.
    fn call(&mut self, token: &[u8]) -> bool {
        match self.queue.iter_mut().find(|w| w.token == token) {
            Some(waiter) => {
                waiter.call();
                true
            }
            None => false,
        }
    }

    /// Makes the waiter of the acquisition `token`, if it waits here, ask
    /// at `at`; false if it does not wait here.
    fn due(&mut self, token: &[u8], at: Instant) -> bool {
        match self.queue.iter_mut().find(|w| w.token == token) {
            Some(waiter) => {
                waiter.due = Some(at);
                waiter.cv.notify_one();
                true
            }
            None => false,
        }
    }

    /// A server confirmed a subscription to the name's release channel,
    /// or (`own`) to a fair manager's own channel for it. Messages may
    /// have been missed before it: watchers look again, and the first
    /// waiter asks. On its own channel, a hand-off naming any waiter with
    /// a place in the members' queues may have been missed (announced by
    /// some members before this one listened, it never reaches a
    /// majority here, and its waiter would sleep through the
    /// reservation): each of them asks at once.
    fn confirmed(&mut self, news: &Condvar, own: bool) {
        self.news(news);
        if !self.subscribed {
            self.subscribed = true;
            self.wake_first();
        }
        if own {
            self.queue
                .iter_mut()
                .filter(|w| w.placed)
                .for_each(Waiter::call);
        }
    }

    /// Wakes the first waiter, if any, to ask again.
    fn wake_first(&mut self) {
        if let Some(first) = self.queue.front() {
            self.wake = true;
            first.cv.notify_one();
        }
    }

    /// What was heard of the release by `token` so far.
    fn release(&mut self, token: &[u8]) -> &mut Release {
        let at = match self.seen.iter().position(|r| r.token == token) {
            Some(at) => at,
            None => {
                if self.seen.len() == SEEN {
                    self.seen.pop_front();
                }
                self.seen.push_back(Release {
                    token: token.to_vec(),
                    messages: 0,
                    local: false,
                    spent: false,
                });
                self.seen.len() - 1
            }
        };
        &mut self.seen[at]
    }
}

impl Registry {
    /// Drops the resources nobody has waited for since `LINGER`.
    fn expire(&mut self, now: Instant) {
        let before = self.resources.len();
        self.resources.retain(|_, e| {
            e.idle_since
                .is_none_or(|since| now.saturating_duration_since(since) < LINGER)
        });
        if self.resources.len() != before {
            self.version += 1;
        }
    }
}

impl Waiters {
    /// The waiters of a manager over `members`; with an `address`, it
    /// also listens for hand-offs to its fair waiters.
    pub(crate) fn new(members: Arc<[Member]>, address: Option<Vec<u8>>) -> Waiters {
        let listening = vec![false; members.len()];
        Waiters {
            shared: Arc::new(Shared {
                address,
                releases: std::array::from_fn(|_| AtomicU64::new(0)),
                news: Condvar::new(),
                members,
                reg: Mutex::new(Registry {
                    listening,
                    ..Registry::default()
                }),
            }),
        }
    }

    /// Starts an acquisition of `resource` with `token` that may wait:
    /// from now until the returned [`Own`] is dropped, releases
    /// announced under `token` (its failed attempts' clean-ups) wake
    /// nobody of this manager. Also says whether threads of this manager
    /// already wait for `resource`.
    pub(crate) fn start<'a>(&'a self, resource: &[u8], token: &'a [u8]) -> (Own<'a>, bool) {
        let mut reg = self.shared.reg.lock();
        reg.own.add(token);
        let busy = reg
            .resources
            .get(resource)
            .is_some_and(|e| !e.queue.is_empty());
        let own = Own {
            waiters: self,
            token,
        };
        (own, busy)
    }

    /// The address hand-offs to this manager's fair waiters go to.
    pub(crate) fn address(&self) -> &[u8] {
        self.shared.address.as_deref().unwrap_or_default()
    }

    /// Whether a server confirmed this manager's subscription to the
    /// release channel of `resource` (it hears its releases).
    pub(crate) fn hears(&self, resource: &[u8]) -> bool {
        self.shared
            .reg
            .lock()
            .resources
            .get(resource)
            .is_some_and(|e| e.subscribed)
    }

    /// Whether threads of this manager waited for `resource` lately (it
    /// has waiters, or had some within the linger time).
    pub(crate) fn lately(&self, resource: &[u8]) -> bool {
        self.shared.reg.lock().resources.contains_key(resource)
    }

    /// Notes how many releases of `resource` were heard so far; read
    /// before each attempt that may be followed by [`join`](Self::join).
    pub(crate) fn before_attempt(&self, resource: &[u8]) -> ReleaseCount {
        ReleaseCount(self.shared.counter(resource).load(Ordering::SeqCst))
    }

    /// Queues the calling thread for `resource`, behind those already
    /// waiting, and makes sure the listeners run. If a release may have
    /// been heard since `seen` (read before the thread's last attempt) and
    /// nobody waits ahead, the thread's first wait ends at once.
    pub(crate) fn join(
        &self,
        resource: &[u8],
        token: &[u8],
        seen: Option<ReleaseCount>,
    ) -> Place<'_> {
        let mut reg = self.shared.reg.lock();
        let missed = seen.is_some_and(|ReleaseCount(n)| {
            self.shared.counter(resource).load(Ordering::SeqCst) != n
        });
        let id = reg.next_id;
        reg.next_id += 1;
        let cv = Arc::new(Condvar::new());
        if !reg.resources.contains_key(resource) {
            reg.resources.insert(resource.to_vec(), Entry::default());
            reg.version += 1;
        }
        if let Some(entry) = reg.resources.get_mut(resource) {
            entry.queue.push_back(Waiter {
                id,
                cv: cv.clone(),
                token: token.to_vec(),
                called: false,
                due: None,
                placed: false,
            });
            entry.idle_since = None;
            if missed && entry.queue.len() == 1 {
                entry.wake = true;
            }
        }
        self.listen(&mut reg);
        Place {
            waiters: self,
            resource: resource.to_vec(),
            id,
            cv,
        }
    }

    /// Starts the listener of every member not listening yet.
    fn listen(&self, reg: &mut Registry) {
        for i in 0..reg.listening.len() {
            if !reg.listening[i] {
                // Without a thread to be had, waiting is polling.
                reg.listening[i] = listen::start(self.shared.clone(), i);
            }
        }
    }

    /// Watches `names`: until the returned [`Watch`] is dropped, the
    /// listeners subscribe to their channels, and every message on them
    /// (a release, an election's news) is counted for
    /// [`Watch::wait`]. Unlike a waiter, a watcher takes no place in a
    /// queue and wakes nobody.
    pub(crate) fn watch(&self, names: &[&[u8]]) -> Watch<'_> {
        let mut reg = self.shared.reg.lock();
        for name in names {
            if !reg.resources.contains_key(*name) {
                reg.resources.insert(name.to_vec(), Entry::default());
                reg.version += 1;
            }
            if let Some(entry) = reg.resources.get_mut(*name) {
                entry.watchers += 1;
                entry.idle_since = None;
            }
        }
        self.listen(&mut reg);
        Watch {
            waiters: self,
            names: names.iter().map(|n| n.to_vec()).collect(),
        }
    }

    /// A release of `resource` by this manager (its unlock round has
    /// ended): wakes the first waiter, unless that release was heard
    /// already.
    pub(crate) fn released(&self, resource: &[u8], token: &[u8]) {
        self.shared.heard(resource, token, true);
    }
}

mod place;

pub(crate) use place::{Grant, Own, Place, Watch};

/// What the listeners listen on, and what they hear does.
impl Listening for Shared {
    fn member(&self, i: usize) -> &Member {
        &self.members[i]
    }

    /// Every waited or watched name's release channel, and its
    /// manager's own channel for it: a fair manager's hand-offs (the
    /// channel, `:`, its address), or (`:-`) a manager that cannot queue
    /// saying that it waits, so that a fair release yields sooner for it
    /// (see `fair/release.lua`).
    fn wanted(&self, member: usize, known: Option<u64>) -> Wanted {
        let mut reg = self.reg.lock();
        reg.expire(Instant::now());
        if reg.resources.is_empty() {
            reg.listening[member] = false;
            return Wanted::Stop;
        }
        if known == Some(reg.version) {
            return Wanted::Same;
        }
        let own: &[u8] = self.address.as_deref().unwrap_or(b"-");
        let channels = reg
            .resources
            .keys()
            .flat_map(|name| {
                let release = channel(name);
                let own = [&release[..], b":", own].concat();
                [(own, name.clone()), (release, name.clone())]
            })
            .collect();
        Wanted::Now(reg.version, channels)
    }

    /// A message on a name's channel: a release, or a hand-off (see
    /// [`Shared::heard`]); none for a name no longer waited for.
    fn message(&self, name: &[u8], data: &[u8]) {
        if self.reg.lock().resources.contains_key(name) {
            self.heard(name, data, false);
        }
    }

    fn confirmed(&self, name: &[u8], channel: &[u8]) {
        let own = self
            .address
            .as_deref()
            .is_some_and(|a| own_channel(channel, a));
        if let Some(entry) = self.reg.lock().resources.get_mut(name) {
            entry.confirmed(&self.news, own);
        }
    }
}

/// Whether `chan` is a fair manager's own channel for a name (the name's
/// release channel, `:`, and the manager's `address`; see
/// [`Listening::wanted`]).
fn own_channel(chan: &[u8], address: &[u8]) -> bool {
    chan.len() > address.len()
        && chan.ends_with(address)
        && chan[chan.len() - address.len() - 1] == b':'
}

#[cfg(test)]
mod tests;
