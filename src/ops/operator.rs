//! What an operator does to a lock from outside its holders:
//! [`LockManager::inspect`] (who holds it, for how long, on which
//! member) and [`LockManager::force_unlock`] (take it away).

use std::fmt;
use std::time::Duration;

use redis::Value;

use crate::base::error::{Error, Result};
use crate::base::holder::{HolderName, describe};
use crate::base::keys::{
    self, READERS_MARK, RESERVED_PREFIX, fence_key, readers_key, record_key, release_channel,
};
use crate::base::node_error::NodeError;
use crate::engine::pipeline::{Answer, Round, announced_on, counter_start};
use crate::engine::quorum;
use crate::members::request::Said;
use crate::members::request::unexpected;
use crate::members::script::scripts;

scripts! {
    /// A member's view of a lock, for `LockManager::inspect`.
    INSPECT, "inspect", "operator/inspect.lua",
        keys ["key", "fence"], args [];
    /// An operator's removal of a lock (`LockManager::force_unlock`).
    FORCE, "force-unlock", "operator/force.lua" after "lock/counter.lua",
        keys ["key", "fence", "readers", "writer", "record"], args ["start", "keep", "publish?", "message?", "channel?"];
}
use crate::shapes::manager::LockManager;

/// An operator's rounds: every member answers, servers kept out after a
/// restart included (what they hold is shown, never counted as a vote).
const OPERATOR: Round = Round {
    count: false,
    replicated: false,
    decides: false,
};

/// What one member holds of a lock (see [`LockManager::inspect`]), or
/// what [`LockManager::force_unlock`] removed from it.
#[derive(Debug)]
#[non_exhaustive]
pub struct MemberView {
    /// The member, as errors name it (`host:port`, or `cluster
    /// host:port`).
    pub member: String,
    /// The lock key's value: a holder's token (32 hex digits, then the
    /// holder's name unless its manager turned [naming](crate::Builder::name_holders)
    /// off: see [`holder_name`](Self::holder_name)),
    /// `redlock:readers` while readers hold it, or `redlock:next:` and a
    /// waiter's token while a fair release has reserved it for that
    /// waiter (see [`reserved_for`](Self::reserved_for): nobody holds
    /// it); `None` when free. For `force_unlock`, what it removed.
    pub holder: Option<String>,
    /// How long the key has left on this member (`inspect`).
    pub left: Option<Duration>,
    /// The resource's fencing counter on this member (the holder's token
    /// is at most the largest of its members' counters). For
    /// `force_unlock`, the counter after it was advanced.
    pub counter: Option<u64>,
    /// Why the member gave no view.
    pub failure: Option<NodeError>,
}

impl MemberView {
    /// The fair waiter the key is reserved for (its token), when the key
    /// holds a fair hand-off's reservation rather than a holder's token.
    pub fn reserved_for(&self) -> Option<&str> {
        reserved_for(self.holder.as_deref())
    }

    /// Who holds the key here (or who it is reserved for), as the token
    /// names it: host, process and label; `None` when free, held by
    /// readers, or by a token that names nobody.
    pub fn holder_name(&self) -> Option<HolderName> {
        let value = self.holder.as_deref()?;
        HolderName::parse(reserved_for(Some(value)).unwrap_or(value).as_bytes())
    }
}

/// The waiter a lock key's `value` is reserved for, if it is a fair
/// reservation.
fn reserved_for(value: Option<&str>) -> Option<&str> {
    value?.strip_prefix(std::str::from_utf8(RESERVED_PREFIX).unwrap_or_default())
}

/// What [`LockManager::inspect`] found: whether a quorum holds the lock,
/// for whom and for how long, and each member's view.
#[derive(Debug)]
#[non_exhaustive]
pub struct LockInfo {
    /// The resource, as messages show it.
    pub resource: String,
    /// A quorum of members hold the same token (or readers hold it):
    /// someone holds the lock. A reservation is no holder: see
    /// [`reserved_for`](Self::reserved_for).
    pub held: bool,
    /// Readers hold it (a read-write lock's read side).
    pub shared: bool,
    /// The value a quorum holds: the holder's token, or
    /// `redlock:readers`; `None` when no quorum holds one value, or when
    /// it is a reservation.
    pub holder: Option<String>,
    /// A quorum holds a fair release's reservation for this waiter (its
    /// token): nobody holds the lock, and only that waiter may take it
    /// until the reservation lapses ([`left`](Self::left) says when).
    pub reserved_for: Option<String>,
    /// The majority's view of the time left: at least a quorum of
    /// members keep the holder's key (or the reservation) this long
    /// (before the clock drift allowance).
    pub left: Option<Duration>,
    /// The largest fencing counter among the members that hold the
    /// lock: the holder's fencing token is at most this (every member
    /// that granted it has counted up to it, and counters only grow;
    /// refused attempts of others count too, so it is a bound, not the
    /// token). Every later acquisition's token is above the holder's.
    /// `None` with fencing off.
    pub fencing_counter: Option<u64>,
    /// Each member's view, in the manager's order.
    pub members: Vec<MemberView>,
}

impl LockInfo {
    /// Who holds the lock (or who a quorum's reservation is for), as the
    /// token names it: host, process and label; `None` when nobody does,
    /// readers do, or the token names nobody (a manager with
    /// [naming](crate::Builder::name_holders) off, another Redlock client).
    pub fn holder_name(&self) -> Option<HolderName> {
        let value = self.holder.as_deref().or(self.reserved_for.as_deref())?;
        HolderName::parse(value.as_bytes())
    }
}

/// What [`LockManager::force_unlock`] did on each member.
#[derive(Debug)]
#[non_exhaustive]
pub struct Forced {
    /// The resource, as messages show it.
    pub resource: String,
    /// How many members had the lock key (whoever held it) and removed
    /// it.
    pub removed: usize,
    /// Each member: what it removed, its counter after, or why it did
    /// not answer.
    pub members: Vec<MemberView>,
}

impl fmt::Display for MemberView {
    /// `host:port: held by web-3 pid 4121, token 3f2a9c01… for 28.1s,
    /// counter 42` (a token that names nobody is shown whole).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(e) = &self.failure {
            return write!(f, "{e}");
        }
        write!(f, "{}: ", self.member)?;
        match (&self.holder, self.left) {
            (Some(h), _) if h.as_bytes() == READERS_MARK => f.write_str("held by readers")?,
            (Some(h), _) => match reserved_for(Some(h)) {
                Some(waiter) => write!(f, "reserved for waiter {}", describe(waiter.as_bytes()))?,
                None => write!(f, "held by {}", describe(h.as_bytes()))?,
            },
            (None, _) => f.write_str("free")?,
        }
        if let (Some(_), Some(left)) = (&self.holder, self.left) {
            write!(f, " for {:.1}s", left.as_secs_f64())?;
        }
        if let Some(c) = self.counter {
            write!(f, ", counter {c}")?;
        }
        Ok(())
    }
}

impl LockManager {
    /// Who holds `resource` and for how long, as its members see it: for
    /// an operator (`lockrun --inspect`), never for deciding whether to
    /// go ahead (only a guard says that). Reads the lock key, its expiry
    /// and its fencing counter on every member, in one round; writes
    /// nothing.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when fewer than a quorum of members answered
    /// (then nobody can tell whether the lock is held), and
    /// [`Error::InvalidArgument`] for a name a lock could not have.
    pub fn inspect(&self, resource: impl AsRef<[u8]>) -> Result<LockInfo> {
        let resource = resource.as_ref();
        keys::check_resource(resource)?;
        let p = self.engine();
        p.check_members()?;
        let fence = fence_key(resource);
        let keys: [&[u8]; 2] = [resource, &fence];
        let (answers, replies) = p.script(&INSPECT, &keys, &[]).read(OPERATOR);
        let shown = quorum::display(resource);
        let members = forget_restarted(self, resource, views(self, answers, &replies, true));
        let members = enough(&shown, members)?;
        let quorum = quorum::quorum(members.len());
        // The value a quorum holds, if one does.
        let value = members
            .iter()
            .filter_map(|m| m.holder.as_ref())
            .find(|h| {
                members
                    .iter()
                    .filter(|m| m.holder.as_ref() == Some(*h))
                    .count()
                    >= quorum
            })
            .cloned();
        let (left, fencing_counter) = match &value {
            Some(h) => {
                let holding = || members.iter().filter(|m| m.holder.as_ref() == Some(h));
                let mut lefts: Vec<Duration> = holding().filter_map(|m| m.left).collect();
                lefts.sort_unstable_by(|a, b| b.cmp(a));
                (
                    lefts.get(quorum - 1).copied(),
                    holding().filter_map(|m| m.counter).max(),
                )
            }
            None => (None, None),
        };
        let reserved = reserved_for(value.as_deref()).map(str::to_owned);
        let holder = value.filter(|_| reserved.is_none());
        // No holder, no token to bound.
        let fencing_counter = fencing_counter.filter(|_| reserved.is_none());
        Ok(LockInfo {
            resource: shown,
            held: holder.is_some(),
            reserved_for: reserved,
            shared: holder
                .as_ref()
                .is_some_and(|h| h.as_bytes() == READERS_MARK),
            holder,
            left,
            fencing_counter,
            members,
        })
    }

    /// Removes the lock on `resource` from every member, whoever holds it
    /// (a lock, a read-write lock's readers and waiting writer's flag, an
    /// election's leader and record), and advances its fencing counter on
    /// each, so that the old holder's token is below every later one.
    /// Waiters are woken. The old holder learns that it lost the lock at
    /// its next renewal (`ensure_held` fails; a `lockrun` holder exits
    /// 76), or at once on `extend`; until then it may still believe it
    /// holds the lock: fencing tokens are what protects the data.
    ///
    /// For an operator clearing a lock whose holder is known to be gone
    /// or stuck: `lockrun --force-unlock`.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`] when fewer than a quorum of members answered:
    /// the lock may still be held on a quorum (what was removed is in
    /// the error's failures and on the members that answered; run it
    /// again). [`Error::InvalidArgument`] for a name a lock could not
    /// have.
    pub fn force_unlock(&self, resource: impl AsRef<[u8]>) -> Result<Forced> {
        let resource = resource.as_ref();
        keys::check_resource(resource)?;
        let p = self.engine();
        p.check_members()?;
        let (fence, readers) = (fence_key(resource), readers_key(resource));
        let (flag, record) = (keys::writer_key(resource), record_key(resource));
        let channel = release_channel(resource);
        let keys: [&[u8]; 5] = [resource, &fence, &readers, &flag, &record];
        let start = counter_start().to_string();
        let keep = p.counter_expiry_ms.to_string();
        let message = p.message(b"redlock-force-unlock");
        let args = announced_on(
            vec![start.as_bytes(), keep.as_bytes()],
            message.as_deref(),
            &channel,
        );
        let (answers, replies) = p.script(&FORCE, &keys, &args).read(OPERATOR);
        let members = views(self, answers, &replies, false);
        let removed = members.iter().filter(|m| m.holder.is_some()).count();
        if let (true, Some(message)) = (removed > 0, &message) {
            p.waiters.released(resource, message);
        }
        let shown = quorum::display(resource);
        let members = enough(&shown, members)?;
        Ok(Forced {
            resource: shown,
            removed,
            members,
        })
    }
}

/// The restart rule on an inspection (`decide::forgetful_views`, as on
/// an election's read): a member whose server a holder's value seen on
/// another member does not name, and that does not show that value
/// itself, may have restarted since that grant and forgotten it, so its
/// view is no answer (a failure). Else an operator whose tool never saw
/// the restart read "free" beside a holder whose key the other members
/// keep.
fn forget_restarted(
    dlm: &LockManager,
    resource: &[u8],
    mut members: Vec<MemberView>,
) -> Vec<MemberView> {
    let p = dlm.engine();
    let holders: Vec<Option<Option<&[u8]>>> = members
        .iter()
        .map(|m| {
            m.failure
                .is_none()
                .then(|| m.holder.as_deref().map(str::as_bytes))
        })
        .collect();
    let servers = p.servers_of(&[resource]);
    let forgetful = crate::engine::decide::forgetful_views(&holders, &servers);
    for (i, m) in members
        .iter_mut()
        .enumerate()
        .filter(|(i, _)| forgetful[*i])
    {
        m.holder = None;
        m.left = None;
        m.counter = None;
        m.failure = Some(p.members[i].view_not_counted());
    }
    members
}

/// The views, or `NoQuorum` when fewer than a quorum of members gave
/// one (with their failures).
fn enough(shown: &str, members: Vec<MemberView>) -> Result<Vec<MemberView>> {
    let answered = members.iter().filter(|m| m.failure.is_none()).count();
    let nodes = members.len();
    let quorum = quorum::quorum(nodes);
    if answered >= quorum {
        return Ok(members);
    }
    Err(Error::NoQuorum {
        resource: shown.to_owned(),
        agreed: answered,
        nodes,
        quorum,
        failures: crate::base::node_error::NodeFailures::some(
            members.into_iter().filter_map(|m| m.failure).collect(),
        ),
    })
}

/// Each member's view from its reply: `[value, pttl, counter]` for an
/// inspection (`timed`), `[value, counter]` for a removal.
fn views(
    dlm: &LockManager,
    answers: Vec<Answer>,
    replies: &[Value],
    timed: bool,
) -> Vec<MemberView> {
    let p = dlm.engine();
    answers
        .into_iter()
        .zip(p.members.iter())
        .map(|(answer, member)| {
            let mut view = MemberView {
                member: member.name().to_owned(),
                holder: None,
                left: None,
                counter: None,
                failure: None,
            };
            let reply = match answer {
                Some(Ok(Said::Kept(at))) => replies.get(at),
                // A read's reply is kept, or it failed.
                Some(Ok(_)) => None,
                Some(Err(e)) => {
                    view.failure = Some(e);
                    return view;
                }
                None => None,
            };
            match reply.and_then(|r| parse(r, timed)) {
                Some((holder, left, counter)) => {
                    view.holder = holder;
                    view.left = left;
                    view.counter = counter;
                }
                None => {
                    let reply = reply.cloned().unwrap_or(Value::Nil);
                    view.failure = Some(NodeError::classify(
                        member.name().into(),
                        unexpected(&reply),
                        false,
                        member.timeout(),
                    ));
                }
            }
            view
        })
        .collect()
}

type Parsed = (Option<String>, Option<Duration>, Option<u64>);

/// Reads a member's reply (see `operator/inspect.lua`, `force.lua`).
fn parse(reply: &Value, timed: bool) -> Option<Parsed> {
    let Value::Array(items) = reply else {
        return None;
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(Some(crate::base::text::shorten(
            b,
            crate::base::text::SHOWN,
        ))),
        Value::Nil => Some(None),
        _ => None,
    };
    let number = |v: &Value| match v {
        Value::BulkString(b) => Some(std::str::from_utf8(b).ok()?.parse::<u64>().ok()),
        Value::Int(n) => Some(u64::try_from(*n).ok()),
        Value::Nil => Some(None),
        _ => None,
    };
    match (items.as_slice(), timed) {
        ([value, Value::Int(pttl), counter], true) => {
            let holder = text(value)?;
            let left =
                (holder.is_some() && *pttl >= 0).then(|| Duration::from_millis(*pttl as u64));
            Some((holder, left, number(counter)?))
        }
        ([value, counter], false) => Some((text(value)?, None, number(counter)?)),
        _ => None,
    }
}
