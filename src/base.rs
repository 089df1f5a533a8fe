//! The base layer: what every layer above uses and nothing here imports
//! from them. What each file holds is in the crate docs' table, [The
//! source, by layer](crate#the-source-by-layer).

pub(crate) mod cancel;
pub(crate) mod counted;
pub(crate) mod entropy;
pub(crate) mod error;
pub mod holder;
pub(crate) mod keys;
pub(crate) mod logging;
pub(crate) mod majority;
pub(crate) mod node_error;
pub mod telemetry;
pub(crate) mod text;
