//! The random part of lock tokens: bytes from the operating system's
//! generator, drawn a batch at a time per manager.
//!
//! One draw per token (a system call: about a third of a microsecond
//! here, more in a cycle that has cooled the caches) was the largest
//! single cost a lock cycle paid over raw connections sending the same
//! commands, about 2% of an uncontended loopback cycle. A manager now
//! draws [`BATCH`] bytes at once and hands out [`TOKEN_BYTES`] of them
//! per token, each byte once. Checking the process id on each token,
//! for a fork, would cost a system call again (measured: all of the
//! gain); the batch is the manager's instead of the thread's, so that
//! forks are safe as long as managers are not shared across them:
//!
//! **Fork.** A manager belongs to the process that built it: a process
//! forked without `exec` shares its connections with its parent (their
//! replies would cross), and its batch too. A process that builds its
//! own manager after a fork draws a batch of its own, and its tokens are
//! its own, whatever its parent drew.

use parking_lot::Mutex;

/// Random bytes in a token: 128 bits.
pub(crate) const TOKEN_BYTES: usize = 16;

/// Bytes drawn at once: sixteen tokens' worth.
const BATCH: usize = 16 * TOKEN_BYTES;

/// A manager's drawn bytes, of which the first `used` are handed out.
pub(crate) struct Entropy(Mutex<Batch>);

struct Batch {
    used: usize,
    bytes: [u8; BATCH],
}

impl Entropy {
    /// Nothing drawn yet: the first token draws.
    pub(crate) fn new() -> Entropy {
        Entropy(Mutex::new(Batch {
            used: BATCH,
            bytes: [0; BATCH],
        }))
    }

    /// Fills `out` with random bytes from the operating system's
    /// generator that no other token of this manager gets.
    pub(crate) fn token_bytes(&self, out: &mut [u8; TOKEN_BYTES]) -> Result<(), getrandom::Error> {
        let mut b = self.0.lock();
        if b.used + TOKEN_BYTES > BATCH {
            getrandom::fill(&mut b.bytes)?;
            b.used = 0;
        }
        let at = b.used;
        out.copy_from_slice(&b.bytes[at..at + TOKEN_BYTES]);
        b.used = at + TOKEN_BYTES;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn no_two_tokens_share_bytes_across_batches_threads_and_managers() {
        let (one, two) = (Entropy::new(), Entropy::new());
        let draw = |e: &Entropy| {
            (0..3 * BATCH / TOKEN_BYTES + 5)
                .map(|_| {
                    let mut out = [0; TOKEN_BYTES];
                    e.token_bytes(&mut out).unwrap();
                    out
                })
                .collect::<Vec<_>>()
        };
        let mut all = std::thread::scope(|s| {
            let other = s.spawn(|| draw(&one));
            let mut all = draw(&one);
            all.extend(other.join().unwrap());
            all
        });
        all.extend(draw(&two));
        let distinct: HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len(), "a token's bytes came twice");
    }
}
