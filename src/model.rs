//! The protocol, model checked (tests only): [`explore`] visits every
//! state a small system can reach, in every interleaving of its
//! deliveries and faults; [`lock`], [`fair`] and [`rwlock`] are the
//! lock's, the fair lock's and the read-write lock's protocols, deciding
//! with the library's own code (`engine::verdict`, `engine::quorum`,
//! `members::restart`). See TESTING.md, "Model checking".

pub(crate) mod explore;
pub(crate) mod fair;
#[cfg(test)]
mod fair_scripts;
pub(crate) mod fair_server;
pub(crate) mod lock;
#[cfg(test)]
mod rw_scripts;
pub(crate) mod rw_server;
pub(crate) mod rwlock;
#[cfg(test)]
mod scripts;
#[cfg(test)]
mod tests;
