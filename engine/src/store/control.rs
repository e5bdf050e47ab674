//! Run control's records: the filter and the targets of a cancel or a replay by ids or by a
//! filter (`v1.AdminService/CancelTasks` and `ReplayTasks`). The actions that apply them to the
//! state, and their invariants, are in `hub/actions/control.rs`.

use std::time::SystemTime;

use tonic::Status as GrpcStatus;

use crate::store::model::{Run, Status};
use hatchet_runtime::protocol::calendar::parse_rfc3339;
use hatchet_runtime::protocol::v1;

/// At most this many runs are selected by a cancel filter (the real engine's cap).
pub const CANCEL_FILTER_CAP: usize = 20_000;
/// At most this many runs are selected by a replay filter.
pub const REPLAY_FILTER_CAP: usize = 1_000;

/// Which runs a filter selects: creation time, statuses, workflows and metadata pairs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunFilter {
    /// Created at or after.
    pub since: Option<SystemTime>,
    /// Created at or before.
    pub until: Option<SystemTime>,
    /// REST spellings (`QUEUED`, `RUNNING`, ...); empty means all.
    pub statuses: Vec<String>,
    /// Workflow ids; empty means all.
    pub workflow_ids: Vec<String>,
    /// Additional-metadata pairs a run must all have.
    pub metadata: Vec<(String, String)>,
}

impl RunFilter {
    /// From the gRPC `TasksFilter`.
    pub fn from_proto(f: &v1::TasksFilter) -> Result<Self, GrpcStatus> {
        let time = |t: &prost_types::Timestamp| {
            SystemTime::UNIX_EPOCH
                + std::time::Duration::new(t.seconds.max(0) as u64, t.nanos.max(0) as u32)
        };
        Ok(RunFilter {
            since: f.since.as_ref().map(time),
            until: f.until.as_ref().map(time),
            statuses: f.statuses.clone(),
            workflow_ids: f.workflow_ids.clone(),
            metadata: metadata_pairs(&f.additional_metadata)?,
        })
    }

    /// From the REST `V1TaskFilter` object.
    pub fn from_json(v: &serde_json::Value) -> Result<Self, String> {
        let time = |k: &str| match v.get(k).and_then(|x| x.as_str()) {
            None => Ok(None),
            Some(s) => parse_rfc3339(s)
                .map(Some)
                .ok_or_else(|| format!("filter.{k} {s:?} is not an RFC 3339 time")),
        };
        let strings = |k: &str| -> Vec<String> {
            v.get(k)
                .and_then(|x| x.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        Ok(RunFilter {
            since: time("since")?,
            until: time("until")?,
            statuses: strings("statuses"),
            workflow_ids: strings("workflowIds"),
            metadata: metadata_pairs(&strings("additionalMetadata"))
                .map_err(|e| e.message().to_string())?,
        })
    }

    /// Whether `run`, whose status reads `status`, is selected (creation time bounds are
    /// inclusive). The status is what REST reads (`store/readable.rs`): the real engine selects
    /// by its OLAP tables.
    pub fn matches(&self, run: &Run, status: Status) -> bool {
        self.since.is_none_or(|t| run.created_at >= t)
            && self.until.is_none_or(|t| run.created_at <= t)
            && (self.statuses.is_empty() || self.statuses.iter().any(|s| s == status.rest()))
            && (self.workflow_ids.is_empty() || self.workflow_ids.contains(&run.workflow_id))
            && self.metadata.iter().all(|(k, v)| has_metadata(run, k, v))
    }
}

/// Whether `run`'s metadata has `key` = `value` (a string value as is, any other JSON value by
/// its JSON text).
pub fn has_metadata(run: &Run, key: &str, value: &str) -> bool {
    run.additional_metadata.get(key).is_some_and(|x| match x {
        serde_json::Value::String(s) => s == value,
        other => {
            serde_json::from_str::<serde_json::Value>(value)
                .ok()
                .as_ref()
                == Some(other)
        }
    })
}

/// `"key:value"` strings split at the first colon; one without a colon is refused.
fn metadata_pairs(items: &[String]) -> Result<Vec<(String, String)>, GrpcStatus> {
    items
        .iter()
        .map(|kv| {
            kv.split_once(':')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| {
                    GrpcStatus::invalid_argument(format!(
                        "additional metadata filter {kv:?} is not key:value"
                    ))
                })
        })
        .collect()
}

/// The targets of one cancel or replay: ids, or a filter.
#[derive(Debug, Clone, Default)]
pub struct Targets {
    /// Run or task ids.
    pub ids: Vec<String>,
    /// Or a filter over runs.
    pub filter: Option<RunFilter>,
}

impl Targets {
    /// Checks invariant 1.
    pub(crate) fn validate(&self) -> Result<(), GrpcStatus> {
        if !self.ids.is_empty() && self.filter.is_some() {
            return Err(GrpcStatus::invalid_argument(
                "cannot provide both external ids and filter",
            ));
        }
        if self.ids.iter().any(|id| uuid::Uuid::parse_str(id).is_err()) {
            return Err(GrpcStatus::invalid_argument("invalid external id"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_filter_together_or_a_bad_id_are_refused() {
        let both = Targets {
            ids: vec![uuid::Uuid::new_v4().to_string()],
            filter: Some(RunFilter::default()),
        };
        assert_eq!(
            both.validate().unwrap_err().code(),
            tonic::Code::InvalidArgument
        );
        let bad = Targets {
            ids: vec!["not-a-uuid".into()],
            filter: None,
        };
        assert!(
            bad.validate()
                .unwrap_err()
                .message()
                .contains("invalid external id")
        );
        assert!(Targets::default().validate().is_ok());
    }

    #[test]
    fn metadata_filters_need_a_colon() {
        assert_eq!(
            metadata_pairs(&["k:v:w".into()]).unwrap(),
            [("k".to_string(), "v:w".to_string())]
        );
        assert!(metadata_pairs(&["novalue".into()]).is_err());
    }

    #[test]
    fn rest_filters_parse_times_and_lists() {
        let f = RunFilter::from_json(&serde_json::json!({
            "since": "2026-01-01T00:00:00Z",
            "statuses": ["FAILED"],
            "workflowIds": ["w"],
            "additionalMetadata": ["a:b"],
        }))
        .unwrap();
        assert!(f.since.is_some() && f.until.is_none());
        assert_eq!(f.statuses, ["FAILED"]);
        assert_eq!(f.metadata, [("a".to_string(), "b".to_string())]);
        assert!(RunFilter::from_json(&serde_json::json!({"since": "yesterday"})).is_err());
    }
}
