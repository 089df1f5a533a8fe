//! The engine layer: the Redlock algorithm that every shape goes through,
//! once. [`pipeline`] is the acquisition, extend and release, with its
//! safety rules; [`quorum`] fans a request out to every member and holds
//! the arithmetic (quorum, drift, validity, retry delay); [`batch`] runs
//! several requests in one round; [`guard`] is what a caller holds;
//! [`single`] is one key holding the token, what the lock, a permit and
//! a leadership share; [`wait`] queues one manager's waiters and hears
//! releases; [`stage`] is the waiting stage around every shape's
//! attempts (retry pauses, this queue, the members' fair queues, which
//! [`fair`] keeps across processes);
//! [`verdict`] is what an acquisition's answers decide, as plain
//! functions that the model checker runs too. A shape
//! (in `shapes`) supplies only its keys, its scripts and how a member's
//! answer reads.

pub(crate) mod batch;
pub(crate) mod fair;
pub(crate) mod guard;
pub(crate) mod pipeline;
pub(crate) mod quorum;
pub(crate) mod single;
pub(crate) mod stage;
pub(crate) mod verdict;
pub(crate) mod wait;
