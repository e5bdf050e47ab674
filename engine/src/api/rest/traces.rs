//! A run's trace over REST (`GET /api/v1/stable/tenants/{tenant}/traces?run_external_id=`):
//! the spans of the trace the run's (or task's) spans named, earliest first, as the real
//! engine's observability read answers: 404 `trace not found` when no span named the run,
//! `{}` for a trace with no spans left, and a page's `pagination` counted from the page itself
//! (the real engine's total is the page's length).

use axum::Json;
use axum::extract::{Query, State as AxState};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use super::{Params, Rest, err};

/// The routes of this module.
pub(super) fn routes() -> axum::Router<Rest> {
    axum::Router::new().route("/api/v1/stable/tenants/{tenant}/traces", get(get_trace))
}

/// A whole-number parameter; a value below `floor` reads as `fallback` (the real engine's
/// rule for `limit` below 1 and `offset` below 0).
fn int(p: &Params, k: &str, floor: i64, fallback: i64) -> Result<i64, String> {
    match p.one(k) {
        None => Ok(fallback),
        Some(v) => v
            .parse::<i64>()
            .map(|n| if n < floor { fallback } else { n })
            .map_err(|_| format!("Invalid format for parameter {k}: {v:?} is not an integer")),
    }
}

async fn get_trace(AxState(s): AxState<Rest>, Query(q): Query<Vec<(String, String)>>) -> Response {
    let p = Params(q);
    let Some(run) = p.one("run_external_id").map(str::to_string) else {
        return err(
            StatusCode::BAD_REQUEST,
            "Query argument run_external_id is required, but not found",
        );
    };
    if uuid::Uuid::parse_str(&run).is_err() {
        return err(
            StatusCode::BAD_REQUEST,
            &format!("Invalid format for parameter run_external_id: {run:?} is not a UUID"),
        );
    }
    let (offset, limit) = match (int(&p, "offset", 0, 0), int(&p, "limit", 1, 1000)) {
        (Ok(o), Ok(l)) => (o, l),
        (Err(why), _) | (_, Err(why)) => return err(StatusCode::BAD_REQUEST, &why),
    };
    let st = s.engine.view();
    let Some(trace) = st.trace_id_of(&run) else {
        return err(StatusCode::NOT_FOUND, "trace not found");
    };
    let rows: Vec<Value> = st
        .trace_page(&trace, offset as usize, limit as usize)
        .iter()
        .map(crate::traces::spans::span_json)
        .collect();
    if rows.is_empty() {
        return Json(json!({})).into_response();
    }
    let pages = (rows.len() as u64).div_ceil(limit as u64) as i64;
    let current = (offset / limit).saturating_add(1);
    let next = if current >= pages {
        current
    } else {
        current + 1
    };
    Json(json!({
        "rows": rows,
        "pagination": {"current_page": current, "next_page": next, "num_pages": pages},
    }))
    .into_response()
}
