//! The attempt ledger: counters per method, readable from the runtime handle.
//!
//! Tracing is done by the executor (one span per operation, one event per attempt); this file
//! only counts. Counts are plain integers behind one short lock per attempt: uncontended on the
//! hot path, and the snapshot is a copy, so readers never hold the lock while they format.

use std::collections::BTreeMap;

use parking_lot::Mutex;

/// Counters of one method (or REST route).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MethodCounters {
    /// Logical operations started.
    pub operations: u64,
    /// Network attempts made (first attempts and retries).
    pub attempts: u64,
    /// Retries made (attempts after the first).
    pub retries: u64,
    /// Retries refused because the budget was spent.
    pub budget_refusals: u64,
    /// Failed attempts by code (`UNAVAILABLE`, `http_503`, `not_sent`, ...).
    pub failures_by_code: BTreeMap<String, u64>,
    /// Finished operations by outcome (`ok`, `maybe_executed`, ...).
    pub outcomes: BTreeMap<&'static str, u64>,
}

/// The ledger of one runtime.
#[derive(Debug, Default)]
pub struct Ledger {
    methods: Mutex<BTreeMap<String, MethodCounters>>,
}

impl Ledger {
    fn with<F: FnOnce(&mut MethodCounters)>(&self, method: &str, f: F) {
        let mut m = self.methods.lock();
        match m.get_mut(method) {
            Some(c) => f(c),
            None => f(m.entry(method.to_string()).or_default()),
        }
    }

    /// An operation started.
    pub fn operation(&self, method: &str) {
        self.with(method, |c| c.operations += 1);
    }

    /// An attempt is being made; `retry` when it is not the first.
    pub fn attempt(&self, method: &str, retry: bool) {
        self.with(method, |c| {
            c.attempts += 1;
            if retry {
                c.retries += 1;
            }
        });
    }

    /// An attempt failed with `code`.
    pub fn failure(&self, method: &str, code: &str) {
        self.with(method, |c| {
            *c.failures_by_code.entry(code.to_string()).or_default() += 1
        });
    }

    /// A retry was refused by the budget.
    pub fn budget_refusal(&self, method: &str) {
        self.with(method, |c| c.budget_refusals += 1);
    }

    /// An operation finished with `outcome` (`ok` on success).
    pub fn finished(&self, method: &str, outcome: &'static str) {
        self.with(method, |c| *c.outcomes.entry(outcome).or_default() += 1);
    }

    /// A copy of every method's counters.
    pub fn snapshot(&self) -> BTreeMap<String, MethodCounters> {
        self.methods.lock().clone()
    }
}
