//! Connections the engine can drop or freeze on demand (fault injection), with TCP_NODELAY.
//!
//! # Invariants
//!
//! 1. Every accepted connection holds the kill token current at its accept; dropping connections
//!    cancels that token, which wakes any pending read or write and fails it with a reset.
//! 2. While frozen, reads never complete and writes are swallowed: the peer sees a half-open
//!    connection, which only keepalive can detect.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::WaitForCancellationFutureOwned;

use crate::faults::Faults;

/// A TCP connection under fault control.
pub(crate) struct FaultyIo {
    inner: TcpStream,
    killed: Pin<Box<WaitForCancellationFutureOwned>>,
    faults: Faults,
}

impl std::fmt::Debug for FaultyIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyIo").finish_non_exhaustive()
    }
}

impl FaultyIo {
    fn new(inner: TcpStream, faults: Faults) -> Self {
        let _ = inner.set_nodelay(true);
        FaultyIo {
            inner,
            killed: Box::pin(faults.kill_token().cancelled_owned()),
            faults,
        }
    }

    fn check(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        if self.killed.as_mut().poll(cx).is_ready() {
            return Some(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "dropped by fault injection",
            ));
        }
        None
    }
}

impl AsyncRead for FaultyIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        if self.faults.frozen_flag() {
            return Poll::Pending; // woken by the kill token when the freeze ends
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for FaultyIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        if self.faults.frozen_flag() {
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(e) = self.check(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for FaultyIo {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// A listener whose connections are [`FaultyIo`].
#[derive(Debug)]
pub(crate) struct FaultyListener {
    pub(crate) inner: TcpListener,
    pub(crate) faults: Faults,
}

impl FaultyListener {
    /// Accepts the next connection (errors are retried after a short pause).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped call accepts nothing.
    pub(crate) async fn accept_io(&self) -> (FaultyIo, std::net::SocketAddr) {
        loop {
            match self.inner.accept().await {
                Ok((s, a)) => return (FaultyIo::new(s, self.faults.clone()), a),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
            }
        }
    }
}

impl axum::serve::Listener for FaultyListener {
    type Io = FaultyIo;
    type Addr = std::net::SocketAddr;

    fn accept(&mut self) -> impl Future<Output = (Self::Io, Self::Addr)> + Send {
        self.accept_io()
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}
