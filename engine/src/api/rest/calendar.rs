//! The cron and schedule lists (`GET .../workflows/crons`, `GET .../workflows/scheduled`), read
//! the way the real engine reads them: a pure selection over the stored rows.
//!
//! # Invariants
//!
//! 1. Crons filter by `workflowId`, `workflowName` and `cronName` (each exact), schedules by
//!    `workflowId`, `parentStepRunId` and `statuses`; both by `additionalMetadata` (`key:value`
//!    strings, each contained in the row's metadata as a string; one that is not exactly one
//!    `key:value` pair refuses the request with the real engine's words). A schedule's
//!    `parentWorkflowRunId` is compared with the schedule's own id, as the real engine's query
//!    compares it (`t."id" = parentWorkflowRunId`).
//! 2. `statuses` on schedules: a row with no run matches when `SCHEDULED` is asked for; a row
//!    with a run when its run's status is.
//! 3. Order: `orderByField` (crons: `name`, the workflow's, or `createdAt`; schedules:
//!    `triggerAt` or `createdAt`) in `orderByDirection` (`DESC` unless `ASC`), by default
//!    `createdAt DESC` for crons and `triggerAt DESC` for schedules; ties (and a field the query
//!    does not know) by id, ascending. Then `offset` and `limit` (50 by default).

use serde_json::Value;

use super::Params;

/// Which list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Crons,
    Schedules,
}

/// The rows a list answers (its page) and how many match in all, or why the request is refused.
pub(crate) fn select(
    kind: Kind,
    rows: impl Iterator<Item = Value>,
    p: &Params,
) -> Result<(Vec<Value>, usize), String> {
    let mut meta = Vec::new();
    for pair in
        p.0.iter()
            .filter(|(k, _)| k == "additionalMetadata" || k == "additionalMetadata[]")
    {
        let parts: Vec<&str> = pair.1.split(':').collect();
        match parts.as_slice() {
            [k, v] => meta.push((k.to_string(), v.to_string())),
            _ => return Err("Additional metadata filters must be in the format key:value.".into()),
        }
    }
    let exact = |row: &Value, field: &str, param: &str| {
        p.one(param)
            .is_none_or(|want| row[field].as_str() == Some(want))
    };
    let statuses = p.all("statuses");
    let keep = |row: &Value| -> bool {
        let common = exact(row, "workflowId", "workflowId")
            && meta
                .iter()
                .all(|(k, v)| row["additionalMetadata"][k].as_str() == Some(v.as_str()));
        common
            && match kind {
                Kind::Crons => {
                    exact(row, "workflowName", "workflowName") && exact(row, "name", "cronName")
                }
                Kind::Schedules => {
                    p.one("parentWorkflowRunId")
                        .is_none_or(|id| row["metadata"]["id"].as_str() == Some(id))
                        && exact(row, "parentStepRunId", "parentStepRunId")
                        && (statuses.is_empty()
                            || match row["workflowRunStatus"].as_str() {
                                None => statuses.iter().any(|s| s == "SCHEDULED"),
                                Some(run) => statuses.iter().any(|s| s == run),
                            })
                }
            }
    };
    let mut picked: Vec<Value> = rows.filter(|r| keep(r)).collect();
    let field = p.one("orderByField").unwrap_or(match kind {
        Kind::Crons => "createdAt",
        Kind::Schedules => "triggerAt",
    });
    let descending = p.one("orderByDirection") != Some("ASC");
    let key = |row: &Value| -> Option<String> {
        let v = match (kind, field) {
            (_, "createdAt") => &row["metadata"]["createdAt"],
            (Kind::Crons, "name") => &row["workflowName"],
            (Kind::Schedules, "triggerAt") => &row["triggerAt"],
            _ => return None,
        };
        v.as_str().map(str::to_string)
    };
    let id = |row: &Value| {
        row["metadata"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    picked.sort_by(|a, b| {
        let by_field = key(a).cmp(&key(b));
        let by_field = if descending {
            by_field.reverse()
        } else {
            by_field
        };
        by_field.then_with(|| id(a).cmp(&id(b)))
    });
    let total = picked.len();
    let offset = p.number("offset", 0)?;
    let limit = p.number("limit", 50)?;
    Ok((picked.into_iter().skip(offset).take(limit).collect(), total))
}

/// A cron or schedule list's pagination, as the real engine's handlers compute it: pages
/// `ceil(total / limit)` (0 for an empty list), the current `1 + ceil(offset / limit)`, the next
/// one more unless the current is the last.
pub(crate) fn pagination(total: usize, offset: usize, limit: usize) -> Value {
    let limit = limit.max(1);
    let pages = total.div_ceil(limit);
    let current = 1 + offset.div_ceil(limit);
    let next = if current == pages {
        current
    } else {
        current + 1
    };
    serde_json::json!({"current_page": current, "next_page": next, "num_pages": pages})
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Params {
        Params(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn cron(id: &str, wf: &str, name: &str, created: &str, team: &str) -> Value {
        json!({"metadata": {"id": id, "createdAt": created}, "workflowId": format!("id-{wf}"),
            "workflowName": wf, "name": name, "additionalMetadata": {"team": team}})
    }

    fn ids(r: Result<(Vec<Value>, usize), String>) -> (Vec<String>, usize) {
        let (rows, total) = r.expect("answered");
        let ids = rows
            .iter()
            .map(|r| r["metadata"]["id"].as_str().unwrap_or("?").to_string())
            .collect();
        (ids, total)
    }

    #[test]
    fn crons_filter_order_and_page_as_the_real_engine_reads_them() {
        let rows = [
            cron("1", "a", "n1", "2026-01-01T00:00:01.000Z", "x"),
            cron("2", "a", "n2", "2026-01-01T00:00:02.000Z", "y"),
            cron("3", "b", "n1", "2026-01-01T00:00:03.000Z", "x"),
        ];
        let list =
            |pairs: &[(&str, &str)]| ids(select(Kind::Crons, rows.iter().cloned(), &q(pairs)));
        assert_eq!(
            list(&[]),
            (vec!["3".into(), "2".into(), "1".into()], 3),
            "newest first"
        );
        assert_eq!(list(&[("workflowId", "id-a")]).0, ["2", "1"]);
        assert_eq!(list(&[("workflowName", "b")]).0, ["3"]);
        assert_eq!(list(&[("cronName", "n1")]).0, ["3", "1"]);
        assert_eq!(list(&[("additionalMetadata", "team:x")]).0, ["3", "1"]);
        assert_eq!(
            list(&[("orderByField", "name"), ("orderByDirection", "ASC")]).0,
            ["1", "2", "3"],
            "by the workflow's name, ties by id"
        );
        assert_eq!(
            list(&[("orderByField", "createdAt"), ("orderByDirection", "ASC")]).0,
            ["1", "2", "3"]
        );
        assert_eq!(
            list(&[("limit", "1"), ("offset", "1")]),
            (vec!["2".into()], 3)
        );
        let refused = select(
            Kind::Crons,
            rows.iter().cloned(),
            &q(&[("additionalMetadata", "a:b:c")]),
        );
        assert_eq!(
            refused.err().as_deref(),
            Some("Additional metadata filters must be in the format key:value.")
        );
    }

    #[test]
    fn pages_are_counted_as_the_real_engine_counts_them() {
        // Read off v0.104.9: an empty list of limit 2, and one row of limit 1.
        assert_eq!(
            pagination(0, 0, 2),
            json!({"current_page": 1, "next_page": 2, "num_pages": 0})
        );
        assert_eq!(
            pagination(1, 0, 1),
            json!({"current_page": 1, "next_page": 1, "num_pages": 1})
        );
        assert_eq!(
            pagination(3, 1, 2),
            json!({"current_page": 2, "next_page": 2, "num_pages": 2})
        );
    }

    #[test]
    fn schedules_filter_by_status_and_their_own_id_and_order_by_trigger_time() {
        let rows = [
            json!({"metadata": {"id": "s1", "createdAt": "2026-01-01T00:00:02.000Z"}, "workflowId": "w", "triggerAt": "2026-02-01T00:00:00.000Z"}),
            json!({"metadata": {"id": "s2", "createdAt": "2026-01-01T00:00:01.000Z"}, "workflowId": "w", "triggerAt": "2026-03-01T00:00:00.000Z", "workflowRunStatus": "SUCCEEDED"}),
        ];
        let list = |pairs: &[(&str, &str)]| {
            ids(select(Kind::Schedules, rows.iter().cloned(), &q(pairs))).0
        };
        assert_eq!(list(&[]), ["s2", "s1"], "latest trigger first");
        assert_eq!(
            list(&[("orderByField", "createdAt"), ("orderByDirection", "ASC")]),
            ["s2", "s1"]
        );
        assert_eq!(list(&[("statuses", "SCHEDULED")]), ["s1"]);
        assert_eq!(list(&[("statuses", "SUCCEEDED")]), ["s2"]);
        assert_eq!(
            list(&[("parentWorkflowRunId", "s2")]),
            ["s2"],
            "compared with the schedule's id"
        );
    }
}
