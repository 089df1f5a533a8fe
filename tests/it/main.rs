//! The integration suite, one test crate (so that `support` compiles
//! once): every test talks to real `redis-server` processes it starts on
//! free loopback ports. TESTING.md has the layout and the failure table.

mod support;

mod acl;
mod check;
mod cluster;
mod cluster_sets;
mod config;
mod contention;
mod election;
mod errors;
mod exclusion;
mod fair;
mod fair_sets;
mod fault_matrix;
mod faults;
mod fenced_writes;
mod fencing_tokens;
mod hostile;
mod keepalive;
mod lock;
#[cfg(feature = "cli")]
mod lockrun;
#[cfg(feature = "log")]
mod logging;
mod longlife;
mod older_copy;
mod operator;
mod properties;
mod replicas;
mod resolve;
mod restart;
mod retry;
mod rwlock;
mod safety;
mod schedule;
mod semaphore;
mod sentinel;
mod sets;
#[cfg(any(feature = "metrics", feature = "tracing"))]
mod telemetry;
#[cfg(feature = "tls")]
mod tls;
mod waiting;
