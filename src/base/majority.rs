//! Majority arithmetic: how many members make a quorum, and when noes
//! alone rule one out. Pure, and used by every layer (the engine's
//! verdicts, the errors' predicates, the operator's reads, the model).

/// Nodes that must agree out of `n`: a strict majority.
pub(crate) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// Whether `no` members' sure noes (or failures of one kind) alone rule
/// a quorum of `nodes` out, whatever the others answer: the difference
/// between `Taken` (or `NotHeld`) and `NoQuorum`, and what makes an error
/// [misconfigured](crate::Error::is_misconfigured).
pub(crate) fn ruled_out(no: usize, nodes: usize) -> bool {
    no > nodes.saturating_sub(quorum(nodes))
}
