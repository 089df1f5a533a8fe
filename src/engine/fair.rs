//! Fair waiting across managers and processes, a stage of the
//! acquisition ([`attempt`] wraps [`Engine::acquire`] for every shape
//! that queues): a waiter refused once takes a place in a queue kept
//! beside the lock key on every member ([`Fair::join`]), claims from it
//! ([`Fair::claim`], [`Fair::claim_call`] for a set's slot groups), steps
//! out of line when cut off from a majority, leaves it when it gives up
//! ([`give_up`]); a fair release hands the key to the first live waiter
//! ([`release`], [`handing_call`]), and the clean-up of a failed claim
//! puts back its reservations ([`unclaim`]). Its scripts are here too
//! (`src/scripts/fair/`); [`Queued`], what a shape that queues provides;
//! and [`FairKey`], the lock's key waiting fairly (`fair/key.rs`): below
//! the stage, `single.rs` knows nothing of queues and the pipeline only
//! reads [`Shape::hands_off`] (a hand-off is announced by the members, so
//! a release wakes none of its manager's waiters itself); a set's own
//! place in line lives with the set (`shapes/set.rs`).
//!
//! The design has one home, the crate docs' "Fair waiting across
//! processes" (`src/manual.md`, linked from
//! [`Builder::fair`](crate::Builder::fair)): the queue, hand-offs and
//! reservations, arrival order and clocks, what it costs, why it is safe,
//! why it cannot deadlock (sets included), what a dead waiter costs, and
//! mixing clients. The scripts' headers say what each does on one
//! member.
//!
//! Fair waiting's timings are computed here and nowhere else: a
//! [`reservation`], a [`queued_pause`], a ticket's life ([`Fair::new`],
//! at most [`TICKET_PAUSES`] queued pauses) and the retry after a lapse
//! ([`after_lapse`]). The crate docs' table "Its timings" states them
//! by name, and the rest of the docs and the scripts' comments use those
//! names.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::base::error::{Error, Result};
use crate::base::keys::{fence_key, queue_key, release_channel, tickets_key};
use crate::base::node_error::NodeErrorKind;
use crate::engine::pipeline::{
    Answer, Engine, Granted, NAMING, RELEASE, Refusal, Round, ScriptCall, Shape, Vote,
    announce_args, counter_start,
};
use crate::engine::quorum::Tally;
use crate::members::request::Said;
use crate::members::script::{Lua, scripts};

scripts! {
    /// A fair manager's release of a lock, handing it to the first fair
    /// waiter queued.
    HANDOFF, "release", "fair/release.lua" after "fair/hand.lua" "fair/waiter.lua",
        keys ["key*", "queue*", "tickets*", "record?"], args ["token", "reserve", "handed?", "publish?", "message?", "channel*"];
    /// A queued fair waiter's attempt.
    CLAIM_QUEUED, "claim-queued", "fair/claim.lua" after "fair/hand.lua" "lock/counter.lua" "fair/waiter.lua",
        keys ["key*", "queue*", "tickets*", "fence*"], args ["token", "ttl", "arrival", "ticket", "address", "where", "start?", "keep?", "reserve?", "publish?", "message?", "channel*"],
        codes CLAIM_CODES;
    /// A fair waiter takes its place in the queue.
    JOIN, "join-queue", "fair/join.lua" after "fair/waiter.lua",
        keys ["queue*", "tickets*"], args ["token", "arrival", "ticket", "address"];
    /// A fair waiter gives up its place (never a token).
    LEAVE, "leave-queue", "fair/leave.lua" after "fair/hand.lua" "fair/waiter.lua",
        keys ["key*", "queue*", "tickets*"], args ["token", "reserve", "unused?", "publish?", "message?", "channel*"];
    /// The clean-up of a queued fair waiter's failed attempt: puts back
    /// the reservation it took.
    UNCLAIM, "unclaim", "fair/unclaim.lua" after "fair/waiter.lua",
        keys ["key*", "tickets*"], args ["token", "publish?", "message?", "channel*"];
}

/// A lock's claim refused because readers hold its key: the claim
/// script's `READERS_HOLD`.
const READERS_HOLD: i64 = -2;
/// A lock's claim refused until another waiter's reservation (or a
/// release's yield) lapses in N ms: the claim script answers
/// `-(LAPSE_BASE + N)`. (A set's claim answers `-i`, its first busy key.)
pub(crate) const LAPSE_BASE: i64 = 3;
/// The codes the claim script answers with, given to it as Lua
/// constants (see `scripts!`).
const CLAIM_CODES: &[(&str, i64)] = &[("READERS_HOLD", READERS_HOLD), ("LAPSE_BASE", LAPSE_BASE)];

/// What a lock's claim refused with a code says (`Said::Busy(c)` reads
/// the script's `-(c + 1)`): readers hold the key, or it lapses in some
/// ms.
enum Refused {
    Readers,
    LapsesIn(u64),
}

impl Refused {
    /// From `c`, the script's `-(c + 1)`: in u64 arithmetic, so that no
    /// reply (a hostile server's `i64::MIN` included) overflows.
    fn of(c: u64) -> Refused {
        const READERS: u64 = READERS_HOLD.unsigned_abs() - 1;
        const LAPSE: u64 = LAPSE_BASE.unsigned_abs() - 1;
        if c == READERS {
            Refused::Readers
        } else {
            Refused::LapsesIn(c.saturating_sub(LAPSE))
        }
    }
}

// The codes do not overlap: readers above every lapse.
const _: () = assert!(-LAPSE_BASE < READERS_HOLD && READERS_HOLD < 0);

/// How long a reservation lasts: twice the node timeout (the waiter
/// hears the release and claims in about one round trip), at least 20 ms.
/// The unit of fair waiting's timings: a queued waiter's longest pause
/// ([`queued_pause`]) and a ticket's life (at most [`TICKET_PAUSES`] of
/// them).
pub(crate) fn reservation(engine: &Engine) -> Duration {
    (engine.node_timeout.saturating_mul(2)).max(Duration::from_millis(20))
}

/// A [`reservation`] in ms, as the scripts take it.
pub(crate) fn reserve_ms(engine: &Engine) -> String {
    reservation(engine).as_millis().to_string()
}

/// The longest pause of a fair waiter (its pauses are drawn between half
/// of this and all of it): a [`reservation`]'s length. A hand-off wakes
/// the waiter it names sooner; this bounds what any waiter can sleep
/// through a free key whatever its retry delay: a waiter handed the key
/// that died (while claim rounds are quick, every reservation has a claim
/// of each live waiter within it, which learns when it lapses, and the
/// waiter asks again then), and members' queues that differ (a join or a
/// claim that reached some members only, under faults) so that no
/// hand-off reaches a majority naming the same waiter. Claims at this
/// rate (one per waiter per three quarters of a reservation on average)
/// cost nothing measurable; notices to the next waiters at each hand-off,
/// the other way to cover a dead waiter, cost 8 processes on one lock
/// about a tenth of their rate.
pub(crate) fn queued_pause(engine: &Engine) -> Duration {
    reservation(engine)
}

/// When a waiter whose claim found other waiters' reservations lapsing
/// within `lapse` asks again: just after the lapse, and up to a quarter of
/// a node timeout later (`random`: 64 random bits), so that waiters
/// refused together do not ask again together (their claims would split
/// the votes of a free key again: a set can take a key on the members
/// where its other keys are free, a lock on the others).
pub(crate) fn after_lapse(engine: &Engine, lapse: Duration, random: u64) -> Duration {
    let spread = (engine.node_timeout / 4).max(Duration::from_millis(2));
    // retry_delay draws from [spread, 2 × spread].
    lapse + crate::engine::quorum::retry_delay(spread * 2, random) - spread
}

/// How long a manager's waiters wait unfairly after a server refused
/// the queue's commands (an ACL rule without them), before they try
/// again.
const REFUSED_FOR: Duration = Duration::from_secs(60);

/// Whether a server refused the queue's commands to this manager lately.
pub(crate) fn refused_lately(engine: &Engine) -> bool {
    engine
        .fair_refused
        .lock()
        .is_some_and(|at| at.elapsed() < REFUSED_FOR)
}

/// How many queued pauses (see [`queued_pause`], a [`reservation`] each)
/// a ticket lasts at most without its waiter asking (see [`Fair::new`]).
const TICKET_PAUSES: u32 = 6;

/// One acquisition's place in the queues.
pub(crate) struct Fair {
    /// When it was first refused (µs since the epoch), 0 before.
    arrival: AtomicU64,
    /// How long its ticket lasts unless refreshed, in ms.
    ticket_ms: u64,
    /// After a refused claim: when the other waiter's reservations it
    /// found lapse, in ms from then (`u64::MAX`: none found).
    lapse_ms: AtomicU64,
    /// A server refused the queue's commands: it waits as an unfair
    /// acquisition from then on.
    denied: AtomicBool,
}

impl Fair {
    /// A place for an acquisition that pauses at most `max_delay` between
    /// attempts.
    pub(crate) fn new(engine: &Engine, max_delay: Duration) -> Fair {
        // A queued waiter asks at least every queued pause (and a claim
        // round); a ticket outlives several of those, and no more: a
        // waiter cut off from a member leaves no place there that keeps
        // the others waiting long (see `attempt`). A slow waiter whose
        // ticket lapsed takes its place back, at its arrival, with its
        // next claim.
        let ticket = max_delay
            .saturating_mul(2)
            .saturating_add(engine.node_timeout * 2)
            .min(queued_pause(engine).saturating_mul(TICKET_PAUSES));
        Fair {
            arrival: AtomicU64::new(0),
            ticket_ms: (ticket.as_millis() as u64).clamp(100, 60_000),
            lapse_ms: AtomicU64::new(u64::MAX),
            denied: AtomicBool::new(false),
        }
    }

    /// The place of an acquisition of `name` by a fair manager that `waits`
    /// (none otherwise: one attempt never queues), pausing at most
    /// `max_delay`. When the manager's threads waited for `name` lately,
    /// its attempts are claims from the first on (so it queues at once).
    pub(crate) fn waiting(
        engine: &Engine,
        waits: bool,
        name: &[u8],
        max_delay: Duration,
    ) -> Option<Fair> {
        (engine.fair && waits && !refused_lately(engine)).then(|| {
            let fair = Fair::new(engine, max_delay);
            if engine.waiters.lately(name) {
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
        self.arrival.load(Ordering::Relaxed) != 0 && self.active()
    }

    /// Whether it still waits fairly (no server refused the queue's
    /// commands).
    pub(crate) fn active(&self) -> bool {
        !self.denied.load(Ordering::Relaxed)
    }

    /// Looks at a queue script's `answers`: where a server refused its
    /// commands (`NOPERM`: the user's ACL rule lacks the fair additions),
    /// this acquisition waits unfairly from now on, and so do the
    /// manager's next ones for a while (see [`REFUSED_FOR`]). Fairness is
    /// a courtesy: a refused queue must not cost the lock.
    pub(crate) fn heed<'a>(&self, engine: &Engine, answers: impl IntoIterator<Item = &'a Answer>) {
        let refusal = answers.into_iter().find_map(|a| match a {
            Some(Err(e)) if e.kind() == NodeErrorKind::Permission => Some(e),
            _ => None,
        });
        if let Some(e) = refusal {
            self.denied.store(true, Ordering::Relaxed);
            note_refusal(engine, e);
        }
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
    pub(crate) fn join(&self, engine: &Engine, key: &[u8], token: &[u8]) {
        let (keys, args) = self.join_call(engine, &[key], token);
        let round = Round {
            decides: false,
            ..RELEASE
        };
        let answers = engine.script(&JOIN, &refs(&keys), &refs(&args)).run(round);
        self.heed(engine, &answers);
    }

    /// The join script's keys and arguments for the lock keys `locks`
    /// (one lock, or a set's slot group); it arrives now if it had not.
    pub(crate) fn join_call(&self, engine: &Engine, locks: &[&[u8]], token: &[u8]) -> Call {
        self.arrive();
        let mut keys: Vec<Vec<u8>> = locks.iter().map(|k| queue_key(k)).collect();
        keys.extend(locks.iter().map(|k| tickets_key(k)));
        let args = vec![
            token.to_vec(),
            self.arrival
                .load(Ordering::Relaxed)
                .to_string()
                .into_bytes(),
            self.ticket_ms.to_string().into_bytes(),
            engine.waiters.address().to_vec(),
        ];
        (keys, args)
    }

    /// A queued attempt on every member (see the claim script): a yes
    /// where the key was free or reserved for it; `keep` is the fencing
    /// counter's keep (with fencing on). Where the key is free but a live
    /// waiter arrived before it, the script reserves the key for that
    /// waiter and tells it on the release channel of `wakes` (see
    /// [`handing_args`]).
    pub(crate) fn claim(
        &self,
        engine: &Engine,
        key: &[u8],
        wakes: &[u8],
        token: &[u8],
        ttl_ms: u64,
        keep: Option<&str>,
    ) -> Vec<Vote> {
        let message = ahead_message(engine, token);
        let start = counter_start().to_string();
        let counted = keep.map(|keep| (keep, &start[..]));
        let (keys, mut args) = self.claim_call(engine, &[key], token, ttl_ms, counted, "");
        handing_args(
            engine,
            &mut args,
            keep.is_some(),
            message.as_deref(),
            &[wakes],
        );
        let call = (keys, args);
        let mut lapse = None;
        let (answers, held) = with_call(engine, &CLAIM_QUEUED, None, call, |script| {
            script.run_naming(NAMING)
        });
        self.heed(engine, &answers);
        let mut votes: Vec<Vote> = answers
            .into_iter()
            .map(|answer| match answer {
                Some(Ok(Said::Busy(c))) => match Refused::of(c) {
                    Refused::Readers => Vote {
                        shared: true,
                        ..Vote::of(Some(Ok(Said::No)))
                    },
                    Refused::LapsesIn(ms) => {
                        lapse = Some(lapse.map_or(ms, |l: u64| l.max(ms)));
                        Vote::of(Some(Ok(Said::No)))
                    }
                },
                // Another owner's value holding it: a no.
                answer => Vote::naming(answer),
            })
            .collect();
        crate::engine::single::give_holders(&mut votes, &held, token);
        self.lapse_ms
            .store(lapse.unwrap_or(u64::MAX), Ordering::Relaxed);
        votes
    }

    /// The claim script's keys and arguments for the lock keys `locks`
    /// (one lock, or a set's slot group, all or nothing); `keep` is the
    /// fencing counters' keep (with fencing on); `wait_at` where a set
    /// waits in line (see `Set::wait_at` in `shapes/set.rs`).
    pub(crate) fn claim_call(
        &self,
        engine: &Engine,
        locks: &[&[u8]],
        token: &[u8],
        ttl_ms: u64,
        counted: Option<(&str, &str)>,
        wait_at: &str,
    ) -> Call {
        let mut keys = queued_keys(locks);
        let mut args = vec![
            token.to_vec(),
            ttl_ms.to_string().into_bytes(),
            self.arrival
                .load(Ordering::Relaxed)
                .to_string()
                .into_bytes(),
            self.ticket_ms.to_string().into_bytes(),
            engine.waiters.address().to_vec(),
            wait_at.as_bytes().to_vec(),
        ];
        if let Some((keep, start)) = counted {
            keys.extend(locks.iter().map(fence_key));
            args.push(start.as_bytes().to_vec());
            args.push(keep.as_bytes().to_vec());
        }
        (keys, args)
    }

    /// Leaves the queue on every member (it gives up), passing on a
    /// reservation it had; best effort.
    pub(crate) fn leave(&self, engine: &Engine, key: &[u8], wakes: &[u8], token: &[u8]) {
        if self.queued() {
            let message = leave_message(engine, token);
            let call = handing_call(engine, &[key], None, &[wakes], token, message.as_deref());
            run(engine, &LEAVE, None, call, RELEASE);
        }
    }
}

/// How a release, or the clean-up of an attempt, goes (see [`route`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// A fair manager's release of a key that hands off: to the first
    /// fair waiter queued for it.
    HandOff,
    /// The clean-up of a queued waiter's attempt: it puts back the
    /// reservations it took.
    Unclaim,
    /// Deleted where it holds the token, as an unfair manager does.
    Plain,
}

/// The fair-release decision, once for every shape that queues (a lock,
/// a leadership, a set): a `release` (not a clean-up) by a fair manager
/// whose members did not refuse the queue lately hands the key on; the
/// clean-up of a `queued` waiter's attempt unclaims; anything else is
/// plain.
pub(crate) fn route(engine: &Engine, release: bool, queued: bool) -> Route {
    if release && engine.fair && !refused_lately(engine) {
        Route::HandOff
    } else if !release && queued {
        Route::Unclaim
    } else {
        Route::Plain
    }
}

/// A shape that may wait fairly: its place in the queues, if any, and how
/// it leaves them.
pub(crate) trait Queued: Shape {
    /// Its place in the members' queues (a fair manager's acquisition
    /// that waits), or `None`.
    fn place(&self) -> Option<&Fair>;

    /// Notes that a majority of members refused it at its resource
    /// `blocked` (by index; `None`: no majority named one), and answers
    /// the index of the resource where it waits in line from now on, the
    /// same on every member. A lock waits at its one key; a set at one
    /// key at a time (see `shapes/set.rs`).
    fn waits_at(&self, _blocked: Option<usize>) -> usize {
        0
    }

    /// Leaves every queue it is in, passing on a reservation it had; best
    /// effort. By default, a lock's.
    fn leave(&self, engine: &Engine, fair: &Fair, token: &[u8]) {
        if let (Some(key), Some(wakes)) = (self.resources().first(), self.wakes().first()) {
            fair.leave(engine, key, wakes, token);
        }
    }
}

/// Admission, the fair stage of every acquisition: one attempt through
/// the pipeline ([`Engine::acquire`]), and what a fair waiter does
/// around it. Refused, it takes its place in the queue of the one
/// resource that refused it (a set waits in line on one key at a time;
/// see the manual's "Why sets cannot deadlock"), or, queued already,
/// learns when the reservations it found lapse; granted by some members
/// only, it leaves the others' queues (it may still be queued there, or
/// hold a reservation). Every shape that waits fairly goes through here:
/// locks, the write side, sets and election candidates.
pub(crate) fn attempt<S: Queued>(
    engine: &Engine,
    shape: &S,
    token: &[u8],
    ttl_ms: u64,
    refusal: &mut Refusal,
) -> Result<Granted> {
    let was_active = shape.place().is_some_and(Fair::active);
    let result = engine.acquire(shape, token, ttl_ms, refusal);
    let Some(fair) = shape.place() else {
        return result;
    };
    refusal.fell_back = was_active && !fair.active();
    match &result {
        Ok(granted) if granted.agreed < engine.members.len() && fair.queued() => {
            shape.leave(engine, fair, token);
        }
        // Cut off from too many members to be granted, whatever they
        // answered: it steps out of line where it is heard, passing on a
        // reservation it had, so that its place there keeps nobody from
        // a free key the others can reach; its arrival stays, and its
        // next claim refused where it is heard takes its place back (its
        // tickets on the members it cannot reach lapse within a ticket's
        // life).
        Err(e @ Error::NoQuorum { .. }) if fair.queued() && cut_off(e) => {
            shape.leave(engine, fair, token);
        }
        Err(Error::Taken { .. }) if fair.queued() => {
            refusal.lapse = fair.lapse();
            shape.waits_at(refusal.blocked);
        }
        Err(Error::Taken { .. }) if fair.active() => {
            let resources = shape.resources();
            // Not queued yet: at its first resource, unless a majority
            // named another.
            let at = shape.waits_at(refusal.blocked.filter(|&i| i < resources.len()));
            debug_assert!(at < resources.len(), "waits_at answered {at}");
            if let Some(resource) = resources.get(at) {
                fair.join(engine, resource, token);
            }
        }
        _ => {}
    }
    refusal.queued = result.is_err() && fair.queued();
    crate::base::logging::log!(
        trace,
        "redlock_sync::fair",
        "{} by {}: {}, arrival {}, lapse {:?}",
        shape.shown(),
        crate::base::text::token_prefix(token),
        match &result {
            Ok(g) => format!("granted by {}", g.agreed),
            Err(e) => e.to_string(),
        },
        fair.arrival.load(Ordering::Relaxed),
        refusal.lapse
    );
    result
}

/// Whether the attempt that failed with `e` could not have been granted
/// whatever the members that answered said: more members than a quorum
/// allows did not answer (no connection, no reply in time). Failures that
/// every waiter meets alike (a restart quarantine, `LOADING`, a `WAIT`
/// short of replicas) do not count: all waiters stepping out of line
/// would lose the order they arrived in.
fn cut_off(e: &Error) -> bool {
    e.failed_past_quorum(|f| {
        matches!(
            f.kind(),
            NodeErrorKind::Timeout
                | NodeErrorKind::Connect
                | NodeErrorKind::Disconnected
                | NodeErrorKind::Resolve
        )
    })
}

/// An acquisition of `shape` that gave up with `token`: a fair waiter
/// leaves every queue at once.
pub(crate) fn give_up<S: Queued>(engine: &Engine, shape: &S, token: &[u8]) {
    if let Some(fair) = shape.place().filter(|f| f.queued()) {
        shape.leave(engine, fair, token);
    }
}

mod key;
mod release;

pub(crate) use key::FairKey;

pub(crate) use release::{
    Call, ahead_message, handing_args, handing_call, leave_message, release, release_or_unfair,
    unclaim, unclaim_call,
};
use release::{note_refusal, queued_keys, refs, run, with_call};
