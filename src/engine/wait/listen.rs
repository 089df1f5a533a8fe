//! The listeners: one thread per member while its manager has waiters,
//! subscribed to the release channels of the resources waited on.

use std::collections::HashMap;
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use redis::Value;

use crate::members::member::Verbs;

use super::*;

/// The pause before linking again to a server that answered a
/// subscription with `MOVED`: the slot map's refresh, not a refusal.
const REDIRECTED: std::time::Duration = std::time::Duration::from_millis(50);

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

/// One member's listener thread: connects to the server(s) that publish
/// the releases of the resources waited on (the node; for a cluster, the
/// master of each resource's slot), keeps the subscriptions in step with
/// those resources, and wakes waiters on messages. Ends (and closes its
/// connections) once no resource is left.
pub(super) fn listen(shared: &Shared, i: usize) {
    let member = &shared.members[i];
    let verbs = member.verbs();
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
            let generation = member.map_generation();
            if synced != Some((reg.version, generation)) {
                synced = Some((reg.version, generation));
                wanted = want(member, reg.resources.keys(), shared.address.as_deref());
                for link in &mut links {
                    link.dirty = true;
                }
            }
        }
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
                    if on_push(shared, link, value) {
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
    wanted: &Wanted,
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

/// The channels to listen on, by server: every resource's channel (and a
/// fair manager's own channel for it) on its node, or on the master of
/// its slot (resources whose master is not
/// known yet are left out, and the slot map is fetched).
fn want<'a>(
    member: &Member,
    resources: impl Iterator<Item = &'a Vec<u8>>,
    address: Option<&[u8]>,
) -> Wanted {
    let mut wanted: Wanted = HashMap::new();
    let mut unknown = false;
    for resource in resources {
        let Some(node) = member.target(keys::slot(resource)) else {
            unknown = true;
            continue;
        };
        let channels = &mut wanted
            .entry(node.name().to_owned())
            .or_insert_with(|| (node, HashMap::new()))
            .1;
        match address {
            // A fair manager's own channel for the name, in its slot.
            Some(address) => {
                channels.insert(
                    [&channel(resource)[..], b":", address].concat(),
                    resource.clone(),
                );
            }
            // A manager that cannot queue says that it waits, on the
            // channel of the name yields are announced to (`:-`): a fair
            // release yields sooner for it (see `fair/release.lua`).
            None => {
                channels.insert([&channel(resource)[..], b":-"].concat(), resource.clone());
            }
        }
        channels.insert(channel(resource), resource.clone());
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
            let own = shared
                .address
                .as_deref()
                .is_some_and(|a| own_channel(chan, a));
            entry.confirmed(&shared.news, own);
        }
        _ => {}
    }
    false
}

/// Whether `chan` is a fair manager's own channel for a name (the name's
/// release channel, `:`, and the manager's `address`; see `want`).
pub(super) fn own_channel(chan: &[u8], address: &[u8]) -> bool {
    chan.len() > address.len()
        && chan.ends_with(address)
        && chan[chan.len() - address.len() - 1] == b':'
}

fn lost(e: &NodeError, what: &str) {
    crate::base::logging::log!(debug, "redlock_sync::wait", "{what}: {e}");
}
