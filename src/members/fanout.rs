//! The round's fan-out: one request sent to every member's server (a
//! node's own, a Redis Cluster member's master for the request's slot),
//! the replies read in turn by one deadline; new connections and
//! redirects on scoped threads. The engine counts what comes back
//! (`engine::quorum::Tally`); nothing here decides anything.

use std::sync::Arc;
use std::thread;
use std::time::Instant;

use crate::base::keys;
use crate::base::node_error::NodeError;
use crate::members::member::Member;
use crate::members::node::{Node, Received};
use crate::members::request::{Pooled, Request, Said};

/// One member's answer to a round: none when it was not asked.
pub(crate) type Answer = Option<Result<Said, NodeError>>;

/// Sends `req` to the members that `only` selects (all when `None`) and
/// returns their answers in member order (`None` for the others).
///
/// Multiplexed: the request is written on a pooled connection of every
/// member's server first (a node's own, a Redis Cluster member's master
/// for the request's slot), then the replies are read in turn, all by
/// one deadline a node timeout away. A round therefore costs about the
/// slowest server's round trip, with no thread. Only members that need a
/// new connection (none pooled, the pooled one found closed, a cluster
/// without its slot map yet) or a redirect followed (`MOVED`, `ASK`) get a
/// scoped thread each, since that can block until the deadline; with a
/// single member the calling thread does it. Every step ends by the
/// deadline, so a round returns within about one node timeout.
pub(crate) fn round(members: &[Member], only: Option<&[bool]>, req: &Request<'_>) -> Vec<Answer> {
    let Some(first) = members.first() else {
        return Vec::new();
    };
    let deadline = Instant::now() + first.timeout();
    let selected = |i: usize| only.is_none_or(|only| only[i]);
    let slot = if members.iter().any(Member::is_cluster) {
        keys::slot(req.op.key())
    } else {
        0
    };
    let send = |i: usize, member: &Member| {
        let node = member.target(slot).filter(|_| selected(i))?;
        // The first write follows the deadline's clock read at once.
        let left = (i == 0).then(|| first.timeout());
        let pooled = node.send(member.request(req), deadline, left)?;
        Some((node, pooled))
    };
    let mut answers: Vec<Answer> = members.iter().map(|_| None).collect();
    // One member: in this thread, nothing to collect.
    if members.len() == 1 {
        if selected(0) {
            let routed = first.request(req);
            let answer = match send(0, first) {
                Some((node, pooled)) => match node.receive(pooled, routed, deadline) {
                    Received::Done(answer) => answer,
                    Received::Stale => first.call(routed, slot, deadline),
                },
                None => first.call(routed, slot, deadline),
            };
            answers[0] = Some(if first.must_follow(&answer) {
                first.follow(answer, routed, deadline)
            } else {
                answer
            });
        }
        log_failures(members, &answers);
        return answers;
    }
    let sent: Vec<Option<(Arc<Node>, Pooled)>> = members
        .iter()
        .enumerate()
        .map(|(i, member)| send(i, member))
        .collect();
    thread::scope(|scope| {
        let connect = |i: usize| {
            let member = &members[i];
            thread::Builder::new()
                .name("redlock-connect".into())
                .spawn_scoped(scope, move || {
                    member.call(member.request(req), slot, deadline)
                })
                .map_err(|_| i)
        };
        let follow = |i: usize, answer: Result<Said, NodeError>| {
            let member = &members[i];
            thread::Builder::new()
                .name("redlock-redirect".into())
                .spawn_scoped(scope, move || {
                    member.follow(answer, member.request(req), deadline)
                })
                .map_err(|_| i)
        };
        let mut pending = Vec::new();
        for (i, sent) in sent.iter().enumerate() {
            if sent.is_none() && selected(i) {
                pending.push((i, connect(i)));
            }
        }
        for (i, sent) in sent.into_iter().enumerate() {
            let Some((node, pooled)) = sent else { continue };
            let member = &members[i];
            match node.receive(pooled, member.request(req), deadline) {
                Received::Done(answer) if member.must_follow(&answer) => {
                    pending.push((i, follow(i, answer)));
                }
                Received::Done(answer) => answers[i] = Some(answer),
                Received::Stale => pending.push((i, connect(i))),
            }
        }
        for (i, handle) in pending {
            answers[i] = Some(match handle {
                Ok(handle) => handle.join().unwrap_or_else(|_| Err(members[i].panicked())),
                // No thread to be had: here, by the same deadline.
                Err(i) => members[i].call(members[i].request(req), slot, deadline),
            });
        }
    });
    log_failures(members, &answers);
    answers
}

/// Logs each member's failure in a round (at debug level: the round's
/// outcome is what callers see and report).
pub(crate) fn log_failures(members: &[Member], answers: &[Answer]) {
    for (member, answer) in members.iter().zip(answers) {
        if let Some(Err(e)) = answer {
            crate::base::telemetry::node_failed(e);
            crate::base::logging::log!(
                debug,
                "redlock_sync::node",
                "{} failed in a round: {e}",
                member.name()
            );
        }
    }
}

/// Connects, at once and by one node timeout, to each server of
/// `members` that answers for one of `slots` and that was never reached
/// (see `Node::meet`): the first on this thread, the others on a scoped
/// thread each.
pub(crate) fn meet(members: &[Member], slots: &[u16]) {
    let unmet: Vec<Arc<Node>> = members
        .iter()
        .flat_map(|m| slots.iter().filter_map(|&s| m.target(s)))
        .filter(|n| !n.met())
        .collect();
    let Some(first) = unmet.first() else {
        return;
    };
    let deadline = Instant::now() + first.timeout();
    thread::scope(|scope| {
        for node in &unmet[1..] {
            let _ = thread::Builder::new()
                .name("redlock-connect".into())
                .spawn_scoped(scope, move || node.meet(deadline));
        }
        first.meet(deadline);
    });
}
