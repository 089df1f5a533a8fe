//! The shapes layer: the public API. [`manager`] and [`builder`] make a
//! [`LockManager`](crate::LockManager); each shape has a room of its own
//! with its API, its scripts and its proof: [`lock`], [`set`] (several
//! resources at once), [`rwlock`], [`semaphore`], [`election`], and
//! [`fence`] for the storage side of fencing tokens.

pub(crate) mod builder;
pub(crate) mod election;
pub mod fence;
pub(crate) mod lock;
pub(crate) mod manager;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
pub(crate) mod set;
