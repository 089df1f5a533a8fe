//! The members layer: the servers a manager asks, and how. Nothing here
//! knows a shape or the algorithm: the engine states an operation
//! (`op.rs`: take a key, call a script), and this layer lowers it for
//! each server (`lower.rs`), sends it and reads the typed answer. What each file holds is in
//! the crate docs' table, [The source, by layer](crate#the-source-by-layer).

pub(crate) mod batch;
pub(crate) mod conn;
pub(crate) mod fanout;
pub(crate) mod identities;
pub(crate) mod listen;
pub(crate) mod lower;
pub(crate) mod member;
pub(crate) mod node;
pub(crate) mod op;
pub(crate) mod redis_cluster;
pub(crate) mod request;
pub(crate) mod resolve;
pub(crate) mod resp;
pub(crate) mod restart;
pub(crate) mod script;
pub(crate) mod sentinel;
#[cfg(feature = "tls")]
pub(crate) mod tls;
pub(crate) mod url;
