//! A member's answer, typed ([`Said`]), and how a tally counts it
//! ([`Tallied`]).

/// What one member's reply said, as its request's [`Reply`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Said {
    /// No (the scripts' 0): another owner holds the key, or it is not
    /// this token's; a count of 0.
    No,
    /// Yes, with its number above 0: 1; a fencing counter; a count; the
    /// unlock's 2, "a fair queue stands" (see `engine/fair/key.rs`).
    Yes(u64),
    /// No such key: expired or deleted (the scripts' -1, to an unlock,
    /// extend or raise).
    Gone,
    /// A negative count `-(i + 1)`, read as `i`: the set script's first
    /// busy key; a fair claim's refusal code (read back by the fair
    /// stage, `engine/fair.rs`).
    Busy(u64),
    /// The check ahead of the request found the member differs (a
    /// permit's count): the check's answer, above 0. The request behind
    /// it ran anyway, and is cleaned up as a yes would be.
    Differs(u64),
    /// An acquisition's no where shared holders may hold the key: it
    /// holds the mark its request named ([`Reply::SetGet`](crate::members::request::Reply::SetGet)), or the
    /// server could not say (`SET NX` without `GET`).
    MaybeShared,
    /// A reply kept whole: its index in the request's
    /// [`kept`](crate::members::request::Request::kept) store ([`Reply::Kept`](crate::members::request::Reply::Kept)).
    Kept(usize),
    /// A no: the key holds another owner's value, kept at this index in
    /// the request's [`kept`](crate::members::request::Request::kept) store (an acquisition's
    /// refusal that says who holds the key: `SET ... NX GET`, the fair
    /// claim).
    Held(usize),
}

impl Said {
    /// The number an answer carries: a yes's, a busy or differing
    /// answer's, a kept reply's index; 0 for a no, a gone key, a shared key.
    pub(crate) fn number(self) -> u64 {
        match self {
            Said::Yes(n) | Said::Busy(n) | Said::Differs(n) => n,
            Said::Kept(i) => i as u64,
            Said::No | Said::Gone | Said::MaybeShared | Said::Held(_) => 0,
        }
    }

    /// A count of 0 or more: 0 is no.
    pub(crate) fn count(n: u64) -> Said {
        match n {
            0 => Said::No,
            n => Said::Yes(n),
        }
    }

    /// The answer as a tally counts it: a no (a shared key's too), a gone
    /// key, or else a yes (any answer that may have written: a busy or
    /// differing one too, which the shapes read before they tally).
    pub(crate) fn tallied(self) -> Tallied {
        match self {
            Said::No | Said::MaybeShared | Said::Held(_) => Tallied::No,
            Said::Gone => Tallied::Gone,
            Said::Yes(_) | Said::Busy(_) | Said::Differs(_) | Said::Kept(_) => Tallied::Yes,
        }
    }
}

/// How a tally counts an answer (see [`Said::tallied`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tallied {
    /// Yes.
    Yes,
    /// No.
    No,
    /// The key is gone.
    Gone,
}
