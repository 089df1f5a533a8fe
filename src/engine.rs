//! The engine layer: the Redlock algorithm that every shape goes
//! through, once. What each file holds is in the crate docs' table, [The
//! source, by layer](crate#the-source-by-layer).

pub(crate) mod decide;
pub(crate) mod fair;
pub(crate) mod guard;
pub(crate) mod pipeline;
pub(crate) mod quorum;
pub(crate) mod single;
pub(crate) mod stage;
pub(crate) mod wait;
