//! The semaphore's room: [`Semaphore`]; its permit's shape
//! ([`PermitShape`]: one key per slot holding the token, as a lock, with
//! the semaphore's count checked ahead of it and kept alive with it); the
//! survey of free slots; and their scripts. Its safety argument is on
//! [`Semaphore`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::base::error::{Error, Result};
use crate::base::keys;
use crate::base::node_error::NodeFailures;
use crate::engine::guard::{LockGuard, Permit};
use crate::engine::pipeline::{Answer, Engine, Names, Refusal, Removal, Round, Shape, Vote};
use crate::engine::quorum::{self, Tally};
use crate::engine::single::{Ahead, OneKey};
use crate::engine::stage::Budget;
use crate::members::request::Said;
use crate::members::script::scripts;
use crate::shapes::manager::{LockManager, Wait, waiting_family};

scripts! {
    /// A semaphore's count check, ahead of a permit's acquisition.
    PERMITS, "permit-count", "semaphore/permits.lua",
        keys ["count"], args ["permits", "keep"];
    /// A semaphore's survey of its slots.
    FREE, "free-permit", "semaphore/free.lua",
        keys ["slot*"], args ["from"];
}

/// A permit's shape: the lock on the slot key of the semaphore, whose
/// release wakes the semaphore's waiters (any slot will do) and hands
/// nothing on; the stored count is checked ahead of the `SET` in the same
/// write, and kept alive with the permit (see "The count is stored
/// with the semaphore" on [`Semaphore`]).
pub(crate) struct PermitShape {
    /// The slot's key; its releases wake the semaphore's name.
    slot: OneKey,
    /// The key of the semaphore's stored count.
    count_key: Box<[u8]>,
    /// The count this client was made with.
    count: u32,
}

impl PermitShape {
    /// The permit on the slot `key` of the semaphore `name`, made with
    /// `count` permits.
    fn new(key: &[u8], name: &[u8], count: u32) -> PermitShape {
        PermitShape {
            slot: OneKey::new(key, name),
            count_key: keys::permits_key(name).into(),
            count,
        }
    }
}

impl Shape for PermitShape {
    fn resources(&self) -> Names<'_> {
        Names::One(&self.slot.key)
    }

    fn shown(&self) -> String {
        shown(self.slot.wakes(), self.count)
    }

    fn wakes(&self) -> Names<'_> {
        Names::One(self.slot.wakes())
    }

    fn holder(&self) -> Option<Vec<u8>> {
        self.slot.holder()
    }

    /// The count check (`PERMITS`, by hash: the handshake loads it) ahead
    /// of `SET slot token NX PX ttl`: a member that stores another count
    /// answers that, and grants nothing.
    fn take(&self, engine: &Engine, token: &[u8], ttl_ms: u64, keep: Option<&str>) -> Vec<Vote> {
        let count = self.count.to_string();
        let kept = engine.companion_keep(ttl_ms).to_string();
        let ahead = Ahead {
            lua: &PERMITS,
            keys: &[&self.count_key],
            args: &[count.as_bytes(), kept.as_bytes()],
        };
        self.slot.take(engine, token, ttl_ms, keep, Some(ahead))
    }

    /// Another count stored on some member: every client of one semaphore
    /// must give the same count.
    fn refusal(&self, engine: &Engine, ttl_ms: u64, votes: &[Vote]) -> Option<Error> {
        let stored = OneKey::differs(votes)?;
        Some(Error::invalid_argument(format!(
            "this semaphore was made with {} permits, but its members store {stored}: \
             every client of one semaphore must give the same count (it may change once \
             no permit has been held for {:?})",
            self.count,
            Duration::from_millis(engine.companion_keep(ttl_ms))
        )))
    }

    fn raise(&self, engine: &Engine, only: &[bool], token: &[u8], to: u64, keep: &str) -> Tally {
        self.slot.raise(engine, only, token, to, keep)
    }

    /// The slot's extend, which keeps the stored count alive with it.
    fn extend(&self, engine: &Engine, token: &[u8], ttl_ms: u64, last: bool) -> Tally {
        self.slot
            .extend(engine, token, ttl_ms, last, &[&self.count_key])
    }

    fn unlock(&self, engine: &Engine, token: &[u8], removal: Removal<'_>) -> Tally {
        Tally::count(self.slot.unlock(engine, token, removal, None))
    }
}

/// A semaphore as errors name it, whatever its count:
/// `nightly (a semaphore of 3 permits)`.
fn shown(name: &[u8], count: u32) -> String {
    let plural = if count == 1 { "" } else { "s" };
    format!(
        "{} (a semaphore of {count} permit{plural})",
        quorum::display(name)
    )
}

/// The most permits a semaphore may have: the survey reads every slot key
/// in one script.
pub const MAX_PERMITS: u32 = 10_000;

/// Up to this many permits, the survey answers a mask of every free slot
/// (exact in a Lua number); beyond, the first free slot it sees.
const MASK_PERMITS: u32 = 52;

/// At most K holders at once across machines, over the same members as
/// the lock; made by [`LockManager::semaphore`]. Each holder has a
/// [`Permit`]. Cheap to clone (clones share the slot hint).
///
/// # Design: K slots, each a Redlock mutex
///
/// A semaphore named `S` with K permits is K ordinary locks, the *slots*
/// `S:permit:0` … `S:permit:K-1` (each in `S`'s Redis Cluster slot, see
/// [`fence_key`](crate::fence_key) for the naming rule). A permit is one
/// slot taken with the lock's own acquisition round: `SET NX PX` on every
/// member, granted by a majority within the TTL, with its own fencing
/// counter, extend, keep-alive and release.
///
/// An attempt tries one slot first (a per-semaphore counter spreads a
/// manager's threads over the slots), so an uncontended acquisition is one
/// round trip, as a lock. When that slot is held by another owner on some
/// member, one *survey* round asks every member which slots it sees free
/// (one script over the K keys: a mask of them for K ≤ 52, else the first
/// free one from a random start), and a slot free on a majority is tried
/// at once. When no slot is free on a majority, every permit is in use:
/// [`Error::Taken`].
///
/// # Why it is safe
///
/// Never more than K permits are valid at once.
///
/// Each slot is a Redlock mutex with a strict-majority quorum, so under the
/// lock's own assumptions (bounded clock drift, restart safety, no
/// eviction) at most one permit per slot is valid at any moment: two
/// holders of one slot would need two majorities that share a member, and
/// that member grants a key only while it holds none. There are K slots,
/// hence at most K valid permits, whatever subset of members each client
/// reaches. The survey only chooses which slot to try; it never grants.
///
/// Counting holders per member instead (as `redis-semaphore`'s
/// `RedlockSemaphore` does) is not safe: with 3 members and 2 permits,
/// three clients each cut off from a different member each count 2 of 3
/// members with room, yet three hold a permit. Per-slot mutual exclusion
/// has no such gap (a test reproduces exactly that partition).
///
/// # The count is stored with the semaphore
///
/// K slots bound the holders only if every client agrees on K: a client
/// given K = 3 would take slot 1 or 2 beside a client given K = 1 holding
/// slot 0. So each member stores the count at `S:redlock-permits` (in
/// `S`'s slot), and every permit's acquisition checks it in the same write
/// (one script ahead of the `SET NX`): where no count is stored it stores
/// its own, where its own is stored it keeps it alive, and where another
/// is stored the member grants nothing and the attempt fails with
/// [`Error::InvalidArgument`] naming both counts. The count lives at least
/// as long as every permit granted with it (each acquisition and renewal
/// keeps it alive past the permit's TTL, like a fencing counter), so two
/// clients with different counts cannot both hold permits: a member that
/// granted one of them a permit still stores its count while that permit
/// is valid, and any two majorities share a member. A semaphore's count
/// can change once no permit has been taken or renewed for the fencing
/// expiry ([`Builder::fencing_expiry`](crate::Builder::fencing_expiry),
/// 10 minutes by default; the TTL with fencing off).
///
/// # Model checked
///
/// The project's model checker (TESTING.md in the repository, "Model
/// checking") runs the count's rule over every interleaving of a small
/// system: three servers (one with a clock fast by the drift), a client
/// made with one permit and one made with two, each taking its own slot,
/// the count's check and the `SET` behind it run together or apart with
/// other requests between, every request also late, holders extending,
/// for 60 ms; and, in a run of 30 ms (shorter than the TTL: no count
/// lapses there), a request lost and one run twice. Every schedule of 6
/// to 8 steps (a million states), never two valid permits. With the count's check off they hold at once
/// in 2 steps; with the extend not keeping the count alive, the count
/// lapses under an extended permit and the other client takes its slot, in
/// 7. The scripts' models are tied to the Lua by a differential test on
/// real servers. Left out: the survey and the choice of slot, two
/// clients on one slot, the refusal of the whole attempt when a member
/// stores another count (the model grants on a quorum regardless: more
/// than the library allows), fencing, restarts, holds.
///
/// # Why a minority of dead members costs no permit
///
/// A slot is granted by any majority, so with a minority of members dead
/// or unreachable every free slot is still acquirable, for any K.
///
/// # Waking
///
/// A permit's release announces on the semaphore's own release channel
/// (`release_channel(S)`), and waiters queue on the semaphore's name: any
/// permit released wakes the longest waiter of each manager.
#[derive(Clone, Debug)]
pub struct Semaphore {
    manager: LockManager,
    name: Box<[u8]>,
    permits: u32,
    /// Where the next attempt starts: spreads a manager's threads.
    next: Arc<AtomicU32>,
}

impl Permit {
    /// Which of the semaphore's K slots this permit holds (0-based).
    pub fn slot(&self) -> u32 {
        self.index()
    }

    /// A fencing token, strictly greater than every earlier one of the
    /// same slot (see [`LockGuard::fencing_token`]); `None` with fencing
    /// off.
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing()
    }

    /// The permit as a plain [`LockGuard`] on its slot (the permit stays
    /// held; the guard releases it).
    pub fn into_guard(self) -> LockGuard {
        self.into_mode()
    }
}

impl Semaphore {
    pub(crate) fn new(manager: LockManager, name: &[u8], permits: u32) -> Result<Semaphore> {
        keys::check_resource(name)?;
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::invalid_argument(format!(
                "a semaphore has 1 to {MAX_PERMITS} permits, got {permits}"
            )));
        }
        Ok(Semaphore {
            manager,
            name: name.into(),
            permits,
            next: Arc::new(AtomicU32::new(random_u32() % permits)),
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// How many permits it has.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    waiting_family! {
        /// Takes a permit for `ttl`, waiting as [`LockManager::lock`] does
        /// (its retry budget; woken by any permit's release). Each attempt
        /// tries a first slot, and the survey's choice if that was taken.
        ///
        /// # Errors
        ///
        /// [`Error::Taken`] when every permit stayed in use, [`Error::NoQuorum`]
        /// when too many members failed, [`Error::InvalidArgument`] when the
        /// members store another permit count for this name (see the module
        /// docs), and the lock's other errors.
        fn acquire, try_acquire, try_acquire_for, try_acquire_until => acquire_with
        () -> Permit
    }

    /// Takes a permit for `ttl`, waiting as `wait` says (see
    /// [`LockManager::lock_with`]).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    pub fn acquire_with(&self, ttl: Duration, wait: Wait) -> Result<Permit> {
        self.take(ttl, self.manager.budget(wait))
    }

    fn take(&self, ttl: Duration, budget: Budget) -> Result<Permit> {
        let engine = self.manager.engine();
        let ttl_ms = engine.acquisition_ttl(ttl)?;
        self.manager
            .stage()
            .permit_attempts(&self.name, budget, |token| {
                // The attempt's second try (after the survey) writes a value
                // of its own, as every attempt does: it may pick the slot the
                // first tried, whose clean-up, delivered late, must not
                // delete it (see `attempt_token`).
                let second = [&token[..], b".2"].concat();
                let grant = |slot: u32, token: &Vec<u8>| {
                    let key = keys::permit_key(&self.name, slot);
                    let shape = Arc::new(PermitShape::new(&key, &self.name, self.permits));
                    let granted =
                        engine.acquire(&*shape, token, ttl_ms, &mut Refusal::default())?;
                    Ok(Permit::with_index(
                        engine.clone(),
                        shape,
                        token.clone(),
                        Duration::from_millis(ttl_ms),
                        granted,
                        Some(slot),
                    ))
                };
                let first = self.next.fetch_add(1, Ordering::Relaxed) % self.permits;
                match grant(first, token) {
                    Err(Error::Taken { .. }) if self.permits > 1 => {}
                    // Some member holds it for another owner, some failed.
                    Err(Error::NoQuorum {
                        agreed,
                        nodes,
                        ref failures,
                        ..
                    }) if self.permits > 1
                        && nodes > agreed + failures.as_ref().map_or(0, |f| f.len()) => {}
                    other => return other,
                }
                // Taken: ask every member which slots it sees free.
                let keys: Vec<Vec<u8>> = (0..self.permits)
                    .map(|i| keys::permit_key(&self.name, i))
                    .collect();
                let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                let start = random_u32() % self.permits;
                let masks = self.permits <= MASK_PERMITS;
                let answers = survey(engine, &refs, (!masks).then_some(start as usize));
                let mut votes = vec![0usize; self.permits as usize];
                for answer in answers.iter().flatten() {
                    match answer {
                        Ok(Said::Yes(mask)) if masks => {
                            for (i, v) in votes.iter_mut().enumerate() {
                                *v += usize::from(mask >> i & 1 == 1);
                            }
                        }
                        Ok(Said::Yes(i)) => {
                            if let Some(v) = votes.get_mut((*i - 1) as usize) {
                                *v += 1;
                            }
                        }
                        _ => {}
                    }
                }
                let quorum = quorum::quorum(answers.len());
                // The first slot free on a majority, from a random start.
                let chosen = (0..self.permits)
                    .map(|j| (start + j) % self.permits)
                    .find(|&i| votes[i as usize] >= quorum);
                match chosen {
                    Some(slot) => grant(slot, &second),
                    None => Err(self.all_in_use(Tally::count(answers))),
                }
            })
    }

    /// The error when no slot is free on a majority.
    fn all_in_use(&self, survey: Tally) -> Error {
        let nodes = survey.yes + survey.no + survey.gone + survey.failures.len();
        Error::Taken {
            resource: shown(&self.name, self.permits),
            // Members that saw every permit held.
            held_elsewhere: survey.no,
            nodes,
            quorum: quorum::quorum(nodes),
            held_here: false,
            holder: None,
            failures: NodeFailures::some(survey.failures),
        }
    }
}

impl LockManager {
    /// A semaphore named `name` with `permits` permits over this manager's
    /// members: at most `permits` valid [`Permit`]s at once, across every
    /// manager using the same name and count (see [`Semaphore`]).
    /// Permits use this manager's settings (retry budget, fencing,
    /// waking).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for 0 permits, more than
    /// [`MAX_PERMITS`], or a name a lock could not have.
    pub fn semaphore(&self, name: impl AsRef<[u8]>, permits: u32) -> Result<Semaphore> {
        Semaphore::new(self.clone(), name.as_ref(), permits)
    }
}

fn random_u32() -> u32 {
    getrandom::u32().unwrap_or(0)
}

/// A semaphore's survey on every member: with `start` `None` (at most 52
/// keys), the mask of the free permits among `keys`; otherwise the first
/// free permit from index `start` on, plus one (0: none free).
fn survey(engine: &Engine, keys: &[&[u8]], start: Option<usize>) -> Vec<Answer> {
    let arg = start.map_or_else(|| "mask".to_owned(), |s| s.to_string());
    let round = Round {
        count: true,
        replicated: false,
        decides: false,
    };
    engine.script(&FREE, keys, &[arg.as_bytes()]).run(round)
}
