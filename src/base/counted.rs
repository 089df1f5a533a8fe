//! Names counted by their users ([`Counted`]): a manager's held
//! resources (one per guard alive), its acquisitions' tokens under way.
//!
//! Both are added and removed on every acquisition and release, so a
//! name is kept by a 64-bit hash of it ([`hash`]): no copy of the name
//! (no allocation) and a cheap hash. Two names with one hash count as
//! one. Between random tokens that is a chance of 2^-64 per pair. The
//! hash is not keyed, so a collision can be built on purpose; what it
//! buys is nothing new:
//!
//! - a resource name that collides with a held one only makes
//!   [`held_here`](crate::Error::Taken) say that this manager holds a
//!   name it does not, in a `Taken` error that is true anyway;
//! - a release message whose token collides with one of this manager's
//!   reads as naming it (its listener ignores it, or wakes that waiter to
//!   ask): a peer that can publish on the channel can name the real
//!   token, which the servers show, just as well. Neither decides a
//!   holder: only the servers' answers do.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{BuildHasherDefault, Hasher};

/// How many users each name has; a name goes with its last user.
#[derive(Default)]
pub(crate) struct Counted {
    counts: HashMap<u64, usize, BuildHasherDefault<Hashed>>,
}

impl Counted {
    /// One more user of `name`.
    pub(crate) fn add(&mut self, name: &[u8]) {
        *self.counts.entry(hash(name)).or_insert(0) += 1;
    }

    /// One user of `name` fewer (none left: it is gone). One lookup,
    /// whether it was the last user or not.
    pub(crate) fn remove(&mut self, name: &[u8]) {
        if let Entry::Occupied(mut users) = self.counts.entry(hash(name)) {
            match *users.get() {
                1 => {
                    users.remove();
                }
                _ => *users.get_mut() -= 1,
            }
        }
    }

    /// Whether `name` has a user.
    pub(crate) fn contains(&self, name: &[u8]) -> bool {
        self.counts.contains_key(&hash(name))
    }
}

/// A 64-bit hash of `bytes`, eight bytes at a time (multiply and
/// xor-shift, as the fast non-cryptographic hashes mix): cheaper than the
/// standard maps' hash for what is hashed on every acquisition and
/// release, a token or a name of some tens of bytes. Not keyed: see the
/// module docs for what a collision costs.
pub(crate) fn hash(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mix = |h: u64, word: u64| {
        let h = (h ^ word).wrapping_mul(K);
        h ^ (h >> 29)
    };
    let mut h = mix(0x243f_6a88_85a3_08d3, bytes.len() as u64);
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        h = mix(h, u64::from_le_bytes(w));
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = mix(h, u64::from_le_bytes(w));
    }
    mix(h, h >> 32)
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
    fn hashes_tell_names_apart() {
        // Every length around the eight-byte words, and names that differ
        // in one byte anywhere or only in length (zero bytes at the end).
        let mut seen = std::collections::HashSet::new();
        let mut count = 0;
        for len in 0..40 {
            let base: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            seen.insert(hash(&base));
            count += 1;
            for at in 0..len {
                let mut other = base.clone();
                other[at] ^= 1;
                seen.insert(hash(&other));
                count += 1;
            }
            seen.insert(hash(&[&base[..], &[0]].concat()));
            count += 1;
        }
        assert_eq!(seen.len(), count, "a collision");
        // The low bits spread too (they pick a release counter).
        let buckets: std::collections::HashSet<u64> = (0..64u32)
            .map(|i| hash(format!("lock:{i}").as_bytes()) % 64)
            .collect();
        assert!(buckets.len() > 32, "{} buckets of 64", buckets.len());
    }
}
