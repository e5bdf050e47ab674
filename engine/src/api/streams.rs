//! Helpers for the engine's outgoing streams: cleanup on drop and planned stream ends.

use std::pin::Pin;

use futures::{Stream, StreamExt as _};

/// A boxed outgoing stream.
pub(crate) type Out<T> = Pin<Box<dyn Stream<Item = Result<T, tonic::Status>> + Send + 'static>>;

/// Runs a closure when dropped.
pub(crate) struct OnDrop<F: FnOnce() + Send>(Option<F>);

impl<F: FnOnce() + Send> OnDrop<F> {
    /// A guard running `f` on drop.
    pub(crate) fn new(f: F) -> Self {
        OnDrop(Some(f))
    }
}

impl<F: FnOnce() + Send> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

/// Wraps `s`: `guard` runs when the stream is dropped, and a fault plan `(after, code)` ends the
/// stream after `after` messages with `code` (or OK when `None`).
pub(crate) fn guarded<T: Send + 'static, S, G>(
    s: S,
    guard: G,
    plan: Option<(usize, Option<i32>)>,
) -> Out<T>
where
    S: Stream<Item = Result<T, tonic::Status>> + Send + 'static,
    G: Send + 'static,
{
    let s = s.map(move |item| {
        let _keep = &guard;
        item
    });
    match plan {
        None => Box::pin(s),
        Some((after, code)) => {
            let tail = futures::stream::iter(code.map(|c| {
                Err(tonic::Status::new(
                    tonic::Code::from_i32(c),
                    "stream ended by fault injection",
                ))
            }));
            Box::pin(s.take(after).chain(tail))
        }
    }
}
