//! The bound every task handler meets, named once.

use std::future::Future;

use crate::worker::context::Context;

/// A task's handler: an async function (or closure) of the task's input and its [`Context`],
/// returning the output or an error; shared by the worker's concurrent attempts, so
/// `Send + Sync + 'static`. Every `async fn(I, Context) -> Result<O, E>` and every closure
/// `|input: I, ctx: Context| async move { ... }` is one: the trait only names the bound, so
/// nothing implements it by hand.
///
/// ```
/// use hatchet_runtime::task::Handler;
/// use hatchet_runtime::{Context, TaskError};
///
/// async fn double(n: u32, _ctx: Context) -> Result<u32, TaskError> {
///     Ok(n * 2)
/// }
///
/// fn takes<H: Handler<u32, u32, TaskError>>(_: H) {}
/// takes(double);
/// takes(|n: u32, _ctx| async move { Ok::<_, TaskError>(n + 1) });
/// ```
pub trait Handler<I, O, E>: Fn(I, Context) -> Self::Future + Send + Sync + 'static {
    /// What one call returns.
    type Future: Future<Output = Result<O, E>> + Send + 'static;
}

impl<I, O, E, F, Fut> Handler<I, O, E> for F
where
    F: Fn(I, Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
{
    type Future = Fut;
}
