//! The base layer: what every layer above uses and nothing here imports
//! from them. The crate's errors ([`Error`](crate::Error), one node's
//! [`NodeError`](crate::NodeError)), every key and channel name, holder
//! names, cancellation, text as messages show it, logging and telemetry.

pub(crate) mod cancel;
pub(crate) mod counted;
pub(crate) mod entropy;
pub(crate) mod error;
pub mod holder;
pub(crate) mod keys;
pub(crate) mod logging;
pub(crate) mod node_error;
pub mod telemetry;
pub(crate) mod text;
