//! The attempt ledger: counters per method, readable from the runtime handle.
//!
//! Tracing is done by the executor (one span per operation, one event per attempt); this file
//! only counts. The hot path is lock-free: each method gets its own set of atomic counters, found
//! through a read lock that is only written the first time a method is seen. Failure codes and
//! outcomes other than `ok` are rarer and go through a short mutex.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};

/// Counters of one method (or REST route), as a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MethodCounters {
    /// Logical operations started.
    pub operations: u64,
    /// Network attempts made (first attempts and retries).
    pub attempts: u64,
    /// Retries made (attempts after the first).
    pub retries: u64,
    /// Retries refused because the budget was spent.
    pub budget_refusals: u64,
    /// Failed attempts by code (`Unavailable`, `http_503`, `not_sent`, ...).
    pub failures_by_code: BTreeMap<String, u64>,
    /// Finished operations by outcome (`ok`, `maybe_executed`, ...).
    pub outcomes: BTreeMap<&'static str, u64>,
}

/// Failure counts by code, and outcomes other than `ok`.
#[derive(Debug, Default)]
struct Rare {
    failures: BTreeMap<String, u64>,
    outcomes: BTreeMap<&'static str, u64>,
}

#[derive(Debug, Default)]
struct Live {
    operations: AtomicU64,
    attempts: AtomicU64,
    retries: AtomicU64,
    budget_refusals: AtomicU64,
    ok: AtomicU64,
    rare: Mutex<Rare>,
}

/// The ledger of one runtime.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    methods: RwLock<HashMap<String, Arc<Live>>>,
}

/// One method's counters, looked up once per operation (the executor counts its operation,
/// attempts and outcome through it without further map lookups).
#[derive(Debug, Clone)]
pub(crate) struct MethodLedger(Arc<Live>);

impl MethodLedger {
    /// An operation started.
    pub(crate) fn operation(&self) {
        self.0.operations.fetch_add(1, Ordering::Relaxed);
    }

    /// An attempt is being made; `retry` when it is not the first.
    pub(crate) fn attempt(&self, retry: bool) {
        self.0.attempts.fetch_add(1, Ordering::Relaxed);
        if retry {
            self.0.retries.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An attempt failed with `code`.
    pub(crate) fn failure(&self, code: &str) {
        *self
            .0
            .rare
            .lock()
            .failures
            .entry(code.to_string())
            .or_default() += 1;
    }

    /// A retry was refused by the budget.
    pub(crate) fn budget_refusal(&self) {
        self.0.budget_refusals.fetch_add(1, Ordering::Relaxed);
    }

    /// The operation finished with `outcome` (`ok` on success).
    pub(crate) fn finished(&self, outcome: &'static str) {
        if outcome == "ok" {
            self.0.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            *self.0.rare.lock().outcomes.entry(outcome).or_default() += 1;
        }
    }
}

impl Ledger {
    /// The counters of `method`.
    pub(crate) fn method(&self, method: &str) -> MethodLedger {
        MethodLedger(self.live(method))
    }

    fn live(&self, method: &str) -> Arc<Live> {
        if let Some(l) = self.methods.read().get(method) {
            return l.clone();
        }
        self.methods
            .write()
            .entry(method.to_string())
            .or_default()
            .clone()
    }

    /// An operation started.
    pub(crate) fn operation(&self, method: &str) {
        self.live(method).operations.fetch_add(1, Ordering::Relaxed);
    }

    /// An attempt is being made; `retry` when it is not the first.
    pub(crate) fn attempt(&self, method: &str, retry: bool) {
        let l = self.live(method);
        l.attempts.fetch_add(1, Ordering::Relaxed);
        if retry {
            l.retries.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An attempt failed with `code`.
    pub(crate) fn failure(&self, method: &str, code: &str) {
        let l = self.live(method);
        *l.rare.lock().failures.entry(code.to_string()).or_default() += 1;
    }

    /// An operation finished with `outcome` (`ok` on success).
    pub(crate) fn finished(&self, method: &str, outcome: &'static str) {
        let l = self.live(method);
        if outcome == "ok" {
            l.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            *l.rare.lock().outcomes.entry(outcome).or_default() += 1;
        }
    }

    /// A copy of every method's counters.
    pub(crate) fn snapshot(&self) -> BTreeMap<String, MethodCounters> {
        self.methods
            .read()
            .iter()
            .map(|(k, l)| {
                let rare = l.rare.lock();
                let mut outcomes = rare.outcomes.clone();
                let ok = l.ok.load(Ordering::Relaxed);
                if ok > 0 {
                    outcomes.insert("ok", ok);
                }
                (
                    k.clone(),
                    MethodCounters {
                        operations: l.operations.load(Ordering::Relaxed),
                        attempts: l.attempts.load(Ordering::Relaxed),
                        retries: l.retries.load(Ordering::Relaxed),
                        budget_refusals: l.budget_refusals.load(Ordering::Relaxed),
                        failures_by_code: rare.failures.clone(),
                        outcomes,
                    },
                )
            })
            .collect()
    }
}
