//! The waiting stage: the one loop around every shape's attempts. It
//! draws the retry pauses ([`Budget`]), spends them in this manager's
//! queue of waiters of the name (ended early by a release heard, see
//! `wait.rs`), waits in the members' queues where the manager is fair
//! (`fair.rs`), and gives a waiting writer its hook. Shapes state what
//! they need as capabilities ([`WaitOn`]: the names, a [`Grant`], a
//! [`Writer`]); nothing here knows a shape.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::base::cancel::Cancel;
use crate::base::error::{Error, Result};
use crate::base::holder::attempt_token;
use crate::base::telemetry;
use crate::engine::fair::{self, Queued};
use crate::engine::guard::{Guard, mode::Mode};
use crate::engine::pipeline::{Engine, MAX_TTL, Refusal, Token, new_token};
use crate::engine::quorum;
pub(crate) use crate::engine::wait::Grant;
use crate::engine::wait::{Place, ReleaseCount, Watch};

/// Retry settings of one manager handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Retry {
    /// Attempts in all (at least 1).
    pub(crate) count: u32,
    /// The longest random pause between two.
    pub(crate) max_delay: Duration,
}

impl Retry {
    pub(crate) fn new(count: u32, max_delay: Duration) -> Result<Retry> {
        if count == 0 {
            return Err(Error::invalid_argument(
                "retry count is the total number of attempts and must be at least 1",
            ));
        }
        Ok(Retry { count, max_delay })
    }
}

/// How long one acquisition may go on pausing between attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Budget {
    /// One attempt, no pause (`try_lock`).
    Once,
    /// `lock`: pauses left to draw, and the unspent rest of the current
    /// one. An attempt on a wake-up does not end a pause: what is left of
    /// it is waited next, so the whole wait is the sum of the pauses.
    Pauses { left: u32, rest: Duration },
    /// `try_lock_for`: pauses until this instant (`None`: beyond any
    /// representable instant).
    Until(Option<Instant>),
}

impl Budget {
    /// Whether the acquisition may wait at all (every budget but
    /// [`Once`](Budget::Once)): a fair waiter queues, and a waiter
    /// listens for releases, only then.
    pub(crate) fn waits(&self) -> bool {
        !matches!(self, Budget::Once)
    }

    /// The next pause, given a freshly drawn random `delay`; `None` when
    /// the budget is spent.
    pub(crate) fn next(&mut self, delay: Duration) -> Option<Duration> {
        match self {
            Budget::Once => None,
            Budget::Pauses { rest, .. } if !rest.is_zero() => Some(*rest),
            Budget::Pauses { left: 0, .. } => None,
            Budget::Pauses { left, rest } => {
                *left -= 1;
                *rest = delay;
                Some(delay)
            }
            Budget::Until(None) => Some(delay),
            Budget::Until(Some(deadline)) => {
                let left = deadline.saturating_duration_since(Instant::now());
                (!left.is_zero()).then(|| delay.min(left))
            }
        }
    }

    /// The most this budget may still wait (`None`: no bound), given the
    /// pauses' maximum.
    pub(crate) fn most(&self, max_delay: Duration) -> Option<Duration> {
        match *self {
            Budget::Once => Some(Duration::ZERO),
            Budget::Pauses { left, rest } => {
                Some(rest.saturating_add(max_delay.saturating_mul(left)))
            }
            Budget::Until(None) => None,
            Budget::Until(Some(deadline)) => {
                Some(deadline.saturating_duration_since(Instant::now()))
            }
        }
    }

    /// Records that `paused` of the current pause went by (all of it, or
    /// less when a release ended it early).
    pub(crate) fn spent(&mut self, paused: Duration) {
        if let Budget::Pauses { rest, .. } = self {
            *rest = rest.saturating_sub(paused);
        }
    }
}

/// What an acquisition waits on, and what it needs of the stage beyond a
/// plain wait, each a capability it states: how its grant treats the
/// other waiters ([`Grant`]), and a waiting writer's hook ([`Writer`]).
#[derive(Clone, Copy)]
pub(crate) struct WaitOn<'a> {
    /// The names whose releases wake it (one; a set's resources).
    pub(crate) names: &'a [&'a [u8]],
    /// A writer of the read-write lock `names[0]`: while it waits, new
    /// readers queue behind it.
    pub(crate) writer: Option<&'a dyn Writer>,
    /// What its grant means to this manager's other waiters.
    pub(crate) grant: Grant,
}

impl<'a> WaitOn<'a> {
    /// A waiter woken by releases of `names` that holds them alone, with
    /// no writer's hook.
    pub(crate) fn names(names: &'a [&'a [u8]]) -> WaitOn<'a> {
        WaitOn {
            names,
            writer: None,
            grant: Grant::Alone,
        }
    }

    /// The same, its grant as `grant` says.
    pub(crate) fn grant(self, grant: Grant) -> WaitOn<'a> {
        WaitOn { grant, ..self }
    }

    /// The same, waiting as the writer `writer`.
    pub(crate) fn writer(self, writer: &'a dyn Writer) -> WaitOn<'a> {
        WaitOn {
            writer: Some(writer),
            ..self
        }
    }
}

/// What a waiting writer does (the read-write lock's rule, in
/// `shapes/rwlock.rs`).
pub(crate) trait Writer: Sync {
    /// Before a pause that follows a refusal: makes new readers queue
    /// behind this writer for `ms`, where readers hold the name. True
    /// when that wrote something [`done`](Self::done) must take down.
    fn waits(&self, engine: &Engine, token: &[u8], ms: u64) -> bool;

    /// The writer waits no more (it got the lock, or gave up).
    fn done(&self, engine: &Engine, token: &[u8]);
}

/// One acquisition's view of its manager: the engine, the handle's
/// retry settings and cancel switch.
pub(crate) struct Stage<'m> {
    /// The engine the attempts run on.
    pub(crate) engine: &'m Arc<Engine>,
    /// The handle's retry settings.
    pub(crate) retry: Retry,
    /// The handle's cancel switch.
    pub(crate) cancel: Option<&'m Cancel>,
}

impl Stage<'_> {
    /// The waiting loop around a permit's `attempt` (given the
    /// acquisition's token), waiting in the queue of `resource` (the
    /// semaphore whose releases wake it): its grant uses up one release
    /// heard ([`Grant::Permit`]).
    pub(crate) fn permit_attempts<T>(
        &self,
        resource: &[u8],
        budget: Budget,
        mut attempt: impl FnMut(&Token) -> Result<T>,
    ) -> Result<T> {
        let names = [resource];
        let wait = WaitOn::names(&names).grant(Grant::Permit);
        self.attempts(wait, budget, |token, _| attempt(&token))
    }

    /// The acquisition every shape shares around the pipeline: attempts
    /// in the waiting loop ([`attempts`](Self::attempts)), each
    /// through fair waiting where the shape queues (`fair::attempt`); a
    /// granted attempt becomes a guard of mode `M`, which `then` (given
    /// it and the attempt's start) turns into the caller's value (a
    /// leadership's claim; most return the guard, whose drop releases it
    /// if `then` fails); and once the wait is given up, the shape's
    /// places in the queues go at once.
    pub(crate) fn acquire_shape<S, M, T>(
        &self,
        shape: Arc<S>,
        wait: WaitOn<'_>,
        budget: Budget,
        ttl_ms: u64,
        mut then: impl FnMut(Guard<M>, Instant) -> Result<T>,
    ) -> Result<T>
    where
        S: Queued + 'static,
        M: Mode,
    {
        let engine = self.engine;
        let mut ours = None;
        let result = self.attempts(wait, budget, |token, refusal| {
            let granted = match fair::attempt(engine, &*shape, &token, ttl_ms, refusal) {
                Ok(granted) => granted,
                Err(e) => {
                    ours = Some(token);
                    return Err(e);
                }
            };
            // Should `then` fail, a queued shape's places go too (the
            // token is copied only then: not on the uncontended path).
            if shape.place().is_some_and(fair::Fair::queued) {
                ours = Some(token.clone());
            }
            let start = granted.start;
            let guard = Guard::new(
                engine.clone(),
                shape.clone(),
                token,
                Duration::from_millis(ttl_ms),
                granted,
            );
            then(guard, start)
        });
        // Given up: its places go at once.
        if let (Err(_), Some(token)) = (&result, ours) {
            fair::give_up(engine, &*shape, &token);
        }
        result
    }

    /// The waiting loop around any `attempt` (given the acquisition's
    /// token), with pauses as `budget` allows; most shapes use it through
    /// [`acquire_shape`](Self::acquire_shape).
    ///
    /// When waiting is on, a pause is spent in the resource's queue of
    /// this manager's waiters (see `wait.rs`): it ends early when a release
    /// is heard, and only the longest waiter then asks again; a thread that
    /// finds others of this manager already waiting queues behind them
    /// without asking. A pause that runs out behind other waiters is spent
    /// with no attempt (they are served first); if no attempt was made at
    /// all when the budget runs out, one is made then. The releases
    /// announced by this acquisition's own failed attempts (the clean-up of
    /// a split vote) wake none of this manager's threads.
    ///
    /// What it waits on is `wait` (see [`WaitOn`]); `attempt` gets
    /// the token and fills in what a failed attempt found ([`Refusal`]):
    /// by its index in `wait.names`, the name found held by another
    /// owner, in whose queue the thread then waits; and whether readers
    /// may hold it (only then does a writer ask readers to queue behind
    /// it: a plain lock that never meets readers sends nothing for them).
    pub(crate) fn attempts<T>(
        &self,
        wait_on: WaitOn<'_>,
        budget: Budget,
        mut attempt: impl FnMut(Token, &mut Refusal) -> Result<T>,
    ) -> Result<T> {
        let names = wait_on.names;
        let _span = telemetry::Span::acquire(|| quorum::display(&quorum::joined(names)));
        let started = telemetry::start();
        let mut attempts = 0;
        let result = self.attempts_inner(wait_on, budget, |token, refusal| {
            attempts += 1;
            let result = attempt(token, refusal);
            telemetry::attempt(telemetry::outcome_of(&result, "acquired"), attempts);
            result
        });
        telemetry::acquired(telemetry::outcome_of(&result, "acquired"), started);
        result
    }

    /// [`attempts`](Self::attempts) without its telemetry: the
    /// attempts, and between them [`pause`](Self::pause), apart (most
    /// acquisitions end with their first attempt; the pauses' code, out
    /// of line, stays out of the way of the common path).
    fn attempts_inner<T>(
        &self,
        wait_on: WaitOn<'_>,
        budget: Budget,
        mut attempt: impl FnMut(Token, &mut Refusal) -> Result<T>,
    ) -> Result<T> {
        let names = wait_on.names;
        self.engine.meet(names);
        let mut token = new_token(&self.engine.entropy, &self.engine.holder_name)?;
        token.extend_from_slice(&self.engine.server_names(names));
        let engine = &self.engine;
        let waiters = &engine.waiters;
        let wait = budget.waits() && engine.wake_on_release;
        let (_own, busy) = match wait {
            true => {
                let (own, busy) = waiters.start(names[0], &token);
                (Some(own), busy)
            }
            false => (None, false),
        };
        // A fair manager's waiters of a name contended lately queue here
        // before they ask, so that they take their places in the members'
        // queues in this order too (only the longest waiter asks; see
        // `fair.rs`). Not otherwise: queuing starts the listeners, which
        // would then hear every uncontended release. (Without a place
        // here, the counts are read again before each attempt.)
        let queue_first = busy || (wait && engine.fair && waiters.lately(names[0]));
        let seen = queue_first.then(|| Counts::of(names, |n| waiters.before_attempt(n)));
        let place =
            queue_first.then(|| waiters.join(names[0], &token, seen.as_ref().map(|s| s.at(0))));
        let mut state = Between {
            budget,
            turn: place.as_ref().is_none_or(|p| p.is_first()),
            place,
            seen,
            at: 0,
            last: None,
            owed: false,
            flagged: false,
            tries: 0,
            watch: None,
            refusal: Refusal::default(),
        };
        loop {
            if state.turn {
                if wait && state.place.is_none() {
                    state.seen = Some(Counts::of(names, |n| waiters.before_attempt(n)));
                }
                state.refusal = Refusal::default();
                // Each attempt writes a value of its own (see
                // `attempt_token`); the token names the waiter.
                state.tries += 1;
                let value = attempt_token(&token, state.tries);
                match attempt(value, &mut state.refusal) {
                    Ok(acquired) => {
                        if let Some(place) = state.place.take() {
                            place.acquired(wait_on.grant);
                        }
                        state.done(&wait_on, engine, &token);
                        return Ok(acquired);
                    }
                    // Owed the last attempt, or one that waiting cannot
                    // help (see `waiting_helps`).
                    Err(err) if state.owed || !waiting_helps(&err, &state.refusal) => {
                        state.done(&wait_on, engine, &token);
                        return Err(err);
                    }
                    Err(err) => state.last = Some(err),
                }
                if let Some(b) = state
                    .refusal
                    .blocked
                    .filter(|&b| b != state.at && b < names.len())
                {
                    // Another name holds it up now: wait in its queue.
                    state.at = b;
                    state.place = None;
                }
            }
            if let Err(err) = self.pause(&mut state, &wait_on, &token, wait) {
                state.done(&wait_on, engine, &token);
                return Err(err);
            }
        }
    }

    /// The wait after an attempt (or a turn without one), as `state`'s
    /// budget allows: its pause, in the resource's queue of this
    /// manager's waiters when `wait` (see [`attempts`](Self::attempts)).
    /// `Err` ends the acquisition with it: cancelled, or the last
    /// attempt's failure once the budget is spent.
    #[cold]
    #[inline(never)]
    fn pause<'w>(
        &'w self,
        state: &mut Between<'w>,
        wait_on: &WaitOn<'_>,
        token: &[u8],
        wait: bool,
    ) -> Result<()> {
        let names = wait_on.names;
        let engine = &self.engine;
        let waiters = &engine.waiters;
        let cancel = self.cancel;
        let cancelled = || Error::Cancelled {
            resource: quorum::display(&quorum::joined(names)),
        };
        if cancel.is_some_and(Cancel::is_cancelled) {
            return Err(cancelled());
        }
        let delay = quorum::retry_delay(self.retry.max_delay, random_u64());
        let most = state.budget.most(self.retry.max_delay);
        let Some(pause) = state.budget.next(delay) else {
            return match state.last.take() {
                Some(err) => Err(err),
                None => {
                    // Queued all along: the one attempt owed.
                    drop(state.place.take());
                    state.owed = true;
                    state.turn = true;
                    Ok(())
                }
            };
        };
        if let (Some(writer), Some(Error::Taken { .. }), true) =
            (wait_on.writer, &state.last, state.refusal.shared)
        {
            // Where readers hold it, new readers queue behind this writer
            // while it waits: at most what is left of its wait, and never
            // long past its next attempt (each pause after a refusal that
            // found readers sets it again).
            let cap = (self.retry.max_delay.saturating_mul(2))
                .saturating_add(engine.node_timeout)
                .min(MAX_TTL);
            let ms = most.map_or(cap, |m| m.min(cap)).as_millis() as u64;
            state.flagged |= writer.waits(engine, token, ms);
        }
        // Reservations for another fair waiter lapse sooner: the rest of
        // the pause is kept for later. A fair manager's waiter (queued on
        // the members, or behind a thread of its own that is) looks again
        // at least every few node timeouts (see `fair::queued_pause`).
        // Both are drawn at random, as the retry delay is: waiters that
        // failed together (their claims split a free key's votes) must not
        // ask again together.
        let pause = state.refusal.lapse.map_or(pause, |lapse| {
            pause.min(fair::after_lapse(engine, lapse, random_u64()))
        });
        let pause = match state.refusal.queued || (engine.fair && wait) {
            true => pause.min(quorum::retry_delay(
                fair::queued_pause(engine),
                random_u64(),
            )),
            false => pause,
        };
        if wait {
            if engine.fair && names.len() > 1 && state.watch.is_none() {
                state.watch = Some(waiters.watch(names));
            }
            let (at, seen) = (state.at, &state.seen);
            let place = state.place.get_or_insert_with(|| {
                waiters.join(names[at], token, seen.as_ref().map(|s| s.at(at)))
            });
            if state.refusal.queued {
                place.placed();
            }
            let started = Instant::now();
            // Queued on the members, it keeps its place there by asking,
            // wherever it stands here.
            state.turn = place.wait(pause, cancel) || state.refusal.queued;
            state.budget.spent(started.elapsed());
        } else {
            match cancel {
                Some(cancel) => {
                    cancel.sleep(pause);
                }
                None => thread::sleep(pause),
            }
            state.budget.spent(pause);
            state.turn = true;
        }
        if cancel.is_some_and(Cancel::is_cancelled) {
            return Err(cancelled());
        }
        Ok(())
    }
}

/// 64 random bits for a retry delay. Falls back to the clock if the
/// system generator fails: a delay needs spread, not secrecy.
fn random_u64() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos().into())
    })
}

/// The waiting loop's state between attempts (see
/// [`Stage::attempts`]).
struct Between<'w> {
    /// The pauses left.
    budget: Budget,
    /// The thread's place in this manager's queue of the name it waits on.
    place: Option<Place<'w>>,
    /// The release counts read before the last attempt.
    seen: Option<Counts>,
    /// Which name it waits on (its index in the waiting's names).
    at: usize,
    /// Its turn to ask.
    turn: bool,
    /// The last attempt's failure.
    last: Option<Error>,
    /// The budget ran out while it was queued: one attempt is owed.
    owed: bool,
    /// A writer's flag is up (readers queue behind it).
    flagged: bool,
    /// Attempts made.
    tries: u64,
    /// A fair set watches the hand-offs of all its names.
    watch: Option<Watch<'w>>,
    /// What the last attempt found.
    refusal: Refusal,
}

impl Between<'_> {
    /// The acquisition ends: a writer's flag is taken down once it waits
    /// no more.
    fn done(&self, wait_on: &WaitOn<'_>, engine: &Engine, token: &[u8]) {
        if let (true, Some(writer)) = (self.flagged, wait_on.writer) {
            writer.done(engine, token);
        }
    }
}

/// The release counts of a waiting's names before an attempt (see
/// [`Waiters::before_attempt`](crate::engine::wait::Waiters::before_attempt)),
/// by the names' index: one name's without an allocation.
enum Counts {
    One(ReleaseCount),
    Many(Vec<ReleaseCount>),
}

impl Counts {
    fn of(names: &[&[u8]], count: impl Fn(&[u8]) -> ReleaseCount) -> Counts {
        match names {
            [one] => Counts::One(count(one)),
            _ => Counts::Many(names.iter().map(|n| count(n)).collect()),
        }
    }

    fn at(&self, i: usize) -> ReleaseCount {
        match self {
            Counts::One(seen) => *seen,
            Counts::Many(all) => all[i],
        }
    }
}

/// Whether another attempt may succeed after `err`: not after bad
/// arguments or configuration, nor refused credentials, permissions, TLS
/// or a peer that is not Redis on too many members, but for a fair
/// queue's refused permissions (see `Refusal::fell_back`): the next
/// attempt does without the queue.
fn waiting_helps(err: &Error, refusal: &Refusal) -> bool {
    err.is_retryable() || (refusal.fell_back && err.is_misconfigured())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_lock_budget_is_its_pauses_whatever_wakes_them_early() {
        let mut b = Budget::Pauses {
            left: 2,
            rest: Duration::ZERO,
        };
        assert_eq!(b.next(100 * MS), Some(100 * MS));
        // Woken after 30 ms: the next pause is the 70 ms left of it.
        b.spent(30 * MS);
        assert_eq!(b.next(999 * MS), Some(70 * MS));
        b.spent(70 * MS);
        // Then the second and last pause.
        assert_eq!(b.next(150 * MS), Some(150 * MS));
        b.spent(150 * MS);
        assert_eq!(b.next(150 * MS), None);
        // One attempt in all: no pause.
        let mut b = Budget::Pauses {
            left: 0,
            rest: Duration::ZERO,
        };
        assert_eq!(b.next(100 * MS), None);
        assert_eq!(Budget::Once.next(100 * MS), None);
    }

    #[test]
    fn a_deadline_budget_ends_at_the_deadline() {
        assert_eq!(Budget::Until(None).next(5 * MS), Some(5 * MS));
        let mut past = Budget::Until(Some(Instant::now()));
        assert_eq!(past.next(5 * MS), None);
        let mut far = Budget::Until(Some(Instant::now() + Duration::from_secs(60)));
        assert_eq!(far.next(5 * MS), Some(5 * MS));
        let mut near = Budget::Until(Some(Instant::now() + 50 * MS));
        assert!(near.next(Duration::from_secs(1)).unwrap() <= 50 * MS);
    }
}
