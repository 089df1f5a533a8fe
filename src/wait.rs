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
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::Value;

use crate::cancel::{Cancel, LOOK};
use crate::conn::pack;
use crate::keys::{self, release_channel as channel};
use crate::member::Member;
use crate::node::{Listener, Node};
use crate::node_error::{NodeError, NodeErrorKind};
use crate::quorum;

/// How long a resource stays subscribed after its last waiter left, and
/// the listeners stay connected after the last resource was dropped: a
/// lock that is busy again soon finds them ready.
const LINGER: Duration = Duration::from_secs(1);
/// A listener reads with this timeout, so it takes up new resources (and
/// drops old ones) at least this often.
const POLL: Duration = Duration::from_millis(20);
/// A listener whose connection was silent this long sends a `PING`, and
/// drops the connection if that is not answered within as long again
/// (a node restarted behind a lost route never says so otherwise).
const PING_AFTER: Duration = Duration::from_secs(1);
/// Pause before connecting again after a failed connection.
const RECONNECT: Duration = Duration::from_secs(1);
/// Pause before asking again after the node refused `SUBSCRIBE` (an ACL
/// user without channel permission, a proxy without pub/sub).
const REFUSED: Duration = Duration::from_secs(30);
/// Release tokens remembered per resource, to count a release heard from
/// several nodes once.
const SEEN: usize = 8;
/// Channels per `SUBSCRIBE` or `UNSUBSCRIBE` command.
const CHUNK: usize = 256;
/// Release counters, each shared by the resources whose name hashes to
/// it.
const COUNTERS: usize = 64;

/// The waiters of one manager (shared by its clones and guards).
pub(crate) struct Waiters {
    shared: Arc<Shared>,
}

struct Shared {
    members: Arc<[Member]>,
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
    /// one of the waiters acquired the lock since.
    ///
    /// A node's message about an unlock by one of this manager's own
    /// waiting acquisitions (the clean-up of its failed attempt) is
    /// ignored: it must not end that thread's own pause, and this
    /// manager's other waiters queue behind that thread anyway.
    fn heard(&self, resource: &[u8], token: &[u8], local: bool) {
        let mut reg = self.reg.lock();
        // Watchers hear everything, their own manager's news included.
        if let Some(entry) = reg.resources.get_mut(resource) {
            entry.news(&self.news);
        }
        if !local && reg.own.contains_key(unlock_token(token)) {
            return;
        }
        self.counter(resource).fetch_add(1, Ordering::SeqCst);
        let quorum = quorum::quorum(self.members.len());
        if let Some(entry) = reg.resources.get_mut(resource) {
            let release = entry.release(token);
            let wake = !release.spent
                && if local {
                    !std::mem::replace(&mut release.local, true)
                } else {
                    release.messages += 1;
                    release.messages == 1 || release.messages == quorum
                };
            if wake {
                entry.wake_first();
            }
        }
    }

    fn counter(&self, resource: &[u8]) -> &AtomicU64 {
        let mut h = DefaultHasher::new();
        resource.hash(&mut h);
        &self.releases[(h.finish() % COUNTERS as u64) as usize]
    }
}

/// A resource's release count before an attempt (see
/// [`Waiters::before_attempt`]).
#[derive(Clone, Copy)]
pub(crate) struct Seen(u64);

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
    own: HashMap<Vec<u8>, usize>,
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
    pub(crate) fn new(members: Arc<[Member]>) -> Waiters {
        let listening = vec![false; members.len()];
        Waiters {
            shared: Arc::new(Shared {
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
    pub(crate) fn start(&self, resource: &[u8], token: &[u8]) -> (Own<'_>, bool) {
        let mut reg = self.shared.reg.lock();
        *reg.own.entry(token.to_vec()).or_insert(0) += 1;
        let busy = reg
            .resources
            .get(resource)
            .is_some_and(|e| !e.queue.is_empty());
        let own = Own {
            waiters: self,
            token: token.to_vec(),
        };
        (own, busy)
    }

    /// Notes how many releases of `resource` were heard so far; read
    /// before each attempt that may be followed by [`join`](Self::join).
    pub(crate) fn before_attempt(&self, resource: &[u8]) -> Seen {
        Seen(self.shared.counter(resource).load(Ordering::SeqCst))
    }

    /// Queues the calling thread for `resource`, behind those already
    /// waiting, and makes sure the listeners run. If a release may have
    /// been heard since `seen` (read before the thread's last attempt) and
    /// nobody waits ahead, the thread's first wait ends at once.
    pub(crate) fn join(&self, resource: &[u8], seen: Option<Seen>) -> Place<'_> {
        let mut reg = self.shared.reg.lock();
        let missed =
            seen.is_some_and(|Seen(n)| self.shared.counter(resource).load(Ordering::SeqCst) != n);
        let id = reg.next_id;
        reg.next_id += 1;
        let cv = Arc::new(Condvar::new());
        if !reg.resources.contains_key(resource) {
            reg.resources.insert(resource.to_vec(), Entry::default());
            reg.version += 1;
        }
        if let Some(entry) = reg.resources.get_mut(resource) {
            entry.queue.push_back(Waiter { id, cv: cv.clone() });
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
                let shared = self.shared.clone();
                // Without a thread to be had, waiting is polling.
                reg.listening[i] = thread::Builder::new()
                    .name("redlock-listen".into())
                    .spawn(move || listen(&shared, i))
                    .is_ok();
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

/// An acquisition under way (see [`Waiters::start`]).
pub(crate) struct Own<'a> {
    waiters: &'a Waiters,
    token: Vec<u8>,
}

impl Drop for Own<'_> {
    fn drop(&mut self) {
        let mut reg = self.waiters.shared.reg.lock();
        if let Some(n) = reg.own.get_mut(&self.token) {
            *n -= 1;
            if *n == 0 {
                reg.own.remove(&self.token);
            }
        }
    }
}

/// A watch of some names (see [`Waiters::watch`]).
pub(crate) struct Watch<'a> {
    waiters: &'a Waiters,
    names: Vec<Vec<u8>>,
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

/// A thread's place in a resource's queue; leaving it (by drop) lets the
/// next one move up.
pub(crate) struct Place<'a> {
    waiters: &'a Waiters,
    resource: Vec<u8>,
    id: u64,
    cv: Arc<Condvar>,
}

impl Place<'_> {
    /// Waits for a release or `pause`, whichever comes first. True when it
    /// is this thread's turn to ask: it is the longest waiter and a
    /// release was heard or the pause is over. False when the pause is
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
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return first;
            }
            let look = cancel.and_then(|_| Instant::now().checked_add(LOOK));
            match deadline.into_iter().chain(look).min() {
                Some(until) => drop(self.cv.wait_until(&mut reg, until)),
                None => self.cv.wait(&mut reg),
            }
        }
    }

    /// Leaves the queue holding the lock: releases heard meanwhile were
    /// before this acquisition, so nobody is woken for them.
    /// A `shared` acquisition (a reader) wakes the next waiter instead,
    /// who may get in beside it.
    pub(crate) fn acquired(self, shared: bool) {
        self.leave(true);
        if shared {
            let mut reg = self.waiters.shared.reg.lock();
            if let Some(entry) = reg.resources.get_mut(&self.resource) {
                entry.wake_first();
            }
        }
    }

    fn leave(&self, acquired: bool) {
        let mut reg = self.waiters.shared.reg.lock();
        let Some(entry) = reg.resources.get_mut(&self.resource) else {
            return;
        };
        let was_first = entry.queue.front().is_some_and(|w| w.id == self.id);
        entry.queue.retain(|w| w.id != self.id);
        if acquired {
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
        self.leave(false);
    }
}

/// A listener's connection to one server and what it has asked for.
struct Link {
    node: Arc<Node>,
    conn: Listener,
    /// Channels this connection subscribed to, with their resource.
    subscribed: HashMap<Vec<u8>, Vec<u8>>,
    /// The subscriptions may differ from what is wanted.
    dirty: bool,
    heard_at: Instant,
    ping_sent: Option<Instant>,
}

/// The channels to listen on, by server name: the server, and each
/// channel with its resource.
type Wanted = HashMap<String, (Arc<Node>, HashMap<Vec<u8>, Vec<u8>>)>;

/// The commands a listener subscribes with: classic pub/sub on a node,
/// sharded pub/sub on a Redis Cluster member (the channel lives on the
/// master of its slot).
struct Verbs {
    subscribe: &'static [u8],
    unsubscribe: &'static [u8],
}

/// One member's listener thread: connects to the server(s) that publish
/// the releases of the resources waited on (the node; for a cluster, the
/// master of each resource's slot), keeps the subscriptions in step with
/// those resources, and wakes waiters on messages. Ends (and closes its
/// connections) once no resource is left.
fn listen(shared: &Shared, i: usize) {
    let member = &shared.members[i];
    let verbs = match member {
        Member::Node(_) => Verbs {
            subscribe: b"SUBSCRIBE",
            unsubscribe: b"UNSUBSCRIBE",
        },
        Member::Cluster(_) => Verbs {
            subscribe: b"SSUBSCRIBE",
            unsubscribe: b"SUNSUBSCRIBE",
        },
    };
    let mut links: Vec<Link> = Vec::new();
    // Per server (by name): when to try connecting again.
    let mut retry_at: HashMap<String, Instant> = HashMap::new();
    // The channels wanted, by server, and what they were computed from.
    let mut wanted: Wanted = HashMap::new();
    let mut synced = None;
    loop {
        let now = Instant::now();
        {
            let mut reg = shared.reg.lock();
            reg.expire(now);
            if reg.resources.is_empty() {
                reg.listening[i] = false;
                return;
            }
            let generation = match member {
                Member::Cluster(cluster) => cluster.generation(),
                Member::Node(_) => 0,
            };
            if synced != Some((reg.version, generation)) {
                synced = Some((reg.version, generation));
                wanted = want(member, reg.resources.keys());
                for link in &mut links {
                    link.dirty = true;
                }
            }
        }
        // Connect to the servers wanted and not linked yet.
        for (name, (node, _)) in &wanted {
            if links.iter().any(|l| l.node.name() == name)
                || retry_at.get(name).is_some_and(|at| now < *at)
            {
                continue;
            }
            match node.listener(now + node.timeout()) {
                Ok(conn) => links.push(Link {
                    node: node.clone(),
                    conn,
                    subscribed: HashMap::new(),
                    dirty: true,
                    heard_at: now,
                    ping_sent: None,
                }),
                Err(e) => {
                    lost(&e, "cannot listen for releases");
                    if let Member::Cluster(cluster) = member {
                        cluster.refresh_soon();
                    }
                    retry_at.insert(name.clone(), now + RECONNECT);
                }
            }
        }
        if links.is_empty() {
            thread::sleep(POLL);
            continue;
        }
        // Each connection gets its share of the poll.
        let wait = POLL / links.len() as u32;
        let mut failed = Vec::new();
        for (at, link) in links.iter_mut().enumerate() {
            let none = HashMap::new();
            let channels = wanted
                .get(link.node.name())
                .map_or(&none, |(_, channels)| channels);
            let result = link
                .update(channels, &verbs)
                .and_then(|()| link.check(now))
                .and_then(|()| link.conn.next(wait));
            match result {
                Ok(Some(value)) => {
                    link.heard_at = Instant::now();
                    link.ping_sent = None;
                    if on_push(shared, link, value) {
                        // A slot moved away from this server.
                        if let Member::Cluster(cluster) = member {
                            cluster.refresh_soon();
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    let refused =
                        matches!(e.kind(), NodeErrorKind::Permission | NodeErrorKind::Server);
                    lost(&e, "stopped listening for releases");
                    let pause = if refused { REFUSED } else { RECONNECT };
                    retry_at.insert(link.node.name().to_owned(), now + pause);
                    failed.push(at);
                }
            }
        }
        for at in failed.into_iter().rev() {
            links.swap_remove(at);
        }
        // Connections no resource needs any more are closed.
        links.retain(|l| wanted.contains_key(l.node.name()));
    }
}

/// The channels to listen on, by server: every resource's channel on its
/// node, or on the master of its slot (resources whose master is not
/// known yet are left out, and the slot map is fetched).
fn want<'a>(member: &Member, resources: impl Iterator<Item = &'a Vec<u8>>) -> Wanted {
    let mut wanted: Wanted = HashMap::new();
    let mut unknown = false;
    for resource in resources {
        let node = match member {
            Member::Node(node) => Some(node.clone()),
            Member::Cluster(cluster) => cluster.route(keys::slot(resource)),
        };
        let Some(node) = node else {
            unknown = true;
            continue;
        };
        wanted
            .entry(node.name().to_owned())
            .or_insert_with(|| (node, HashMap::new()))
            .1
            .insert(channel(resource), resource.clone());
    }
    if let (true, Member::Cluster(cluster)) = (unknown, member) {
        cluster.refresh_soon();
    }
    wanted
}

impl Link {
    /// Subscribes to the wanted channels not subscribed yet, and
    /// unsubscribes from those no longer wanted.
    fn update(
        &mut self,
        wanted: &HashMap<Vec<u8>, Vec<u8>>,
        verbs: &Verbs,
    ) -> Result<(), NodeError> {
        if !self.dirty {
            return Ok(());
        }
        self.dirty = false;
        let add: Vec<(Vec<u8>, Vec<u8>)> = wanted
            .iter()
            .filter(|(c, _)| !self.subscribed.contains_key(*c))
            .map(|(c, r)| (c.clone(), r.clone()))
            .collect();
        let remove: Vec<Vec<u8>> = self
            .subscribed
            .keys()
            .filter(|c| !wanted.contains_key(*c))
            .cloned()
            .collect();
        // Sharded subscriptions take channels of one slot per command.
        let chunk = if verbs.subscribe == b"SSUBSCRIBE" {
            1
        } else {
            CHUNK
        };
        for (verb, channels) in [
            (
                verbs.subscribe,
                add.iter().map(|(c, _)| c).collect::<Vec<_>>(),
            ),
            (verbs.unsubscribe, remove.iter().collect()),
        ] {
            for chunk in channels.chunks(chunk) {
                let mut args: Vec<&[u8]> = vec![verb];
                args.extend(chunk.iter().map(|c| c.as_slice()));
                self.conn.send(&pack(&args))?;
            }
        }
        self.subscribed.extend(add);
        for c in &remove {
            self.subscribed.remove(c);
        }
        Ok(())
    }

    /// Pings a connection silent for `PING_AFTER`; gives up on one whose
    /// ping went unanswered as long.
    fn check(&mut self, now: Instant) -> Result<(), NodeError> {
        match self.ping_sent {
            Some(sent) if now.saturating_duration_since(sent) > PING_AFTER => {
                Err(self.conn.timed_out())
            }
            Some(_) => Ok(()),
            None if now.saturating_duration_since(self.heard_at) > PING_AFTER => {
                self.ping_sent = Some(now);
                self.conn.send(&pack(&[b"PING"]))
            }
            None => Ok(()),
        }
    }
}

/// Acts on a push from a server: a message on a release channel wakes the
/// resource's first waiter (once per release); the first confirmation of
/// a subscription does too, since a release may have come between the
/// waiter's last attempt and the subscription. A sharded channel the
/// server dropped by itself (its slot moved away) is forgotten, to be
/// subscribed again where it lives now: then true.
fn on_push(shared: &Shared, link: &mut Link, value: Value) -> bool {
    let Value::Array(items) = value else {
        return false;
    };
    let [Value::BulkString(kind), Value::BulkString(chan), data] = items.as_slice() else {
        return false;
    };
    match kind.as_slice() {
        b"sunsubscribe" => {
            // Our own unsubscription was forgotten when it was sent; one
            // still subscribed was dropped by the server.
            let moved = link.subscribed.remove(chan).is_some();
            link.dirty |= moved;
            return moved;
        }
        b"message" | b"smessage" | b"subscribe" | b"ssubscribe" => {}
        _ => return false,
    }
    let Some(resource) = link.subscribed.get(chan) else {
        return false;
    };
    let mut reg = shared.reg.lock();
    let Some(entry) = reg.resources.get_mut(resource) else {
        return false;
    };
    match (kind.as_slice(), data) {
        (b"message" | b"smessage", Value::BulkString(token)) => {
            drop(reg);
            shared.heard(resource, token, false);
        }
        (b"subscribe" | b"ssubscribe", _) => {
            // Messages may have been missed before this (re)subscription:
            // watchers look again.
            entry.news(&shared.news);
            if !entry.subscribed {
                entry.subscribed = true;
                entry.wake_first();
            }
        }
        _ => {}
    }
    false
}

fn lost(e: &NodeError, what: &str) {
    crate::log!(debug, "redlock_sync::wait", "{what}: {e}");
}

#[cfg(test)]
mod tests;
