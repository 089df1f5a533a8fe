//! The pipeline every shape plugs into: one acquisition, one extend, one
//! release-and-wake. A shape (the lock, a set, a permit, a read lock: see
//! their modules) supplies only its scripts, its keys and how a member's
//! answer counts ([`Shape`]); the rules that make a grant safe live here,
//! once:
//!
//! - **Members.** An attempt starts only while no two members have turned
//!   out to be the same server or cluster (their votes would count
//!   twice), and fails if such a pair is found during the round.
//! - **TTL.** Every TTL used is noted first, so that a server seen
//!   restarted is kept out of votes for the longest of them (see
//!   `restart.rs`; requests that decide a holder get no answer from it).
//! - **Tally.** A grant needs a majority of members to say yes.
//! - **Fencing.** The token is the highest count among the granting
//!   members; every granting member with any counter below it is raised
//!   to it before the grant counts, so that a quorum holds the token on
//!   every counter, and any later quorum, which shares a member with it,
//!   counts past it. A raise that leaves fewer than a quorum fails the
//!   attempt.
//! - **Validity.** `TTL - elapsed - drift`, counted from the round's
//!   start (see `quorum::valid_until`); none left is a failure.
//! - **Clean-up.** A failed attempt removes whatever it may have written
//!   (a yes, or a failure that may have run) before it returns; a grant
//!   removes what a member took only in part.
//! - **Extend.** Whatever an extend round returns, the validity after it
//!   is at most the new TTL less the drift from the round's start (see
//!   `quorum::after_extend`, applied by the guard).
//! - **Release.** Deletes only what holds our token, and announces each
//!   release it made on the name's channel, which wakes waiters.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::base::counted::Counted;
use crate::base::entropy::{Entropy, TOKEN_BYTES};
use crate::base::error::{Error, Result};
use crate::base::node_error::NodeError;
use crate::base::telemetry;
use crate::base::text::Decimal;
use crate::engine::decide;
use crate::engine::quorum::{self, Tally};
use crate::engine::wait::Waiters;
use crate::members::identities::Identities;
use crate::members::member::Member;
use crate::members::request::Replicas;
use crate::members::restart::Policy;

mod scripts;
mod shape;

pub(crate) use scripts::ScriptCall;
pub(crate) use shape::{Answer, Granted, Names, Refusal, Removal, Shape, Vote};

/// The largest TTL accepted: 2^52 ms, about 142,000 years. Anything
/// larger would risk overflowing Redis's millisecond expiry times.
pub const MAX_TTL: Duration = Duration::from_millis(1 << 52);

/// A token: the random bytes, hex encoded so that it reads well in
/// `redis-cli`, then the holder's name, if any (see `holder.rs`).
pub(crate) type Token = Vec<u8>;

/// A fresh token: random bytes from the operating system's generator,
/// drawn in batches by `entropy` (the manager's, see `entropy.rs`),
/// followed by `name` (the manager's [`holder_name`](Engine::holder_name):
/// empty, or `@host/pid[/label]`).
pub(crate) fn new_token(entropy: &Entropy, name: &[u8]) -> Result<Token> {
    let mut raw = [0u8; TOKEN_BYTES];
    entropy.token_bytes(&mut raw).map_err(|e| Error::Entropy {
        source: Box::new(e),
    })?;
    let mut token = Vec::with_capacity(2 * TOKEN_BYTES + name.len());
    for byte in raw {
        token.extend_from_slice(&[HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]]);
    }
    token.extend_from_slice(name);
    Ok(token)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// An attempt's clock reading, from which a fencing counter that is
/// behind it (created anew, or gone back with a restart from an older
/// copy) counts on: microseconds since the Unix epoch on this machine's
/// clock (0 if the clock is before 1970). A node cannot count faster
/// than one increment per microsecond, so a counter's value stays below
/// the clock, and a count from a later reading is above every value an
/// earlier one reached (see the crate docs' fencing section for the
/// exact assumption). Stays below 2^53 until the
/// year 2255.
pub(crate) fn counter_start() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// One manager's engine: its members and settings, its waiters and the
/// resources it holds, shared by its clones and its guards (what every
/// round needs). Its methods are the pipeline's stages:
/// [`acquire`](Self::acquire), extend and release, by the rules in the module docs.
pub(crate) struct Engine {
    pub(crate) members: Arc<[Member]>,
    pub(crate) drift_factor: f64,
    pub(crate) node_timeout: Duration,
    /// How long (ms) fair releases hand a key on (from its first hand-off
    /// or last yield) before one yields it to clients that do not queue
    /// (see `Builder::fair_yield`); `None`: never.
    pub(crate) fair_yield_ms: Option<u64>,
    /// A TTL too short for the node timeout was logged (once a manager).
    pub(crate) warned_short_ttl: AtomicBool,
    /// Acquisitions count fencing counters (see `Builder::fencing`).
    pub(crate) fencing: bool,
    /// How long, in ms, a counter lives after its last acquisition or
    /// renewal: the fencing counter with fencing on, and a counter a
    /// shape keeps whatever the setting (an election's terms, see
    /// [`Shape::keep`]).
    pub(crate) counter_expiry_ms: u64,
    /// Whether releases publish and waiters listen for them.
    pub(crate) wake_on_release: bool,
    /// What follows the random part of this manager's tokens: empty, or
    /// `@host/pid[/label]` (see `holder.rs`).
    pub(crate) holder_name: Vec<u8>,
    /// The random bytes of this manager's tokens (see `entropy.rs`).
    pub(crate) entropy: Entropy,
    /// Lock waiters queue across managers (see `fair.rs`).
    pub(crate) fair: bool,
    /// When a server last refused the fair queue's commands (waiters then
    /// wait unfairly for a while; see `fair.rs`).
    pub(crate) fair_refused: Mutex<Option<Instant>>,
    /// This manager's threads waiting for busy resources.
    pub(crate) waiters: Waiters,
    /// Resources a guard of this manager holds, with how many guards.
    pub(crate) held: Mutex<Counted>,
    /// Some member is a Redis Cluster (requests then get their cluster
    /// variant).
    pub(crate) has_clusters: bool,
    /// What the members turned out to be at first contact.
    pub(crate) identities: Arc<Identities>,
    /// Replicas that must acknowledge an acquisition or extend for the
    /// member's vote to count, and the `WAIT` timeout in ms.
    pub(crate) replica_acks: Option<(u32, String)>,
    /// When restarted servers vote again (shared with every node).
    pub(crate) restart: Arc<Policy>,
    /// The servers a token names, as last made for node members, and the
    /// sum of their `run_id` changes then (see
    /// [`server_names`](Self::server_names)).
    pub(crate) names: Mutex<(u64, Vec<u8>)>,
}

/// What a script round is for: how its answers count, and whether they
/// wait for replicas and decide a holder.
#[derive(Clone, Copy)]
pub(crate) struct Round {
    /// The script answers a count, not yes or no.
    pub(crate) count: bool,
    /// A yes counts only once the replicas asked for acknowledged it.
    pub(crate) replicated: bool,
    /// Its answers decide a holder: servers kept out after a restart give
    /// none.
    pub(crate) decides: bool,
}

/// Releases and clean-ups: a yes or no, deciding no holder.
pub(crate) const RELEASE: Round = Round {
    count: false,
    replicated: false,
    decides: false,
};

/// An extend script's TTL argument: `ttl_ms`, which the script sets only
/// where it raises the key's expiry; with `last`, `-ttl_ms`, which it sets
/// exactly, lowering it.
///
/// An extend never lowers an expiry: one delivered late (sent on a
/// connection that then timed out) would cut a later, longer extend on
/// its node while the holder counts that node's vote. Only a guard's
/// last request lowers it (the end of an at-least hold, see
/// [`Engine::hold_for`]): nobody counts on the guard's keys after it (a
/// renewal already under way may still raise them: the keys then last
/// longer, never shorter).
pub(crate) fn ttl_arg(ttl_ms: u64, last: bool) -> String {
    if last {
        format!("-{ttl_ms}")
    } else {
        ttl_ms.to_string()
    }
}

/// Acquisitions and extends decide a holder, and wait for replicas.
pub(crate) const DECIDE: Round = Round {
    count: false,
    replicated: true,
    decides: true,
};

/// An acquisition whose refusals may name who holds the key (a count:
/// see `ScriptCall::run_naming`).
pub(crate) const NAMING: Round = Round {
    count: true,
    ..DECIDE
};

/// A read's round: it decides a holder (servers kept out after a
/// restart give no answer), writes nothing a replica must hold, and its
/// replies are kept whole (see `ScriptCall::read`).
pub(crate) const READS: Round = Round {
    count: false,
    replicated: false,
    decides: true,
};

/// The announcement arguments of a script that deletes lock keys: the
/// verb (as each server takes it: see [`PUBLISH`]) and the message; none
/// when releases are not announced.
pub(crate) fn announce_args(message: Option<&[u8]>) -> Vec<&[u8]> {
    match message {
        Some(message) => vec![PUBLISH, message],
        None => Vec::new(),
    }
}

/// A script's arguments `args`, then its announcement on one `channel`
/// (the verb, the message, the channel) when releases are announced
/// (`message`): an unlock's, a read lock's, a forced unlock's.
pub(crate) fn announced_on<'a>(
    mut args: Vec<&'a [u8]>,
    message: Option<&'a [u8]>,
    channel: &'a [u8],
) -> Vec<&'a [u8]> {
    if let Some(message) = message {
        args.extend([PUBLISH, message, channel]);
    }
    args
}

pub(crate) use crate::members::op::{Announce, Args, PUBLISH};

/// The resource that refused an attempt on a majority of the members, if
/// one did: where a set waits in line. Every member must be told the same
/// (see `Set::wait_at`), and a key a majority refused is where the set is
/// held up; a refusal by fewer (members that differ under faults) moves
/// it nowhere, so that it does not go from queue to queue at every
/// attempt, first in each by its early arrival. `busy`: the resource each
/// member's refusal named, if any.
pub(crate) fn most_busy(
    busy: impl ExactSizeIterator<Item = Option<usize>>,
    resources: usize,
) -> Option<usize> {
    let quorum = quorum::quorum(busy.len());
    let mut count = vec![0usize; resources];
    for i in busy.flatten().filter(|&i| i < resources) {
        count[i] += 1;
    }
    count.iter().position(|&c| c >= quorum)
}

impl Engine {
    /// The replicas whose acknowledgement a yes of a round of `round`
    /// waits for (`WAIT`, when replica acknowledgements are asked for).
    pub(crate) fn waits(&self, round: Round) -> Option<Replicas<'_>> {
        match &self.replica_acks {
            Some((acks, ms)) if round.replicated => Some(Replicas { acks: *acks, ms }),
            _ => None,
        }
    }

    /// Fails once two members turned out to be the same server or cluster
    /// (found at first contact): their votes would count twice.
    pub(crate) fn check_members(&self) -> Result<()> {
        match self.identities.conflict.get() {
            Some(why) => Err(Error::invalid_config(why.clone())),
            None => Ok(()),
        }
    }

    /// Checks a TTL and returns it in whole milliseconds (what `PX` and
    /// `PEXPIRE` take; a fraction of a millisecond is dropped).
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<u64> {
        if ttl > MAX_TTL {
            return Err(Error::invalid_argument(format!(
                "TTL {ttl:?} is larger than the maximum of {MAX_TTL:?}"
            )));
        }
        let ttl_ms = ttl.as_millis() as u64;
        if ttl_ms == 0 {
            return Err(Error::invalid_argument(format!(
                "TTL must be at least 1 ms, got {ttl:?}"
            )));
        }
        let whole = Duration::from_millis(ttl_ms);
        if quorum::validity(whole, Duration::ZERO, self.drift_factor).is_none() {
            return Err(Error::invalid_argument(format!(
                "TTL {ttl:?} leaves no validity after the clock drift allowance of {:?}; \
                 give a TTL of at least {:?}",
                quorum::drift(whole, self.drift_factor),
                quorum::shortest_ttl(Duration::ZERO, self.drift_factor)
            )));
        }
        Ok(ttl_ms)
    }

    /// [`check_ttl`](Self::check_ttl) for an acquisition's TTL, which
    /// also warns (once a manager, with the `log` feature) when it is too
    /// short for the node timeout (see "TTLs" in the crate docs: accepted,
    /// as an extend's short TTL is without a word).
    pub(crate) fn acquisition_ttl(&self, ttl: Duration) -> Result<u64> {
        let ttl_ms = self.check_ttl(ttl)?;
        if let Some(shortest) = self.short_of(Duration::from_millis(ttl_ms))
            && !self.warned_short_ttl.swap(true, Ordering::Relaxed)
        {
            crate::base::logging::log!(
                warn,
                "redlock_sync::config",
                "TTL {ttl:?} is too short for the node timeout of {:?}: while one member \
                 takes the whole node timeout to answer, every attempt fails (no \
                 validity left); give a TTL of at least {shortest:?}",
                self.node_timeout
            );
        }
        Ok(ttl_ms)
    }

    /// When `ttl` leaves no validity after a round in which one member
    /// takes the whole node timeout (the round waits for it): the
    /// shortest TTL that does.
    pub(crate) fn short_of(&self, ttl: Duration) -> Option<Duration> {
        quorum::validity(ttl, self.node_timeout, self.drift_factor)
            .is_none()
            .then(|| quorum::shortest_ttl(self.node_timeout, self.drift_factor))
    }

    /// The error of a round a quorum confirmed too late for `ttl`.
    pub(crate) fn no_validity(&self, resource: String, elapsed: Duration, ttl: Duration) -> Error {
        Error::NoValidity {
            resource,
            elapsed,
            ttl,
            shortest: self.short_of(ttl),
        }
    }

    /// How long (in ms) a counter lives after an acquisition or renewal
    /// with `ttl_ms`: the idle expiry, and never less than the TTL, so
    /// that it outlives every holder counted with it. The one rule for
    /// every counter: a fencing counter (with fencing on, see
    /// [`Shape::keep`]), an election's terms (whatever the setting), and
    /// the keys kept alive beside a lock key ([`companion_keep`](Self::companion_keep)).
    pub(crate) fn counter_keep(&self, ttl_ms: u64) -> u64 {
        self.counter_expiry_ms.max(ttl_ms)
    }

    /// How long (in ms) a key kept alive with a lock key (its fencing
    /// counter, a semaphore's stored count) lives after an acquisition or
    /// renewal with `ttl_ms`: a counter's keep with fencing on (see
    /// [`counter_keep`](Self::counter_keep)), else the TTL.
    pub(crate) fn companion_keep(&self, ttl_ms: u64) -> u64 {
        match self.fencing {
            true => self.counter_keep(ttl_ms),
            false => ttl_ms,
        }
    }

    /// The restart rule (see [`decide::forgetful`] and the crate docs,
    /// "Restarts"): a yes from a server that a holder's value, found in
    /// the same round on another member, does not name is that member's
    /// failure (its key, if it set one, is cleaned up with the attempt's);
    /// so is, when such a value was found, the yes of a member kept out
    /// by then (its server changed while it answered). Without a holder's
    /// value found, who said yes is not weighed, and a member's yes
    /// stands as the quarantine read it.
    fn forget_restarted(&self, shape: &dyn Shape, mut votes: Vec<Vote>) -> Vec<Vote> {
        if votes.iter().all(|v| v.held.is_empty()) {
            return votes;
        }
        let servers = self.servers_of(&shape.resources());
        let yes: Vec<bool> = votes.iter().map(|v| v.yes.is_some()).collect();
        let held: Vec<Vec<Vec<u8>>> = votes
            .iter_mut()
            .map(|v| std::mem::take(&mut v.held))
            .collect();
        let forgetful = decide::forgetful(&yes, &servers, &held);
        // A member's server is read as its last connection's (`servers`,
        // read after the votes came), which need not be the connection
        // that said yes (a Sentinel group's, while its connections reach
        // two servers). A server other than the one read since that
        // connection was made is a change of `run_id` seen, which keeps
        // the member out from then on: kept out now, its yes may be
        // another server's, and is not counted either.
        let kept_out = self.kept_out(&shape.resources());
        let moved = |i: usize| yes[i] && kept_out[i];
        for (i, vote) in votes.iter_mut().enumerate() {
            if !(forgetful[i] || moved(i)) {
                continue;
            }
            let runs: Vec<String> = servers[i]
                .iter()
                .map(|d| String::from_utf8_lossy(d).into_owned())
                .collect();
            let why = match forgetful[i] {
                true => format!(
                    "its yes is not counted: its server (run_id {}...) is not among those that \
                     a holder's value, found on another member, names: it may have restarted \
                     since it granted that holder, and forgotten the grant",
                    runs.join(", ")
                ),
                false => "its yes is not counted: its server changed while it answered (a new \
                          run_id seen), and is kept out as a restarted one"
                    .to_owned(),
            };
            vote.yes = None;
            vote.low = 0;
            vote.dirty = true;
            vote.answer = Some(Err(self.members[i].not_counted(why)));
        }
        votes
    }

    /// One acquisition attempt of `shape` with `token` for `ttl_ms`, by
    /// the rules in the module docs. On failure, `refusal` says what the
    /// members found (see [`Refusal`]), and whatever the attempt may have
    /// written is removed from every member before it returns.
    pub(crate) fn acquire(
        &self,
        shape: &dyn Shape,
        token: &[u8],
        ttl_ms: u64,
        refusal: &mut Refusal,
    ) -> Result<Granted> {
        self.check_members()?;
        self.restart.note_ttl(ttl_ms);
        let ttl = Duration::from_millis(ttl_ms);
        let keep = shape.keep(self, ttl_ms);
        let start = Instant::now();
        let votes = self.forget_restarted(shape, shape.take(self, token, ttl_ms, keep.as_deref()));
        crate::base::logging::log!(
            trace,
            "redlock_sync::attempt",
            "{} by {}: {}",
            shape.shown(),
            crate::base::text::token_prefix(token),
            votes.iter().map(Vote::traced).collect::<Vec<_>>().join(" ")
        );
        let quorum = quorum::quorum(self.members.len());
        let refused = shape.refusal(self, ttl_ms, &votes);
        let decide::Count {
            granted,
            highest,
            reached,
        } = decide::count(
            votes.iter().map(Vote::ballot),
            self.members.len(),
            refused.is_some(),
        );
        let lags = |v: &Vote| decide::lags(&v.ballot(), highest);
        let mut failed = None;
        if let (true, Some(keep)) = (reached, &keep) {
            // Every counter on every granting member must reach the token,
            // not just the member's highest: a Redis Cluster member whose
            // hottest slot group made a set's token has its other groups
            // below it.
            let behind = votes.iter().filter(|v| lags(v)).count();
            if behind > 0 {
                let lagging: Vec<bool> = votes.iter().map(lags).collect();
                let raised = shape.raise(self, &lagging, token, highest, keep);
                if !decide::raised_enough(granted, behind, raised.yes, self.members.len()) {
                    failed = Some(raised);
                }
            }
        }
        let elapsed = start.elapsed();
        let conflict = self.check_members().err();
        let valid_until = (reached && failed.is_none() && conflict.is_none())
            .then(|| quorum::valid_until(start, elapsed, ttl, self.drift_factor))
            .flatten();
        if let Some(valid_until) = valid_until {
            let failures = self.after_grant(shape, token, votes, granted);
            let fencing = keep.is_some().then_some(highest);
            telemetry::granted(granted, quorum, fencing);
            return Ok(Granted {
                valid_until,
                fencing,
                agreed: granted,
                failures,
                start,
                answered: start + elapsed,
            });
        }
        // Best effort, on every member that may hold what was written.
        let dirty: Vec<bool> = votes.iter().map(|v| v.dirty).collect();
        if dirty.contains(&true) {
            self.clean_up(shape, &dirty, token);
        }
        let resources = shape.resources();
        *refusal = Refusal {
            blocked: most_busy(votes.iter().map(|v| v.busy), resources.len()),
            shared: votes.iter().any(|v| v.shared),
            lapse: None,
            queued: false,
            fell_back: false,
        };
        if let Some(err) = conflict.or(refused) {
            return Err(err);
        }
        Err(self.attempt_error(shape, votes, failed, (granted, highest), elapsed, ttl))
    }

    /// The error of an attempt without a grant, from its `votes`: the
    /// raise's answers in place of the lagging members' grants when the
    /// raise `failed`, no validity left when enough agreed (`granted`),
    /// else who held it or what failed.
    fn attempt_error(
        &self,
        shape: &dyn Shape,
        votes: Vec<Vote>,
        failed: Option<Tally>,
        (granted, highest): (usize, u64),
        elapsed: Duration,
        ttl: Duration,
    ) -> Error {
        let lags = |v: &Vote| decide::lags(&v.ballot(), highest);
        let quorum = quorum::quorum(self.members.len());
        let resources = shape.resources();
        let shown = shape.shown();
        match failed {
            // The attempt as every member answered it: the raise's answers
            // in place of the lagging members' grants (a restarted
            // member's failure names the quarantine), not the raise
            // round's alone ("0 of 1 nodes agreed").
            Some(raised) => {
                let mut all =
                    Tally::count(votes.into_iter().filter(|v| !lags(v)).map(|v| v.answer));
                all.add(raised);
                all.no_quorum(&shown)
            }
            None if granted >= quorum => self.no_validity(shown, elapsed, ttl),
            None => {
                let mut err =
                    Tally::count(votes.into_iter().map(|v| v.answer)).acquire_error(&shown);
                if let Error::Taken {
                    held_here, holder, ..
                } = &mut err
                {
                    *held_here = resources.iter().any(|r| self.held_here(r));
                    *holder = shape.holder().map(|h| crate::base::holder::describe(&h));
                }
                err
            }
        }
    }

    /// After a grant: what members took only in part goes back at once,
    /// and the members that failed (redundancy lost) are returned, and
    /// logged.
    fn after_grant(
        &self,
        shape: &dyn Shape,
        token: &[u8],
        votes: Vec<Vote>,
        granted: usize,
    ) -> Vec<NodeError> {
        if votes.iter().any(|v| v.partial) {
            let partial: Vec<bool> = votes.iter().map(|v| v.partial).collect();
            self.clean_up(shape, &partial, token);
        }
        // (Collected only when some failed: collected in place, the
        // votes' buffer would be shrunk on every acquisition.)
        if !votes.iter().any(|v| matches!(v.answer, Some(Err(_)))) {
            return Vec::new();
        }
        let failures: Vec<NodeError> = votes
            .into_iter()
            .filter_map(|v| match v.answer {
                Some(Err(e)) => Some(e),
                _ => None,
            })
            .collect();
        crate::base::logging::log!(
            warn,
            "redlock_sync::redundancy",
            "{}: taken with {granted} of {} members agreeing; one more failure may \
             stop it: {}",
            shape.shown(),
            self.members.len(),
            failures
                .iter()
                .map(|f| f.to_string())
                .collect::<Vec<_>>()
                .join("; ")
        );
        failures
    }

    /// One extend round of `shape`, `ttl_ms` from now (the guard applies
    /// the validity rule to its tally).
    pub(crate) fn extend(&self, shape: &dyn Shape, token: &[u8], ttl_ms: u64) -> Tally {
        self.restart.note_ttl(ttl_ms);
        shape.extend(self, token, ttl_ms, false)
    }

    /// An at-least hold of what `token` holds of `shape`: an extend round
    /// to `ms` from now, which is not a TTL the restart quarantine counts
    /// (a hold of an hour would keep every restarted server out of the
    /// votes for an hour; see [`LockGuard::set_min_hold`]).
    ///
    /// [`LockGuard::set_min_hold`]: crate::LockGuard::set_min_hold
    /// It is the guard's last request: it sets the expiry to `ms` exactly,
    /// lowering it (see [`ttl_arg`]).
    pub(crate) fn hold_for(&self, shape: &dyn Shape, token: &[u8], ms: u64) -> Tally {
        shape.extend(self, token, ms, true)
    }

    /// Releases what `token` holds of `shape` on every member, and once
    /// the round is over wakes this manager's waiters of each name the
    /// shape wakes, when a member released it.
    pub(crate) fn release(&self, shape: &dyn Shape, token: &[u8]) -> Tally {
        let message = self.message(token);
        let tally = shape.unlock(self, token, Removal::release(message.as_deref()));
        crate::base::logging::log!(
            trace,
            "redlock_sync::release",
            "{} by {}: {} yes, {} no, {} gone, {} failed",
            shape.shown(),
            crate::base::text::token_prefix(token),
            tally.yes,
            tally.no,
            tally.gone,
            tally.failures.len()
        );
        // A fair hand-off is announced by the members, naming the waiter
        // it went to: no local news (it would wake this manager's first
        // waiter whoever was next), unless this manager hears nothing of
        // the name (its servers refuse it channels): its first waiter
        // then asks, and learns whose the reservation is.
        let handed = self.fair && shape.hands_off();
        if let (true, Some(message)) = (tally.yes > 0, &message) {
            for &name in shape.wakes().iter() {
                if !handed || !self.waiters.hears(name) {
                    self.waiters.released(name, message);
                }
            }
        }
        tally
    }

    /// The clean-up of a failed attempt on the members `only` selects:
    /// as a release, announced only where something was deleted (so an
    /// attempt that freed nothing wakes nobody), and waking none of this
    /// manager's threads here: its message names `token`, so the
    /// attempt's own thread ignores it.
    fn clean_up(&self, shape: &dyn Shape, only: &[bool], token: &[u8]) {
        let message = self.message(token);
        shape.unlock(self, token, Removal::clean_up(only, message.as_deref()));
    }

    /// The message announcing one unlock by `token` (none when releases
    /// are not announced): the token, then a count that tells apart the
    /// unlocks of one token (a release and the clean-ups of its failed
    /// attempts).
    pub(crate) fn message(&self, token: &[u8]) -> Option<Vec<u8>> {
        static UNLOCKS: AtomicU64 = AtomicU64::new(0);
        self.wake_on_release.then(|| {
            let n = Decimal::of(UNLOCKS.fetch_add(1, Ordering::Relaxed));
            let n = n.as_bytes();
            let mut message = Vec::with_capacity(token.len() + 1 + n.len());
            message.extend_from_slice(token);
            message.push(b':');
            message.extend_from_slice(n);
            message
        })
    }

    /// Marks `resource` as held by a guard of this manager (see
    /// [`held_here`](Self::held_here)).
    pub(crate) fn hold(&self, resource: &[u8]) {
        self.held.lock().add(resource);
    }

    /// A guard of this manager for `resource` is gone.
    pub(crate) fn let_go(&self, resource: &[u8]) {
        self.held.lock().remove(resource);
    }

    /// Whether a guard of this manager (or a clone) for `resource` is
    /// alive: a `Taken` then most likely means the caller already holds
    /// it (locks are not re-entrant).
    pub(crate) fn held_here(&self, resource: &[u8]) -> bool {
        self.held.lock().contains(resource)
    }
}

mod names;

#[cfg(test)]
mod tests;
