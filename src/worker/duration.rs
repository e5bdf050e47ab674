//! Durations on the wire, as the engine's duration strings spell them (`1h2m3s`, `250ms`).

use std::time::Duration;

/// A duration as the engine's duration strings spell it (`1h2m3s`, `250ms`): whole seconds
/// when it has no milliseconds, milliseconds otherwise (rounded up, never `0ms` for a
/// non-zero duration).
pub(crate) fn wire_duration(d: Duration) -> String {
    if d.subsec_nanos() != 0 {
        let ms = d.as_nanos().div_ceil(1_000_000);
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    let (h, m, s) = (s / 3600, (s / 60) % 60, s % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}
