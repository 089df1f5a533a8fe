//! A member's release listener: a thread with connections of its own
//! (a node's; a Redis Cluster member's, one per master of the names
//! listened for), subscribed to the channels its manager wants, pinging
//! a silent connection, connecting again after a failure, following a
//! slot that moved. What the channels mean, and what a message or a
//! confirmed subscription does, are the manager's (the engine's waiting
//! room, `engine/wait.rs`, through [`Listening`]); the classic or sharded
//! commands (`SUBSCRIBE` or `SSUBSCRIBE`) are chosen here, by the member.
//!
//! A listener only ever adds wake-ups: a message lost, late, or from a
//! server that restarted costs a waiter one pause, never a wrong grant
//! (every attempt is decided by the members' answers, not by news).

use std::collections::HashMap;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redis::Value;

use crate::base::keys;
use crate::base::node_error::{NodeError, NodeErrorKind};
use crate::members::conn::pack;
use crate::members::member::{Member, Verbs};
use crate::members::node::{Listener, Node};

/// A listener reads with this timeout, so it takes up new channels (and
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
/// Channels per `SUBSCRIBE` or `UNSUBSCRIBE` command.
const CHUNK: usize = 256;
/// The pause before linking again to a server that answered a
/// subscription with `MOVED`: the slot map's refresh, not a refusal.
const REDIRECTED: Duration = Duration::from_millis(50);

/// What a member's listener asks of its manager, and tells it.
pub(crate) trait Listening: Sync {
    /// The channels member `member` is to listen on: [`Wanted::Stop`]
    /// once there are none (the listener ends, and is started again when
    /// some are wanted: deciding that and stopping are one step, under
    /// the manager's lock), [`Wanted::Same`] while they are those of
    /// version `known`.
    fn wanted(&self, member: usize, known: Option<u64>) -> Wanted;
    /// A message on the channel of `name`.
    fn message(&self, name: &[u8], data: &[u8]);
    /// A server confirmed the subscription to `channel`, of `name`:
    /// messages may have been missed before it.
    fn confirmed(&self, name: &[u8], channel: &[u8]);
    /// Member `i`, whose listener this is.
    fn member(&self, i: usize) -> &Member;
}

/// Starts member `i`'s listener (see [`listen`]) on a thread of its own;
/// false when no thread could be had (its manager's waiters then poll).
pub(crate) fn start(listening: Arc<dyn Listening + Send>, i: usize) -> bool {
    thread::Builder::new()
        .name("redlock-listen".into())
        .spawn(move || listen(listening.member(i), i, &*listening))
        .is_ok()
}

/// The channels a listener is to listen on (see [`Listening::wanted`]).
pub(crate) enum Wanted {
    /// None: the listener ends.
    Stop,
    /// Those of the version known.
    Same,
    /// These, of this version: each channel with the name it concerns,
    /// whose slot routes it on a Redis Cluster member.
    Now(u64, Vec<(Vec<u8>, Vec<u8>)>),
}

/// A listener's connection to one server and what it has asked for.
struct Link {
    node: Arc<Node>,
    conn: Listener,
    /// Channels this connection subscribed to, with their name.
    subscribed: HashMap<Vec<u8>, Vec<u8>>,
    /// The subscriptions may differ from what is wanted.
    dirty: bool,
    heard_at: Instant,
    ping_sent: Option<Instant>,
}

/// The channels to listen on, by server name: the server, and each
/// channel with its name.
type ByServer = HashMap<String, (Arc<Node>, HashMap<Vec<u8>, Vec<u8>>)>;

/// Member `i`'s listener thread (`member`): connects to the server(s)
/// that publish on the channels `listening` wants (the node; for a
/// cluster, the master of each name's slot), keeps the subscriptions in
/// step with them, and tells `listening` what it hears. Ends (and closes
/// its connections) once no channel is wanted.
fn listen(member: &Member, i: usize, listening: &dyn Listening) {
    let verbs = member.verbs();
    let mut links: Vec<Link> = Vec::new();
    // Per server (by name): when to try connecting again.
    let mut retry_at: HashMap<String, Instant> = HashMap::new();
    // The channels wanted, their version, and the slot map they were
    // routed by.
    let mut channels = Vec::new();
    let mut version = None;
    let mut routed = None;
    let mut wanted: ByServer = HashMap::new();
    loop {
        let now = Instant::now();
        match listening.wanted(i, version) {
            Wanted::Stop => return,
            Wanted::Same => {}
            Wanted::Now(v, now_wanted) => {
                version = Some(v);
                channels = now_wanted;
                routed = None;
            }
        }
        let generation = member.map_generation();
        if routed != Some(generation) {
            routed = Some(generation);
            wanted = route(member, &channels);
            for link in &mut links {
                link.dirty = true;
            }
        }
        // A Sentinel group's failover: its links may reach the old
        // master, which hears no release published on the new one until
        // it is demoted; made again at once, on the new master.
        links.retain(|l| !l.node.switched_since(l.conn.switches()));
        connect(member, &wanted, &mut links, &mut retry_at, now);
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
                    if on_push(listening, link, value) {
                        // A slot moved away from this server.
                        member.refresh_soon();
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    lost(&e, "stopped listening for releases");
                    retry_at.insert(link.node.name().to_owned(), now + pause_after(&e, member));
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

/// Connects to the servers `wanted` and not linked yet, unless a recent
/// failure put that off (`retry_at`).
fn connect(
    member: &Member,
    wanted: &ByServer,
    links: &mut Vec<Link>,
    retry_at: &mut HashMap<String, Instant>,
    now: Instant,
) {
    for (name, (node, _)) in wanted {
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
                member.refresh_soon();
                retry_at.insert(name.clone(), now + RECONNECT);
            }
        }
    }
}

/// How long a listener waits before it connects again after `e`. A
/// `MOVED` (or `ASK`) is no refusal: a slot moved away and the map is
/// behind; it is refreshed, and the link made again at once for the
/// master's other slots.
fn pause_after(e: &NodeError, member: &Member) -> Duration {
    let redirected = matches!(e.code(), Some("MOVED" | "ASK"));
    let refused =
        !redirected && matches!(e.kind(), NodeErrorKind::Permission | NodeErrorKind::Server);
    if redirected {
        member.refresh_soon();
        REDIRECTED
    } else if refused {
        REFUSED
    } else {
        RECONNECT
    }
}

/// The channels to listen on, by server: each on its node, or on the
/// master of its name's slot (those whose master is not known yet are
/// left out, and the slot map is fetched).
fn route(member: &Member, channels: &[(Vec<u8>, Vec<u8>)]) -> ByServer {
    let mut wanted: ByServer = HashMap::new();
    let mut unknown = false;
    for (channel, name) in channels {
        let Some(node) = member.target(keys::slot(name)) else {
            unknown = true;
            continue;
        };
        wanted
            .entry(node.name().to_owned())
            .or_insert_with(|| (node, HashMap::new()))
            .1
            .insert(channel.clone(), name.clone());
    }
    if unknown {
        member.refresh_soon();
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
        let chunk = if verbs.sharded { 1 } else { CHUNK };
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

/// Acts on a push from a server: a message on a channel, or the
/// confirmation of a subscription, is told to `listening`. A sharded
/// channel the server dropped by itself (its slot moved away) is
/// forgotten, to be subscribed again where it lives now: then true.
fn on_push(listening: &dyn Listening, link: &mut Link, value: Value) -> bool {
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
    let Some(name) = link.subscribed.get(chan) else {
        return false;
    };
    match (kind.as_slice(), data) {
        (b"message" | b"smessage", Value::BulkString(data)) => listening.message(name, data),
        (b"subscribe" | b"ssubscribe", _) => listening.confirmed(name, chan),
        _ => {}
    }
    false
}

fn lost(e: &NodeError, what: &str) {
    crate::base::logging::log!(debug, "redlock_sync::wait", "{what}: {e}");
}
