//! What the run streams carry of a run's results: the payload threshold, and the error that
//! stands for one too large to send. The run lifecycle that uses them is an action:
//! `hub/actions/runs.rs`.

use hatchet_runtime::protocol as proto;

/// The payload threshold of the run stream: the real engine's `SERVER_GRPC_MAX_MSG_SIZE`
/// default (4 MiB).
pub(crate) const RESULTS_THRESHOLD: usize = 4 * 1024 * 1024;

/// The error text that replaces an oversized error on the run stream (the real engine's).
pub(crate) const ERROR_TOO_LARGE: &str = "Error is too large to send over the Hatchet stream.";

/// The results a finished run's event carries, as the real engine decides: all of them while
/// outputs and errors together stay under `threshold`; none when the outputs alone reach it;
/// otherwise each error longer than its share of what is left is replaced by
/// [`ERROR_TOO_LARGE`], and none if that still does not fit.
pub(crate) fn fit_results(
    mut results: Vec<proto::StepRunResult>,
    threshold: usize,
) -> Vec<proto::StepRunResult> {
    let sizes = |rs: &[proto::StepRunResult]| {
        rs.iter().fold((0usize, 0usize), |(total, outputs), r| {
            let o = r.output.as_ref().map_or(0, String::len);
            let e = r.error.as_ref().map_or(0, String::len);
            (total + o + e, outputs + o)
        })
    };
    let (total, outputs) = sizes(&results);
    if total < threshold {
        return results;
    }
    if outputs >= threshold || results.is_empty() {
        return Vec::new();
    }
    let per_field = (threshold - outputs) / results.len();
    for r in &mut results {
        if r.error.as_ref().is_some_and(|e| e.len() > per_field) {
            r.error = Some(ERROR_TOO_LARGE.to_string());
        }
    }
    if sizes(&results).0 > threshold {
        return Vec::new();
    }
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(output: Option<usize>, error: Option<usize>) -> proto::StepRunResult {
        proto::StepRunResult {
            task_run_external_id: "t".into(),
            task_name: "t".into(),
            job_run_id: "t".into(),
            error: error.map(|n| "e".repeat(n)),
            output: output.map(|n| "o".repeat(n)),
        }
    }

    #[test]
    fn results_fit_the_stream_as_the_real_engine_decides() {
        // Under the threshold: untouched.
        assert_eq!(
            fit_results(vec![r(Some(40), None), r(None, Some(50))], 100).len(),
            2
        );
        // Outputs alone reach it: no results at all (the waiter must read the details).
        assert!(fit_results(vec![r(Some(60), None), r(Some(40), None)], 100).is_empty());
        // Outputs fit, a long error does not: the error is replaced, the output stays.
        let fitted = fit_results(vec![r(Some(10), None), r(None, Some(200))], 150);
        assert_eq!(fitted.len(), 2);
        assert_eq!(fitted[0].output.as_deref().map(str::len), Some(10));
        assert_eq!(fitted[1].error.as_deref(), Some(ERROR_TOO_LARGE));
        // Still over once the errors are replaced: none.
        assert!(fit_results(vec![r(Some(90), None), r(None, Some(200))], 100).is_empty());
    }
}
