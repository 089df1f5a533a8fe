//! The members layer: the servers a manager asks, and how. A member is a
//! Redis server ([`node`]) or a whole Redis Cluster ([`redis_cluster`],
//! routing apart from connections); [`member`] makes either one vote.
//! Below them: a connection of our own ([`conn`]) with its reply reader
//! ([`resp`]), one request on it ([`request`]), scripts sent by hash
//! ([`script`]), restarts ([`restart`]), which servers the members turned
//! out to be ([`identities`]), name resolution, TLS and node URLs. Nothing
//! here knows a shape or the algorithm: a request is keys, arguments and
//! how its reply reads.

pub(crate) mod conn;
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
