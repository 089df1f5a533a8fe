//! Names counted by their users ([`Counted`]): a manager's held
//! resources (one per guard alive), its acquisitions' tokens under way.
//!
//! Both are added and removed on every acquisition and release, so a
//! name is kept by its 64-bit FNV-1a hash ([`fnv`]): no copy of the name
//! (no allocation) and a cheap hash. Two names with one hash count as
//! one. Between random tokens that is a chance of 2^-64 per pair; a
//! resource name's collision, which a caller could build on purpose,
//! only makes [`held_here`](crate::Error::Taken) say that this manager
//! holds a name it does not, in a `Taken` error that is true anyway.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// How many users each name has; a name goes with its last user.
#[derive(Default)]
pub(crate) struct Counted {
    counts: HashMap<u64, usize, BuildHasherDefault<Hashed>>,
}

impl Counted {
    /// One more user of `name`.
    pub(crate) fn add(&mut self, name: &[u8]) {
        *self.counts.entry(fnv(name)).or_insert(0) += 1;
    }

    /// One user of `name` fewer (none left: it is gone).
    pub(crate) fn remove(&mut self, name: &[u8]) {
        let hash = fnv(name);
        if let Some(n) = self.counts.get_mut(&hash) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(&hash);
            }
        }
    }

    /// Whether `name` has a user.
    pub(crate) fn contains(&self, name: &[u8]) -> bool {
        self.counts.contains_key(&fnv(name))
    }
}

/// FNV-1a over `bytes`: cheaper than the standard maps' hash for what is
/// hashed on every acquisition and release.
pub(crate) fn fnv(bytes: &[u8]) -> u64 {
    let mut h = Fnv::default();
    h.write(bytes);
    h.finish()
}

/// The FNV-1a hasher (see [`fnv`]).
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The map's hasher for keys that are hashes already: the key itself.
#[derive(Default)]
struct Hashed(u64);

impl Hasher for Hashed {
    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed here; any other input still hashes.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_goes_with_its_last_user() {
        let mut c = Counted::default();
        c.add(b"a");
        c.add(b"a");
        c.add(b"b");
        c.remove(b"a");
        assert!(c.contains(b"a"), "one user of a is left");
        c.remove(b"a");
        assert!(!c.contains(b"a"));
        assert!(c.contains(b"b"));
        // A name never added stays absent, and removing it takes nothing.
        c.remove(b"z");
        assert!(!c.contains(b"z"));
        assert!(c.contains(b"b"));
    }

    #[test]
    fn fnv_is_fnv_1a() {
        // The published FNV-1a 64 test vectors.
        assert_eq!(fnv(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
