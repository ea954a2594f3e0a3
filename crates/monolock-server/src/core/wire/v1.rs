//! A version 1 session: one connection, one claim, from its valid ACQUIRE
//! to its end. A heartbeat is handled entirely here: an atomic store of
//! the new deadline (the server-wide lease wheel reads it when it next
//! looks), one write. It takes no shared lock, arms no timer and allocates
//! nothing.

use std::sync::Arc;

use monolock_proto::{ErrorCode, Phase, acquired_frame, decode_request, waiting_frame};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite},
    time::Instant,
};
use tracing::debug;

use crate::core::{
    events::{Event, ReleaseReason},
    slot::{EndNotice, SessionSlot},
    table::Acquired,
    wire::connection::{
        BUF_LEN, Connection, End, SHUTTING_DOWN, WriteFailed, holds_until_lease_end,
        report_server_ending, write_bounded,
    },
};

/// A connection with a valid ACQUIRE: a holder or a waiter.
pub(crate) struct Session<'a, 'c, S> {
    conn: &'c mut Connection<'a, S>,
    slot: &'c Arc<SessionSlot>,
    /// Whether ACQUIRED has been sent (as the ACQUIRE's reply or a push).
    announced: bool,
}

impl<'a, 'c, S: AsyncRead + AsyncWrite + Unpin> Session<'a, 'c, S> {
    /// The session of `slot`, a claim admitted and filed in the table, on
    /// `conn`.
    pub(crate) fn new(conn: &'c mut Connection<'a, S>, slot: &'c Arc<SessionSlot>) -> Self {
        Self {
            conn,
            slot,
            announced: false,
        }
    }

    /// Serves the session until it ends; how it ended.
    pub(crate) async fn run(&mut self) -> End {
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
    pub(crate) async fn finish(self, end: End) {
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
