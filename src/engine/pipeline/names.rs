//! The servers a token names (see `holder::server_names` and the crate
//! docs, "Restarts"): which servers answer for a shape's names now, and
//! meeting those this manager never reached before it makes a token.

use super::Engine;

impl Engine {
    /// The hash slots of `names` on Redis Cluster members (one, 0, when
    /// there are none: a node answers for every name).
    fn slots_of(&self, names: &[&[u8]]) -> Vec<u16> {
        let mut slots: Vec<u16> = match self.has_clusters {
            true => names.iter().map(|r| crate::base::keys::slot(r)).collect(),
            false => vec![0],
        };
        slots.sort_unstable();
        slots.dedup();
        slots
    }

    /// Connects, at once and by one node timeout, to each server that
    /// answers for `names` and that this manager never reached (its first
    /// acquisition, as every `lockrun` run's is), so that the token it is
    /// about to make names them (see [`server_names`](Self::server_names)):
    /// a token that names no server makes every yes beside its key
    /// uncounted for others (the restart rule). Costs nothing once met.
    pub(crate) fn meet(&self, names: &[&[u8]]) {
        // Node members all reached once: nothing to do (the common path).
        if !self.has_clusters
            && self
                .members
                .iter()
                .all(|m| m.node_runs().is_some_and(|r| r.1))
        {
            return;
        }
        crate::members::fanout::meet(&self.members, &self.slots_of(names));
    }

    /// The servers that answer for `names` now, as a token names them
    /// (see `holder::server_names`): each member's, by the `run_id` its
    /// last connection read (a Redis Cluster member's, for each name's
    /// slot); those not known yet are left out.
    pub(crate) fn server_names(&self, names: &[&[u8]]) -> Vec<u8> {
        // Node members: made again only when a server's run_id changed.
        if !self.has_clusters {
            let runs: u64 = self
                .members
                .iter()
                .filter_map(|m| m.node_runs().map(|r| r.0))
                .sum();
            let mut cached = self.names.lock();
            if cached.0 != runs || runs == 0 {
                *cached = (runs, self.make_server_names(names));
            }
            return cached.1.clone();
        }
        self.make_server_names(names)
    }

    /// [`server_names`](Self::server_names), made anew.
    fn make_server_names(&self, names: &[&[u8]]) -> Vec<u8> {
        let mut digests: Vec<Vec<u8>> = self.servers_of(names).into_iter().flatten().collect();
        digests.sort_unstable();
        digests.dedup();
        crate::base::holder::server_names(digests.iter().map(|d| &d[..]))
    }

    /// Each member's servers that answer for `names` now, by the
    /// `run_id` digests their last connections read (a Redis Cluster
    /// member's, one per name's slot; none where unknown).
    pub(crate) fn servers_of(&self, names: &[&[u8]]) -> Vec<Vec<Vec<u8>>> {
        let slots = self.slots_of(names);
        self.members
            .iter()
            .map(|m| {
                let mut digests: Vec<Vec<u8>> =
                    slots.iter().filter_map(|&s| m.run_digest(s)).collect();
                digests.dedup();
                digests
            })
            .collect()
    }

    /// For each member, whether a server that answers for `names` is
    /// kept out now (see `Member::kept_out`).
    pub(crate) fn kept_out(&self, names: &[&[u8]]) -> Vec<bool> {
        let slots = self.slots_of(names);
        self.members
            .iter()
            .map(|m| slots.iter().any(|&s| m.kept_out(s)))
            .collect()
    }
}
