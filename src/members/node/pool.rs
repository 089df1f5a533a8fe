//! A node's connections: opening one (connect and handshake), the pool
//! of idle ones, and the listener's own connection, which subscribes to
//! channels and waits for their messages.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redis::Value;

use crate::base::node_error::{CallStep, Cause, NodeError};
use crate::members::conn::Conn;
use crate::members::request::{Failure, Pooled, Said, is_reply};
use crate::members::restart::{Identity, Noticed};

use super::Node;

/// A connection of its own, never pooled, that subscribes to channels and
/// then mostly waits for their messages.
pub(crate) struct Listener {
    con: Box<Conn>,
    node: Arc<str>,
    timeout: Duration,
    /// The node's switches when it was opened (see `Pooled::switches`).
    switches: u64,
}

impl Listener {
    /// Writes commands (`SUBSCRIBE`, `UNSUBSCRIBE`, `PING`) within the node
    /// timeout.
    pub(crate) fn send(&mut self, packed: &[u8]) -> Result<(), NodeError> {
        let deadline = Instant::now() + self.timeout;
        self.con.write(packed, deadline).map_err(|e| self.error(e))
    }

    /// The next push or reply, if one comes within `wait`. An error reply
    /// (a refused `SUBSCRIBE`) is an `Err` too.
    pub(crate) fn next(&mut self, wait: Duration) -> Result<Option<Value>, NodeError> {
        self.con.read_within(wait).map_err(|e| self.error(e))
    }

    /// The node's switches (a Sentinel group's failovers) counted when
    /// it was opened.
    pub(crate) fn switches(&self) -> u64 {
        self.switches
    }

    /// The failure of a connection that stopped answering.
    pub(crate) fn timed_out(&self) -> NodeError {
        self.error(crate::members::conn::timed_out())
    }

    fn error(&self, e: Cause) -> NodeError {
        NodeError::classify(self.node.clone(), e, false, self.timeout)
    }
}

/// What reading a reply on a pooled connection gave.
pub(crate) enum Received {
    /// An answer, or a failure of this node.
    Done(Result<Said, NodeError>),
    /// The connection was found closed before any reply (the server
    /// restarted since it was last used): try again on a new one.
    Stale,
}

impl Node {
    /// Opens a connection and runs the handshake, all by `deadline`.
    pub(super) fn connect(&self, deadline: Instant) -> Result<Pooled, NodeError> {
        // The first contact's own failure, a moment ago (see
        // `Node::meet`): the round that follows it reports it, instead of
        // waiting for the same failure again.
        if let Some((at, e)) = self.met_failure.lock().take()
            && at.elapsed() < self.timeout
        {
            return Err(e);
        }
        crate::base::logging::log!(
            debug,
            "redlock_sync::node",
            "{}: opening a connection",
            self.name
        );
        // Read before the Sentinels are asked (a group's): a switch
        // announced meanwhile makes this connection one of before it.
        let switches = self.switches();
        let mut pooled = Conn::open(
            &self.addr,
            self.resolver.as_ref(),
            self.tls.as_ref(),
            deadline,
            self.timeout,
        )
        .map(Pooled::new)
        .map(|mut pooled| {
            pooled.switches = switches;
            pooled
        })
        .map_err(|(step, e)| NodeError::opening(self.name.clone(), e, step, self.timeout))?;
        self.handshake(&mut pooled, deadline).map_err(|f| {
            // A peer that answered, but not in RESP: say what it said.
            if let Some(said) = pooled.con.foreign() {
                return NodeError::opening(
                    self.name.clone(),
                    Cause::Foreign(said),
                    CallStep::Hello,
                    self.timeout,
                );
            }
            let e = NodeError::opening(self.name.clone(), f.error, CallStep::Hello, self.timeout);
            match self.required_names.get(f.at) {
                Some(name) if is_reply(e.cause()) => e.about((*name).to_owned()),
                _ => e,
            }
        })?;
        Ok(pooled)
    }

    /// Sends the handshake at once, then reads each reply by `deadline`.
    /// AUTH or SELECT failing fails the connection; the rest may fail
    /// (CLIENT SETINFO on old servers, SCRIPT LOAD while loading or
    /// refused by an ACL) without harm.
    pub(super) fn handshake(&self, pooled: &mut Pooled, deadline: Instant) -> Result<(), Failure> {
        pooled.con.write(&self.handshake.concat(), deadline)?;
        let mut replies = vec![Value::Nil; self.handshake.len()];
        // The required commands come first: the first error reply is
        // theirs if any of theirs failed.
        match pooled.read_replies(&mut replies, deadline)? {
            Some(refused) if refused.at < self.required_names.len() => return Err(refused),
            _ => {}
        }
        // A refused command leaves its slot Nil: read as unknown.
        let at = |i: usize| Some(&replies[self.identity_at + i]).filter(|v| **v != Value::Nil);
        let identity = Identity::read(at(0), at(1), at(2));
        pooled.legacy = !identity.set_nx_get;
        pooled.plain_delete = identity
            .plain_delete
            .filter(|_| !self.plain_delete_refused.load(Ordering::Relaxed));
        if let (Some((identities, member)), Some(run_id)) = (self.member.get(), &identity.run_id) {
            identities.server(member, &self.name, run_id);
        }
        match self.watch.observe(&identity, Instant::now()) {
            Noticed::Same => {}
            Noticed::Restarted => crate::base::logging::log!(
                warn,
                "redlock_sync::restart",
                "{}: restarted, or another server behind its address (new run_id){}",
                self.name,
                "; it votes again once the longest TTL (or the restart quarantine) has \
                 passed since the change was seen, whatever its uptime or persistence: \
                 the server now behind the address may lack the old one's keys"
            ),
            Noticed::Unreadable => crate::base::logging::log!(
                warn,
                "redlock_sync::restart",
                "{}: INFO refused (give the user +info): restarts of this server cannot be \
                 detected, and it always votes",
                self.name
            ),
        }
        Ok(())
    }

    /// Opens a connection for listening (see [`Listener`]), handshake
    /// included, by `deadline`.
    pub(crate) fn listener(&self, deadline: Instant) -> Result<Listener, NodeError> {
        let pooled = self.connect(deadline)?;
        Ok(Listener {
            con: pooled.con,
            node: self.name.clone(),
            timeout: self.timeout,
            switches: pooled.switches,
        })
    }

    /// A connection from the pool, if any, told what its node learned
    /// since it was pooled.
    pub(super) fn checkout(&self) -> Option<Pooled> {
        let mut pooled = self.idle.lock().pop()?;
        if pooled.switches != self.switches() {
            // Opened before a failover: to the old master, maybe still up.
            self.idle.lock().clear();
            return None;
        }
        if self.plain_delete_refused.load(Ordering::Relaxed) {
            pooled.plain_delete = None;
        }
        Some(pooled)
    }

    /// Returns a healthy connection to the pool, its socket timeouts reset
    /// to their resting value.
    pub(super) fn checkin(&self, mut pooled: Pooled) {
        if pooled.plain_delete_refused {
            self.plain_delete_refused.store(true, Ordering::Relaxed);
        }
        if pooled.demoted || pooled.switches != self.switches() || pooled.con.rest().is_err() {
            return;
        }
        pooled.counts.settle();
        let mut idle = self.idle.lock();
        if idle.len() < self.max_idle {
            idle.push(pooled);
        }
    }
}
