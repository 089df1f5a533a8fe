//! The operator's tools: [`check`] (is each server fit to hold locks?),
//! and [`operator`] (inspect who holds a lock, force-unlock). They use
//! the shapes' scripts and the members, never the other way round.

pub(crate) mod check;
pub(crate) mod operator;
