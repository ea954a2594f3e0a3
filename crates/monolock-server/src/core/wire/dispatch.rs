//! First-frame dispatch: an accepted connection's first frame, read within
//! io-timeout and validated, decides what it is: a version 1 session
//! (ACQUIRE, checked against the ACL) or a version 2 session (OPEN).

use std::{net::SocketAddr, sync::Arc, time::SystemTime};

use monolock_proto::{
    ACQUIRE_HEADER_LEN, ErrorCode, Lease, LockName, RequestError, decode_acquire_header, msg, v2,
};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    time::{Instant, timeout_at},
};
use tracing::debug;

use crate::core::{
    admission::{SHED_REASON, claim_limit_reason},
    config::refusal,
    events::{Event, SessionInfo},
    shared::Shared,
    slot::{SessionSlot, deadline_after},
    wire::{
        connection::{BUF_LEN, Connection},
        v1, v2 as session_v2,
    },
};

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
    // The session is run here, not in a function of `v1`: its future is
    // then laid out in this task's own, which stays as small as it was.
    let mut session = v1::Session::new(&mut conn, &slot);
    let end = session.run().await;
    session.finish(end).await;
    shared.claims.end_one();
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
                Box::pin(session_v2::serve(self, lease, remote_addr, identity)).await;
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
            let reason = refusal(&info.identity, info.lock.as_str());
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
}
