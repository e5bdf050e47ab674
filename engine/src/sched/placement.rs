//! Which worker takes a task: sticky strategies and worker-label affinity, as the real engine
//! ranks workers (`hatchet-engine-semantics.md` §6, §7). Pure functions over plain data; the
//! assignment pass (`hub/actions/assign.rs`) applies them.
//!
//! # Invariants
//!
//! 1. HARD sticky with a desired worker: only that worker is eligible. SOFT: it ranks first,
//!    the others stay eligible. Sticky (either) means labels are not evaluated at all.
//! 2. A `required` desired label that a worker does not satisfy excludes that worker; every other
//!    label only adds its weight when satisfied. The highest score wins; ties go to the worker
//!    with the fewest assignments so far (round robin).
//! 3. Strings compare with strings and ints with ints; a string never matches an int. Ordered
//!    comparators compare the worker's value to the desired one (`GREATER_THAN`: worker >
//!    desired) and need ints.

use std::collections::{BTreeMap, HashMap};

use hatchet_runtime::protocol::{self as proto, v1};

/// A worker label's value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub(crate) enum LabelValue {
    Str(String),
    Int(i32),
}

impl LabelValue {
    /// From the wire: the string value if set, else the int; `None` if neither.
    pub(crate) fn from_parts(s: Option<&String>, i: Option<i32>) -> Option<Self> {
        s.map(|s| LabelValue::Str(s.clone()))
            .or(i.map(LabelValue::Int))
    }
}

impl std::fmt::Display for LabelValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LabelValue::Str(s) => f.write_str(s),
            LabelValue::Int(i) => write!(f, "{i}"),
        }
    }
}

/// Worker labels from `Register` or `UpsertWorkerLabels`.
pub(crate) fn worker_labels(
    labels: &HashMap<String, proto::WorkerLabels>,
) -> BTreeMap<String, LabelValue> {
    labels
        .iter()
        .filter_map(|(k, v)| {
            LabelValue::from_parts(v.str_value.as_ref(), v.int_value).map(|l| (k.clone(), l))
        })
        .collect()
}

/// One desired label of a task (defaults: EQUAL, weight 100, not required).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Desired {
    pub key: String,
    pub value: LabelValue,
    pub required: bool,
    pub comparator: v1::WorkerLabelComparator,
    pub weight: i64,
}

/// A task's or run's desired labels.
pub(crate) fn desired_labels(labels: &HashMap<String, v1::DesiredWorkerLabels>) -> Vec<Desired> {
    let mut out: Vec<Desired> = labels
        .iter()
        .filter_map(|(k, d)| {
            Some(Desired {
                key: k.clone(),
                value: LabelValue::from_parts(d.str_value.as_ref(), d.int_value)?,
                required: d.required.unwrap_or(false),
                comparator: d
                    .comparator
                    .and_then(|c| v1::WorkerLabelComparator::try_from(c).ok())
                    .unwrap_or(v1::WorkerLabelComparator::Equal),
                weight: i64::from(d.weight.unwrap_or(100)),
            })
        })
        .collect();
    out.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// Whether a worker's value satisfies one desired label (invariant 3).
pub(crate) fn satisfies(have: &LabelValue, want: &Desired) -> bool {
    use v1::WorkerLabelComparator as C;
    match (have, &want.value, want.comparator) {
        (a, b, C::Equal) => a == b,
        (LabelValue::Str(_), LabelValue::Int(_), C::NotEqual)
        | (LabelValue::Int(_), LabelValue::Str(_), C::NotEqual) => false,
        (a, b, C::NotEqual) => a != b,
        (LabelValue::Int(a), LabelValue::Int(b), c) => match c {
            C::GreaterThan => a > b,
            C::GreaterThanOrEqual => a >= b,
            C::LessThan => a < b,
            C::LessThanOrEqual => a <= b,
            C::Equal | C::NotEqual => false,
        },
        _ => false,
    }
}

/// A worker's label score for a task: `None` when a required label excludes it (invariant 2).
pub(crate) fn label_score(
    labels: &BTreeMap<String, LabelValue>,
    desired: &[Desired],
) -> Option<i64> {
    let mut score = 0;
    for d in desired {
        let ok = labels.get(&d.key).is_some_and(|have| satisfies(have, d));
        if ok {
            score += d.weight;
        } else if d.required {
            return None;
        }
    }
    Some(score)
}

/// A workflow's sticky strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Sticky {
    #[default]
    None,
    Soft,
    Hard,
}

impl Sticky {
    /// From `CreateWorkflowVersionRequest.sticky` (unset: none).
    pub(crate) fn from_proto(s: Option<i32>) -> Self {
        match s.and_then(|s| v1::StickyStrategy::try_from(s).ok()) {
            Some(v1::StickyStrategy::Soft) => Sticky::Soft,
            Some(v1::StickyStrategy::Hard) => Sticky::Hard,
            None => Sticky::None,
        }
    }
}

/// What a task asks of its worker.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Wish {
    pub sticky: Sticky,
    /// The worker it should stay on (sticky only).
    pub desired_worker: Option<String>,
    pub labels: Vec<Desired>,
}

/// A worker's rank for a task, or `None` when it is not eligible (invariants 1 and 2). Higher
/// ranks first.
pub(crate) fn rank(
    wish: &Wish,
    worker_id: &str,
    labels: &BTreeMap<String, LabelValue>,
) -> Option<i64> {
    match (wish.sticky, wish.desired_worker.as_deref()) {
        (Sticky::Hard, Some(w)) => (w == worker_id).then_some(1),
        (Sticky::Soft, Some(w)) => Some(i64::from(w == worker_id)),
        (Sticky::Hard | Sticky::Soft, None) => Some(0),
        (Sticky::None, _) => label_score(labels, &wish.labels),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use v1::WorkerLabelComparator as C;

    fn want(key: &str, value: LabelValue, c: C, required: bool, weight: i64) -> Desired {
        Desired {
            key: key.into(),
            value,
            required,
            comparator: c,
            weight,
        }
    }

    fn labels(pairs: &[(&str, LabelValue)]) -> BTreeMap<String, LabelValue> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn comparators_compare_the_workers_value_to_the_desired_one() {
        let int = LabelValue::Int;
        let s = |x: &str| LabelValue::Str(x.into());
        assert!(satisfies(
            &int(512),
            &want("m", int(256), C::GreaterThan, false, 1)
        ));
        assert!(!satisfies(
            &int(128),
            &want("m", int(256), C::GreaterThan, false, 1)
        ));
        assert!(satisfies(
            &int(256),
            &want("m", int(256), C::LessThanOrEqual, false, 1)
        ));
        assert!(satisfies(
            &s("gpu"),
            &want("k", s("gpu"), C::Equal, false, 1)
        ));
        assert!(satisfies(
            &s("cpu"),
            &want("k", s("gpu"), C::NotEqual, false, 1)
        ));
        assert!(
            !satisfies(&s("1"), &want("k", int(1), C::Equal, false, 1)),
            "no coercion"
        );
        assert!(!satisfies(
            &s("9"),
            &want("k", int(1), C::GreaterThan, false, 1)
        ));
    }

    #[test]
    fn required_labels_exclude_and_weights_add_up() {
        let d = vec![
            want("model", LabelValue::Str("fast".into()), C::Equal, true, 100),
            want(
                "mem",
                LabelValue::Int(512),
                C::GreaterThanOrEqual,
                false,
                30,
            ),
        ];
        let fast_big = labels(&[
            ("model", LabelValue::Str("fast".into())),
            ("mem", LabelValue::Int(1024)),
        ]);
        let fast_small = labels(&[
            ("model", LabelValue::Str("fast".into())),
            ("mem", LabelValue::Int(256)),
        ]);
        let slow = labels(&[
            ("model", LabelValue::Str("slow".into())),
            ("mem", LabelValue::Int(4096)),
        ]);
        assert_eq!(label_score(&fast_big, &d), Some(130));
        assert_eq!(label_score(&fast_small, &d), Some(100));
        assert_eq!(label_score(&slow, &d), None);
        assert_eq!(label_score(&BTreeMap::new(), &[]), Some(0));
    }

    #[test]
    fn sticky_overrides_labels() {
        let required = vec![want(
            "model",
            LabelValue::Str("fast".into()),
            C::Equal,
            true,
            100,
        )];
        let hard = Wish {
            sticky: Sticky::Hard,
            desired_worker: Some("w1".into()),
            labels: required.clone(),
        };
        assert_eq!(
            rank(&hard, "w1", &BTreeMap::new()),
            Some(1),
            "labels not evaluated"
        );
        assert_eq!(rank(&hard, "w2", &BTreeMap::new()), None);
        let soft = Wish {
            sticky: Sticky::Soft,
            ..hard.clone()
        };
        assert!(rank(&soft, "w1", &BTreeMap::new()) > rank(&soft, "w2", &BTreeMap::new()));
        let none = Wish {
            sticky: Sticky::None,
            ..hard
        };
        assert_eq!(
            rank(&none, "w1", &BTreeMap::new()),
            None,
            "desired worker ignored"
        );
    }
}
