#![doc = include_str!("manual.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod base;
mod engine;
mod members;
#[cfg(test)]
mod model;
// The public API's room before the operators': the docs list
// `LockManager`'s methods in the order their modules come (apart, so that
// rustfmt keeps this order).
mod shapes;

mod ops;

pub use base::{holder, telemetry};
pub use shapes::fence;

pub use base::cancel::Cancel;
pub use base::error::{Error, Result};
pub use base::holder::HolderName;
pub use base::keys::{FENCE_SUFFIX, MAX_RESOURCE_LEN, RELEASE_SUFFIX, fence_key, release_channel};
pub use base::node_error::{NodeError, NodeErrorKind, NodeFailures};
pub use engine::guard::{Guard, LockGuard, Permit, ReadGuard, mode};
pub use engine::pipeline::MAX_TTL;
pub use ops::check::{NodeReport, Problem, SentinelReport, Verdict};
pub use ops::operator::{Forced, LockInfo, MemberView};
pub use shapes::builder::Builder;
pub use shapes::election::{Election, Leader, Leadership, Observe};
pub use shapes::manager::{LockManager, Wait};
pub use shapes::rwlock::RwLock;
pub use shapes::semaphore::{MAX_PERMITS, Semaphore};
pub use shapes::set::MAX_SET;

// The README's examples compile as doctests (they are `no_run`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
