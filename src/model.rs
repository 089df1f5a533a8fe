//! The protocol, model checked (tests only): [`explore`] visits every
//! state a small system can reach, in every interleaving of its
//! deliveries and faults; [`lock`], [`fair`], [`rwlock`] and
//! [`election`] are the lock's, the fair lock's (with sets beside locks,
//! over two keys), the read-write lock's and the election's protocols,
//! deciding with the library's own code (`engine::decide`,
//! `engine::quorum`, `members::restart`, `engine::fair`). See TESTING.md,
//! "Model checking".

#[cfg(test)]
mod el_scripts;
pub(crate) mod el_server;
pub(crate) mod election;
pub(crate) mod explore;
pub(crate) mod fair;
#[cfg(test)]
mod fair_scripts;
pub(crate) mod fair_server;
pub(crate) mod lock;
pub(crate) mod names;
pub(crate) mod net;
#[cfg(test)]
mod realtime;
#[cfg(test)]
mod rw_scripts;
pub(crate) mod rw_server;
pub(crate) mod rwlock;
#[cfg(test)]
mod scripts;
#[cfg(test)]
mod sem_scripts;
pub(crate) mod sem_server;
pub(crate) mod semaphore;
#[cfg(test)]
mod set_scripts;
pub(crate) mod set_server;
#[cfg(test)]
mod tests;
