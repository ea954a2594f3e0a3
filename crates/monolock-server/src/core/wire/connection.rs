//! What every connection shares, whichever protocol it speaks: its
//! stream and small buffer, how its session ends ([`End`]), the bounded
//! write, and the ERROR that closes it.

use std::{pin::Pin, task::Poll, time::Duration};

use monolock_proto::{ErrorCode, RequestError, ServerFrame};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    time::{Instant, timeout, timeout_at},
};

use crate::core::{
    config::ERROR_DRAIN_TIMEOUT,
    events::{Event, ReleaseReason, ServerEnding},
    shared::Shared,
    slot::deadline_after,
};

/// The per-connection buffer. After ACQUIRE every valid frame is one byte,
/// so this bounds how many heartbeats one read takes in (and the replies
/// one write sends). Small on purpose: every session carries it for life;
/// an ACQUIRE's name is read into its own allocation instead.
pub(crate) const BUF_LEN: usize = 64;

/// How a session ends, decided by its own task.
pub(crate) enum End {
    /// Release with this reason and close, sending nothing.
    Quiet(ReleaseReason),
    /// Release with this reason, send this ERROR, drain and close.
    Error(ReleaseReason, ErrorCode, &'static str),
    /// A bad frame: release as a protocol error and answer it.
    Protocol(RequestError),
    /// A frame begun and not completed within io-timeout: release as an
    /// io-timeout and close, sending nothing.
    FrameTimeout,
}

impl End {
    /// The reason the session's claims are released with.
    pub(crate) fn reason(&self) -> ReleaseReason {
        match self {
            End::Quiet(reason) | End::Error(reason, ..) => *reason,
            End::Protocol(_) => ReleaseReason::ProtocolError,
            End::FrameTimeout => ReleaseReason::IoTimeout,
        }
    }

    /// Why the server chose this ending, when it did so on its own (a
    /// write blocked past io-timeout is the only `Quiet` io-timeout).
    pub(crate) fn server_ending(&self) -> Option<ServerEnding> {
        match self {
            End::Quiet(ReleaseReason::IoTimeout) => Some(ServerEnding::WriteTimeout),
            End::FrameTimeout => Some(ServerEnding::ReadTimeout),
            End::Protocol(_) => Some(ServerEnding::ProtocolError),
            End::Quiet(_) | End::Error(..) => None,
        }
    }
}

/// Tells the observers that the server ended a connection on its own,
/// keeping `kept_claims` held claims until the lease's end.
pub(crate) fn report_server_ending(shared: &Shared, end: &End, kept_claims: usize) {
    if let Some(cause) = end.server_ending() {
        shared
            .config
            .observer
            .observe(&Event::ConnectionEndedByServer { cause, kept_claims });
    }
}

/// The end of every session at shutdown.
pub(crate) const SHUTTING_DOWN: End = End::Error(
    ReleaseReason::Shutdown,
    ErrorCode::SHUTTING_DOWN,
    "server shutting down",
);

/// Whether the server, not the client, chose to end a session for
/// `reason` while the client may still count on its held claims: a write
/// blocked past io-timeout, a started frame not completed within
/// io-timeout, a bad frame. Its held claims are then released only when its
/// lease would have run out (docs/protocol.md, "How a claim ends"); every
/// other ending releases at once (the client closed or was silent past its
/// lease, an administrator, a shutdown).
pub(crate) fn holds_until_lease_end(reason: ReleaseReason) -> bool {
    #[cfg(feature = "mutations")]
    if reason == ReleaseReason::IoTimeout
        && monolock_mutation::active(monolock_mutation::Mutation::HandOnAtIoTimeout)
    {
        return false;
    }
    matches!(
        reason,
        ReleaseReason::IoTimeout | ReleaseReason::ProtocolError
    )
}

/// A write could not complete.
pub(crate) enum WriteFailed {
    /// Blocked for io-timeout: the client does not read.
    IoTimeout,
    /// The session's lease ran out while the write was blocked.
    Expired,
    /// The stream failed: the client closed or reset its connection.
    Closed,
}

impl From<WriteFailed> for End {
    fn from(failed: WriteFailed) -> Self {
        match failed {
            WriteFailed::IoTimeout => End::Quiet(ReleaseReason::IoTimeout),
            WriteFailed::Expired => End::Quiet(ReleaseReason::Expired),
            WriteFailed::Closed => End::Quiet(ReleaseReason::Graceful),
        }
    }
}

/// Writes all of `bytes` and flushes them within io-timeout, unless the
/// lease (ending at `lease_end`) runs out first. The flush matters for TLS:
/// rustls buffers what it encrypts, and a push left there would wait for
/// the next write; on plain TCP it is a no-op.
pub(crate) async fn write_bounded<S: AsyncWrite + Unpin>(
    stream: &mut S,
    bytes: &[u8],
    io_timeout: Duration,
    lease_end: Instant,
) -> Result<(), WriteFailed> {
    // The common case, the socket taking the whole reply at once, arms no
    // timer; and the timer of the slow case lives in its own allocation, so
    // it does not make every session's task bigger.
    let first = std::future::poll_fn(|cx| match Pin::new(&mut *stream).poll_write(cx, bytes) {
        Poll::Ready(Ok(n)) if n == bytes.len() => match Pin::new(&mut *stream).poll_flush(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(Fast::Done),
            Poll::Ready(Err(_)) => Poll::Ready(Fast::Failed),
            Poll::Pending => Poll::Ready(Fast::Rest(bytes.len())),
        },
        Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => Poll::Ready(Fast::Failed),
        Poll::Ready(Ok(n)) => Poll::Ready(Fast::Rest(n)),
        Poll::Pending => Poll::Ready(Fast::Rest(0)),
    })
    .await;
    let rest = match first {
        Fast::Done => return Ok(()),
        Fast::Failed => return Err(WriteFailed::Closed),
        Fast::Rest(written) => &bytes[written..],
    };
    Box::pin(async {
        let io_end = deadline_after(Instant::now(), io_timeout);
        let write = async {
            stream.write_all(rest).await?;
            stream.flush().await
        };
        match timeout_at(io_end.min(lease_end), write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(WriteFailed::Closed),
            Err(_) if lease_end < io_end => Err(WriteFailed::Expired),
            Err(_) => Err(WriteFailed::IoTimeout),
        }
    })
    .await
}

/// How far [`write_bounded`]'s first attempt got.
enum Fast {
    /// Written and flushed.
    Done,
    /// The stream failed or closed.
    Failed,
    /// This many bytes were written; the rest, and the flush, wait.
    Rest(usize),
}

/// The stream and its buffer.
pub(crate) struct Connection<'a, S> {
    pub(crate) stream: S,
    pub(crate) shared: &'a Shared,
    pub(crate) buf: [u8; BUF_LEN],
    pub(crate) filled: usize,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<'_, S> {
    /// Reads more input after what is buffered; false at EOF or on error.
    pub(crate) async fn fill(&mut self) -> bool {
        match self.stream.read(&mut self.buf[self.filled..]).await {
            Ok(n) if n > 0 => {
                self.filled += n;
                true
            }
            _ => false,
        }
    }

    /// Drops the first `n` buffered bytes.
    pub(crate) fn consume(&mut self, n: usize) {
        self.buf.copy_within(n..self.filled, 0);
        self.filled -= n;
    }

    /// Sends ERROR, shuts the write side and drains input briefly, so the
    /// frame reaches the client even when unread input remains.
    ///
    /// Boxed: it is the cold end of every connection, and inline its timers
    /// would enlarge every session's task for its whole life.
    pub(crate) async fn close_with(&mut self, code: ErrorCode, reason: &str) {
        Box::pin(self.send_error_and_drain(code, reason)).await;
    }

    async fn send_error_and_drain(&mut self, code: ErrorCode, reason: &str) {
        self.shared.config.observer.observe(&Event::ErrorSent(code));
        let frame = ServerFrame::Error {
            code,
            reason: reason.to_owned(),
        }
        .to_bytes();
        let io_timeout = self.shared.config.io_timeout;
        if !matches!(
            timeout(io_timeout, self.stream.write_all(&frame)).await,
            Ok(Ok(()))
        ) {
            return;
        }
        let _ = timeout(io_timeout, self.stream.shutdown()).await;
        let drain =
            async { while matches!(self.stream.read(&mut self.buf).await, Ok(n) if n > 0) {} };
        let _ = timeout(ERROR_DRAIN_TIMEOUT.min(io_timeout), drain).await;
    }
}
