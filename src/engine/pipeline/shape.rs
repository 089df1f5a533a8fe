//! What a shape states to the pipeline ([`Shape`]: its names and how it
//! asks), and what the pipeline says back: each member's [`Vote`], a
//! failed attempt's [`Refusal`], a [`Granted`] acquisition.

use std::time::Instant;

use crate::base::error::Error;
use crate::base::node_error::NodeError;
use crate::engine::decide;
use crate::engine::quorum::{self, Tally};
use crate::members::request::{Said, Tallied};

use super::Engine;

pub(crate) use crate::engine::quorum::Answer;

/// How one member answered an acquisition round (all its parts together,
/// for a Redis Cluster member that takes a set one slot at a time).
pub(crate) struct Vote {
    /// A grant: the member's highest count (its fencing counter; any
    /// number above 0 without fencing).
    pub(crate) yes: Option<u64>,
    /// With `yes`, the lowest count among the member's counters for this
    /// acquisition: all of them are between `low` and `yes`.
    pub(crate) low: u64,
    /// The index (among the shape's resources) of one found held by
    /// another owner, when the member said which.
    pub(crate) busy: Option<usize>,
    /// The member may hold something the attempt wrote: it said yes, or
    /// failed after the request may have run.
    pub(crate) dirty: bool,
    /// It wrote part of the request but voted no (a cluster member with
    /// some slots of a set busy): a grant gives that part back at once.
    pub(crate) partial: bool,
    /// A no where shared holders (a read-write lock's readers) may hold
    /// the key (the acquisition says so, see `Said::MaybeShared`).
    pub(crate) shared: bool,
    /// The answer as one, for the tally: the highest yes, a no, the
    /// first failure otherwise.
    pub(crate) answer: Answer,
    /// With a no or a failure: the values of holders the round's refusals
    /// found, for the restart rule (see [`decide::forgetful`]).
    pub(crate) held: Vec<Vec<u8>>,
}

impl Vote {
    /// The vote in a few characters, for trace logs: `y<n>` granted,
    /// `b<i>` busy at the i-th resource, `r` readers, `B<n>` a busy count,
    /// `g` gone, `<n>` another answer's number (0 a no), `-` not asked,
    /// `!<kind>` failed.
    #[cfg_attr(not(feature = "log"), allow(dead_code))]
    pub(super) fn traced(&self) -> String {
        match (&self.yes, self.busy, &self.answer) {
            (Some(n), ..) => format!("y{n}"),
            (None, Some(i), _) => format!("b{i}"),
            (None, None, _) if self.shared => "r".into(),
            (None, None, Some(Ok(Said::Busy(n)))) => format!("B{n}"),
            (None, None, Some(Ok(Said::Gone))) => "g".into(),
            (None, None, Some(Ok(said))) => said.number().to_string(),
            (None, None, Some(Err(e))) => format!("!{:?}", e.kind()),
            (None, None, None) => "-".into(),
        }
    }

    /// What the verdict reads of it (see `decide.rs`).
    pub(crate) fn ballot(&self) -> decide::Ballot {
        decide::Ballot {
            yes: self.yes,
            low: self.low,
        }
    }

    /// The vote of an answer that may name who holds the key (see
    /// `ScriptCall::run_naming`): another owner's value holding it is a no
    /// (the value goes to the restart rule, see `give_holders`); any other
    /// answer as [`of`](Self::of).
    pub(crate) fn naming(answer: Answer) -> Vote {
        match answer {
            Some(Ok(Said::Held(_))) => Vote::of(Some(Ok(Said::No))),
            answer => Vote::of(answer),
        }
    }

    /// The vote of a one-part answer: a yes (or any answer that may have
    /// written, see [`Said::tallied`]) grants with its number.
    pub(crate) fn of(answer: Answer) -> Vote {
        let (yes, dirty) = match &answer {
            Some(Ok(said)) => match said.tallied() {
                Tallied::Yes => (Some(said.number()), true),
                Tallied::No | Tallied::Gone => (None, false),
            },
            Some(Err(e)) => (None, !e.settled),
            None => (None, false),
        };
        Vote {
            yes,
            low: yes.unwrap_or(0),
            busy: None,
            dirty,
            partial: false,
            shared: false,
            answer,
            held: Vec::new(),
        }
    }
}

/// What a failed attempt found, for the waiting loop.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Refusal {
    /// The index (among the shape's resources) of one found held by
    /// another owner, when a member said which.
    pub(crate) blocked: Option<usize>,
    /// Some member may hold the resource for shared holders (a read-write
    /// lock's readers): a waiting writer asks them to queue behind it.
    pub(crate) shared: bool,
    /// A queued fair attempt found the lock reserved for another waiter,
    /// and the reservations lapse within this: the thread asks again then
    /// rather than at the end of its pause (see `fair.rs`).
    pub(crate) lapse: Option<std::time::Duration>,
    /// The attempt holds a place in the members' fair queues, which keeps
    /// only while it asks: it asks when its pause ends even behind this
    /// manager's other waiters (the members' queue decides who goes
    /// first; see `fair.rs`).
    pub(crate) queued: bool,
    /// A fair attempt's queue commands were refused (`NOPERM`: an ACL
    /// rule without the fair additions): its permission failures say
    /// nothing of whether the lock can be taken, and the next attempt
    /// goes unfair (see `Fair::heed`), so waiting goes on.
    pub(crate) fell_back: bool,
}

/// A shape's names (see [`Shape::resources`]): one, borrowed, for every
/// shape but a set (no allocation on the hot path), or several.
pub(crate) enum Names<'a> {
    /// One name.
    One(&'a [u8]),
    /// Several (a set's).
    Many(Vec<&'a [u8]>),
}

impl<'a> std::ops::Deref for Names<'a> {
    type Target = [&'a [u8]];

    fn deref(&self) -> &[&'a [u8]] {
        match self {
            Names::One(name) => std::slice::from_ref(name),
            Names::Many(names) => names,
        }
    }
}

/// What a shape supplies to the pipeline: its rounds on the members. The
/// pipeline decides what they add up to.
pub(crate) trait Shape: Send + Sync {
    /// Every resource held, as errors name them and as `held_here` counts
    /// them (a set's all, in the order given).
    fn resources(&self) -> Names<'_>;

    /// What errors and logs name: the resource, or a set's resources
    /// joined with `, `; a permit names its semaphore and its count the
    /// same way whatever the count (`nightly (a semaphore of 3 permits)`).
    fn shown(&self) -> String {
        quorum::display(&quorum::joined(&self.resources()))
    }

    /// Its release hands it to the first fair waiter queued (with fair
    /// waiting on; see `fair.rs`), announced by the members to that
    /// waiter's manager: the pipeline's release then wakes none of its own
    /// manager's waiters (see [`Engine::release`]). True for the shapes
    /// that wait fairly (`FairKey`, leaderships, sets).
    fn hands_off(&self) -> bool {
        false
    }

    /// Who holds it, as a member that refused an attempt said last (the
    /// key's value), for the `Taken` error; `None` where none said.
    fn holder(&self) -> Option<Vec<u8>> {
        None
    }

    /// The names whose waiters a release wakes (a permit's: the
    /// semaphore's name).
    fn wakes(&self) -> Names<'_> {
        self.resources()
    }

    /// Whether an acquisition counts fencing counters (and so has a
    /// fencing token); a read lock does not.
    fn fenced(&self) -> bool {
        true
    }

    /// Whether holders share it (a read lock).
    fn shared(&self) -> bool {
        false
    }

    /// How long (ms, as a command argument) an acquisition with `ttl_ms`
    /// keeps its fencing counters (see [`Engine::counter_keep`]); `None`:
    /// it counts none. By default the manager's fencing setting decides,
    /// for shapes that are [`fenced`](Self::fenced).
    fn keep(&self, engine: &Engine, ttl_ms: u64) -> Option<String> {
        (engine.fencing && self.fenced()).then(|| engine.counter_keep(ttl_ms).to_string())
    }

    /// One acquisition round on every member, with `token` for `ttl_ms`;
    /// `keep`: with fencing, how long (ms) the counters are kept.
    fn take(&self, engine: &Engine, token: &[u8], ttl_ms: u64, keep: Option<&str>) -> Vec<Vote>;

    /// A reason of the shape's own to refuse what the votes grant (a
    /// semaphore's permit count that differs), checked before the raise.
    fn refusal(&self, _engine: &Engine, _ttl_ms: u64, _votes: &[Vote]) -> Option<Error> {
        None
    }

    /// Raises every counter of the acquisition to at least `to`, on the
    /// members `only` selects, keeping each counter's expiry (or creating
    /// it with `keep` ms if it expired meanwhile). Only called when
    /// [`fenced`](Self::fenced).
    /// Counts a member only where it still holds `token` under every key
    /// the counters fence (see `raise.lua`).
    fn raise(&self, engine: &Engine, only: &[bool], token: &[u8], to: u64, keep: &str) -> Tally;

    /// One extend round: `ttl_ms` from now, where `token` still holds
    /// (see [`ttl_arg`] for `last`).
    fn extend(&self, engine: &Engine, token: &[u8], ttl_ms: u64, last: bool) -> Tally;

    /// Removes what `token` holds, as `removal` says: on which members,
    /// announced how, and whether it is the guard's release or the
    /// clean-up of an attempt (see [`Removal`]).
    fn unlock(&self, engine: &Engine, token: &[u8], removal: Removal<'_>) -> Tally;
}

/// What an unlock removes and how it tells (see [`Shape::unlock`]).
#[derive(Clone, Copy)]
pub(crate) struct Removal<'a> {
    /// The members it runs on; `None`: every member.
    pub(crate) only: Option<&'a [bool]>,
    /// The message each release it made is announced with, on the
    /// channel of the name it wakes; `None`: releases are not announced.
    pub(crate) message: Option<&'a [u8]>,
    /// The guard's release, which may announce unconditionally (the lock
    /// pipelines a `PUBLISH` behind its unlock, cheaper than one inside
    /// the script); otherwise the clean-up of an attempt, which announces
    /// only what it deleted.
    pub(crate) release: bool,
}

impl<'a> Removal<'a> {
    /// The guard's release, on every member.
    pub(crate) fn release(message: Option<&'a [u8]>) -> Removal<'a> {
        Removal {
            only: None,
            message,
            release: true,
        }
    }

    /// The clean-up of a failed attempt, on the members `only` selects.
    pub(crate) fn clean_up(only: &'a [bool], message: Option<&'a [u8]>) -> Removal<'a> {
        Removal {
            only: Some(only),
            message,
            release: false,
        }
    }
}

/// A granted acquisition.
pub(crate) struct Granted {
    /// The end of the validity.
    pub(crate) valid_until: Instant,
    /// The fencing token; `None` with fencing off, and for shapes without.
    pub(crate) fencing: Option<u64>,
    /// How many members agreed.
    pub(crate) agreed: usize,
    /// The members that failed, each with its cause: redundancy lost.
    pub(crate) failures: Vec<NodeError>,
    /// When the attempt started (before its first write).
    pub(crate) start: Instant,
    /// When its answers were in (the clock read that measured the round:
    /// no other is needed to date the acquisition).
    pub(crate) answered: Instant,
}
