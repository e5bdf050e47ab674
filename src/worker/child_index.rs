//! Child indexes of one task attempt: the key that makes a child trigger idempotent on the
//! engine (same parent task + same index = the same child run).
//!
//! # Invariants
//!
//! 1. Spawns take indexes in call order, from 0, as the official SDKs number them, so a retried
//!    task that spawns the same children again gets the same runs back.
//! 2. An index is spent only when its spawn succeeded. A spawn that failed or was dropped (its
//!    caller gave up mid-call) returns its index to its workflow, and the next spawn of the same
//!    workflow takes the smallest returned index first: calling `spawn_child` again after a
//!    dropped call reaches the same child, never a second one.
//! 3. A returned index is never handed to a spawn of another workflow: the dropped call may have
//!    reached the engine, which would answer that spawn with the other workflow's child.

use std::collections::{BTreeMap, BTreeSet};

use parking_lot::Mutex;

/// The indexes of one task attempt.
#[derive(Debug, Default)]
pub(crate) struct ChildIndexes {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next: i32,
    /// Indexes given back, by the workflow whose spawn gave them back.
    returned: BTreeMap<String, BTreeSet<i32>>,
}

impl ChildIndexes {
    /// Takes an index for a spawn of `workflow`; it goes back to that workflow unless
    /// [`Reserved::spend`] is called.
    pub(crate) fn take(&self, workflow: &str) -> Reserved<'_> {
        let mut g = self.inner.lock();
        let returned = g.returned.get_mut(workflow).and_then(BTreeSet::pop_first);
        if g.returned.get(workflow).is_some_and(BTreeSet::is_empty) {
            g.returned.remove(workflow);
        }
        let index = match returned {
            Some(i) => i,
            None => {
                let i = g.next;
                g.next += 1;
                i
            }
        };
        Reserved {
            owner: self,
            workflow: workflow.to_string(),
            index,
            spent: false,
        }
    }
}

/// An index taken by a spawn in progress.
#[derive(Debug)]
pub(crate) struct Reserved<'a> {
    owner: &'a ChildIndexes,
    workflow: String,
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
            let mut g = self.owner.inner.lock();
            let workflow = std::mem::take(&mut self.workflow);
            g.returned.entry(workflow).or_default().insert(self.index);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_count_up_and_a_dropped_spawn_gives_its_index_to_the_next_of_its_workflow() {
        let c = ChildIndexes::default();
        let a = c.take("a");
        assert_eq!(a.index, 0);
        a.spend();
        let b = c.take("a");
        let d = c.take("a");
        assert_eq!((b.index, d.index), (1, 2));
        drop(b); // dropped mid-call: 1 goes back to "a"
        d.spend();
        let other = c.take("b");
        assert_eq!(
            other.index, 3,
            "another workflow never gets an index a dropped spawn may have used"
        );
        other.spend();
        let again = c.take("a");
        assert_eq!(again.index, 1, "the retry reaches the same child");
        again.spend();
        assert_eq!(c.take("a").index, 4);
    }
}
