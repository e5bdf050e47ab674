//! Type erasure: a typed handler `Fn(I, Context) -> Result<O, E>` as the one shape the worker
//! runs (JSON in, JSON out).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Handler, TaskError};
use crate::worker::context::Context;

/// A type-erased task handler.
pub(crate) type TaskFn =
    Arc<dyn Fn(Context) -> BoxFuture<'static, Result<Value, TaskError>> + Send + Sync>;

/// Wraps a typed `async fn(input, ctx) -> Result<output, error>`.
pub(crate) fn typed<I, O, E, F>(f: F) -> TaskFn
where
    I: DeserializeOwned + Send + 'static,
    O: Serialize + Send + 'static,
    E: Into<TaskError> + Send + 'static,
    F: Handler<I, O, E>,
{
    let f = Arc::new(f);
    Arc::new(move |ctx: Context| {
        let f = f.clone();
        Box::pin(async move {
            let input: I = serde_json::from_value(ctx.input().clone()).map_err(|e| {
                TaskError::non_retryable(format!(
                    "the input does not match the task's input type: {e}"
                ))
            })?;
            let out = f(input, ctx).await.map_err(Into::into)?;
            serde_json::to_value(out).map_err(|e| {
                TaskError::non_retryable(format!("the output cannot be serialized: {e}"))
            })
        })
    })
}
