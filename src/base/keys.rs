//! Every key and channel name a lock uses, in one place.
//!
//! | name | what it is | written by |
//! | --- | --- | --- |
//! | `R` | the lock key: a token, or the readers' mark | lock, set, permit, read and write locks |
//! | `R` + [`FENCE_SUFFIX`] | the fencing counter of `R` | acquisitions with fencing on |
//! | `R` + [`RELEASE_SUFFIX`] | the channel a release of `R` is announced on | releases, clean-ups |
//! | `R` + `:redlock-readers` | a read-write lock's readers (a sorted set) | read locks |
//! | `R` + `:redlock-writer` | the flag of a writer waiting behind readers | writers |
//! | `S` + `:redlock-permits` | a semaphore's permit count | permits |
//! | `S` + `:permit:` + `i` | a semaphore's slot `i`, an ordinary lock key | permits |
//! | `E` + `:redlock-leader` | an election's record: its leader's token, term and value (a hash) | leaders |
//! | `R` + `:redlock-check` | what [`LockManager::check`](crate::LockManager::check) tries commands on | `check` |
//! | `R` + `:redlock-seen` | the highest fencing token a [`Fence`](crate::shapes::fence::Fence) has seen for `R`, on the storage's Redis | fenced writes |
//!
//! The suffixes `:redlock-fence`, `:redlock-readers`, `:redlock-writer`,
//! `:redlock-permits`, `:redlock-leader`, `:redlock-queue`,
//! `:redlock-tickets` and `:redlock-seen` are reserved: a resource named
//! so is refused.
//!
//! A Redis Cluster serves a key from the master that owns the key's hash
//! slot (CRC16 of the key, or of its hash tag: the bytes between the
//! first `{` and the first `}` after it, when there are some, modulo
//! 16384). A script may only touch keys of one slot, and a sharded
//! channel lives in one slot too. So everything that goes with a resource
//! `R` (its fencing counter, its release channel) is named so that it
//! hashes to `R`'s slot, whatever bytes `R` holds:
//!
//! - `R` has a hash tag: `R` followed by the suffix (the tag is still the
//!   first one);
//! - `R` has no `{`: `R`, the suffix, then `{T}`, where `T` is a short
//!   decimal tag chosen for `R`'s slot (the first `{` is ours, so `T` is
//!   the tag);
//! - `R` has a `{` but no tag (`a{b`, `a{}b`): `{T}`, then `R`, then the
//!   suffix.
//!
//! The lock key is `R` itself, on every member, so that other Redlock
//! clients (node-redlock) interoperate. The same names are used on plain
//! nodes, so one request suits every member.

use std::sync::OnceLock;

use crate::base::error::{Error, Result};
use crate::base::text::Decimal;

/// Suffix of the fencing counter keys: the counter of resource `R` is
/// `R` followed by this suffix, so that an ACL key pattern that covers the
/// resource names (`~lock:*`) covers their counters too. Resource names
/// ending with it are reserved.
pub const FENCE_SUFFIX: &[u8] = b":redlock-fence";

/// Suffix of the release channels: a release of resource `R` is announced
/// on `R` followed by this suffix (see [`release_channel`]).
pub const RELEASE_SUFFIX: &[u8] = b":redlock-release";

/// Suffix of the key that lists a read-write lock's readers (see
/// `rwlock.rs`), kept beside the lock key in its slot. Reserved.
pub(crate) const READERS_SUFFIX: &[u8] = b":redlock-readers";

/// Suffix of the key that stores a semaphore's permit count (see
/// `semaphore.rs`), beside its name in its slot. Reserved.
pub(crate) const PERMITS_SUFFIX: &[u8] = b":redlock-permits";

/// Suffix of the flag a waiting writer sets so that new readers queue
/// behind it (see `rwlock.rs`). Reserved.
pub(crate) const WRITER_SUFFIX: &[u8] = b":redlock-writer";

/// Suffix of the queue of fair waiters (see `fair.rs`), beside the lock
/// key in its slot. Reserved.
pub(crate) const QUEUE_SUFFIX: &[u8] = b":redlock-queue";

/// Suffix of the fair waiters' tickets (see `fair.rs`), beside the lock
/// key in its slot. Reserved.
pub(crate) const TICKETS_SUFFIX: &[u8] = b":redlock-tickets";

/// Suffix of an election's record (see `election.rs`), beside its lock
/// key in its slot. Reserved.
pub(crate) const LEADER_SUFFIX: &[u8] = b":redlock-leader";

/// Suffix of the key a [`Fence`](crate::shapes::fence::Fence) keeps the highest
/// fencing token it has seen for a resource in, on the storage's Redis.
/// Reserved.
pub(crate) const SEEN_SUFFIX: &[u8] = b":redlock-seen";

/// What follows a semaphore's name, then the slot's index, in a permit
/// slot's key.
const PERMIT_SUFFIX: &str = ":permit:";

/// The value the lock key holds while readers hold the lock. It is no
/// token (tokens start with 32 hex digits), so no writer's unlock deletes
/// it.
pub(crate) const READERS_MARK: &[u8] = b"redlock:readers";

/// What a lock key holds while a fair release has handed it to a waiter
/// (see `fair.rs`): this, then the waiter's token. It is no token, so no
/// unlock deletes it and nobody holds the lock.
pub(crate) const RESERVED_PREFIX: &[u8] = b"redlock:next:";

/// The key of the fencing counter of `resource`: the resource's name
/// followed by [`FENCE_SUFFIX`], in the resource's Redis Cluster hash slot
/// (`lock:job:redlock-fence{29178}`; see the crate docs' "Redis Cluster"
/// section for the rule).
pub fn fence_key(resource: impl AsRef<[u8]>) -> Vec<u8> {
    companion(resource.as_ref(), FENCE_SUFFIX)
}

/// The channel a release of `resource` is published on: the resource's
/// name followed by [`RELEASE_SUFFIX`], in the resource's Redis Cluster
/// hash slot (as its fencing counter: `lock:job:redlock-release{29178}`),
/// so that a cluster member announces it with sharded pub/sub.
pub fn release_channel(resource: impl AsRef<[u8]>) -> Vec<u8> {
    companion(resource.as_ref(), RELEASE_SUFFIX)
}

/// The readers' set of the read-write lock `name`.
pub(crate) fn readers_key(name: &[u8]) -> Vec<u8> {
    companion(name, READERS_SUFFIX)
}

/// The waiting-writer flag of the read-write lock `name`.
pub(crate) fn writer_key(name: &[u8]) -> Vec<u8> {
    companion(name, WRITER_SUFFIX)
}

/// The queue of fair waiters for the lock `name`.
pub(crate) fn queue_key(name: &[u8]) -> Vec<u8> {
    companion(name, QUEUE_SUFFIX)
}

/// The tickets of fair waiters for the lock `name`.
pub(crate) fn tickets_key(name: &[u8]) -> Vec<u8> {
    companion(name, TICKETS_SUFFIX)
}

/// The key of the highest fencing token a fence has seen for `resource`.
pub(crate) fn seen_key(resource: &[u8]) -> Vec<u8> {
    companion(resource, SEEN_SUFFIX)
}

/// The stored permit count of the semaphore `name`.
pub(crate) fn permits_key(name: &[u8]) -> Vec<u8> {
    companion(name, PERMITS_SUFFIX)
}

/// The record of the election `name`: its leader's token, term and
/// value; also the name of the channel its news is announced on (see
/// [`release_channel`]).
pub(crate) fn record_key(name: &[u8]) -> Vec<u8> {
    companion(name, LEADER_SUFFIX)
}

/// The key of slot `i` of the semaphore `name`.
pub(crate) fn permit_key(name: &[u8], i: u32) -> Vec<u8> {
    companion(name, format!("{PERMIT_SUFFIX}{i}").as_bytes())
}

/// The longest resource name accepted, in bytes: 64 KiB. Far above any
/// name a lock needs, far below what would make a round slow (a name
/// travels in every command of it, to every member) or a reply large.
pub const MAX_RESOURCE_LEN: usize = 64 << 10;

/// Checks a resource name: not empty, not longer than
/// [`MAX_RESOURCE_LEN`], and not a reserved name.
pub(crate) fn check_resource(resource: &[u8]) -> Result<()> {
    if resource.is_empty() {
        return Err(Error::invalid_argument("the resource name is empty"));
    }
    if resource.len() > MAX_RESOURCE_LEN {
        return Err(Error::invalid_argument(format!(
            "the resource name has {} bytes; names are at most {MAX_RESOURCE_LEN} bytes",
            resource.len()
        )));
    }
    const RESERVED: [(&[u8], &str); 8] = [
        (FENCE_SUFFIX, "fencing counters"),
        (READERS_SUFFIX, "the readers of read-write locks"),
        (WRITER_SUFFIX, "the flags of waiting writers"),
        (PERMITS_SUFFIX, "the permit counts of semaphores"),
        (LEADER_SUFFIX, "the records of elections"),
        (QUEUE_SUFFIX, "the queues of fair waiters"),
        (TICKETS_SUFFIX, "the tickets of fair waiters"),
        (SEEN_SUFFIX, "the tokens fences have seen"),
    ];
    // A reserved name ends with a suffix (its `:` where the suffix would
    // start, its last byte last), or with the `}` of a hash tag after
    // one: most names do neither, and are checked with two bytes'
    // comparisons per suffix (this runs on every acquisition; the last
    // byte alone let through every name ending in `e`, `s`, `r` or `n`).
    let last = resource[resource.len() - 1];
    let may_end_with = |suffix: &[u8]| {
        resource.len() >= suffix.len()
            && resource[resource.len() - suffix.len()] == suffix[0]
            && suffix[suffix.len() - 1] == last
    };
    if last != b'}' && !RESERVED.iter().any(|(suffix, _)| may_end_with(suffix)) {
        return Ok(());
    }
    for (suffix, what) in RESERVED {
        if is_companion(resource, suffix) {
            return Err(Error::invalid_argument(format!(
                "resource names ending with {:?} (or with it and a {{number}} hash tag) \
                 are reserved for {what}",
                String::from_utf8_lossy(suffix)
            )));
        }
    }
    Ok(())
}

/// Hash slots in a Redis Cluster.
pub(crate) const SLOTS: usize = 16384;

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis
/// Cluster hashes keys.
pub(crate) fn crc16(data: &[u8]) -> u16 {
    static TABLE: OnceLock<[u16; 256]> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = [0u16; 256];
        for (i, entry) in table.iter_mut().enumerate() {
            let mut crc = (i as u16) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
            *entry = crc;
        }
        table
    });
    data.iter().fold(0u16, |crc, &b| {
        (crc << 8) ^ table[usize::from((crc >> 8) as u8 ^ b)]
    })
}

/// The hash tag of `key`: the bytes between its first `{` and the first
/// `}` after it, when there are some.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// The hash slot of `key`.
pub(crate) fn slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key).unwrap_or(key)) & (SLOTS as u16 - 1)
}

/// A short tag for each slot: the smallest number whose decimal digits
/// hash to it (all below 200,000; found once, in about a millisecond).
fn tag_for(slot: u16) -> u32 {
    static TAGS: OnceLock<Vec<u32>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags = vec![u32::MAX; SLOTS];
        let mut left = SLOTS;
        let mut n = 0u32;
        while left > 0 {
            let s = usize::from(crc16(n.to_string().as_bytes()) & (SLOTS as u16 - 1));
            if tags[s] == u32::MAX {
                tags[s] = n;
                left -= 1;
            }
            n += 1;
        }
        tags
    });
    tags[usize::from(slot)]
}

/// The name of what goes with `resource` (its fencing counter, its
/// release channel): `resource` and `suffix`, in `resource`'s hash slot
/// (see the module docs for the rule).
pub(crate) fn companion(resource: &[u8], suffix: &[u8]) -> Vec<u8> {
    with_tag(resource, |tag| {
        let Some((tag, brace)) = tag else {
            // A hash tag of its own: the suffix follows it.
            return [resource, suffix].concat();
        };
        let parts: [&[u8]; 5] = if brace {
            [b"{", tag, b"}", resource, suffix]
        } else {
            [resource, suffix, b"{", tag, b"}"]
        };
        parts.concat()
    })
}

/// Calls `f` with how `resource`'s companions are tagged: `None` when it
/// has a hash tag of its own; else the digits of its slot's tag (see
/// [`tag_for`]), and whether it holds a `{` (the tag then goes first).
/// Remembered per thread for the last short name asked: a lock's
/// fencing counter, queue and release channel are companions of one
/// name, on every cycle.
fn with_tag<T>(resource: &[u8], f: impl FnOnce(Option<(&[u8], bool)>) -> T) -> T {
    const REMEMBERED: usize = 256;
    /// The last name asked, and its tagging.
    struct Last {
        name: Vec<u8>,
        tag: Option<(Decimal, bool)>,
    }
    thread_local! {
        static LAST: std::cell::RefCell<Last> = const {
            std::cell::RefCell::new(Last { name: Vec::new(), tag: None })
        };
    }
    let tagging = |resource: &[u8]| {
        hash_tag(resource).is_none().then(|| {
            let tag = Decimal::of(u64::from(tag_for(slot(resource))));
            (tag, resource.contains(&b'{'))
        })
    };
    if resource.is_empty() || resource.len() > REMEMBERED {
        let tag = tagging(resource);
        return f(tag.as_ref().map(|(t, brace)| (t.as_bytes(), *brace)));
    }
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if last.name != resource {
            last.tag = tagging(resource);
            last.name.clear();
            last.name.extend_from_slice(resource);
        }
        f(last.tag.as_ref().map(|(t, brace)| (t.as_bytes(), *brace)))
    })
}

/// Whether `name` could be the companion of some resource with `suffix`
/// (such names are reserved: a resource of that name would share its key
/// with another resource's counter).
pub(crate) fn is_companion(name: &[u8], suffix: &[u8]) -> bool {
    if name.ends_with(suffix) {
        return true;
    }
    // `R` + suffix + `{digits}`.
    let Some(body) = name.strip_suffix(b"}") else {
        return false;
    };
    let Some(open) = body.iter().rposition(|&b| b == b'{') else {
        return false;
    };
    let digits = &body[open + 1..];
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) && body[..open].ends_with(suffix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // Values from CLUSTER KEYSLOT on a real server.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"));
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn the_remembered_tag_follows_the_name_asked() {
        // Names alternating, on one thread: each gets its own slot's tag,
        // the long one (not remembered) too.
        let long = vec![b'q'; 300];
        let names: [&[u8]; 7] = [
            b"lock:a", b"lock:b", b"{t}:x", b"lock:a", &long, b"a{b", b"lock:b",
        ];
        for name in names.into_iter().chain(names) {
            let expected = hash_tag(name).is_none().then(|| {
                let digits = tag_for(slot(name)).to_string().into_bytes();
                (digits, name.contains(&b'{'))
            });
            assert_eq!(
                with_tag(name, |t| t.map(|(digits, brace)| (digits.to_vec(), brace))),
                expected,
                "{:?}",
                String::from_utf8_lossy(name)
            );
            assert_eq!(slot(&companion(name, b":x")), slot(name));
        }
    }

    #[test]
    fn companions_share_the_resource_slot() {
        for r in [
            &b"lock:job"[..],
            b"{user:42}:lock",
            b"a{b",
            b"a{}b",
            b"}{",
            b"x}y",
            b"",
            b"{",
            b"{}",
        ] {
            for suffix in [&b":redlock-fence"[..], b":redlock-release"] {
                let c = companion(r, suffix);
                assert_eq!(slot(&c), slot(r), "{:?}", String::from_utf8_lossy(&c));
                assert!(
                    is_companion(&c, suffix),
                    "{:?}",
                    String::from_utf8_lossy(&c)
                );
            }
        }
        assert_eq!(companion(b"{u}:l", b":s"), b"{u}:l:s");
        assert!(companion(b"lock:job", b":s").starts_with(b"lock:job:s{"));
        assert!(companion(b"a{b", b":s").starts_with(b"{"));
        assert!(!is_companion(b"lock:job", b":s"));
        assert!(!is_companion(b"lock:job{12}", b":s"));
        assert!(!is_companion(b"lock:job:s{}", b":s"));
        assert!(!is_companion(b"lock:job:s{1a}", b":s"));
    }

    proptest::proptest! {
        /// Whatever bytes a resource holds (braces included), its
        /// counter and channel share its slot, are reserved names, and
        /// differ from it.
        #[test]
        fn any_resource_shares_its_slot_with_its_companions(
            name in proptest::collection::vec(proptest::prop_oneof![
                proptest::num::u8::ANY,
                proptest::strategy::Just(b'{'),
                proptest::strategy::Just(b'}'),
            ], 0..40)
        ) {
            for suffix in [&b":redlock-fence"[..], b":redlock-release"] {
                let c = companion(&name, suffix);
                proptest::prop_assert_eq!(slot(&c), slot(&name));
                proptest::prop_assert!(is_companion(&c, suffix));
                proptest::prop_assert_ne!(&c, &name);
            }
        }
    }

    #[test]
    fn every_slot_has_a_short_tag() {
        for s in 0..SLOTS as u16 {
            let tag = tag_for(s);
            assert!(tag < 200_000, "slot {s}: {tag}");
            assert_eq!(slot(tag.to_string().as_bytes()), s);
        }
    }

    #[test]
    fn counter_keys_follow_the_resource_in_its_slot_and_are_reserved() {
        // The crate docs' example.
        assert_eq!(fence_key(b"lock:job"), b"lock:job:redlock-fence{29178}");
        assert_eq!(fence_key(b"{lock}:job"), b"{lock}:job:redlock-fence");
        for r in [&b"lock:job"[..], b"{lock}:job", b"a{b"] {
            assert!(check_resource(r).is_ok());
            assert!(check_resource(&fence_key(r)).is_err());
        }
        assert!(check_resource(b"lock:job:redlock-fence").is_err());
        assert!(check_resource(b":redlock-fence").is_err());
        for free in [
            &b"jobs:update:queue"[..],
            b"a:redlock-fencE",
            b"redlock-fence",
            b"e",
        ] {
            assert!(check_resource(free).is_ok(), "{free:?}");
        }
        for suffix in [
            READERS_SUFFIX,
            WRITER_SUFFIX,
            PERMITS_SUFFIX,
            LEADER_SUFFIX,
            QUEUE_SUFFIX,
            TICKETS_SUFFIX,
            SEEN_SUFFIX,
        ] {
            let taken = companion(b"lock:job", suffix);
            assert!(check_resource(&taken).is_err());
            assert!(check_resource(&[b"lock:job", suffix].concat()).is_err());
        }
        assert!(check_resource(b"").is_err());
        assert_eq!(slot(&release_channel(b"lock:a")), slot(b"lock:a"));
        assert_eq!(slot(&permit_key(b"pool", 7)), slot(b"pool"));
    }
}
