//! Child indexes of one task attempt: the key that makes a child trigger idempotent on the
//! engine (same parent task + same index = the same child run).
//!
//! # Invariants
//!
//! 1. Spawns take indexes in call order, from 0, as the official SDKs number them, so a retried
//!    task that spawns the same children again gets the same runs back.
//! 2. An index is spent only when its spawn succeeded. A spawn that failed or was dropped (its
//!    caller gave up mid-call) returns its index, and the next spawn takes the smallest returned
//!    index first: calling `spawn_child` again after a dropped call reaches the same child, never
//!    a second one.

use std::collections::BTreeSet;

use parking_lot::Mutex;

/// The indexes of one task attempt.
#[derive(Debug, Default)]
pub(crate) struct ChildIndexes {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: i32,
    returned: BTreeSet<i32>,
}

impl ChildIndexes {
    /// Takes an index; it goes back unless [`Reserved::spend`] is called.
    pub(crate) fn take(&self) -> Reserved<'_> {
        let mut g = self.inner.lock();
        let index = match g.returned.pop_first() {
            Some(i) => i,
            None => {
                let i = g.next;
                g.next += 1;
                i
            }
        };
        Reserved {
            owner: self,
            index,
            spent: false,
        }
    }
}

/// An index taken by a spawn in progress.
#[derive(Debug)]
pub(crate) struct Reserved<'a> {
    owner: &'a ChildIndexes,
    /// The index.
    pub index: i32,
    spent: bool,
}

impl Reserved<'_> {
    /// The spawn succeeded: the index is used for good.
    pub(crate) fn spend(mut self) {
        self.spent = true;
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        if !self.spent {
            self.owner.inner.lock().returned.insert(self.index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_count_up_and_a_dropped_spawn_gives_its_index_to_the_next() {
        let c = ChildIndexes::default();
        let a = c.take();
        assert_eq!(a.index, 0);
        a.spend();
        let b = c.take();
        let d = c.take();
        assert_eq!((b.index, d.index), (1, 2));
        drop(b); // dropped mid-call: 1 goes back
        d.spend();
        let again = c.take();
        assert_eq!(again.index, 1, "the retry reaches the same child");
        again.spend();
        assert_eq!(c.take().index, 3);
    }
}
