//! Who leads: [`Leader`], and the majority read that finds it (each
//! member's view of the election, and what a majority of views say).

use std::fmt;
use std::time::Duration;

use redis::Value;

use crate::base::error::Result;
use crate::base::node_error::NodeError;
use crate::engine::pipeline::Answer;
use crate::engine::quorum::{self, Tally};
use crate::members::member::Member;
use crate::members::request::Said;
use crate::members::request::unexpected;

/// Who leads an election, as a majority of members agree
/// ([`Election::leader`](crate::Election::leader)).
#[derive(Clone)]
pub struct Leader {
    term: u64,
    value: Vec<u8>,
    /// When the leadership would lose its majority unless renewed, from
    /// the read (for watchers).
    pub(crate) left: Duration,
}

impl Leader {
    /// The value the leader proclaimed ([`Leadership::proclaim`](crate::Leadership::proclaim)); empty
    /// until it proclaims one.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The leader's term: its fencing token.
    pub fn term(&self) -> u64 {
        self.term
    }
}

impl fmt::Debug for Leader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leader")
            .field("term", &self.term)
            .field("value", &String::from_utf8_lossy(&self.value))
            .finish()
    }
}

impl PartialEq for Leader {
    /// The same term and value (when the reads were made does not count).
    fn eq(&self, other: &Leader) -> bool {
        self.term == other.term && self.value == other.value
    }
}

impl Eq for Leader {}

/// What one member knows of the election.
#[derive(Debug, PartialEq)]
pub(crate) struct View {
    /// The lock key's value, when held.
    holder: Option<Vec<u8>>,
    /// The lock key's expiry in ms.
    left: u64,
    /// The record: token, term, seq, value.
    record: Option<(Vec<u8>, u64, u64, Vec<u8>)>,
}

#[cfg(test)]
impl View {
    /// A view as a member's read would give it (for the model checker).
    pub(crate) fn new(
        holder: Option<Vec<u8>>,
        left: u64,
        record: Option<(Vec<u8>, u64, u64, Vec<u8>)>,
    ) -> View {
        View {
            holder,
            left,
            record,
        }
    }
}

/// A member's answer to the read, as a view; an unreadable reply is a
/// failure of the member.
pub(crate) fn view(
    answer: Answer,
    replies: &[Value],
    member: &Member,
) -> Option<Result<View, NodeError>> {
    let at = match answer? {
        Ok(Said::Kept(at)) => at,
        // A read's reply is kept, or it failed.
        Ok(_) => return None,
        Err(e) => return Some(Err(e)),
    };
    let reply = replies.get(at)?;
    Some(parse_view(reply).ok_or_else(|| {
        NodeError::classify(
            member.name().into(),
            unexpected(reply),
            false,
            member.timeout(),
        )
    }))
}

/// Reads the read script's array (see `election/read.lua`).
fn parse_view(reply: &Value) -> Option<View> {
    let Value::Array(items) = reply else {
        return None;
    };
    let [holder, left, token, term, seq, value] = items.as_slice() else {
        return None;
    };
    let bytes = |v: &Value| match v {
        Value::BulkString(b) => Some(Some(b.clone())),
        Value::Nil => Some(None),
        _ => None,
    };
    let number = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
        _ => None,
    };
    let left = match left {
        Value::Int(n) => u64::try_from(*n).unwrap_or(0),
        _ => return None,
    };
    let record = match bytes(token)? {
        Some(token) => Some((
            token,
            number(term)?,
            number(seq)?,
            bytes(value)?.unwrap_or_default(),
        )),
        None => None,
    };
    Some(View {
        holder: bytes(holder)?,
        left,
        record,
    })
}

/// The restart rule on a read (see `decide::forgetful_views` and the
/// crate docs, "Restarts"): a member whose server (`servers[i]`, its
/// `run_id` digests) a holder's value seen on another member does not
/// name, and that does not show that value itself, may have restarted
/// since that grant and forgotten it, so its view is no answer:
/// `not_counted(i)`'s failure. Else a reader that never saw the
/// restart counted that member's empty view beside the members that
/// keep a valid leader's key, and read "nobody leads".
pub(crate) fn forget_restarted(
    views: Vec<Option<Result<View, NodeError>>>,
    servers: &[Vec<Vec<u8>>],
    not_counted: impl Fn(usize) -> NodeError,
) -> Vec<Option<Result<View, NodeError>>> {
    let holders: Vec<Option<Option<&[u8]>>> = views
        .iter()
        .map(|v| match v {
            Some(Ok(view)) => Some(view.holder.as_deref()),
            _ => None,
        })
        .collect();
    let forgetful = crate::engine::decide::forgetful_views(&holders, servers);
    views
        .into_iter()
        .enumerate()
        .map(|(i, v)| match forgetful[i] {
            true => Some(Err(not_counted(i))),
            false => v,
        })
        .collect()
}

/// The majority read: the leader a majority of members hold (with the
/// record of the highest claim among them), `None` when a majority holds
/// none, an error when the answers cannot tell.
pub(crate) fn majority(
    views: Vec<Option<Result<View, NodeError>>>,
    name: &[u8],
) -> Result<Option<Leader>> {
    let n = views.len();
    let q = quorum::quorum(n);
    let mut failures = Vec::new();
    let mut answered = Vec::new();
    for v in views.into_iter().flatten() {
        match v {
            Ok(view) => answered.push(view),
            Err(e) => failures.push(e),
        }
    }
    // The token held by the most members.
    let mut best: Option<(&[u8], usize)> = None;
    for v in &answered {
        if let Some(h) = &v.holder {
            let count = answered
                .iter()
                .filter(|o| o.holder.as_deref() == Some(h))
                .count();
            if best.is_none_or(|(_, c)| count > c) {
                best = Some((h, count));
            }
        }
    }
    if let Some((token, _)) = best.filter(|(_, c)| *c >= q) {
        let holding: Vec<&View> = answered
            .iter()
            .filter(|v| v.holder.as_deref() == Some(token))
            .collect();
        // When the majority would lose the key: the q-th longest expiry.
        let mut lefts: Vec<u64> = holding.iter().map(|v| v.left).collect();
        lefts.sort_unstable_by(|a, b| b.cmp(a));
        let left = Duration::from_millis(lefts[q - 1]);
        let claimed = holding
            .iter()
            .filter_map(|v| v.record.as_ref())
            .filter(|(t, ..)| t[..] == *token)
            // Claims of one value go by term, then sequence number (a
            // leader's proclaims; a failed attempt of the campaign wrote
            // a value of its own, which this filter leaves out).
            .max_by_key(|(_, term, seq, _)| (*term, *seq));
        // Held, but with no claim on these members: the campaign is under
        // way (or failed and is being undone); nobody leads yet.
        return Ok(claimed.map(|(_, term, _, value)| Leader {
            term: *term,
            value: value.clone(),
            left,
        }));
    }
    // No majority holds one token: nobody leads, unless the members that
    // did not answer could make one.
    let most = best.map_or(0, |(_, c)| c);
    if most + failures.len() >= q && !failures.is_empty() {
        // Too few answered to tell: counted as `inspect` counts them
        // (each answer to a read agrees); else those that agree on the
        // likeliest leader, short of a majority.
        let yes = match answered.len() < q {
            true => answered.len(),
            false => most,
        };
        let tally = Tally {
            yes,
            no: answered.len() - yes,
            gone: 0,
            failures,
        };
        return Err(tally.no_quorum(&crate::engine::quorum::display(name)));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(token: &str, left: u64, record: Option<(&str, u64, u64, &str)>) -> View {
        View {
            holder: Some(token.into()),
            left,
            record: record.map(|(t, term, seq, v)| (t.into(), term, seq, v.into())),
        }
    }

    fn free() -> View {
        View {
            holder: None,
            left: 0,
            record: None,
        }
    }

    fn failed() -> NodeError {
        NodeError::cluster("n:1".into(), "down".into(), Duration::from_millis(50))
    }

    fn read(views: Vec<Option<std::result::Result<View, NodeError>>>) -> Result<Option<Leader>> {
        majority(views, b"e")
    }

    #[test]
    fn a_majority_holding_one_token_is_the_leader_with_its_latest_claim() {
        let rec1 = Some(("t", 7, 1, "a"));
        let rec2 = Some(("t", 7, 2, "b"));
        let leader = read(vec![
            Some(Ok(held("t", 900, rec1))),
            Some(Ok(held("t", 800, rec2))),
            Some(Ok(free())),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((leader.term(), leader.value()), (7, &b"b"[..]));
        // The majority lapses when the second-longest expiry does.
        assert_eq!(leader.left, Duration::from_millis(800));
    }

    #[test]
    fn a_failed_attempts_claim_of_the_same_token_never_names_the_term() {
        // Issue 39: the campaign's first attempt (term 7) claimed on one
        // member and failed; the elected attempt fences with term 9.
        // (Each attempt now writes a value of its own, so the two claims
        // name different values; the rule for one value's claims, highest
        // term then sequence number, still holds a leader's proclaims.)
        let failed = Some(("t", 7, 1, "a"));
        let elected = Some(("t", 9, 1, "a"));
        for order in [[elected, failed], [failed, elected]] {
            let leader = read(vec![
                Some(Ok(held("t", 900, order[0]))),
                Some(Ok(held("t", 900, order[1]))),
                Some(Ok(free())),
            ])
            .unwrap()
            .unwrap();
            assert_eq!(leader.term(), 9, "{order:?}");
        }
        // A proclaim of the elected term outranks the failed claim too.
        let leader = read(vec![
            Some(Ok(held("t", 900, Some(("t", 9, 2, "b"))))),
            Some(Ok(held("t", 900, failed))),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((leader.term(), leader.value()), (9, &b"b"[..]));
    }

    #[test]
    fn a_record_of_another_token_is_not_the_leaders() {
        let stale = Some(("old", 3, 9, "x"));
        let leader = read(vec![
            Some(Ok(held("t", 900, stale))),
            Some(Ok(held("t", 900, Some(("t", 7, 1, "a"))))),
            Some(Ok(held("t", 900, None))),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((leader.term(), leader.value()), (7, &b"a"[..]));
        // Held by a majority but claimed nowhere: nobody leads yet.
        let unclaimed = read(vec![
            Some(Ok(held("t", 900, stale))),
            Some(Ok(held("t", 900, None))),
            Some(Ok(free())),
        ]);
        assert_eq!(unclaimed.unwrap(), None);
    }

    #[test]
    fn no_majority_is_nobody_unless_the_silent_members_could_make_one() {
        let rec = Some(("t", 7, 1, "a"));
        assert_eq!(
            read(vec![
                Some(Ok(free())),
                Some(Ok(free())),
                Some(Err(failed()))
            ])
            .unwrap(),
            None
        );
        assert_eq!(
            read(vec![
                Some(Ok(held("t", 9, rec))),
                Some(Ok(held("u", 9, None))),
                Some(Ok(free()))
            ])
            .unwrap(),
            None
        );
        let err = read(vec![
            Some(Ok(held("t", 9, rec))),
            Some(Err(failed())),
            Some(Ok(free())),
        ])
        .unwrap_err();
        assert!(
            matches!(
                err,
                crate::base::error::Error::NoQuorum {
                    agreed: 1,
                    nodes: 3,
                    quorum: 2,
                    ..
                }
            ),
            "{err:?}"
        );
        // A majority down: the one that answered is counted, as
        // `inspect` counts it.
        let err = read(vec![
            Some(Err(failed())),
            Some(Err(failed())),
            Some(Ok(free())),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("1 of 3 nodes agreed"), "{err}");
        assert!(
            read(vec![
                Some(Err(failed())),
                Some(Err(failed())),
                Some(Ok(free()))
            ])
            .is_err()
        );
    }

    #[test]
    fn a_view_is_read_from_the_scripts_array_and_anything_else_is_refused() {
        let b = |s: &str| Value::BulkString(s.into());
        let full = Value::Array(vec![
            b("t"),
            Value::Int(500),
            b("t"),
            b("7"),
            b("2"),
            b("v"),
        ]);
        assert_eq!(
            parse_view(&full),
            Some(held("t", 500, Some(("t", 7, 2, "v"))))
        );
        let none = Value::Array(vec![
            Value::Nil,
            Value::Int(-2),
            Value::Nil,
            Value::Nil,
            Value::Nil,
            Value::Nil,
        ]);
        assert_eq!(parse_view(&none), Some(free()));
        for bad in [
            Value::Int(1),
            Value::Array(vec![b("t")]),
            Value::Array(vec![
                b("t"),
                Value::Int(5),
                b("t"),
                b("seven"),
                b("2"),
                b("v"),
            ]),
            Value::Array(vec![b("t"), b("5"), b("t"), b("7"), b("2"), b("v")]),
            Value::Array(vec![
                Value::Int(3),
                Value::Int(5),
                Value::Nil,
                Value::Nil,
                Value::Nil,
                Value::Nil,
            ]),
        ] {
            assert_eq!(parse_view(&bad), None, "{bad:?}");
        }
    }
}
