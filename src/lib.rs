#![doc = include_str!("manual.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// Logs through the `log` facade with the `log` feature; compiles to
/// nothing (the arguments are not evaluated) without it.
macro_rules! log {
    ($level:ident, $target:expr, $($arg:tt)+) => {{
        #[cfg(feature = "log")]
        ::log::$level!(target: $target, $($arg)+);
        #[cfg(not(feature = "log"))]
        if false {
            let _ = ($target, format_args!($($arg)+));
        }
    }};
}
pub(crate) use log;

mod batch;
mod builder;
mod cancel;
mod check;
mod conn;
mod election;
mod error;
mod fair;
pub mod fence;
mod guard;
pub mod holder;
mod identities;
mod keys;
mod lock;
mod manager;
mod member;
mod node;
mod node_error;
mod operator;
mod pipeline;
mod quorum;
mod redis_cluster;
mod request;
mod resolve;
mod resp;
mod restart;
mod rwlock;
mod script;
mod semaphore;
mod set;
pub mod telemetry;
mod text;
#[cfg(feature = "tls")]
mod tls;
mod url;
mod wait;

pub use builder::Builder;
pub use cancel::Cancel;
pub use check::{NodeReport, Problem, Verdict};
pub use election::{Election, Leader, Leadership, Observe};
pub use error::{Error, Result};
pub use guard::{Guard, LockGuard, Permit, ReadGuard, mode};
pub use holder::HolderName;
pub use keys::{FENCE_SUFFIX, MAX_RESOURCE_LEN, RELEASE_SUFFIX, fence_key, release_channel};
pub use manager::{LockManager, Wait};
pub use node_error::{NodeError, NodeErrorKind, NodeFailures};
pub use operator::{Forced, LockInfo, MemberView};
pub use pipeline::MAX_TTL;
pub use rwlock::RwLock;
pub use semaphore::{MAX_PERMITS, Semaphore};
pub use set::MAX_SET;

// The README's examples compile as doctests (they are `no_run`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
