//! Several requests in one round: a set's slot groups on Redis Cluster
//! members. Each member's requests are pipelined, one connection per
//! server, written for every member first and then read in turn, as
//! [`fanout::round`](crate::members::fanout::round) does for one request: a set
//! spanning a thousand slots costs one connection per master, no thread.
//!
//! What the pipelines leave open (no pooled connection, no slot map yet,
//! a `MOVED`, a script the server no longer has, an `ASK`) is settled per
//! member, on a scoped thread each when more than one member needs it:
//! moved requests are routed again and pipelined once more, each
//! server's first request then sent with its script's source (`EVAL`,
//! which loads the script for the ones behind it); an `ASK` is followed
//! one request at a time. A request answered `NOSCRIPT` or `MOVED` did
//! not run, so sending it again is safe. Every step ends by the round's
//! deadline, a node timeout away.

use std::sync::Arc;
use std::thread;
use std::time::Instant;

use parking_lot::Mutex;

use crate::base::keys;
use crate::base::node_error::NodeError;
use crate::members::fanout::{Answer, log_failures};
use crate::members::member::Member;
use crate::members::node::Node;
use crate::members::request::Said;
use crate::members::request::{Request, Routed};

/// A request's answer by its index.
type Got = (usize, Result<Said, NodeError>);

/// A member's requests left open, and its redirects to follow.
type Job = (Vec<usize>, Vec<Got>);

/// Which member takes which request: `takes(request, member)` (the
/// batch's assignment; a script's declared arguments are `script::Takes`).
pub(crate) type Assigned<'a> = &'a (dyn Fn(usize, usize) -> bool + Sync);

/// How many times a member's open requests are routed and sent at most
/// (a `MOVED` or `NOSCRIPT` sends them once more).
const PASSES: usize = 3;

/// Runs `reqs` in one round: request `r` on member `i` when `takes(r, i)`.
/// Returns each request's answers, one per member (`None` where it was
/// not taken).
pub(crate) fn round(
    members: &[Member],
    reqs: &[&Request<'_>],
    takes: Assigned<'_>,
) -> Vec<Vec<Answer>> {
    let mut answers: Vec<Vec<Answer>> = reqs
        .iter()
        .map(|_| members.iter().map(|_| None).collect())
        .collect();
    let Some(first) = members.first() else {
        return answers;
    };
    let deadline = Instant::now() + first.timeout();
    let slots: Vec<u16> = reqs.iter().map(|r| keys::slot(r.op.key())).collect();
    let mut open: Vec<Vec<usize>> = members.iter().map(|_| Vec::new()).collect();
    let mut follow: Vec<Vec<Got>> = members.iter().map(|_| Vec::new()).collect();
    // Written on every member's pooled connections first.
    let mut sent = Vec::new();
    for (i, member) in members.iter().enumerate() {
        let mut per: Vec<(Arc<Node>, Vec<usize>)> = Vec::new();
        for r in (0..reqs.len()).filter(|&r| takes(r, i)) {
            match member.target(slots[r]) {
                Some(node) => by_server(&mut per, node, r),
                None => open[i].push(r),
            }
        }
        for (node, rs) in per {
            match node.send_all(&bare(member, reqs, &rs), deadline) {
                Some(pooled) => sent.push((i, node, rs, pooled)),
                None => open[i].extend(rs),
            }
        }
    }
    // Then read in turn.
    for (i, node, rs, pooled) in sent {
        let member = &members[i];
        let Some(got) = node.receive_all(pooled, &bare(member, reqs, &rs), deadline) else {
            // Found closed before any reply: nothing ran.
            open[i].extend(rs);
            continue;
        };
        for (r, answer) in rs.into_iter().zip(got) {
            match answer {
                Err(e) if again(member, &e) => open[i].push(r),
                answer if member.must_follow(&answer) => follow[i].push((r, answer)),
                answer => answers[r][i] = Some(answer),
            }
        }
    }
    // What is left, per member: the first on this thread, the others on
    // a thread each (each can block until the deadline).
    let left = Left {
        members,
        reqs,
        slots: &slots,
        takes,
        deadline,
    };
    let settled = left.settle(open, follow, &answers);
    for (i, got) in settled {
        for (r, answer) in got {
            answers[r][i] = Some(answer);
        }
    }
    for row in &answers {
        log_failures(members, row);
    }
    answers
}

/// What a round leaves to settle per member: requests that could not go
/// out on a pooled connection, and redirections to follow.
struct Left<'r, 'a> {
    members: &'r [Member],
    reqs: &'r [&'r Request<'a>],
    slots: &'r [u16],
    takes: Assigned<'r>,
    deadline: Instant,
}

impl Left<'_, '_> {
    /// Settles each member's `open` requests and `follow`-ups: the first
    /// member's on this thread, the others on a thread each (each can
    /// block until the deadline). `answers` says which requests are
    /// answered already.
    fn settle(
        &self,
        open: Vec<Vec<usize>>,
        follow: Vec<Vec<Got>>,
        answers: &[Vec<Answer>],
    ) -> Vec<(usize, Vec<Got>)> {
        let (members, reqs, takes) = (self.members, self.reqs, self.takes);
        let jobs: Vec<(usize, Mutex<Option<Job>>)> = open
            .into_iter()
            .zip(follow)
            .enumerate()
            .filter(|(_, (open, follow))| !open.is_empty() || !follow.is_empty())
            .map(|(i, job)| (i, Mutex::new(Some(job))))
            .collect();
        let run = |i: usize, job: &Mutex<Option<Job>>| -> Vec<Got> {
            match job.lock().take() {
                Some((open, follow)) => {
                    settle(&members[i], reqs, self.slots, open, follow, self.deadline)
                }
                None => Vec::new(),
            }
        };
        thread::scope(|scope| {
            let spawned: Vec<_> = jobs
                .iter()
                .skip(1)
                .map(|(i, job)| {
                    let run = &run;
                    let handle = thread::Builder::new()
                        .name("redlock-batch".into())
                        .spawn_scoped(scope, move || run(*i, job));
                    (*i, job, handle)
                })
                .collect();
            let mut settled: Vec<(usize, Vec<Got>)> = jobs
                .first()
                .map(|(i, job)| (*i, run(*i, job)))
                .into_iter()
                .collect();
            for (i, job, handle) in spawned {
                let got = match handle {
                    // A panic (a bug): the member's requests that were not
                    // answered are its failures.
                    Ok(handle) => handle.join().unwrap_or_else(|_| {
                        (0..reqs.len())
                            .filter(|&r| takes(r, i) && answers[r][i].is_none())
                            .map(|r| (r, Err(members[i].panicked())))
                            .collect()
                    }),
                    // No thread to be had: here, by the same deadline.
                    Err(_) => run(i, job),
                };
                settled.push((i, got));
            }
            settled
        })
    }
}

/// Adds request `r` to the list for `node`.
fn by_server(per: &mut Vec<(Arc<Node>, Vec<usize>)>, node: Arc<Node>, r: usize) {
    match per.iter_mut().find(|(n, _)| Arc::ptr_eq(n, &node)) {
        Some((_, rs)) => rs.push(r),
        None => per.push((node, vec![r])),
    }
}

/// The requests `rs` as `member` sends them, without their reload: in a
/// pipeline, a script's source sent after `NOSCRIPT` would come after the
/// replies of the requests behind it (see [`settle`]).
fn bare<'a>(member: &Member, reqs: &[&'a Request<'a>], rs: &[usize]) -> Vec<Routed<'a>> {
    rs.iter()
        .map(|&r| Routed {
            reload: false,
            ..member.request(reqs[r])
        })
        .collect()
}

/// Whether a request refused so did not run and goes again: `NOSCRIPT`,
/// or a `MOVED` (its new owner noted).
fn again(member: &Member, e: &NodeError) -> bool {
    e.code() == Some("NOSCRIPT") || member.moved(e)
}

/// Settles one member's open requests (routed again, pipelined per
/// server, each server's first request with its script's source) and its
/// redirects to follow, by `deadline`.
fn settle(
    member: &Member,
    reqs: &[&Request<'_>],
    slots: &[u16],
    mut open: Vec<usize>,
    follow: Vec<Got>,
    deadline: Instant,
) -> Vec<Got> {
    let mut done: Vec<Got> = follow
        .into_iter()
        .map(|(r, answer)| (r, member.follow(answer, member.request(reqs[r]), deadline)))
        .collect();
    for pass in 0..PASSES {
        if open.is_empty() {
            break;
        }
        let last = pass + 1 == PASSES;
        let mut per: Vec<(Arc<Node>, Vec<usize>)> = Vec::new();
        for r in open.drain(..) {
            match member.route(slots[r], deadline) {
                Ok(node) => by_server(&mut per, node, r),
                Err(e) => done.push((r, Err(e))),
            }
        }
        for (node, rs) in per {
            let mut bare = bare(member, reqs, &rs);
            bare[0].source = true;
            for (&r, answer) in rs.iter().zip(node.run_all(&bare, deadline)) {
                match answer {
                    Err(e) if !last && again(member, &e) => open.push(r),
                    answer if member.must_follow(&answer) => {
                        done.push((r, member.follow(answer, member.request(reqs[r]), deadline)));
                    }
                    answer => done.push((r, answer)),
                }
            }
        }
    }
    done
}
