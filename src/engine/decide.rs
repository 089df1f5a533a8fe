//! The acquisition's decisions as plain functions (sans-IO): what the
//! members' answers add up to, with no socket, thread or clock. The
//! pipeline (`pipeline.rs`) calls them between its rounds, and the model
//! checker (`crate::model`, tests only) calls the same ones between the
//! deliveries it chooses, so that what it checks over every interleaving
//! is this code, not a copy of it.
//!
//! An acquisition is one round, then a raise round when it is fenced and
//! some granting member's counter lags the token, then the grant or the
//! clean-up:
//!
//! 1. [`count`] the members' [`Ballot`]s: granted by a majority (and
//!    refused by no shape rule), and the token, the highest count among
//!    the granting members.
//! 2. Each granting member whose lowest counter is below the token
//!    [`lags`]; they are raised to it. [`raised_enough`] says whether the
//!    members that hold the token on every counter still make a quorum.
//! 3. The grant's validity is [`quorum::valid_until`], counted from the
//!    first round's start; none left fails the attempt.
//!
//! Before step 1, [`forgetful`] says which yes votes do not count: a
//! server that may have restarted since a grant that another member's
//! refusal shows (the crate docs, "Restarts": the holder's value names
//! the servers its grant was asked of). How each member's answer becomes
//! its vote (a ballot, and whether it may hold what the attempt wrote:
//! the clean-up's targets) is `single::take_vote` and `Vote::of`, which
//! the model checker calls too.
//!
//! An extend is one round; [`extend_confirmed`] says whether it kept the
//! holder's validity, which then follows `quorum::after_extend`.

use std::time::Instant;

use crate::base::holder::names_server;
use crate::engine::quorum::{self, Tally};

/// Whether an extend round confirmed the holder's keys: a quorum of the
/// members asked extended them (`tally`), and the round ended (`ended`)
/// before the validity it started with ran out (`valid_until`). The
/// guard's validity then follows `quorum::after_extend`, confirmed or
/// not.
pub(crate) fn extend_confirmed(tally: &Tally, ended: Instant, valid_until: Instant) -> bool {
    tally.reached() && ended < valid_until
}

/// Which members' yes votes do not count, by the restart rule: a yes
/// from a member whose server (`servers[i]`: the `run_id` digests of the
/// servers that answered for it, none when unknown) is not named by a
/// holder's value that another member's refusal found in the same round
/// (`held[j]`: the values of holders the round's refusals found, given
/// with each member's no or failure), when that value names servers at
/// all. Such a server may have restarted since it granted that holder,
/// and forgotten the grant; a server that kept it refuses. A value that
/// names no server (another client's, an earlier version's) says
/// nothing, and a yes whose server is unknown (`INFO` refused) counts.
pub(crate) fn forgetful(
    yes: &[bool],
    servers: &[Vec<Vec<u8>>],
    held: &[Vec<Vec<u8>>],
) -> Vec<bool> {
    let named = |digest: &[u8], except: usize| {
        held.iter().enumerate().all(|(j, values)| {
            j == except
                || values
                    .iter()
                    .all(|value| names_server(value, digest) != Some(false))
        })
    };
    (0..yes.len())
        .map(|i| yes[i] && servers[i].iter().any(|d| !named(d, i)))
        .collect()
}

/// The restart rule on a read (an election's, an inspection): which
/// members' views are no answers. A member that answered (`holders[i]`:
/// `Some` of the value its key holds, or `Some(None)` when free; `None`:
/// no answer) is not counted when its server (`servers[i]`) is not named
/// by a holder's value that another member shows, unless it shows that
/// same value itself (it kept the grant: a durable restart, a promoted
/// replica that had it). Reservations say nothing (`RESERVED_PREFIX`: a
/// waiter's name, not a grant's).
pub(crate) fn forgetful_views(
    holders: &[Option<Option<&[u8]>>],
    servers: &[Vec<Vec<u8>>],
) -> Vec<bool> {
    let evidence = |v: &[u8]| !v.starts_with(crate::base::keys::RESERVED_PREFIX);
    (0..holders.len())
        .map(|i| {
            let Some(own) = holders[i] else {
                return false;
            };
            let yes: Vec<bool> = (0..holders.len()).map(|j| j == i).collect();
            let held: Vec<Vec<Vec<u8>>> = holders
                .iter()
                .map(|h| match h {
                    Some(Some(v)) if evidence(v) && Some(*v) != own => vec![v.to_vec()],
                    _ => Vec::new(),
                })
                .collect();
            forgetful(&yes, servers, &held)[i]
        })
        .collect()
}

/// One member's answer to an acquisition, as the verdict reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Ballot {
    /// It granted, with this count (its highest counter; 1 when the
    /// shape is not fenced).
    pub(crate) yes: Option<u64>,
    /// With `yes`, its lowest counter for this acquisition.
    pub(crate) low: u64,
}

/// What a round's ballots add up to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Count {
    /// Members that granted.
    pub(crate) granted: usize,
    /// The highest count among them: the fencing token (0: none granted).
    pub(crate) highest: u64,
    /// A majority of `members` granted and no shape rule refused.
    pub(crate) reached: bool,
}

/// Counts the `ballots` of `members` members (one each; a member not
/// asked has none); `refused`: a shape's own rule refused the attempt
/// whatever the count.
pub(crate) fn count(
    ballots: impl IntoIterator<Item = Ballot>,
    members: usize,
    refused: bool,
) -> Count {
    let (mut granted, mut highest) = (0, 0);
    for b in ballots {
        if let Some(yes) = b.yes {
            granted += 1;
            highest = highest.max(yes);
        }
    }
    Count {
        granted,
        highest,
        reached: granted >= quorum::quorum(members) && !refused,
    }
}

/// Whether a member that cast `ballot` must be raised to `highest` before
/// the grant counts: it granted, and some counter of it is below.
pub(crate) fn lags(ballot: &Ballot, highest: u64) -> bool {
    ballot.yes.is_some() && ballot.low < highest
}

/// Whether a fenced grant still stands after its raise: of the `granted`
/// members, `behind` lagged and `raised` of those were raised; the rest
/// and the raised must make a quorum of `members`.
pub(crate) fn raised_enough(granted: usize, behind: usize, raised: usize, members: usize) -> bool {
    granted - behind + raised >= quorum::quorum(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_counts_where_it_shows_the_value_or_every_value_seen_names_its_server() {
        let servers: Vec<Vec<Vec<u8>>> = [b"aaaaaaaa", b"bbbbbbbb", b"cccccccc"]
            .iter()
            .map(|d| vec![d.to_vec()])
            .collect();
        // Granted by a and b (the servers it names).
        let v = &b"t@h/1!aaaaaaaa.bbbbbbbb#1"[..];
        // c shows nothing, and v does not name it: no answer.
        assert_eq!(
            forgetful_views(&[Some(Some(v)), Some(Some(v)), Some(None)], &servers),
            [false, false, true]
        );
        // c shows v itself (it kept the grant under a run v does not
        // name): counted.
        assert_eq!(
            forgetful_views(&[Some(Some(v)), Some(None), Some(Some(v))], &servers),
            [false; 3]
        );
        // A reservation names a waiter, not a grant: it says nothing.
        let r = &b"redlock:next:t@h/1!aaaaaaaa"[..];
        assert_eq!(
            forgetful_views(&[Some(Some(r)), Some(None), Some(None)], &servers),
            [false; 3]
        );
        // A member that did not answer is no answer already.
        assert_eq!(
            forgetful_views(&[Some(Some(v)), None, Some(None)], &servers),
            [false, false, true]
        );
    }

    #[test]
    fn a_yes_counts_only_where_every_holder_seen_names_its_server() {
        let value = |names: &[u8]| vec![[&b"t@h/1"[..], names, b"#1"].concat()];
        let servers = |d: &[&[u8]]| -> Vec<Vec<u8>> { d.iter().map(|d| d.to_vec()).collect() };
        let all = [
            servers(&[b"aaaaaaaa"]),
            servers(&[b"bbbbbbbb"]),
            servers(&[b"cccccccc"]),
        ];
        // No holder seen: every yes counts.
        let none = [Vec::new(), Vec::new(), Vec::new()];
        assert_eq!(forgetful(&[true, true, false], &all, &none), [false; 3]);
        // The holder on member 2 named the servers of 0 and 1: they count.
        let named = [
            Vec::new(),
            Vec::new(),
            value(b"!aaaaaaaa.bbbbbbbb.cccccccc"),
        ];
        assert_eq!(forgetful(&[true, true, false], &all, &named), [false; 3]);
        // Member 0's server is not the one it named (a restart since).
        let moved = [
            Vec::new(),
            Vec::new(),
            value(b"!aaaaaaa0.bbbbbbbb.cccccccc"),
        ];
        assert_eq!(
            forgetful(&[true, true, false], &all, &moved),
            [true, false, false]
        );
        // A holder that names no server says nothing: every yes counts.
        let silent = [Vec::new(), Vec::new(), value(b"")];
        assert_eq!(forgetful(&[true, true, false], &all, &silent), [false; 3]);
        // Two holders seen (a late value beside a later one): a yes
        // counts where both name its server.
        let two = [
            Vec::new(),
            value(b"!aaaaaaaa.bbbbbbbb"),
            value(b"!aaaaaaaa.cccccccc"),
        ];
        assert_eq!(forgetful(&[true, false, false], &all, &two), [false; 3]);
        let two = [
            Vec::new(),
            value(b"!aaaaaaaa.bbbbbbbb"),
            value(b"!aaaaaaa0.cccccccc"),
        ];
        assert_eq!(
            forgetful(&[true, false, false], &all, &two),
            [true, false, false]
        );
        // A server whose run_id is unknown counts; a member answered by
        // two servers (a cluster's set) counts only if both are named.
        let odd = [
            servers(&[]),
            servers(&[b"bbbbbbbb", b"dddddddd"]),
            servers(&[b"cccccccc"]),
        ];
        assert_eq!(
            forgetful(&[true, true, false], &odd, &named),
            [false, true, false]
        );
    }

    fn yes(n: u64) -> Ballot {
        Ballot {
            yes: Some(n),
            low: n,
        }
    }

    #[test]
    fn a_majority_grants_and_the_token_is_the_highest_count() {
        let c = count([yes(4), Ballot::default(), yes(7)], 3, false);
        assert_eq!((c.granted, c.highest, c.reached), (2, 7, true));
        assert!(!count([yes(4), Ballot::default(), yes(7)], 3, true).reached);
        assert!(!count([yes(4), Ballot::default(), Ballot::default()], 3, false).reached);
        assert!(lags(&yes(4), 7) && !lags(&yes(7), 7) && !lags(&Ballot::default(), 7));
        assert!(raised_enough(2, 1, 1, 3) && !raised_enough(2, 1, 0, 3));
    }
}
