//! Attempts this worker has finished, remembered for a while: the same attempt offered again
//! (its first assignment went out on a stream that broke before the engine heard STARTED) must
//! not run again once it has run here.
//!
//! # Invariants
//!
//! 1. An attempt is keyed by (task run id, durable invocation, retry count): a retry or a new
//!    invocation is a new key and always runs.
//! 2. At most [`REMEMBERED`] attempts are kept, oldest forgotten first, so memory is bounded
//!    however long the worker runs.

use std::collections::{HashSet, VecDeque};

use parking_lot::Mutex;

/// Finished attempts remembered.
pub(super) const REMEMBERED: usize = 10_000;

/// The set of recently finished attempts.
#[derive(Debug, Default)]
pub(crate) struct Finished<K> {
    inner: Mutex<(HashSet<K>, VecDeque<K>)>,
}

impl<K: Clone + Eq + std::hash::Hash> Finished<K> {
    /// Records `key` as finished.
    pub(crate) fn insert(&self, key: K) {
        let mut g = self.inner.lock();
        if g.0.insert(key.clone()) {
            g.1.push_back(key);
            if g.1.len() > REMEMBERED
                && let Some(old) = g.1.pop_front()
            {
                g.0.remove(&old);
            }
        }
    }

    /// Whether an attempt that `which` selects finished here recently.
    pub(crate) fn any(&self, which: impl Fn(&K) -> bool) -> bool {
        self.inner.lock().1.iter().any(which)
    }

    /// Whether `key` finished here recently.
    pub(crate) fn contains(&self, key: &K) -> bool {
        self.inner.lock().0.contains(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_the_newest_attempts_and_forgets_the_oldest() {
        let f = Finished::default();
        for i in 0..REMEMBERED + 5 {
            f.insert(i);
        }
        assert!(!f.contains(&0), "the oldest are forgotten");
        assert!(!f.contains(&4));
        assert!(f.contains(&5));
        assert!(f.contains(&(REMEMBERED + 4)));
        f.insert(REMEMBERED + 4); // a repeat changes nothing
        assert!(f.contains(&5));
    }
}
