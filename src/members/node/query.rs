//! The control plane's commands on a node (`CLUSTER SLOTS`, `INFO`,
//! `check`'s trial): never on a lock's hot path.

use std::time::Instant;

use redis::Value;

use super::Node;
use crate::base::node_error::NodeError;
use crate::members::request::{is_reply, is_stale};

impl Node {
    /// Sends one command and returns its reply (an error reply as `Err`),
    /// by `deadline`: for the control plane (`CLUSTER SLOTS`, `INFO`),
    /// never on the hot path.
    pub(crate) fn query(&self, packed: &[u8], deadline: Instant) -> Result<Value, NodeError> {
        let pooled = self.checkout();
        let mut pooled = match pooled {
            Some(pooled) => pooled,
            None => self.connect(deadline)?,
        };
        let reply = pooled
            .con
            .write(packed, deadline)
            .and_then(|()| pooled.con.read(deadline));
        match reply {
            Ok(value) => {
                self.checkin(pooled);
                Ok(value)
            }
            Err(e) if is_reply(&e) => {
                self.checkin(pooled);
                Err(self.error(e, false))
            }
            Err(e) if is_stale(&e) => {
                // Found closed: once more on a new connection.
                let mut pooled = self.connect(deadline)?;
                let value = pooled
                    .con
                    .write(packed, deadline)
                    .and_then(|()| pooled.con.read(deadline))
                    .map_err(|e| self.error(e, false))?;
                self.checkin(pooled);
                Ok(value)
            }
            Err(e) => Err(self.error(e, false)),
        }
    }

    /// Sends several commands at once and reads each one's reply (an error
    /// reply as its `Err`), by `deadline`, on a connection of its own that
    /// goes back to the pool only in step: for the control plane (`check`),
    /// where a command such as `ASKING` must be followed by another on the
    /// same connection.
    pub(crate) fn query_each(
        &self,
        commands: &[Vec<u8>],
        deadline: Instant,
    ) -> Result<Vec<Result<Value, NodeError>>, NodeError> {
        let mut pooled = self.connect(deadline)?;
        pooled
            .con
            .write(&commands.concat(), deadline)
            .map_err(|e| self.error(e, false))?;
        let mut replies = Vec::with_capacity(commands.len());
        for _ in commands {
            match pooled.con.read(deadline) {
                Ok(value) => replies.push(Ok(value)),
                Err(e) if is_reply(&e) => replies.push(Err(self.error(e, false))),
                Err(e) => return Err(self.error(e, false)),
            }
        }
        self.checkin(pooled);
        Ok(replies)
    }
}
