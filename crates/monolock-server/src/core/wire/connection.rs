//! One connection, from accept to close: the first ACQUIRE, then heartbeats,
//! pushes and the end of the session.
//!
//! Each connection is one task that owns its stream and a small fixed
//! buffer. A heartbeat is handled entirely here: an atomic store of the new
//! deadline (the server-wide lease wheel reads it when it next looks), one
//! write. It takes no shared lock, arms no timer and allocates nothing.

use std::{
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::Poll,
    time::{Duration, SystemTime},
};

use monolock_proto::{
    ACQUIRE_HEADER_LEN, ErrorCode, Lease, LockName, Phase, RequestError, ServerFrame,
    acquired_frame, decode_acquire_header, decode_request, msg, v2, waiting_frame,
};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    time::{Instant, timeout, timeout_at},
};
use tracing::debug;

use crate::{
    core::admission::{SHED_REASON, claim_limit_reason},
    core::config::ERROR_DRAIN_TIMEOUT,
    core::events::{Event, ReleaseReason, ServerEnding, SessionInfo},
    core::shared::Shared,
    core::slot::{EndNotice, SessionSlot, deadline_after},
    core::table::Acquired,
};

/// The per-connection buffer. After ACQUIRE every valid frame is one byte,
/// so this bounds how many heartbeats one read takes in (and the replies
/// one write sends). Small on purpose: every session carries it for life;
/// an ACQUIRE's name is read into its own allocation instead.
const BUF_LEN: usize = 64;

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

/// Serves one accepted connection to its end.
pub(crate) async fn serve<S>(
    stream: S,
    remote_addr: SocketAddr,
    identity: Arc<str>,
    accepted_at: Instant,
    shared: Arc<Shared>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut conn = Connection {
        stream,
        shared: &shared,
        buf: [0; BUF_LEN],
        filled: 0,
    };
    // Boxed: the handshake's timers live only until the ACQUIRE, so they are
    // not kept in every session's task for its whole life. A version 2
    // session is served from inside it (boxed again), so it adds nothing
    // to a version 1 session's task either.
    let Some(info) = Box::pin(conn.handshake(remote_addr, identity, accepted_at)).await else {
        return;
    };
    // A version 1 connection is one claim, for the whole session. Ended
    // by hand below rather than by a guard kept here: every session's task
    // carries what it keeps across its awaits.
    let Some(claim) = shared.admit_claim() else {
        let reason = claim_limit_reason(shared.config.max_claims);
        debug!(%remote_addr, "over --max-claims: ACQUIRE refused");
        conn.close_with(ErrorCode::SERVER_CLAIM_LIMIT, &reason)
            .await;
        return;
    };
    std::mem::forget(claim);
    let now = Instant::now();
    let slot = Arc::new(SessionSlot::new(info, now));
    shared.table.touch(&slot, now);
    shared.table.watch_lease(&slot);
    let mut session = Session {
        conn: &mut conn,
        slot: &slot,
        announced: false,
    };
    let end = session.run().await;
    session.finish(end).await;
    shared.claims.end_one();
}

/// The stream and its buffer.
pub(crate) struct Connection<'a, S> {
    pub(crate) stream: S,
    pub(crate) shared: &'a Shared,
    pub(crate) buf: [u8; BUF_LEN],
    pub(crate) filled: usize,
}

/// The first frame of a connection.
enum First {
    /// A version 1 ACQUIRE.
    Acquire { lease: Lease, name: LockName },
    /// A version 2 OPEN.
    Open(Lease),
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<'_, S> {
    /// Reads the first frame within io-timeout of accept, validates it and
    /// checks the ACL. `None` when the connection ended instead (after an
    /// ERROR where one is due), or was a version 2 session, served here
    /// to its end.
    async fn handshake(
        &mut self,
        remote_addr: SocketAddr,
        identity: Arc<str>,
        accepted_at: Instant,
    ) -> Option<SessionInfo> {
        let shared = self.shared;
        // Out of descriptors, the server closes connections without a whole
        // first frame before any session (admission.rs).
        let pending = shared.pending.take(remote_addr);
        let shed = pending.as_ref().map(|pending| pending.shed.clone());
        let shed = async {
            match shed {
                Some(token) => token.cancelled_owned().await,
                None => std::future::pending().await,
            }
        };
        let first = tokio::select! {
            biased;
            () = shared.shutdown.cancelled() => {
                self.close_with(ErrorCode::SHUTTING_DOWN, "server shutting down").await;
                return None;
            }
            () = shed => {
                shared.config.observer.observe(&Event::ConnectionShed);
                debug!(%remote_addr, "out of descriptors: closing a connection without a first frame");
                self.close_with(ErrorCode::TOO_MANY_CONNECTIONS, SHED_REASON).await;
                return None;
            }
            first = timeout_at(deadline_after(accepted_at, shared.config.io_timeout), self.read_acquire()) => first,
        };
        drop(pending);
        let (lease, lock) = match first {
            Ok(Ok(Some(First::Acquire { lease, name }))) => (lease, name),
            Ok(Ok(Some(First::Open(lease)))) => {
                Box::pin(crate::core::session_v2::serve(
                    self,
                    lease,
                    remote_addr,
                    identity,
                ))
                .await;
                return None;
            }
            Ok(Ok(None)) => return None, // closed before a whole ACQUIRE
            Ok(Err(err)) => {
                debug!(%remote_addr, code = %err.code, reason = %err.reason, "refusing first frame");
                self.close_with(err.code, &err.reason).await;
                return None;
            }
            Err(_) => {
                debug!(%remote_addr, "no ACQUIRE within io-timeout");
                return None;
            }
        };
        let info = SessionInfo {
            lock,
            lease,
            remote_addr,
            identity,
            queued_at: SystemTime::now(),
            claim: None,
        };
        if let Some(authorizer) = &shared.config.authorizer
            && !authorizer.allows(&info.identity, &info.lock)
        {
            shared.config.observer.observe(&Event::Denied(&info));
            let reason = crate::core::acl::refusal(&info.identity, info.lock.as_str());
            tracing::info!(lock = %info.lock, identity = %info.identity, %remote_addr, "ACQUIRE denied by ACL: {reason}");
            self.close_with(ErrorCode::NOT_AUTHORIZED, &reason).await;
            return None;
        }
        Some(info)
    }

    /// Reads one whole ACQUIRE (or a version 2 OPEN: type 0x01, version
    /// 2), failing as soon as the bytes seen allow (see
    /// `decode_acquire_header`), or `None` at EOF. Bytes after the first
    /// frame stay in the buffer.
    async fn read_acquire(&mut self) -> Result<Option<First>, RequestError> {
        let header = loop {
            if self.filled >= 2 && self.buf[0] == msg::ACQUIRE && self.buf[1] == v2::VERSION {
                return self.read_open().await;
            }
            if let Some(header) = decode_acquire_header(&self.buf[..self.filled])? {
                break header;
            }
            if !self.fill().await {
                return Ok(None);
            }
        };
        self.consume(ACQUIRE_HEADER_LEN);
        let mut name = Vec::with_capacity(header.name_len);
        loop {
            let take = (header.name_len - name.len()).min(self.filled);
            name.extend_from_slice(&self.buf[..take]);
            self.consume(take);
            if name.len() == header.name_len {
                break;
            }
            if !self.fill().await {
                return Ok(None);
            }
        }
        let name = LockName::from_bytes(&name)?;
        Ok(Some(First::Acquire {
            lease: header.lease,
            name,
        }))
    }

    /// Reads the rest of a version 2 OPEN.
    async fn read_open(&mut self) -> Result<Option<First>, RequestError> {
        loop {
            if let Some((lease, used)) = v2::decode_open(&self.buf[..self.filled])? {
                self.consume(used);
                return Ok(Some(First::Open(lease)));
            }
            if !self.fill().await {
                return Ok(None);
            }
        }
    }

    /// Reads more input after what is buffered; false at EOF or on error.
    async fn fill(&mut self) -> bool {
        match self.stream.read(&mut self.buf[self.filled..]).await {
            Ok(n) if n > 0 => {
                self.filled += n;
                true
            }
            _ => false,
        }
    }

    /// Drops the first `n` buffered bytes.
    fn consume(&mut self, n: usize) {
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

/// A connection with a valid ACQUIRE: a holder or a waiter.
struct Session<'a, 'c, S> {
    conn: &'c mut Connection<'a, S>,
    slot: &'a Arc<SessionSlot>,
    /// Whether ACQUIRED has been sent (as the ACQUIRE's reply or a push).
    announced: bool,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<'_, '_, S> {
    async fn run(&mut self) -> End {
        let shared = self.conn.shared;
        let first_reply = match shared.grace.admit(self.slot, &shared.table) {
            Acquired::Granted(token) => {
                self.announced = true;
                debug!(remote_addr = %self.slot.info.remote_addr, lock = %self.slot.info.lock, token, "granted");
                Reply::Acquired(token)
            }
            Acquired::Queued | Acquired::Busy => Reply::Waiting,
            Acquired::ShuttingDown => return SHUTTING_DOWN,
        };
        if let Err(failed) = self.write_replies(first_reply, 1).await {
            return failed.into();
        }
        // Created once per wait, not on every turn of the loop: a heartbeat
        // that wins the select leaves it registered and ready.
        let slot: &SessionSlot = self.slot;
        let notified = slot.notify.notified();
        tokio::pin!(notified);
        loop {
            if self.conn.filled > 0
                && let Some(end) = self.handle_input().await
            {
                return end;
            }
            tokio::select! {
                biased;
                () = notified.as_mut() => {
                    notified.set(slot.notify.notified());
                    if let Some(end) = self.sync_state().await {
                        return end;
                    }
                }
                read = self.conn.stream.read(&mut self.conn.buf) => match read {
                    Ok(0) | Err(_) => return End::Quiet(ReleaseReason::Graceful),
                    Ok(n) => self.conn.filled = n,
                },
            }
        }
    }

    /// Acts on what the table decided for this session: an end imposed from
    /// outside, or a promotion to push.
    async fn sync_state(&mut self) -> Option<End> {
        match self.slot.end_notice() {
            Some(EndNotice::Forced) => {
                return Some(End::Error(
                    ReleaseReason::Force,
                    ErrorCode::CLOSED_BY_ADMIN,
                    "lock force-released by administrator",
                ));
            }
            Some(EndNotice::Kicked) => {
                return Some(End::Error(
                    ReleaseReason::Force,
                    ErrorCode::CLOSED_BY_ADMIN,
                    "removed from queue by administrator",
                ));
            }
            Some(EndNotice::Expired) => return Some(End::Quiet(ReleaseReason::Expired)),
            Some(EndNotice::Shutdown) => return Some(SHUTTING_DOWN),
            None => {}
        }
        if !self.announced
            && let Some(token) = self.slot.granted_token()
        {
            self.announced = true;
            debug!(remote_addr = %self.slot.info.remote_addr, lock = %self.slot.info.lock, token, "promoted");
            if let Err(failed) = self.write_replies(Reply::Acquired(token), 1).await {
                return Some(failed.into());
            }
        }
        None
    }

    /// Handles everything in the buffer: heartbeats are counted and answered
    /// together (in order, one reply each); a bad byte ends the session after
    /// the heartbeats before it are answered.
    async fn handle_input(&mut self) -> Option<End> {
        let mut heartbeats = 0;
        let mut refused = None;
        for offset in 0..self.conn.filled {
            match decode_request(&self.conn.buf[offset..self.conn.filled], Phase::Established) {
                Ok(_) => heartbeats += 1,
                Err(err) => {
                    refused = Some(err);
                    break;
                }
            }
        }
        self.conn.filled = 0;
        if heartbeats > 0 {
            let shared = self.conn.shared;
            let now = Instant::now();
            shared.table.touch(self.slot, now);
            shared
                .config
                .observer
                .observe(&Event::Heartbeats(heartbeats as u64));
            if let Some(end) = self.sync_state().await {
                return Some(end);
            }
            let reply = match self.slot.granted_token() {
                Some(token) if self.announced => Reply::Acquired(token),
                _ => Reply::Waiting,
            };
            if let Err(failed) = self.write_replies(reply, heartbeats).await {
                return Some(failed.into());
            }
        }
        refused.map(End::Protocol)
    }

    /// Writes `count` copies of `reply`, in as few writes as the buffer
    /// allows, each bounded by io-timeout and by the lease.
    async fn write_replies(&mut self, reply: Reply, count: usize) -> Result<(), WriteFailed> {
        let frame = reply.bytes();
        let frame = &frame[..reply.len()];
        let io_timeout = self.conn.shared.config.io_timeout;
        let lease_end = self.conn.shared.table.lease_end(self.slot);
        if count == 1 {
            // From the frame itself: the buffer may still hold unread input
            // (heartbeats pipelined behind the ACQUIRE).
            return write_bounded(&mut self.conn.stream, frame, io_timeout, lease_end).await;
        }
        // Several replies answer input already consumed: batch them in the
        // buffer.
        let per_write = BUF_LEN / frame.len();
        let mut left = count;
        while left > 0 {
            let batch = left.min(per_write);
            let len = batch * frame.len();
            for chunk in self.conn.buf[..len].chunks_exact_mut(frame.len()) {
                chunk.copy_from_slice(frame);
            }
            let conn = &mut *self.conn;
            write_bounded(&mut conn.stream, &conn.buf[..len], io_timeout, lease_end).await?;
            left -= batch;
        }
        Ok(())
    }

    /// Releases in the table first (so the next waiter is promoted at once),
    /// then tells the client if there is anything to tell; but a lock held
    /// when the server chose the ending is released only at the end of the
    /// lease (see [`holds_until_lease_end`]).
    async fn finish(self, end: End) {
        let shared = self.conn.shared;
        let reason = end.reason();
        debug!(remote_addr = %self.slot.info.remote_addr, lock = %self.slot.info.lock, reason = reason.as_str(), "session ended");
        shared.grace.leave(self.slot);
        let promoted = if holds_until_lease_end(reason) {
            // The client may still count on a grant until its lease runs
            // out: a granted session keeps the lock until then, though its
            // connection closes now; a waiter leaves its queue at once.
            let release_at = shared.table.lease_end(self.slot);
            shared.table.forget_lease(self.slot);
            let held = shared
                .table
                .end_waiting_keep_held([self.slot], reason, release_at);
            report_server_ending(shared, &end, held.len());
            shared.release_when_lease_ends(held, release_at, reason, None);
            false
        } else {
            report_server_ending(shared, &end, 0);
            shared.table.end(self.slot, reason)
        };
        match end {
            // Let the promoted session write its ACQUIRED before this one
            // closes its socket: the close is the slower half of the
            // handover and nobody waits on it.
            End::Quiet(_) | End::FrameTimeout if promoted => tokio::task::yield_now().await,
            End::Quiet(_) | End::FrameTimeout => {}
            End::Error(_, code, reason) => self.conn.close_with(code, reason).await,
            End::Protocol(err) => self.conn.close_with(err.code, &err.reason).await,
        }
    }
}

/// A reply frame to repeat.
#[derive(Clone, Copy)]
enum Reply {
    Waiting,
    Acquired(u64),
}

impl Reply {
    /// The frame, from `monolock-proto`, in a fixed buffer (no allocation):
    /// the first [`Reply::len`] bytes.
    fn bytes(self) -> [u8; 9] {
        match self {
            Self::Waiting => {
                let mut bytes = [0; 9];
                bytes[..1].copy_from_slice(&waiting_frame());
                bytes
            }
            Self::Acquired(token) => acquired_frame(token),
        }
    }

    fn len(self) -> usize {
        match self {
            Self::Waiting => waiting_frame().len(),
            Self::Acquired(token) => acquired_frame(token).len(),
        }
    }
}
