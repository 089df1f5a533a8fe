//! The shapes layer: the public API, a room per shape with its scripts
//! and its proof. What each file holds is in the crate docs' table, [The
//! source, by layer](crate#the-source-by-layer).

// In the order `LockManager`'s page lists their methods (apart, so that
// rustfmt keeps it): making one and locking first, then the other shapes.
pub(crate) mod builder;

pub(crate) mod lock;

pub(crate) mod manager;

pub(crate) mod election;
pub mod fence;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
pub(crate) mod set;

/// The scripts every new connection loads with its handshake: those a
/// round sends by hash (a one-key shape's release and extend, the
/// acquisition's count of its fencing counter, the raise of fencing
/// counters, a permit's count check). Loading them there saves a `NOSCRIPT` round trip at first use
/// after a restart, which a multiplexed round could not spare.
pub(crate) fn preloaded() -> Vec<&'static crate::members::script::Lua> {
    use crate::engine::single::{COUNT, EXTEND, RAISE, UNLOCK};
    use crate::shapes::semaphore::PERMITS;
    vec![&*UNLOCK, &*EXTEND, &*COUNT, &*RAISE, &*PERMITS]
}
