//! One quorum member: a Redis server, or a whole Redis Cluster. A round
//! asks every member once; each member answers with one vote.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::base::node_error::{Cause, NodeError};
use crate::members::node::Node;
use crate::members::redis_cluster::RedisCluster;
use crate::members::request::Said;
use crate::members::request::{Request, Routed};

/// One vote of the quorum.
pub(crate) enum Member {
    /// One Redis server.
    Node(Arc<Node>),
    /// A Redis Cluster: each request goes to the master of its key's slot.
    Cluster(Arc<RedisCluster>),
}

/// The pub/sub commands of release announcements: classic pub/sub on a
/// node, sharded pub/sub on a Redis Cluster member (the channel lives on
/// the master of its slot). The one place that chooses between them.
#[derive(Clone, Copy)]
pub(crate) struct Verbs {
    pub(crate) publish: &'static [u8],
    pub(crate) subscribe: &'static [u8],
    pub(crate) unsubscribe: &'static [u8],
    /// Sharded: one command takes the channels of one slot only.
    pub(crate) sharded: bool,
}

impl Verbs {
    /// The commands of a node (`cluster` false) or of a Redis Cluster
    /// member.
    pub(crate) const fn of(cluster: bool) -> Verbs {
        match cluster {
            false => Verbs {
                publish: b"PUBLISH",
                subscribe: b"SUBSCRIBE",
                unsubscribe: b"UNSUBSCRIBE",
                sharded: false,
            },
            true => Verbs {
                publish: b"SPUBLISH",
                subscribe: b"SSUBSCRIBE",
                unsubscribe: b"SUNSUBSCRIBE",
                sharded: true,
            },
        }
    }
}

impl Member {
    /// Whether it is a Redis Cluster: its requests take their cluster
    /// form ([`request`](Self::request)) and route by the key's slot.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Member::Cluster(_))
    }

    /// The pub/sub commands of its release announcements.
    pub(crate) fn verbs(&self) -> Verbs {
        Verbs::of(self.is_cluster())
    }

    /// How many times a cluster's slot map changed (0 for a node): what
    /// is routed by it is routed again when this changes.
    pub(crate) fn map_generation(&self) -> u64 {
        match self {
            Member::Node(_) => 0,
            Member::Cluster(cluster) => cluster.generation(),
        }
    }

    /// Has a cluster fetch its slot map again soon (a slot moved, a
    /// master is unknown or unreachable); nothing for a node.
    pub(crate) fn refresh_soon(&self) {
        if let Member::Cluster(cluster) = self {
            cluster.refresh_soon();
        }
    }

    /// The member's name in messages: `host:port`, or `cluster host:port`
    /// (the first seed).
    pub(crate) fn name(&self) -> &str {
        match self {
            Member::Node(node) => node.name(),
            Member::Cluster(cluster) => cluster.name(),
        }
    }

    /// The node timeout.
    pub(crate) fn timeout(&self) -> Duration {
        match self {
            Member::Node(node) => node.timeout(),
            Member::Cluster(cluster) => cluster.timeout(),
        }
    }

    /// The failure reported for a member whose call panicked (a bug,
    /// never expected): counted as a failed member instead of unwinding.
    pub(crate) fn panicked(&self) -> NodeError {
        match self {
            Member::Node(node) => node.panicked(),
            Member::Cluster(cluster) => NodeError::cluster(
                cluster.name().clone(),
                "the call to this member panicked".into(),
                cluster.timeout(),
            ),
        }
    }

    /// A node member's server: how many times its `run_id` changed, and
    /// whether it was ever reached (none for a Redis Cluster member,
    /// whose server depends on the slot).
    pub(crate) fn node_runs(&self) -> Option<(u64, bool)> {
        match self {
            Member::Node(node) => Some((node.runs(), node.met())),
            Member::Cluster(_) => None,
        }
    }

    /// The server that answers for `slot` now, as tokens name it (see
    /// `Node::run_digest`); none while unknown.
    pub(crate) fn run_digest(&self, slot: u16) -> Option<Vec<u8>> {
        self.target(slot)?.run_digest()
    }

    /// Whether the server that answers for `slot` is kept out now after a
    /// restart (or a change of server seen behind its address).
    pub(crate) fn kept_out(&self, slot: u16) -> bool {
        self.target(slot)
            .is_some_and(|node| node.quarantine().is_some())
    }

    /// The failure that stands for a yes not counted: `why` says why.
    /// Not settled: the yes may have left the attempt's key there, which
    /// the attempt's clean-up removes.
    pub(crate) fn not_counted(&self, why: String) -> NodeError {
        let (name, timeout) = match self {
            Member::Node(node) => (Arc::from(node.name()), node.timeout()),
            Member::Cluster(cluster) => (cluster.name().clone(), cluster.timeout()),
        };
        let mut e = NodeError::classify(name, Cause::Restarted(why), false, timeout);
        e.settled = false;
        e
    }

    /// This member's view in a read is no answer, by the restart rule
    /// (see `decide::forgetful_views`).
    pub(crate) fn view_not_counted(&self) -> NodeError {
        self.not_counted(
            "its view is not counted: its server is not among those that a holder's value, \
             found on another member, names: it may have restarted since that grant, and \
             forgotten it"
                .into(),
        )
    }

    /// The request as this member sends it.
    pub(crate) fn request<'r>(&self, req: &'r Request<'r>) -> Routed<'r> {
        Routed::of(req, self.is_cluster())
    }

    /// The server that takes a request for `slot`, when known without
    /// I/O (a node is always known; a cluster once it has a slot map).
    pub(crate) fn target(&self, slot: u16) -> Option<Arc<Node>> {
        match self {
            Member::Node(node) => Some(node.clone()),
            Member::Cluster(cluster) => cluster.route(slot),
        }
    }

    /// The server that takes a request for `slot`: as
    /// [`target`](Self::target), fetching a cluster's slot map first if
    /// it is not known yet, by `deadline`.
    pub(crate) fn route(&self, slot: u16, deadline: Instant) -> Result<Arc<Node>, NodeError> {
        match self {
            Member::Node(node) => Ok(node.clone()),
            Member::Cluster(cluster) => cluster.route_or_fetch(slot, deadline),
        }
    }

    /// Notes the new owner named by a `MOVED` answer, so that the request
    /// may be routed again (see `RedisCluster::note_moved`).
    pub(crate) fn moved(&self, e: &NodeError) -> bool {
        match self {
            Member::Node(_) => false,
            Member::Cluster(cluster) => cluster.note_moved(e),
        }
    }

    /// Runs `req` on a connection of its own (connecting, and for a
    /// cluster fetching the slot map, as needed), by `deadline`.
    pub(crate) fn call(
        &self,
        req: Routed<'_>,
        slot: u16,
        deadline: Instant,
    ) -> Result<Said, NodeError> {
        match self {
            Member::Node(node) => node.call(req, deadline),
            Member::Cluster(cluster) => cluster.call(req, slot, deadline),
        }
    }

    /// Whether an answer must be followed up (a cluster's redirect) on a
    /// thread of its own, by [`follow`](Self::follow).
    pub(crate) fn must_follow(&self, answer: &Result<Said, NodeError>) -> bool {
        matches!(
            (self, answer),
            (Member::Cluster(_), Err(e)) if matches!(e.code(), Some("MOVED" | "ASK"))
                || e.is_connection_failure()
        )
    }

    /// Follows up an answer (see [`must_follow`](Self::must_follow)).
    pub(crate) fn follow(
        &self,
        answer: Result<Said, NodeError>,
        req: Routed<'_>,
        deadline: Instant,
    ) -> Result<Said, NodeError> {
        match self {
            Member::Node(_) => answer,
            Member::Cluster(cluster) => cluster.after(answer, req, deadline),
        }
    }
}
