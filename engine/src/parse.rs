//! What every room reads requests with: ids and display names, durations, event-key patterns,
//! key expressions, JSON fields and metadata, refused in the real engine's words. A leaf: it
//! imports no other engine file.

use std::time::Duration;

use serde_json::Value;
use tonic::Status as GrpcStatus;

pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A stable UUID for a workflow's step (a task definition): the same workflow and readable id
/// always give the same one.
pub(crate) fn step_id(workflow_id: &str, readable: &str) -> String {
    uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_OID,
        format!("{workflow_id}/{readable}").as_bytes(),
    )
    .to_string()
}

/// A run's display name: its one task's readable id (its workflow's name for a DAG) and its
/// creation in Unix milliseconds, as the real engine names runs.
pub(crate) fn display_name(base: &str, created: std::time::SystemTime) -> String {
    let ms = created
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    format!("{base}-{ms}")
}

pub(crate) use hatchet_runtime::protocol::timestamp;

/// Parses a Hatchet duration (`10s`, `1m30s`, `250ms`, `2h`); `None` if malformed.
pub fn parse_duration(s: &str) -> Option<Duration> {
    // The real engine's grammar: one or more `<number><unit>` parts, units ms/s/m/h, a number
    // with an optional fraction (`1.5s`, `.5m`, `2.h`), no sign; and no more than Go's
    // `time.ParseDuration` holds (an i64 of nanoseconds).
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (int, after) = rest.split_at(int_len);
        let (frac, after) = match after.strip_prefix('.') {
            Some(f) => {
                let n = f.find(|c: char| !c.is_ascii_digit()).unwrap_or(f.len());
                f.split_at(n)
            }
            None => ("", after),
        };
        if int.is_empty() && frac.is_empty() {
            return None;
        }
        let (unit_ns, len): (u128, usize) = if after.starts_with("ms") {
            (1_000_000, 2)
        } else if after.starts_with('s') {
            (1_000_000_000, 1)
        } else if after.starts_with('m') {
            (60_000_000_000, 1)
        } else if after.starts_with('h') {
            (3_600_000_000_000, 1)
        } else {
            return None;
        };
        let whole: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
        let mut part = whole.checked_mul(unit_ns)?;
        // The fraction, to the nanosecond (digits past the 20th change nothing).
        let digits = &frac[..frac.len().min(20)];
        if !digits.is_empty() {
            let f: u128 = digits.parse().ok()?;
            part = part.checked_add(f * unit_ns / 10u128.pow(digits.len() as u32))?;
        }
        total = total.checked_add(part)?;
        if total > i64::MAX as u128 {
            return None;
        }
        rest = &after[len..];
    }
    u64::try_from(total).ok().map(Duration::from_nanos)
}

/// SQL-LIKE-ish matching of an event key against a workflow's event trigger with `*`
/// wildcards. For triggers only: the real engine matches the event key of a condition (a
/// durable wait, a DAG task's event condition) exactly.
pub(crate) fn key_matches(pattern: &str, key: &str) -> bool {
    fn go(p: &[u8], k: &[u8]) -> bool {
        match p.split_first() {
            None => k.is_empty(),
            Some((b'*', rest)) => (0..=k.len()).any(|i| go(rest, &k[i..])),
            Some((c, rest)) => k.first() == Some(c) && go(rest, &k[1..]),
        }
    }
    go(pattern.as_bytes(), key.as_bytes())
}

pub(crate) fn parse_json(field: &str, s: &str) -> Result<Value, GrpcStatus> {
    if s.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(s).map_err(|_| invalid_json(field))
}

/// A request field that is not JSON, refused in the real engine's words (`field` as it names
/// it: a trigger's input is its `payload` there too).
pub(crate) fn invalid_json(field: &str) -> GrpcStatus {
    GrpcStatus::invalid_argument(format!("Invalid request: invalid json in field `{field}`"))
}

/// A request's additional metadata: JSON, or refused as the real engine refuses it; JSON that is
/// not an object is accepted and reads as none, as there.
pub(crate) fn parse_metadata(
    s: Option<&str>,
) -> Result<serde_json::Map<String, Value>, GrpcStatus> {
    match s.map(str::trim) {
        None | Some("") => Ok(Default::default()),
        Some(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => Ok(m),
            Ok(_) => Ok(Default::default()),
            Err(_) => Err(invalid_json("additionalMetadata")),
        },
    }
}

/// Evaluates the small subset of concurrency and rate-limit key expressions the dev engine
/// understands: a dotted path into `input` or `additional_metadata` (`input.order_id`); anything
/// else is used verbatim. The value of a key expression (`input.user_id`, `additional_metadata.tenant`) as a string;
/// any other expression is its own (constant) key.
pub(crate) fn key_of_expression(
    expr: &str,
    input: &Value,
    meta: &serde_json::Map<String, Value>,
) -> String {
    let mut parts = expr.trim().split('.');
    let root = match parts.next() {
        Some("input") => input.clone(),
        Some("additional_metadata") | Some("additionalMetadata") => Value::Object(meta.clone()),
        _ => return expr.to_string(),
    };
    let v = parts.try_fold(root, |v, p| v.get(p).cloned());
    match v {
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
        None => "null".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        // Fractions, as the real engine takes them.
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration(".5m"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("2.h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1h0.25m"), Some(Duration::from_secs(3615)));
        assert_eq!(
            parse_duration("0.0000000015s"),
            Some(Duration::from_nanos(1))
        );
        for bad in [
            "", "s", "10", "10d", "-1s", " 1s", "1s ", ".s", "1..5s", "1.5", "3000000h",
        ] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn wildcards() {
        assert!(key_matches("order:*", "order:created"));
        assert!(key_matches("*", "anything"));
        assert!(key_matches("a*c", "abbbc"));
        assert!(!key_matches("order:*", "user:created"));
        assert!(!key_matches("order", "order:created"));
    }
}
