//! Fair waiting across managers and processes (see
//! [`Builder::fair`](crate::Builder::fair)): waiters of a lock, wherever
//! they run, are served in the order they arrived.
//!
//! A waiter refused by an ordinary attempt takes a place in a queue kept
//! beside the lock key on every member: a sorted set of waiters' tokens
//! scored by arrival (the waiter's clock, in microseconds, the same score
//! on every member, so members order the same waiters the same way), and
//! a hash of tickets, each waiter's deadline on the server's clock. A
//! ticket lasts about two retry delays unless refreshed, and every attempt
//! of a queued waiter refreshes it.
//!
//! A fair manager's release of a lock (an unfair one deletes the key,
//! whatever is queued) deletes the key as before when no queue exists;
//! when one does, it hands the key to the first waiter whose ticket is
//! live: the key then holds a reservation for that waiter (`redlock:next:`
//! and its token) for a short time (twice the node timeout), and that
//! waiter is taken off the queue. The hand-off is announced on the
//! release channel followed by the waiter's manager's address (only that
//! process hears it), and the waiter claims once a majority of members
//! announced it. A
//! newcomer's `SET NX` finds the key taken, as it would find a holder. A
//! queued waiter's attempt is a script that sets the key to its token
//! where the key holds its own reservation, or where it is free and no
//! waiter with a live ticket arrived before it; otherwise it keeps its
//! place. A claim that fails (a minority: the release had not reached the
//! other members yet) puts back the reservations it took, until the
//! deadlines they had. A waiter that gives up leaves the queue at once,
//! passing on a reservation it had.
//!
//! ## Why it is safe
//!
//! The queue only decides who may try. On each member the lock key still
//! holds at most one token at a time: a token is written only where the
//! key held no token (free, or a reservation, which is no one's token),
//! and a release or a clean-up replaces only its own token (with nothing,
//! or with its own reservation). A reservation is never a vote for
//! anyone: its waiter must still set its token on a majority, within the
//! validity, as any acquisition. So the safety argument of the lock
//! ([`LockManager`](crate::LockManager), "Why it is safe") holds
//! unchanged; a queue that is lost (a restart), partial or different on
//! each member costs fairness, never safety.
//!
//! ## Why it cannot deadlock
//!
//! Everything the queue writes expires: a reservation at its deadline (a
//! failed claim puts it back only until that deadline, so no waiter keeps
//! one by failing), a ticket after two retry delays without its waiter,
//! the queue's keys with their last ticket. Members' queues may differ (a
//! join that timed out, a restart), but a claim refused on a member adds
//! the waiter's ticket there at the same arrival score as everywhere: after
//! one round of claims the members agree on the first live waiter, the
//! only one a free key accepts from the queue. When members hand the key
//! to different waiters, each finds a minority; their reservations lapse
//! within twice the node timeout, and the free keys then go to the first
//! live waiter, the same on every member. A waiter that stops asking
//! (dead, or cut off from a member) loses its ticket there within two
//! retry delays, and the next is first. A waiter whose reservation lapsed
//! (it was slow) is off the queue and takes its place again, at its first
//! arrival, with its next attempt. A dead waiter costs one reservation, at
//! most twice the node timeout: a waiter whose claim finds another's
//! reservation asks again when it lapses (the claim answers when), not at
//! the end of its pause.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::keys::{fence_key, queue_key, release_channel, tickets_key};
use crate::pipeline::{
    Answer, DECIDE, Mode, Pipeline, RELEASE, Vote, announce_args, counter_start,
};
use crate::quorum::Tally;
use crate::script::{BUSY, CLAIM_QUEUED, HANDOFF, JOIN, LEAVE, Lua, UNCLAIM};

/// How long a reservation lasts, in ms: twice the node timeout (the
/// waiter hears the release and claims in about one round trip), at least
/// 20 ms.
pub(crate) fn reserve_ms(p: &Pipeline) -> String {
    (p.node_timeout.as_millis() as u64 * 2).max(20).to_string()
}

/// One acquisition's place in the queues.
pub(crate) struct Fair {
    /// When it was first refused (µs since the epoch), 0 before.
    arrival: AtomicU64,
    /// How long its ticket lasts unless refreshed, in ms.
    ticket_ms: u64,
    /// After a refused claim: when the other waiter's reservations it
    /// found lapse, in ms from then (`u64::MAX`: none found).
    lapse_ms: AtomicU64,
}

impl Fair {
    /// A place for an acquisition that pauses at most `max_delay` between
    /// attempts.
    pub(crate) fn new(p: &Pipeline, max_delay: Duration) -> Fair {
        let ticket = max_delay
            .saturating_mul(2)
            .saturating_add(p.node_timeout * 2);
        Fair {
            arrival: AtomicU64::new(0),
            ticket_ms: (ticket.as_millis() as u64).clamp(100, 60_000),
            lapse_ms: AtomicU64::new(u64::MAX),
        }
    }

    /// The place of an acquisition of `name` by a fair manager that `waits`
    /// (none otherwise: one attempt never queues), pausing at most
    /// `max_delay`. When the manager's threads waited for `name` lately,
    /// its attempts are claims from the first on (so it queues at once).
    pub(crate) fn waiting(
        p: &Pipeline,
        waits: bool,
        name: &[u8],
        max_delay: Duration,
    ) -> Option<Fair> {
        (p.fair && waits).then(|| {
            let fair = Fair::new(p, max_delay);
            if p.waiters.lately(name) {
                fair.arrive();
            }
            fair
        })
    }

    /// After a refused claim that found other waiters' reservations: when
    /// the last of them lapses (and a little later, for the servers'
    /// clocks), so that the next claim comes then, not at the end of a
    /// pause: a waiter that died holding a reservation costs the others
    /// that reservation, not a pause more.
    pub(crate) fn lapse(&self) -> Option<Duration> {
        match self.lapse_ms.load(Ordering::Relaxed) {
            u64::MAX => None,
            ms => Some(Duration::from_millis(ms.saturating_add(2))),
        }
    }

    /// Whether it has taken its place (its attempts are claims).
    pub(crate) fn queued(&self) -> bool {
        self.arrival.load(Ordering::Relaxed) != 0
    }

    /// Arrives now: its attempts are claims from the first on (the lock
    /// was contended lately, so the first claim takes its place at once,
    /// instead of an ordinary attempt and a join).
    pub(crate) fn arrive(&self) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_micros() as u64)
            .max(1);
        let _ = self
            .arrival
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Takes its place on every member, after an ordinary attempt was
    /// refused; best effort (a member that fails it keeps no place).
    pub(crate) fn join(&self, p: &Pipeline, key: &[u8], token: &[u8]) {
        self.arrive();
        let arrival = self.arrival.load(Ordering::Relaxed).to_string();
        let ticket = self.ticket_ms.to_string();
        let (queue, tickets) = (queue_key(key), tickets_key(key));
        let mode = Mode {
            decides: false,
            ..RELEASE
        };
        p.script_then(
            &JOIN,
            None,
            &[&queue, &tickets],
            &[
                token,
                arrival.as_bytes(),
                ticket.as_bytes(),
                p.waiters.address(),
            ],
            None,
            mode,
        );
    }

    /// A queued attempt on every member (see the claim script): a yes
    /// where the key was free or reserved for it; `keep` is the fencing
    /// counter's keep (with fencing on).
    pub(crate) fn claim(
        &self,
        p: &Pipeline,
        key: &[u8],
        token: &[u8],
        ttl_ms: u64,
        keep: Option<&str>,
    ) -> Vec<Vote> {
        let (queue, tickets, fence) = (queue_key(key), tickets_key(key), fence_key(key));
        let (px, arrival) = (ttl_ms.to_string(), self.arrival.load(Ordering::Relaxed));
        let (arrival, ticket, start) = (
            arrival.to_string(),
            self.ticket_ms.to_string(),
            counter_start().to_string(),
        );
        let mut keys: Vec<&[u8]> = vec![key, &queue, &tickets];
        let address = p.waiters.address();
        let mut args: Vec<&[u8]> = vec![
            token,
            px.as_bytes(),
            arrival.as_bytes(),
            ticket.as_bytes(),
            address,
        ];
        if let Some(keep) = keep {
            keys.push(&fence);
            args.extend([start.as_bytes(), keep.as_bytes()]);
        }
        let mode = Mode {
            count: true,
            ..DECIDE
        };
        let mut lapse = None;
        let votes = p
            .script_then(&CLAIM_QUEUED, None, &keys, &args, None, mode)
            .into_iter()
            .map(|answer| match answer {
                // Readers hold the key (the script's -2).
                Some(Ok(c)) if c == BUSY | 1 => Vote {
                    readers: true,
                    ..Vote::of(Some(Ok(0)))
                },
                // Another waiter's reservation, lapsing in N ms (-3 - N).
                Some(Ok(c)) if c & BUSY != 0 => {
                    let ms = (c & !BUSY).saturating_sub(2);
                    lapse = Some(lapse.map_or(ms, |l: u64| l.max(ms)));
                    Vote::of(Some(Ok(0)))
                }
                answer => Vote::of(answer),
            })
            .collect();
        self.lapse_ms
            .store(lapse.unwrap_or(u64::MAX), Ordering::Relaxed);
        votes
    }

    /// Leaves the queue on every member (it gives up), passing on a
    /// reservation it had; best effort.
    pub(crate) fn leave(&self, p: &Pipeline, key: &[u8], wakes: &[u8], token: &[u8]) {
        if self.queued() {
            let message = p.message(token);
            handing(p, &LEAVE, None, key, None, wakes, token, message.as_deref());
        }
    }
}

/// A lock's (or a leadership's) release on the members `only` selects:
/// the key deleted where it holds `token`, or handed to the first fair
/// waiter queued there (see the module docs), and a leadership's
/// `record` of ours deleted; with a `message`, the script announces it,
/// naming the waiter it was handed to, so that only that waiter is woken.
pub(crate) fn release(
    p: &Pipeline,
    only: Option<&[bool]>,
    key: &[u8],
    record: Option<&[u8]>,
    wakes: &[u8],
    token: &[u8],
    message: Option<&[u8]>,
) -> Tally {
    Tally::count(handing(
        p, &HANDOFF, only, key, record, wakes, token, message,
    ))
}

/// Runs `lua`, the release or the leave script (the same keys and
/// arguments, but a `record` for the release only; the leave never gives
/// up a token), on the members `only` selects (leave: all).
#[allow(clippy::too_many_arguments)]
fn handing(
    p: &Pipeline,
    lua: &Lua,
    only: Option<&[bool]>,
    key: &[u8],
    record: Option<&[u8]>,
    wakes: &[u8],
    token: &[u8],
    message: Option<&[u8]>,
) -> Vec<Answer> {
    let (queue, tickets, channel) = (queue_key(key), tickets_key(key), release_channel(wakes));
    let reserve = reserve_ms(p);
    let args = |cluster: bool| {
        let mut args: Vec<&[u8]> = vec![token, reserve.as_bytes()];
        let announce = announce_args(message, cluster);
        if !announce.is_empty() {
            args.extend(announce);
            args.push(&channel);
        }
        args
    };
    let (node, cluster) = (args(false), args(true));
    let mut keys: Vec<&[u8]> = vec![key, &queue, &tickets];
    keys.extend(record);
    p.script_then(lua, only, &keys, &node, Some(&cluster), RELEASE)
}

/// The clean-up of a queued attempt that failed, on the members `only`
/// selects: where it replaced its reservation with its token, the
/// reservation goes back until the deadline it had; elsewhere the key is
/// deleted where it holds `token`, and that is announced, as any clean-up
/// does (see the unclaim script).
pub(crate) fn unclaim(
    p: &Pipeline,
    only: Option<&[bool]>,
    key: &[u8],
    wakes: &[u8],
    token: &[u8],
    message: Option<&[u8]>,
) -> Tally {
    let (tickets, channel) = (tickets_key(key), release_channel(wakes));
    let args = |cluster: bool| {
        let mut args: Vec<&[u8]> = vec![token];
        let announce = announce_args(message, cluster);
        if !announce.is_empty() {
            args.extend(announce);
            args.push(&channel);
        }
        args
    };
    let (node, cluster) = (args(false), args(true));
    Tally::count(p.script_then(
        &UNCLAIM,
        only,
        &[key, &tickets],
        &node,
        Some(&cluster),
        RELEASE,
    ))
}
