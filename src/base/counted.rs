//! Names counted by their users ([`Counted`]): a manager's held
//! resources (one per guard alive), its acquisitions' tokens under way.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

/// How many users each name has; a name goes with its last user.
#[derive(Default)]
pub(crate) struct Counted<S = RandomState> {
    counts: HashMap<Box<[u8]>, usize, S>,
}

impl<S: BuildHasher> Counted<S> {
    /// One more user of `name`.
    pub(crate) fn add(&mut self, name: &[u8]) {
        *self.counts.entry(name.into()).or_insert(0) += 1;
    }

    /// One user of `name` fewer (none left: it is gone). One lookup when
    /// it was the last, the usual case.
    pub(crate) fn remove(&mut self, name: &[u8]) {
        if let Some((name, n)) = self.counts.remove_entry(name)
            && n > 1
        {
            self.counts.insert(name, n - 1);
        }
    }

    /// Whether `name` has a user.
    pub(crate) fn contains(&self, name: &[u8]) -> bool {
        self.counts.contains_key(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_goes_with_its_last_user() {
        let mut c = Counted::<RandomState>::default();
        c.add(b"a");
        c.add(b"a");
        c.add(b"b");
        c.remove(b"a");
        assert!(c.contains(b"a"), "one user of a is left");
        c.remove(b"a");
        assert!(!c.contains(b"a"));
        assert!(c.contains(b"b"));
        // A name never added stays absent.
        c.remove(b"z");
        assert!(!c.contains(b"z"));
    }
}
