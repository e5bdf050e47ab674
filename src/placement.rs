//! Where tasks run: worker labels, the labels a task (or a run) wants, and sticky strategies.
//! The engine ranks workers by them (see the development engine's `placement.rs`); this module
//! only says what to ask for.
//!
//! # Invariants
//!
//! 1. A label is a string or an int, never both; ints compare with ints and strings with
//!    strings (the engine does not coerce), so `memory = 1024` and `memory = "1024"` differ.
//! 2. A desired label defaults to what the engine assumes when a field is absent: EQUAL,
//!    weight 100, not required. Only what differs from the default is sent.

use std::collections::HashMap;

use crate::protocol::{self as proto, v1};

/// How a workflow's runs stay on the worker that started them (child runs spawned with
/// [`crate::worker::context::Context::spawn_sticky_child`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StickyStrategy {
    /// Prefer that worker; another one may take the run when it is busy or gone.
    Soft,
    /// Only that worker: the run waits for it.
    Hard,
}

impl StickyStrategy {
    /// On the wire.
    pub(crate) fn wire(self) -> v1::StickyStrategy {
        match self {
            StickyStrategy::Soft => v1::StickyStrategy::Soft,
            StickyStrategy::Hard => v1::StickyStrategy::Hard,
        }
    }
}

/// How a worker's label compares with a desired value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Comparator {
    /// `label == value` (the engine's default).
    Equal,
    /// `label != value`.
    NotEqual,
    /// `label > value`.
    GreaterThan,
    /// `label >= value`.
    GreaterThanOrEqual,
    /// `label < value`.
    LessThan,
    /// `label <= value`.
    LessThanOrEqual,
}

impl Comparator {
    /// On the wire.
    pub(crate) fn wire(self) -> v1::WorkerLabelComparator {
        use v1::WorkerLabelComparator as W;
        match self {
            Comparator::Equal => W::Equal,
            Comparator::NotEqual => W::NotEqual,
            Comparator::GreaterThan => W::GreaterThan,
            Comparator::GreaterThanOrEqual => W::GreaterThanOrEqual,
            Comparator::LessThan => W::LessThan,
            Comparator::LessThanOrEqual => W::LessThanOrEqual,
        }
    }
}

/// A worker label's value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LabelValue {
    /// A string label (`model = "fast"`).
    Str(String),
    /// An int label (`memory = 1024`), comparable with `<`, `>`, ...
    Int(i32),
}

impl From<&str> for LabelValue {
    fn from(s: &str) -> Self {
        LabelValue::Str(s.to_string())
    }
}

impl From<String> for LabelValue {
    fn from(s: String) -> Self {
        LabelValue::Str(s)
    }
}

impl From<i32> for LabelValue {
    fn from(i: i32) -> Self {
        LabelValue::Int(i)
    }
}

impl LabelValue {
    /// The worker label on the wire.
    pub(crate) fn to_proto(&self) -> proto::WorkerLabels {
        match self {
            LabelValue::Str(s) => proto::WorkerLabels {
                str_value: Some(s.clone()),
                int_value: None,
            },
            LabelValue::Int(i) => proto::WorkerLabels {
                str_value: None,
                int_value: Some(*i),
            },
        }
    }
}

/// Worker labels on the wire.
pub(crate) fn labels_to_proto(
    labels: &HashMap<String, LabelValue>,
) -> HashMap<String, proto::WorkerLabels> {
    labels
        .iter()
        .map(|(k, v)| (k.clone(), v.to_proto()))
        .collect()
}

/// A label a task wants its worker to have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredLabel {
    /// The value compared with the worker's.
    pub value: LabelValue,
    /// A worker without it is never used (otherwise it only adds `weight` to a worker's score).
    pub required: bool,
    /// How the worker's value compares with `value` (`GreaterThan`: worker > value).
    pub comparator: Comparator,
    /// What a satisfied label adds to a worker's score (the highest score wins).
    pub weight: i32,
}

impl DesiredLabel {
    /// The worker's label must equal `value` (preferred, not required, weight 100).
    pub fn equals(value: impl Into<LabelValue>) -> Self {
        Self::compare(Comparator::Equal, value)
    }

    /// The worker's label must compare with `value` by `comparator`.
    pub fn compare(comparator: Comparator, value: impl Into<LabelValue>) -> Self {
        DesiredLabel {
            value: value.into(),
            required: false,
            comparator,
            weight: 100,
        }
    }

    /// Never use a worker without it.
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// Its weight in a worker's score.
    pub fn weight(mut self, weight: i32) -> Self {
        self.weight = weight;
        self
    }

    /// On the wire (invariant 2).
    pub(crate) fn to_proto(&self) -> v1::DesiredWorkerLabels {
        let (str_value, int_value) = match &self.value {
            LabelValue::Str(s) => (Some(s.clone()), None),
            LabelValue::Int(i) => (None, Some(*i)),
        };
        v1::DesiredWorkerLabels {
            str_value,
            int_value,
            required: Some(self.required),
            comparator: (self.comparator != Comparator::Equal)
                .then_some(self.comparator.wire() as i32),
            weight: (self.weight != 100).then_some(self.weight),
        }
    }
}

/// Desired labels on the wire.
pub(crate) fn desired_to_proto(
    labels: &HashMap<String, DesiredLabel>,
) -> HashMap<String, v1::DesiredWorkerLabels> {
    labels
        .iter()
        .map(|(k, v)| (k.clone(), v.to_proto()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_keep_their_kind_on_the_wire() {
        assert_eq!(
            LabelValue::from("fast").to_proto().str_value.as_deref(),
            Some("fast")
        );
        let int = LabelValue::from(1024).to_proto();
        assert_eq!((int.str_value, int.int_value), (None, Some(1024)));
    }

    #[test]
    fn desired_labels_send_only_what_differs_from_the_engines_defaults() {
        let d = DesiredLabel::equals("fast").to_proto();
        assert_eq!(
            (d.comparator, d.weight, d.required),
            (None, None, Some(false))
        );
        let d = DesiredLabel::compare(Comparator::GreaterThan, 512)
            .required()
            .weight(30)
            .to_proto();
        assert_eq!(d.int_value, Some(512));
        assert_eq!(
            d.comparator,
            Some(v1::WorkerLabelComparator::GreaterThan as i32)
        );
        assert_eq!((d.weight, d.required), (Some(30), Some(true)));
    }
}
