//! The key a run's waiters are registered under: its run id, stored compactly.
//!
//! # Invariants
//!
//! 1. `RunKey::new(id).to_string() == id` for every id: a UUID is kept as its 128 bits only when
//!    `id` is in the canonical lowercase hyphenated form (the form engines send); any other id
//!    is kept as text.
//! 2. Two ids are equal exactly when their keys are equal.
//!
//! Why: a million pending waiters each held a copy of their 36-byte id on the heap, and every
//! delivered result compared against it there (a cache miss, and a free on the listener's
//! thread). Kept inline, the key costs neither.

use std::fmt;

/// A run id as a waiter key.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) enum RunKey {
    /// A canonical lowercase hyphenated UUID, as two halves (a `u128` would align the key, and
    /// every registry slot, to 16 bytes).
    Uuid([u64; 2]),
    /// Any other id, verbatim.
    Text(Box<str>),
}

impl RunKey {
    /// The key of `run_id`. Allocates only for an id that is not a canonical UUID.
    pub(crate) fn new(run_id: &str) -> Self {
        if let Ok(u) = uuid::Uuid::try_parse(run_id) {
            let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
            if u.hyphenated().encode_lower(&mut buf) == run_id {
                let (hi, lo) = u.as_u64_pair();
                return RunKey::Uuid([hi, lo]);
            }
        }
        RunKey::Text(run_id.into())
    }
}

impl fmt::Display for RunKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunKey::Uuid([hi, lo]) => {
                fmt::Display::fmt(&uuid::Uuid::from_u64_pair(*hi, *lo).hyphenated(), f)
            }
            RunKey::Text(t) => f.write_str(t),
        }
    }
}

impl fmt::Debug for RunKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_string(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_round_trips_and_only_canonical_uuids_are_packed() {
        let canonical = "6f1c2b1e-8f3a-4c2d-9b1e-0a2b3c4d5e6f";
        for id in [
            canonical,
            "6F1C2B1E-8F3A-4C2D-9B1E-0A2B3C4D5E6F", // uppercase: another id to an engine
            "6f1c2b1e8f3a4c2d9b1e0a2b3c4d5e6f",     // simple form
            "{6f1c2b1e-8f3a-4c2d-9b1e-0a2b3c4d5e6f}",
            "urn:uuid:6f1c2b1e-8f3a-4c2d-9b1e-0a2b3c4d5e6f",
            "run-42",
            "",
        ] {
            let key = RunKey::new(id);
            assert_eq!(key.to_string(), id, "invariant 1 for {id:?}");
            assert_eq!(matches!(key, RunKey::Uuid(_)), id == canonical, "{id:?}");
        }
    }

    #[test]
    fn a_key_is_three_words() {
        assert_eq!(std::mem::size_of::<RunKey>(), 24);
        assert_eq!(std::mem::align_of::<RunKey>(), 8);
    }

    #[test]
    fn keys_are_equal_exactly_when_ids_are() {
        let a = "6f1c2b1e-8f3a-4c2d-9b1e-0a2b3c4d5e6f";
        let upper = a.to_uppercase();
        assert_eq!(RunKey::new(a), RunKey::new(a));
        assert_ne!(
            RunKey::new(a),
            RunKey::new(&upper),
            "different ids stay apart"
        );
        assert_ne!(
            RunKey::new(a),
            RunKey::new("6f1c2b1e-8f3a-4c2d-9b1e-0a2b3c4d5e60")
        );
    }
}
