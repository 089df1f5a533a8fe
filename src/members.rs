//! The members layer: the servers a manager asks, and how. Nothing here
//! knows a shape or the algorithm: a request is keys, arguments, its
//! per-server forms and how its reply reads. What each file holds is in
//! the crate docs' table, [The source, by layer](crate#the-source-by-layer).

pub(crate) mod batch;
pub(crate) mod conn;
pub(crate) mod fanout;
pub(crate) mod identities;
pub(crate) mod member;
pub(crate) mod node;
pub(crate) mod redis_cluster;
pub(crate) mod request;
pub(crate) mod resolve;
pub(crate) mod resp;
pub(crate) mod restart;
pub(crate) mod script;
#[cfg(feature = "tls")]
pub(crate) mod tls;
pub(crate) mod url;
