//! Which servers the members turned out to be, shared by the members of
//! one manager: two members that are the same server (one server under
//! two names, `127.0.0.1:7001` and `localhost:7001`) or the same Redis
//! Cluster would have their votes counted twice, so the first contact
//! that shows it makes every later call fail with `InvalidConfig`.
//!
//! Servers are told apart by their `run_id` (read from `INFO server` by
//! every new connection) and cluster nodes by their node ID (from
//! `CLUSTER SLOTS`). A user refused `INFO` gives no `run_id`: such a
//! server given twice under two names is not found (`check()` warns that
//! `INFO` is refused).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

/// A server as first reached: the member, and the name (spelling) it was
/// reached by.
type Reached = (Arc<str>, Arc<str>);

/// What one manager's members have shown of themselves.
#[derive(Default)]
pub(crate) struct Identities {
    /// Cluster node IDs, with the member (by name) that reported them.
    ids: Mutex<HashMap<String, Arc<str>>>,
    /// Servers' `run_id`s, with the member and the name (spelling) the
    /// server was reached by.
    run_ids: Mutex<HashMap<String, Reached>>,
    /// The plain nodes' addresses (`host:port`).
    nodes: Mutex<HashSet<String>>,
    /// Set once two members were found to be the same.
    pub(crate) conflict: OnceLock<String>,
}

impl Identities {
    /// Records a plain node member's address.
    pub(crate) fn node(&self, name: &str) {
        self.nodes.lock().insert(name.to_owned());
    }

    /// A conflict if a server of the cluster `member` (by address) is also
    /// a plain node member.
    pub(crate) fn check_servers(&self, member: &Arc<str>, servers: &[String]) {
        let nodes = self.nodes.lock();
        if let Some(server) = servers.iter().find(|s| nodes.contains(*s)) {
            let _ = self.conflict.set(format!(
                "{server} is a node member and also a server of {member}; Redlock needs \
                 independent members, and a vote counted twice is unsafe"
            ));
        }
    }

    /// Records `ids` as `member`'s; a conflict if another member has one.
    pub(crate) fn claim(&self, member: &Arc<str>, ids: &[String]) {
        let mut known = self.ids.lock();
        for id in ids {
            match known.get(id) {
                Some(other) if other != member => {
                    let _ = self.conflict.set(format!(
                        "{other} and {member} are the same Redis Cluster (both have node {id}); \
                         Redlock needs independent members, and a vote counted twice is unsafe"
                    ));
                    return;
                }
                Some(_) => {}
                None => {
                    known.insert(id.clone(), member.clone());
                }
            }
        }
    }

    /// Records that `node` (of `member`) is the server `run_id`, now; a
    /// conflict if another member reached the same server. A name whose
    /// server changed (a restart, an address moved) gives up its old
    /// `run_id`, so that only what the names lead to now is compared.
    pub(crate) fn server(&self, member: &Arc<str>, node: &Arc<str>, run_id: &str) {
        let mut known = self.run_ids.lock();
        match known.get(run_id) {
            Some((other, spelled)) if other != member => {
                // Plain node members are named by their node.
                let plain = |m: &Arc<str>| !m.starts_with("cluster ");
                let what = if plain(other) && plain(member) {
                    format!("{spelled} and {node} are the same server (run_id {run_id})")
                } else if plain(other) || plain(member) {
                    format!(
                        "{other} and {member} share a server ({spelled} and {node} have run_id \
                         {run_id})"
                    )
                } else {
                    format!(
                        "{other} and {member} are the same Redis Cluster (both reach the server \
                         with run_id {run_id}: {spelled}, {node})"
                    )
                };
                let _ = self.conflict.set(format!(
                    "{what}, given as two members; Redlock needs independent members, and a \
                     vote counted twice is unsafe"
                ));
            }
            Some(_) => {}
            None => {
                known.retain(|_, (_, name)| name != node);
                known.insert(run_id.to_owned(), (member.clone(), node.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_server_under_two_members_is_a_conflict_naming_both() {
        let ids = Identities::default();
        let (a, b): (Arc<str>, Arc<str>) = ("127.0.0.1:7001".into(), "localhost:7001".into());
        ids.server(&a, &a, "r1");
        ids.server(&a, &a, "r1");
        assert!(ids.conflict.get().is_none());
        ids.server(&b, &b, "r1");
        let why = ids.conflict.get().unwrap();
        assert!(why.contains("127.0.0.1:7001 and localhost:7001"), "{why}");
        assert!(why.contains("r1"), "{why}");
    }

    #[test]
    fn two_names_of_one_member_or_a_server_replaced_are_no_conflict() {
        let ids = Identities::default();
        let member: Arc<str> = "cluster 127.0.0.1:7000".into();
        let (seed, announced): (Arc<str>, Arc<str>) =
            ("localhost:7000".into(), "127.0.0.1:7000".into());
        // A seed and the address the cluster announces: one member.
        ids.server(&member, &seed, "r1");
        ids.server(&member, &announced, "r1");
        // A name whose server was replaced gives up the old run_id: the
        // old server, now reached by another member, is no conflict.
        let (a, b): (Arc<str>, Arc<str>) = ("10.0.0.1:6379".into(), "10.0.0.2:6379".into());
        ids.server(&a, &a, "old");
        ids.server(&a, &a, "new");
        ids.server(&b, &b, "old");
        assert!(ids.conflict.get().is_none(), "{:?}", ids.conflict.get());
    }
}
