//! The election's room: [`Election`], [`Leadership`] and [`Leader`]. A
//! leadership is the lock on the election's name (the lock's shape, with
//! a record beside it and terms always counted), so it goes through the
//! same pipeline as every other shape. Its safety argument is on
//! [`Election`].

use std::fmt;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::base::error::{Error, Result};

pub(crate) mod majority;

use crate::base::keys::{self, release_channel};
use crate::engine::fair::{Fair, FairKey, Queued};
use crate::engine::guard::LockGuard;
use crate::engine::pipeline::{Announce, Engine, Round};
use crate::engine::pipeline::{DECIDE, Names, READS, Removal, Shape, Vote};
use crate::engine::quorum::{self, Tally};
use crate::engine::single::{OneKey, Record};
use crate::engine::stage::WaitOn;
use crate::members::script::scripts;
use crate::shapes::manager::{LockManager, Wait, waiting_family};
pub use majority::Leader;
use majority::{forget_restarted, majority, view};

scripts! {
    /// A leader's record: its term and value.
    CLAIM, "claim", "election/claim.lua",
        keys ["key", "record"], args ["token", "term", "seq", "value"];
    /// Renewal of a leadership, with its record.
    EXTEND_LEADER, "extend-leader", "election/extend.lua" after "lock/expiry.lua",
        keys ["key", "fence", "record"], args ["token", "ttl", "keep"];
    /// Resignation of a leader, and clean-up of a failed campaign.
    RESIGN, "resign", "election/resign.lua",
        keys ["key", "record"], args ["token", "publish?", "message?", "channel?"];
    /// A member's view of an election, for `Election::leader`.
    READ_LEADER, "read-leader", "election/read.lua",
        keys ["key", "record"], args [];
}

/// A leadership's shape: the lock on the election's name, whose record
/// is renewed and deleted with the key (its own extend and resign
/// scripts), and whose fencing counter always counts (the terms).
pub(crate) struct LeaderShape {
    key: FairKey,
    /// The key of the election's record.
    record: Box<[u8]>,
}

impl LeaderShape {
    /// The leadership of the election `name`, waiting fairly with `fair`.
    fn new(name: &[u8], fair: Option<Fair>) -> LeaderShape {
        LeaderShape {
            key: FairKey::new(OneKey::new(name, name), fair),
            record: keys::record_key(name).into(),
        }
    }

    fn record(&self) -> Record<'_> {
        Record {
            key: &self.record,
            unlock: &RESIGN,
        }
    }
}

impl Shape for LeaderShape {
    fn resources(&self) -> Names<'_> {
        Names::One(&self.key.one.key)
    }

    fn hands_off(&self) -> bool {
        true
    }

    fn holder(&self) -> Option<Vec<u8>> {
        self.key.one.holder()
    }

    /// Terms are counted whether fencing is on or not.
    fn keep(&self, engine: &Engine, ttl_ms: u64) -> Option<String> {
        Some(engine.counter_keep(ttl_ms).to_string())
    }

    fn take(&self, engine: &Engine, token: &[u8], ttl_ms: u64, keep: Option<&str>) -> Vec<Vote> {
        self.key.take(engine, token, ttl_ms, keep)
    }

    fn raise(&self, engine: &Engine, only: &[bool], token: &[u8], to: u64, keep: &str) -> Tally {
        self.key.one.raise(engine, only, token, to, keep)
    }

    /// The key, its counter and the record, renewed together where the
    /// key holds our token.
    fn extend(&self, engine: &Engine, token: &[u8], ttl_ms: u64, last: bool) -> Tally {
        let ttl = crate::engine::pipeline::ttl_arg(ttl_ms, last);
        let fence = keys::fence_key(&self.key.one.key);
        let keep = self.keep(engine, ttl_ms).unwrap_or_default();
        let keys: [&[u8]; 3] = [&self.key.one.key, &fence, &self.record];
        let args: [&[u8]; 3] = [token, ttl.as_bytes(), keep.as_bytes()];
        Tally::count(engine.script(&EXTEND_LEADER, &keys, &args).run(DECIDE))
    }

    fn unlock(&self, engine: &Engine, token: &[u8], removal: Removal<'_>) -> Tally {
        self.key.unlock(engine, token, removal, Some(self.record()))
    }
}

impl Queued for LeaderShape {
    fn place(&self) -> Option<&Fair> {
        self.key.place()
    }
}

/// A watcher reads the election again at least this often while its
/// manager hears releases: a backstop for a message lost while every
/// listener stayed connected.
const BACKSTOP: Duration = Duration::from_secs(10);

/// Without release messages ([`Builder::wake_on_release`](crate::Builder::wake_on_release) off), a
/// watcher reads the election this often.
const UNHEARD: Duration = Duration::from_millis(500);

/// A leader election over the manager's members; made by
/// [`LockManager::election`]. Cheap to clone.
///
/// Candidates [`campaign`](Self::campaign); the one elected gets a
/// [`Leadership`], which renews itself in the background, says when it
/// is lost ([`Leadership::wait_lost`]), carries a fencing term
/// ([`Leadership::term`]) and resigns when dropped. Anyone can ask who
/// leads ([`leader`](Self::leader)) or wait for the next change
/// ([`wait_change`](Self::wait_change), [`observe`](Self::observe)).
///
/// ```no_run
/// # fn main() -> redlock_sync::Result<()> {
/// # let dlm = redlock_sync::LockManager::new(["redis://127.0.0.1:7001"])?;
/// use redlock_sync::Wait;
/// use std::time::Duration;
/// let election = dlm.election("billing-scheduler")?;
/// let lead = election.campaign_with(Duration::from_secs(10), Wait::Forever)?; // until elected
/// lead.proclaim("10.0.0.7:8080")?; // what followers read
/// while !lead.wait_lost(Duration::from_secs(1)) {
///     // lead: pass lead.term() to every write, so that storage can
///     // refuse an older leader's
/// }
/// # Ok(())
/// # }
/// ```
///
/// # Design
///
/// An election named `E` is the lock `E` with fencing always on (even
/// when [`Builder::fencing`](crate::Builder::fencing) is off): the leader
/// holds the lock key `E` on a majority of members, and its term is the
/// lock's fencing token, counted by `E`'s fencing counter
/// ([`fence_key`](crate::fence_key)). Beside the key, each member keeps
/// the election's *record* (`E:redlock-leader`, a hash in `E`'s Redis
/// Cluster slot): the leader's token, its term, and the value it
/// proclaimed with a sequence number. The record is written only where
/// the lock key holds the leader's token, expires with the key, and is
/// deleted with it on resignation. A lock on `E` and the election `E` are
/// the same thing: do not use one name for both unless that is meant.
///
/// A campaign is the lock's acquisition (one round, plus the raise of
/// lagging counters) followed by the *claim*, one round that writes the
/// record on every member holding the key and announces it; the campaign
/// succeeds once a majority has the record. A leadership is renewed by a
/// keep-alive thread every TTL/3 (the lock's extend, which also renews
/// the record) and resigns with the lock's release, which deletes both
/// and announces it on `E`'s release channel, waking candidates at once.
/// With [`Builder::fair`](crate::Builder::fair), candidates queue as lock
/// waiters do, and a resignation hands the lock key to the candidate that
/// campaigned first (a reservation, which that candidate's campaign then
/// turns into its leadership, term and record): candidates are elected in
/// arrival order. The queue decides only who may try, so the argument
/// below is unchanged (see "Fair waiting across processes" in the
/// manual).
///
/// # Why it is safe
///
/// *At most one valid leadership at any moment.* A leadership is a
/// Redlock lock, granted by a majority that holds its token, valid for
/// the TTL less the round and the drift allowance, and renewed only when
/// a majority confirms before the validity ends. Under the lock's
/// assumptions (see the crate docs, [Why the lock is
/// safe](crate#why-the-lock-is-safe): bounded clock
/// drift, no eviction, restart quarantine) two valid leaderships would
/// need two majorities holding different tokens at once, which share a
/// member.
///
/// *A leader that is cut off steps down first.* Its validity ends at
/// `start + TTL − drift`, counted from the start of its latest confirmed
/// round on its own clock; each member lets the key go no earlier than
/// `TTL` after it applied that round, which is after the round started.
/// So the leadership's [`is_leader`](Leadership::is_leader) turns false
/// and [`wait_lost`](Leadership::wait_lost) returns true before a
/// majority can have dropped the key, and so before any other candidate
/// can be elected. A renewal that misses the quorum already makes
/// [`ensure_held`](Leadership::ensure_held) (and `is_leader`) fail
/// closed.
///
/// *Terms only grow.* A term is the lock's fencing token, so it is above
/// every earlier term of the election (the fencing argument on
/// [`LockManager`]): each member's counter only grows, a majority holds
/// a counter at least the term when it is granted, and any later
/// majority shares a member with it and counts past it.
///
/// *What a term cannot do.* A leader paused (a GC pause, `SIGSTOP`, a
/// swapped-out VM) after it checked `is_leader` may act once another
/// leads: no client-side check can prevent that. The term can: give it
/// to the storage the leader writes, and have the storage refuse a term
/// lower than the highest it has seen. The older leader's writes are then
/// refused once the new leader has written.
///
/// *Reading who leads.* [`leader`](Self::leader) is a majority read: it
/// reports a leader only when a majority of members hold the same token
/// in the lock key, with the claim of that token with the highest term,
/// then sequence number, among them (a failed attempt of the same
/// campaign may have left an older term's claim; a value proclaimed successfully
/// reached a majority, and any two majorities share a member, so it is
/// seen unless a newer one is under way). It answers `None` when a
/// majority holds no leader, and fails when too few members answered to
/// tell. A member whose server is not among those that a leader's value
/// seen on another member names (it may have restarted since that grant,
/// and forgotten it; see the crate docs, "Restarts") gives no answer: a
/// reader that never saw the restart would otherwise count its empty
/// view beside a member with no leader, and answer `None` while a valid
/// leader holds on the other members. The answer may be stale by the time it is used: the leader may
/// lose its leadership right after the read. Treat it as a hint (where to
/// send requests), and let the term fence anything that matters.
///
/// *What arrives late.* A claim (the campaign's, or a proclaim given up
/// on) delivered after a newer claim of the same leadership finds that
/// claim's higher number in the record and leaves it: without that
/// order, a proclaim that failed and reached the members late would put
/// the older value back under a newer one that succeeded, and reads would
/// name it. A claim of an attempt that holds no key on a member (not
/// granted there, or resigned since) finds another token or none and
/// writes nothing there; a resignation deletes only its own token's key
/// and record.
///
/// *Model checked.* The project's tests check these promises over every
/// interleaving of a small system, to a bound: three servers (one with a
/// clock fast by the drift), two candidates, a leader's two proclaims and
/// an observer's two majority reads, each request in flight, late, lost
/// or run twice; the candidates decide with the library's verdict and
/// validity, the observer with this type's majority read, over Rust
/// models of the claim, resign and read scripts tied to their Lua by a
/// differential test on real servers. No two valid leaders, and no read
/// that begins after a claim round succeeded and ends while its leader is
/// valid names anything but that claim or a later one (or fails), in
/// every schedule of 6-8 steps; with the claim's order turned off the
/// checker finds a read naming the older value in 8, and without the
/// drift allowance two leaders. With a server that restarts, empty or
/// from a snapshot, before anyone saw it, and default settings, neither
/// promise breaks (6 steps); with the restart rule off for campaigns
/// the checker finds two leaders in 6 steps, and off for reads a read
/// that says nobody leads beside a valid leader in 4. Not modelled:
/// campaigns of more than one attempt, the raise of lagging term
/// counters (the lock's fenced model checks that terms grow, across
/// older copies too), renewals, fair campaigns, the record's channel
/// (TESTING.md in the repository, "Model checking").
///
/// # Waiting for a change
///
/// [`wait_change`](Self::wait_change) and [`observe`](Self::observe) read
/// again when the election's channels announce something (a new leader's
/// claim, a proclaim, a resignation: the manager's release listeners
/// carry them), when the leader read last would lose its majority unless
/// renewed (to see a leader that crashed), and otherwise at least every
/// 10 seconds as a backstop for a message lost in transit (every 500 ms
/// with [`Builder::wake_on_release`](crate::Builder::wake_on_release)
/// off).
#[derive(Clone, Debug)]
pub struct Election {
    manager: LockManager,
    name: Box<[u8]>,
    record: Box<[u8]>,
    /// What a campaign proclaims with the election.
    value: Box<[u8]>,
}

/// The leadership of an [`Election`]: renewed in the background from the
/// start, lost at the latest when its validity ends, resigned when
/// dropped.
#[must_use = "bind the leadership (`let lead = ...`): dropped, it resigns at once"]
pub struct Leadership {
    guard: LockGuard,
    record: Box<[u8]>,
    term: u64,
    /// The sequence number of the latest claim, held during a proclaim so
    /// that proclaims go one at a time.
    seq: Mutex<u64>,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &String::from_utf8_lossy(self.guard.resource()))
            .field("term", &self.term)
            .field("validity", &self.guard.validity())
            .finish()
    }
}

impl LockManager {
    /// The election named `name`, over this manager's members (see
    /// [`Election`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a name a lock would refuse (empty,
    /// or ending with a reserved suffix).
    pub fn election(&self, name: impl AsRef<[u8]>) -> Result<Election> {
        let name = name.as_ref();
        keys::check_resource(name)?;
        Ok(Election {
            manager: self.clone(),
            name: name.into(),
            record: keys::record_key(name).into(),
            value: Box::default(),
        })
    }
}

impl Election {
    /// The election's name (its lock key).
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The same election, whose campaigns proclaim `value` with the
    /// election ([`Leader::value`]): followers never see this candidate
    /// lead without it. Later values go out with
    /// [`Leadership::proclaim`]. Defaults to the empty value.
    pub fn with_value(mut self, value: impl AsRef<[u8]>) -> Election {
        self.value = value.as_ref().into();
        self
    }

    waiting_family! {
        /// Campaigns with the manager's retry settings, as
        /// [`LockManager::lock`] waits: one attempt, then while another leads
        /// *count − 1* random pauses, each ended early by a resignation. The
        /// returned leadership is valid for `ttl` less the rounds and the
        /// drift allowance, and renews itself every `ttl / 3`. Candidates of
        /// one manager (of every manager, with [fair
        /// waiting](crate::Builder::fair)) are served in arrival order. A
        /// leader that crashed is replaced once its keys expire: within `ttl`
        /// and one pause.
        ///
        /// A candidate that should wait for its turn however long it takes
        /// passes [`Wait::Forever`] to [`campaign_with`](Self::campaign_with):
        /// every bare verb waits as `lock` does, so that no call hangs its
        /// caller by default.
        ///
        /// # Errors
        ///
        /// [`Error::Taken`](crate::Error::Taken) while another candidate
        /// leads after the last attempt; otherwise as [`LockManager::lock`].
        fn campaign, try_campaign, try_campaign_for, try_campaign_until => campaign_with
        () -> Leadership
    }

    /// Renamed [`try_campaign_for`](Self::try_campaign_for), as the
    /// family of [`LockManager::try_lock_for`] says.
    ///
    /// # Errors
    ///
    /// As [`try_campaign_for`](Self::try_campaign_for).
    #[deprecated(since = "0.4.0", note = "renamed `try_campaign_for`")]
    pub fn campaign_for(&self, ttl: Duration, timeout: Duration) -> Result<Leadership> {
        self.try_campaign_for(ttl, timeout)
    }

    /// Campaigns waiting as `wait` says: the one call behind
    /// [`campaign`](Self::campaign) ([`Wait::Retries`]),
    /// [`try_campaign`](Self::try_campaign) ([`Wait::No`]),
    /// [`try_campaign_for`](Self::try_campaign_for) ([`Wait::For`]) and
    /// [`try_campaign_until`](Self::try_campaign_until) ([`Wait::Until`]);
    /// [`Wait::Forever`] waits until elected. Proclaims the value set
    /// with [`with_value`](Self::with_value).
    ///
    /// # Errors
    ///
    /// As [`try_campaign_for`](Self::try_campaign_for). Busy elections
    /// and failing members are waited out while `wait` allows.
    pub fn campaign_with(&self, ttl: Duration, wait: Wait) -> Result<Leadership> {
        let value = &*self.value;
        let engine = self.manager.engine();
        let ttl_ms = engine.acquisition_ttl(ttl)?;
        let names = [&self.name[..]];
        let wait_on = WaitOn::names(&names);
        let budget = self.manager.budget(wait);
        let waits = !matches!(wait, Wait::No);
        let fair = Fair::waiting(engine, waits, &self.name, self.manager.retry().1);
        let shape = Arc::new(LeaderShape::new(&self.name, fair));
        self.manager.stage().acquire_shape(
            shape,
            wait_on,
            budget,
            ttl_ms,
            |guard: LockGuard, start| {
                let term = guard.fencing_token().unwrap_or(0);
                // Dropped on failure: the lock is released, candidates
                // woken. A leadership that ran out before its claim was
                // done is an attempt too slow for its TTL, which waiting
                // may cure.
                let too_slow = |e: Error| match e {
                    Error::NotHeld { .. } => {
                        engine.no_validity(quorum::display(&self.name), start.elapsed(), ttl)
                    }
                    e => e,
                };
                self.claim(engine, guard.token(), term, 1, value)
                    .and_then(|()| guard.ensure_held())
                    .map_err(too_slow)?;
                Ok(Leadership {
                    guard: guard.keep_alive(),
                    record: self.record.clone(),
                    term,
                    seq: Mutex::new(1),
                })
            },
        )
    }

    /// The claim round: writes the record (term, claim number `seq`,
    /// `value`) where the lock key holds `token`, and announces it on the
    /// record's channel.
    fn claim(
        &self,
        engine: &Engine,
        token: &[u8],
        term: u64,
        seq: u64,
        value: &[u8],
    ) -> Result<()> {
        claim(engine, &self.name, &self.record, token, term, seq, value)
    }

    /// Who leads, as a majority of members agree (see "Reading who leads"
    /// in the type's docs): `None` when a majority holds no leader.
    ///
    /// # Errors
    ///
    /// [`Error::NoQuorum`](crate::Error::NoQuorum) when too few members answered to tell.
    pub fn leader(&self) -> Result<Option<Leader>> {
        let p = self.manager.engine();
        let keys: [&[u8]; 2] = [&self.name, &self.record];
        let (answers, replies) = p.script(&READ_LEADER, &keys, &[]).read(READS);
        let views = answers
            .into_iter()
            .zip(p.members.iter())
            .map(|(answer, member)| view(answer, &replies, member))
            .collect();
        let servers = p.servers_of(&[&self.name]);
        let views = forget_restarted(views, &servers, |i| p.members[i].view_not_counted());
        majority(views, &self.name)
    }

    /// Waits until who leads differs from `last` (another term or value,
    /// or a leader where `last` was `None`, or none where there was one),
    /// or until `timeout` has passed; returns who leads then. Pass what
    /// [`leader`](Self::leader) or the previous call returned. See
    /// "Waiting for a change" in the type's docs for what wakes it.
    ///
    /// # Errors
    ///
    /// As [`leader`](Self::leader): the first read that fails ends the
    /// wait.
    pub fn wait_change(&self, last: Option<&Leader>, timeout: Duration) -> Result<Option<Leader>> {
        let deadline = Instant::now().checked_add(timeout);
        let p = self.manager.engine();
        let watch = p
            .wake_on_release
            .then(|| p.waiters.watch(&[&self.name, &self.record]));
        loop {
            let heard = watch.as_ref().map(|w| w.heard());
            let now = Instant::now();
            let current = self.leader()?;
            if current.as_ref() != last {
                return Ok(current);
            }
            let every = if watch.is_some() { BACKSTOP } else { UNHEARD };
            // A leader that does not renew loses its majority after its
            // time left: look again just after.
            let again = current
                .as_ref()
                .map_or(every, |l| every.min(l.left + Duration::from_millis(5)));
            let until = deadline.map_or(now + again, |d| d.min(now + again));
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(current);
            }
            match (&watch, heard) {
                (Some(watch), Some(heard)) => {
                    watch.wait(heard, until);
                }
                _ => thread::sleep(until.saturating_duration_since(Instant::now())),
            }
        }
    }

    /// Every change of leader, as it happens: the first item is who leads
    /// now, each next one blocks until that changes (as
    /// [`wait_change`](Self::wait_change) without a timeout). A read that
    /// fails is an `Err` item; the next one reads again after the
    /// manager's retry pause. The iterator never ends.
    pub fn observe(&self) -> Observe<'_> {
        Observe {
            election: self,
            last: None,
            failed: false,
        }
    }
}

/// The claim round (see [`Election::claim`]).
fn claim(
    engine: &Engine,
    name: &[u8],
    record: &[u8],
    token: &[u8],
    term: u64,
    seq: u64,
    value: &[u8],
) -> Result<()> {
    let (term_s, seq_s) = (term.to_string(), seq.to_string());
    let keys: [&[u8]; 2] = [name, record];
    let args: [&[u8]; 4] = [token, term_s.as_bytes(), seq_s.as_bytes(), value];
    let channel = release_channel(record);
    let message = engine.message(token);
    let tail = message.as_deref().map(|message| Announce {
        channel: &channel,
        message,
    });
    // Decides, but waits for no replica: the record is what followers
    // read, the lock key (replicated as every acquisition asks) is what
    // elects.
    let round = Round {
        count: false,
        replicated: false,
        decides: true,
    };
    let answers = engine.script(&CLAIM, &keys, &args).tail(tail).run(round);
    let tally = Tally::count(answers);
    if tally.reached() {
        Ok(())
    } else {
        Err(tally.held_error(&quorum::display(name), false))
    }
}

/// See [`Election::observe`].
#[derive(Debug)]
pub struct Observe<'a> {
    election: &'a Election,
    last: Option<Option<Leader>>,
    failed: bool,
}

impl Iterator for Observe<'_> {
    type Item = Result<Option<Leader>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            thread::sleep(self.election.manager.retry().1);
        }
        let read = match &self.last {
            None => self.election.leader(),
            Some(last) => self.election.wait_change(last.as_ref(), Duration::MAX),
        };
        self.failed = read.is_err();
        if let Ok(now) = &read {
            self.last = Some(now.clone());
        }
        Some(read)
    }
}

impl Leadership {
    /// The election's name.
    pub fn name(&self) -> &[u8] {
        self.guard.resource()
    }

    /// This term's fencing token: above every earlier leader's term of the
    /// election. Give it to the storage the leader writes (see "What a
    /// term cannot do" on [`Election`]). Always below 2^53.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The members that failed while this leadership was won, each with
    /// its cause (see [`Guard::failures`](crate::Guard::failures)).
    pub fn failures(&self) -> &[crate::base::node_error::NodeError] {
        self.guard.failures()
    }

    /// How many members agreed when this leadership was won.
    pub fn agreed(&self) -> usize {
        self.guard.agreed()
    }

    /// Whether this is still the leader, failing closed: false once the
    /// validity ran out, once a renewal found the leadership taken over,
    /// and from the first renewal that missed the quorum (until a retry
    /// reaches it). No network call.
    pub fn is_leader(&self) -> bool {
        self.guard.is_valid()
    }

    /// As [`is_leader`](Self::is_leader), with the reason.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld), as [`LockGuard::ensure_held`] says.
    pub fn ensure_held(&self) -> Result<()> {
        self.guard.ensure_held()
    }

    /// How long the leadership is still safe to rely on without another
    /// renewal.
    pub fn validity(&self) -> Duration {
        self.guard.validity()
    }

    /// Blocks until the leadership is lost (true), or until `timeout` has
    /// passed while still leader (false). Woken by the renewal thread: a
    /// renewal that finds the leadership taken over, or the validity
    /// running out while renewals fail, ends the wait no later than the
    /// validity the leadership can still prove. See
    /// [`LockGuard::wait_lost`].
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        self.guard.wait_lost(timeout)
    }

    /// Publishes `value` for followers ([`Leader::value`]): written on
    /// every member that holds this leadership, and announced, so that
    /// watchers wake.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld) when this is no longer the leader (nothing is
    /// written then), [`Error::NoQuorum`](crate::Error::NoQuorum) when too few members took the
    /// value (followers may see the old or the new one).
    pub fn proclaim(&self, value: impl AsRef<[u8]>) -> Result<()> {
        let mut seq = self.seq.lock();
        self.guard.ensure_held()?;
        *seq += 1;
        let p = self.guard.engine();
        claim(
            p,
            self.guard.resource(),
            &self.record,
            self.guard.token(),
            self.term,
            *seq,
            value.as_ref(),
        )?;
        self.guard.ensure_held()
    }

    /// Steps down: deletes the leadership and its record on every member
    /// and wakes the candidates; dropping the leadership does the same
    /// silently.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`]: [`Error::NotHeld`](crate::Error::NotHeld) when the leadership
    /// was already lost, [`Error::NoQuorum`](crate::Error::NoQuorum) when too many members failed
    /// (what is left expires with the TTL).
    pub fn resign(self) -> Result<()> {
        self.guard.release()
    }
}
