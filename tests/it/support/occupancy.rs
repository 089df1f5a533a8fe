//! The in-process overlap checker of the shape tests: threads enter and
//! leave a section as its holders, and it counts every entry that broke
//! the shape's rule (two holders of a lock or a leadership, more than K
//! of a semaphore's permits, a writer beside anyone). Its self-test below
//! feeds it made-up overlaps: it must be able to fail.

use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

/// Who may be inside at once.
#[derive(Clone, Copy, Debug)]
enum Rule {
    /// At most this many holders (a lock, a leadership: 1).
    AtMost(usize),
    /// Readers together, or one writer alone.
    ReadWrite,
}

#[derive(Default)]
struct Inside {
    holders: usize,
    writers: usize,
}

/// Counts the holders of a section and the entries that broke its rule.
pub struct Occupancy {
    rule: Rule,
    inside: Mutex<Inside>,
    most: AtomicUsize,
    violations: AtomicUsize,
}

/// One holder inside: it leaves when dropped.
#[must_use = "the holder leaves when this is dropped"]
pub struct Holder<'a> {
    of: &'a Occupancy,
    writer: bool,
}

impl Drop for Holder<'_> {
    fn drop(&mut self) {
        let mut inside = self.of.inside.lock();
        inside.holders -= 1;
        inside.writers -= usize::from(self.writer);
    }
}

impl Occupancy {
    fn new(rule: Rule) -> Occupancy {
        Occupancy {
            rule,
            inside: Mutex::new(Inside::default()),
            most: AtomicUsize::new(0),
            violations: AtomicUsize::new(0),
        }
    }

    /// One holder at a time (a lock, a set, a leadership).
    pub fn exclusive() -> Occupancy {
        Occupancy::new(Rule::AtMost(1))
    }

    /// At most `k` holders at a time (a semaphore's permits).
    pub fn at_most(k: usize) -> Occupancy {
        Occupancy::new(Rule::AtMost(k))
    }

    /// Readers together, a writer alone.
    pub fn read_write() -> Occupancy {
        Occupancy::new(Rule::ReadWrite)
    }

    fn enter_as(&self, writer: bool) -> Holder<'_> {
        let mut inside = self.inside.lock();
        let broken = match self.rule {
            Rule::AtMost(k) => inside.holders + 1 > k,
            Rule::ReadWrite => inside.writers > 0 || (writer && inside.holders > 0),
        };
        if broken {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
        inside.holders += 1;
        inside.writers += usize::from(writer);
        self.most.fetch_max(inside.holders, Ordering::SeqCst);
        Holder { of: self, writer }
    }

    /// Enters as a holder (a reader, under [`Occupancy::read_write`]).
    pub fn enter(&self) -> Holder<'_> {
        self.enter_as(false)
    }

    /// Enters as a writer (under [`Occupancy::read_write`]).
    pub fn enter_writer(&self) -> Holder<'_> {
        self.enter_as(true)
    }

    /// Entries that broke the rule so far.
    pub fn violations(&self) -> usize {
        self.violations.load(Ordering::SeqCst)
    }

    /// The most holders inside at once.
    pub fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

#[test]
fn the_occupancy_checker_finds_made_up_overlaps() {
    // A lock: one after the other is fine; two at once is one violation.
    let lock = Occupancy::exclusive();
    drop(lock.enter());
    drop(lock.enter());
    assert_eq!((lock.violations(), lock.most()), (0, 1));
    let a = lock.enter();
    let b = lock.enter();
    drop((a, b));
    assert_eq!((lock.violations(), lock.most()), (1, 2));
    // Permits: exactly K at once is fine, K + 1 is not.
    let permits = Occupancy::at_most(2);
    let (a, b) = (permits.enter(), permits.enter());
    assert_eq!(permits.violations(), 0);
    let c = permits.enter();
    drop((a, b, c));
    assert_eq!((permits.violations(), permits.most()), (1, 3));
    // Readers together are fine; a writer beside a reader, or a reader
    // beside a writer, is not; writers one after the other are.
    let rw = Occupancy::read_write();
    let (a, b) = (rw.enter(), rw.enter());
    assert_eq!(rw.violations(), 0);
    let w = rw.enter_writer();
    assert_eq!(rw.violations(), 1);
    drop((a, b));
    let r = rw.enter();
    assert_eq!(rw.violations(), 2);
    drop((w, r));
    drop(rw.enter_writer());
    drop(rw.enter_writer());
    assert_eq!(rw.violations(), 2);
    // Across threads too.
    let lock = Occupancy::exclusive();
    let barrier = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let _h = lock.enter();
                barrier.wait();
            });
        }
    });
    assert_eq!(lock.violations(), 1);
}
