//! A protocol version 2 session: one connection carrying many claims.
//!
//! The connection is the session, and every claim dies with it. One task
//! serves the session, whatever its number of claims; a claim is a
//! [`SessionSlot`] in the lock table like a version 1 session, whose
//! deadline is the session's and whose wake-up wakes this task with the
//! claim's id (see `slot.rs`, [`SessionLink`]). One lease wheel entry
//! serves the whole session.
//!
//! I/O is batched per wakeup, for few system calls per claim: one read
//! takes in every frame that has arrived and all of them are handled; the
//! replies, and the grants and revocations the table pushed meanwhile, are
//! collected in one buffer and written with one write. A RELEASE and the
//! next ACQUIRE written together by a client therefore cost one read and
//! one write here. Nothing is spawned per claim and, beyond the claim's
//! slot and name, nothing is allocated per frame.
//!
//! Order on the wire (docs/protocol.md, "Claims"): every frame is answered
//! in order; a claim's GRANTED, when the grant landed before its RELEASE
//! was handled, is written before the RELEASED; a claim revoked by an
//! administrator is told REVOKED before the reply to any later frame that
//! names it.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, atomic::Ordering},
    time::{Duration, SystemTime},
};

use futures_util::FutureExt;
use monolock_proto::{
    ErrorCode, Lease, LockName, RequestError, ext,
    v2::{self, Mode, Request},
};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite},
    time::{Instant, Sleep},
};
use tracing::debug;

use crate::{
    core::admission::{ClaimPermit, claim_limit_reason},
    core::events::{ClaimRef, Event, ReleaseReason, SessionInfo},
    core::slot::{EndNotice, SessionLink, SessionSlot, deadline_after},
    core::table::Acquired,
    core::watch::{StatePush, Watch},
    core::wire::connection::{
        Connection, End, SHUTTING_DOWN, WriteFailed, holds_until_lease_end, report_server_ending,
        write_bounded,
    },
};

/// The session's read buffer: far more than the longest frame (262 bytes),
/// so one read takes in a whole pipelined batch.
const READ_BUF_LEN: usize = 4096;

/// The most of its write buffer a session keeps between wakeups.
const OUT_KEPT_CAPACITY: usize = 16 * 1024;

/// The name a session's own lease slot carries. That slot is filed in the
/// lease wheel only and never enters the lock table, so the name is never
/// looked up; it shows in nothing a user reads.
const LEASE_SLOT_NAME: &str = "(v2 session)";

/// Why an idle session is closed, in its ERROR frame.
const IDLE_REASON: &str = "idle session closed: no claims";

/// One claim of the session.
struct Claim {
    /// Counts the claim against `--max-claims` while it lives here.
    _permit: ClaimPermit,
    slot: Arc<SessionSlot>,
    /// Whether ACQUIRED or GRANTED has been written for it.
    announced: bool,
}

struct Session<'c, 'a, S> {
    conn: &'c mut Connection<'a, S>,
    link: Arc<SessionLink>,
    claims: HashMap<u32, Claim>,
    /// Replies and pushes waiting for this wakeup's one write.
    out: Vec<u8>,
    /// Claim ids taken from the link's inbox (kept to reuse its capacity).
    changed: Vec<u32>,
    lease: Lease,
    remote_addr: SocketAddr,
    identity: Arc<str>,
    /// Since when the session has had no claim (`None`: it has claims).
    idle_since: Option<Instant>,
    /// Since when a started frame has waited for its remaining bytes.
    partial_since: Option<Instant>,
    /// When the session's one timer is set to fire; never later than any
    /// deadline it must catch (idle, a started frame), so it is reset only
    /// when a deadline comes earlier, which is rare.
    armed: Instant,
    /// Whether values and observers were granted (FEATURES bit 0).
    ext: bool,
    /// Whether a frame was read after OPEN (HELLO must be the first).
    opened_only: bool,
    /// The session's watches, by watch id.
    watches: HashMap<u32, Arc<Watch>>,
    /// STATE pushes taken from the outbox (kept to reuse its capacity).
    pushes: Vec<StatePush>,
    /// Whether a coalesced push was written yet (logged once at info).
    coalesced_before: bool,
    /// The simulation's planted mistake `V2ReleasedBeforeTable`: claims
    /// whose RELEASED went out before the table released them.
    #[cfg(feature = "mutations")]
    released_later: Vec<Arc<SessionSlot>>,
}

/// Serves a version 2 session whose OPEN has been read from `conn`, to its
/// end.
pub(crate) async fn serve<S>(
    conn: &mut Connection<'_, S>,
    lease: Lease,
    remote_addr: SocketAddr,
    identity: Arc<str>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let shared = conn.shared;
    let id = shared.next_session_id.fetch_add(1, Ordering::Relaxed);
    let now = Instant::now();
    let Ok(lock) = LockName::new(LEASE_SLOT_NAME) else {
        return;
    };
    let info = SessionInfo {
        lock,
        lease,
        remote_addr,
        identity: Arc::clone(&identity),
        queued_at: SystemTime::now(),
        claim: None,
    };
    let lease_slot = Arc::new(SessionSlot::new(info, now));
    shared.table.touch(&lease_slot, now);
    shared.table.watch_lease(&lease_slot);
    let link = Arc::new(SessionLink::new(id, lease_slot));
    shared.sessions.lock().insert(id, Arc::clone(&link));
    // Registered before this check, so a shutdown either finds the session
    // in the registry or is seen here.
    if shared.shutdown.is_cancelled() {
        link.lease.end_from_outside(EndNotice::Shutdown);
    }
    shared.config.observer.observe(&Event::SessionOpened);
    debug!(%remote_addr, session = id, lease_ms = lease.as_millis(), "v2 session opened");
    let mut read = vec![0; READ_BUF_LEN].into_boxed_slice();
    let filled = conn.filled;
    read[..filled].copy_from_slice(&conn.buf[..filled]);
    conn.filled = 0;
    let mut session = Session {
        conn,
        link,
        claims: HashMap::new(),
        out: Vec::with_capacity(256),
        changed: Vec::new(),
        lease,
        remote_addr,
        identity,
        idle_since: Some(now),
        partial_since: None,
        armed: deadline_after(now, shared.config.idle_timeout),
        ext: false,
        opened_only: true,
        watches: HashMap::new(),
        pushes: Vec::new(),
        coalesced_before: false,
        #[cfg(feature = "mutations")]
        released_later: Vec::new(),
    };
    session
        .out
        .extend_from_slice(&v2::opened_frame(id, shared.config.max_claims_per_session));
    let end = session.run(&mut read, filled).await;
    session.finish(end).await;
    shared.sessions.lock().remove(&id);
}

impl<S: AsyncRead + AsyncWrite + Unpin> Session<'_, '_, S> {
    async fn run(&mut self, read: &mut [u8], mut filled: usize) -> End {
        let shared = self.conn.shared;
        let link = Arc::clone(&self.link);
        let notified = link.lease.notify.notified();
        tokio::pin!(notified);
        let timer: Sleep = tokio::time::sleep_until(self.armed);
        tokio::pin!(timer);
        loop {
            if filled > 0 {
                let end = self.handle_input(read, &mut filled);
                if let Some(end) = end {
                    return end;
                }
                if let Some(needed) = self.next_deadline()
                    && needed < self.armed
                {
                    self.armed = needed;
                    timer.as_mut().reset(needed);
                }
            }
            if !self.out.is_empty()
                && let Err(failed) = self.flush().await
            {
                return failed.into();
            }
            tokio::select! {
                biased;
                () = notified.as_mut() => {
                    notified.set(link.lease.notify.notified());
                    if let Some(end) = self.sync() {
                        return end;
                    }
                    // A watched lock that changes at every turn keeps this
                    // branch ready at every turn: take in what the client
                    // sent meanwhile too, so its PINGs are never left
                    // unread behind the pushes (a read is cancel-safe).
                    if !self.watches.is_empty() && filled < read.len() {
                        match self.conn.stream.read(&mut read[filled..]).now_or_never() {
                            Some(Ok(0) | Err(_)) => return End::Quiet(ReleaseReason::Graceful),
                            Some(Ok(n)) => filled += n,
                            None => {}
                        }
                    }
                }
                got = self.conn.stream.read(&mut read[filled..]) => match got {
                    Ok(0) | Err(_) => return End::Quiet(ReleaseReason::Graceful),
                    Ok(n) => filled += n,
                },
                () = timer.as_mut() => {
                    let now = Instant::now();
                    if let Some(end) = self.check_deadlines(now) {
                        return end;
                    }
                    let period = shared.config.idle_timeout.max(Duration::from_millis(1));
                    self.armed = self
                        .next_deadline()
                        .unwrap_or_else(|| deadline_after(now, period));
                    timer.as_mut().reset(self.armed);
                }
            }
        }
    }

    /// The earliest instant the timer must catch, if any.
    fn next_deadline(&self) -> Option<Instant> {
        let config = &self.conn.shared.config;
        let idle = self
            .idle_since
            .map(|since| deadline_after(since, config.idle_timeout));
        let partial = self
            .partial_since
            .map(|since| deadline_after(since, config.io_timeout));
        match (idle, partial) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Ends the session if it has been idle for the idle timeout, or a
    /// started frame has waited for io-timeout.
    fn check_deadlines(&mut self, now: Instant) -> Option<End> {
        let config = &self.conn.shared.config;
        if let Some(since) = self.partial_since
            && deadline_after(since, config.io_timeout) <= now
        {
            debug!(remote_addr = %self.remote_addr, session = self.link.id, "v2 frame not complete within io-timeout");
            return Some(End::FrameTimeout);
        }
        if let Some(since) = self.idle_since
            && deadline_after(since, config.idle_timeout) <= now
        {
            return Some(self.idle_end());
        }
        None
    }

    fn idle_end(&self) -> End {
        self.conn
            .shared
            .config
            .observer
            .observe(&Event::IdleSessionClosed);
        debug!(remote_addr = %self.remote_addr, session = self.link.id, "idle v2 session closed");
        End::Error(
            ReleaseReason::Graceful,
            ErrorCode::IDLE_SESSION,
            IDLE_REASON,
        )
    }

    /// Handles every whole frame in `read[..filled]`, leaving a started
    /// frame's bytes at the front.
    fn handle_input(&mut self, read: &mut [u8], filled: &mut usize) -> Option<End> {
        // The session may have been expired (or shut down) since it last
        // looked: frames read after that are not served.
        if let Some(notice) = self.link.lease.end_notice() {
            return Some(end_for(notice));
        }
        #[cfg(feature = "mutations")]
        for slot in std::mem::take(&mut self.released_later) {
            self.conn.shared.table.end(&slot, ReleaseReason::Graceful);
        }
        let mut at = 0;
        let mut pings = 0;
        let mut end = None;
        let mut now = None;
        while at < *filled {
            let input = &read[at..*filled];
            // Without the extension granted, frames decode exactly as on a
            // server without it (its frames are ERROR 0x13), but for HELLO.
            let decoded = if self.ext || input[0] == ext::msg::HELLO {
                ext::decode_request(input)
            } else {
                v2::decode_request(input).map(|got| got.map(|(r, n)| (ext::Request::Base(r), n)))
            };
            match decoded {
                Ok(Some((request, used))) => {
                    at += used;
                    if now.is_none() {
                        // Every frame restarts the session's silence window.
                        let instant = Instant::now();
                        self.conn.shared.table.touch(&self.link.lease, instant);
                        now = Some(instant);
                    }
                    if matches!(request, ext::Request::Base(Request::Ping)) {
                        pings += 1;
                    }
                    if let Some(ended) = self.handle(request) {
                        end = Some(ended);
                        break;
                    }
                }
                Ok(None) => break,
                Err(err) => {
                    end = Some(End::Protocol(err));
                    break;
                }
            }
        }
        read.copy_within(at..*filled, 0);
        *filled -= at;
        if pings > 0 {
            self.conn
                .shared
                .config
                .observer
                .observe(&Event::Heartbeats(pings));
        }
        self.partial_since = match (*filled, self.partial_since) {
            (0, _) => None,
            (_, Some(since)) if at == 0 => Some(since),
            _ => Some(now.unwrap_or_else(Instant::now)),
        };
        end
    }

    fn handle(&mut self, request: ext::Request<'_>) -> Option<End> {
        let first = std::mem::replace(&mut self.opened_only, false);
        match request {
            ext::Request::Base(request) => self.handle_base(request),
            ext::Request::Hello { features } => self.hello(first, features),
            ext::Request::AcquireValue {
                claim,
                mode,
                name,
                value,
            } => self.acquire(claim, mode, name, value),
            ext::Request::Proclaim { claim, value } => self.proclaim(claim, value),
            ext::Request::Observe { watch, name } => self.observe(watch, name),
            ext::Request::Unobserve { watch } => {
                self.unobserve(watch);
                None
            }
            ext::Request::Lookup { name } => {
                self.lookup(name);
                None
            }
            ext::Request::Refuse {
                id, code, reason, ..
            } => {
                self.refuse(id, code, reason);
                None
            }
        }
    }

    fn handle_base(&mut self, request: Request<'_>) -> Option<End> {
        match request {
            Request::Ping => {
                self.out.push(v2::msg::PONG);
                None
            }
            Request::BadAcquire {
                claim,
                code,
                reason,
            } => {
                self.refuse(claim, code, reason);
                None
            }
            Request::Release { claim } => self.release(claim),
            Request::Acquire { claim, mode, name } => self.acquire(claim, mode, name, ""),
        }
    }

    fn refuse(&mut self, claim: u32, code: ErrorCode, reason: &str) {
        v2::encode_claim_error(&mut self.out, v2::msg::REFUSED, claim, code, reason);
    }

    /// Checks an ACQUIRE of `name` under `claim` before it reaches the
    /// table, in the documented order (the id free, the session's bound,
    /// the server's bound, the name, the ACL): the claim's permit and who
    /// it is, or `Err` once it is refused (`None`: the REFUSED is written,
    /// the session lives on) or the session ends.
    fn admit(&mut self, claim: u32, name: &str) -> Result<(ClaimPermit, SessionInfo), Option<End>> {
        let shared = self.conn.shared;
        if let Some(existing) = self.claims.get(&claim) {
            match existing.slot.end_notice() {
                Some(notice @ (EndNotice::Forced | EndNotice::Kicked)) => {
                    self.claims.remove(&claim);
                    self.revoked(claim, notice);
                }
                Some(notice) => return Err(Some(end_for(notice))),
                None => {
                    self.refuse(
                        claim,
                        ErrorCode::CLAIM_IN_USE,
                        &format!("claim id {claim} is already in use: RELEASE it first"),
                    );
                    return Err(None);
                }
            }
        }
        let max = shared.config.max_claims_per_session;
        if self.claims.len() >= max as usize {
            self.refuse(
                claim,
                ErrorCode::TOO_MANY_CLAIMS,
                &format!("too many claims on this session: the limit is {max}"),
            );
            return Err(None);
        }
        let Some(permit) = shared.admit_claim() else {
            let reason = claim_limit_reason(shared.config.max_claims);
            self.refuse(claim, ErrorCode::SERVER_CLAIM_LIMIT, &reason);
            return Err(None);
        };
        let Ok(lock) = LockName::new(name) else {
            // The decoder let through only 1..=255 bytes of UTF-8.
            self.refuse(claim, ErrorCode::CLAIM_EMPTY_NAME, "lock name is empty");
            return Err(None);
        };
        let info = SessionInfo {
            lock,
            lease: self.lease,
            remote_addr: self.remote_addr,
            identity: Arc::clone(&self.identity),
            queued_at: SystemTime::now(),
            claim: Some(ClaimRef {
                session: self.link.id,
                claim,
            }),
        };
        if let Some(authorizer) = &shared.config.authorizer
            && !authorizer.allows(&info.identity, &info.lock)
        {
            shared.config.observer.observe(&Event::Denied(&info));
            let reason = crate::core::config::refusal(&info.identity, info.lock.as_str());
            tracing::info!(lock = %info.lock, identity = %info.identity, remote_addr = %self.remote_addr, session = self.link.id, claim, "ACQUIRE denied by ACL: {reason}");
            self.refuse(claim, ErrorCode::CLAIM_NOT_AUTHORIZED, &reason);
            return Err(None);
        }
        Ok((permit, info))
    }

    fn acquire(&mut self, claim: u32, mode: Mode, name: &str, value: &str) -> Option<End> {
        let shared = self.conn.shared;
        let (permit, info) = match self.admit(claim, name) {
            Ok(admitted) => admitted,
            Err(end) => return end,
        };
        let slot = SessionSlot::new_claim(info, Instant::now(), Arc::clone(&self.link), claim);
        if !value.is_empty() {
            slot.set_value(Some(Arc::from(value)));
        }
        let slot = Arc::new(slot);
        let announced = match shared
            .grace
            .admit_or(&slot, &shared.table, mode == Mode::Wait)
        {
            Acquired::Granted(token) => {
                debug!(remote_addr = %self.remote_addr, lock = %slot.info.lock, token, session = self.link.id, claim, "granted");
                self.out
                    .extend_from_slice(&v2::acquired_frame(claim, token));
                true
            }
            Acquired::Queued => {
                self.out.extend_from_slice(&v2::waiting_frame(claim));
                false
            }
            Acquired::Busy => {
                self.out.extend_from_slice(&v2::busy_frame(claim));
                return None;
            }
            Acquired::ShuttingDown => return Some(SHUTTING_DOWN),
        };
        self.claims.insert(
            claim,
            Claim {
                _permit: permit,
                slot,
                announced,
            },
        );
        self.set_idle(false);
        None
    }

    fn release(&mut self, claim: u32) -> Option<End> {
        let shared = self.conn.shared;
        let Some(Claim {
            slot, announced, ..
        }) = self.claims.remove(&claim)
        else {
            self.refuse(
                claim,
                ErrorCode::UNKNOWN_CLAIM,
                &format!("unknown claim id: {claim}"),
            );
            return None;
        };
        shared.grace.leave(&slot);
        #[cfg(feature = "mutations")]
        if monolock_mutation::active(monolock_mutation::Mutation::V2ReleasedBeforeTable) {
            self.out.extend_from_slice(&v2::released_frame(claim));
            self.released_later.push(slot);
            return None;
        }
        // A no-op if an administrator ended the claim first.
        shared.table.end(&slot, ReleaseReason::Graceful);
        match slot.end_notice() {
            Some(notice @ (EndNotice::Forced | EndNotice::Kicked)) => {
                self.revoked(claim, notice);
                self.refuse(
                    claim,
                    ErrorCode::UNKNOWN_CLAIM,
                    &format!("unknown claim id: {claim}"),
                );
            }
            Some(notice) => return Some(end_for(notice)),
            None => {
                if !announced && let Some(token) = slot.granted_token() {
                    debug!(remote_addr = %self.remote_addr, lock = %slot.info.lock, token, session = self.link.id, claim, "promoted");
                    self.out.extend_from_slice(&v2::granted_frame(claim, token));
                }
                self.out.extend_from_slice(&v2::released_frame(claim));
                // The lock may have gone to another claim of this session:
                // its GRANTED follows the RELEASED at once.
                if let Some(end) = self.apply_changes() {
                    return Some(end);
                }
            }
        }
        self.update_idle();
        None
    }

    /// HELLO: only as the first frame after OPEN (else ERROR 0x19);
    /// grants what it asks for of what this server has.
    fn hello(&mut self, first: bool, features: u32) -> Option<End> {
        if !first || self.ext {
            return Some(End::Protocol(RequestError {
                code: ErrorCode::OUT_OF_STATE,
                reason: "frame out of state: HELLO must be the first frame after OPEN, once"
                    .to_owned(),
            }));
        }
        let granted = features & ext::FEATURE_VALUES_AND_OBSERVERS;
        self.ext = granted != 0;
        let max_watches = self.conn.shared.config.max_watches_per_session;
        // Field names avoid "granted": operators grep for it to find grants.
        debug!(remote_addr = %self.remote_addr, session = self.link.id, features_asked = features, features_on = granted, "v2 session HELLO");
        self.out
            .extend_from_slice(&ext::features_frame(granted, max_watches));
        None
    }

    /// PROCLAIM: replaces the value of a claim in use, held or waiting.
    fn proclaim(&mut self, claim: u32, value: &str) -> Option<End> {
        let shared = self.conn.shared;
        let Some(slot) = self.claims.get(&claim).map(|c| Arc::clone(&c.slot)) else {
            self.refuse(
                claim,
                ErrorCode::UNKNOWN_CLAIM,
                &format!("unknown claim id: {claim}"),
            );
            return None;
        };
        let value = (!value.is_empty()).then(|| Arc::from(value));
        if !shared.table.proclaim(&slot, value) {
            match slot.end_notice() {
                Some(notice @ (EndNotice::Forced | EndNotice::Kicked)) => {
                    self.claims.remove(&claim);
                    self.revoked(claim, notice);
                    self.refuse(
                        claim,
                        ErrorCode::UNKNOWN_CLAIM,
                        &format!("unknown claim id: {claim}"),
                    );
                    self.update_idle();
                    return None;
                }
                Some(notice) => return Some(end_for(notice)),
                None => {}
            }
        }
        self.out
            .extend_from_slice(&claim_frame(ext::msg::PROCLAIMED, claim));
        None
    }

    /// Whether the ACL lets this session's identity observe or look up
    /// `lock` (the permission of ACQUIRE); REFUSED 0x24 naming `id` if not.
    fn allowed(&mut self, id: u32, lock: &LockName, what: &str) -> bool {
        let shared = self.conn.shared;
        let Some(authorizer) = &shared.config.authorizer else {
            return true;
        };
        if authorizer.allows(&self.identity, lock) {
            return true;
        }
        let reason = crate::core::config::refusal(&self.identity, lock.as_str());
        tracing::info!(lock = %lock, identity = %self.identity, remote_addr = %self.remote_addr, session = self.link.id, id, "{what} denied by ACL: {reason}");
        self.refuse(id, ErrorCode::CLAIM_NOT_AUTHORIZED, &reason);
        false
    }

    /// OBSERVE: checked in the documented order (the watch id free, the
    /// session's bound, the server's, the ACL), then registered: OBSERVING
    /// and the INITIAL state now, every change after.
    fn observe(&mut self, watch: u32, name: &str) -> Option<End> {
        let shared = self.conn.shared;
        if self.watches.contains_key(&watch) {
            self.refuse(
                watch,
                ErrorCode::CLAIM_IN_USE,
                &format!("watch id {watch} is already in use: UNOBSERVE it first"),
            );
            return None;
        }
        let max = shared.config.max_watches_per_session;
        if self.watches.len() >= max as usize {
            shared.config.observer.observe(&Event::WatchRefused(
                crate::core::events::WatchBound::Session,
            ));
            self.refuse(
                watch,
                ErrorCode::TOO_MANY_WATCHES,
                &format!("too many watches on this session: the limit is {max}"),
            );
            return None;
        }
        let Ok(lock) = LockName::new(name) else {
            // The decoder let through only 1..=255 bytes of UTF-8.
            self.refuse(watch, ErrorCode::CLAIM_EMPTY_NAME, "lock name is empty");
            return None;
        };
        if !shared.admit_watch() {
            let reason = format!(
                "server watch limit reached: the server has --max-watches ({}) watches",
                shared.config.max_watches
            );
            debug!(remote_addr = %self.remote_addr, session = self.link.id, watch, "over --max-watches: OBSERVE refused");
            self.refuse(watch, ErrorCode::SERVER_WATCH_LIMIT, &reason);
            return None;
        }
        if !self.allowed(watch, &lock, "OBSERVE") {
            shared.watches_ended(1);
            return None;
        }
        let registered = Arc::new(Watch::new(Arc::clone(&self.link), watch, lock));
        let initial = shared.table.observe(&registered);
        self.watches.insert(watch, registered);
        self.link
            .watches
            .store(self.watches.len(), Ordering::Relaxed);
        self.set_idle(false);
        self.out
            .extend_from_slice(&claim_frame(ext::msg::OBSERVING, watch));
        let push = StatePush {
            watch,
            state: initial,
            coalesced: false,
        };
        encode_push(&mut self.out, &push, ext::FLAG_INITIAL);
        shared.config.observer.observe(&Event::StatePushes {
            pushed: 1,
            coalesced: 0,
        });
        None
    }

    /// UNOBSERVE: nothing more is pushed to the watch; what the table had
    /// queued for the session goes before UNOBSERVED.
    fn unobserve(&mut self, watch: u32) {
        let shared = self.conn.shared;
        let Some(registered) = self.watches.get(&watch).map(Arc::clone) else {
            self.refuse(
                watch,
                ErrorCode::UNKNOWN_CLAIM,
                &format!("unknown watch id: {watch}"),
            );
            return;
        };
        shared.table.unobserve([&registered]);
        shared.watches_ended(1);
        // Still listed, so that what was queued for it is taken now.
        self.take_pushes();
        self.watches.remove(&watch);
        self.link
            .watches
            .store(self.watches.len(), Ordering::Relaxed);
        self.out
            .extend_from_slice(&claim_frame(ext::msg::UNOBSERVED, watch));
        self.update_idle();
    }

    /// LOOKUP: the lock's state now, if the ACL allows.
    fn lookup(&mut self, name: &str) {
        let Ok(lock) = LockName::new(name) else {
            self.refuse(0, ErrorCode::CLAIM_EMPTY_NAME, "lock name is empty");
            return;
        };
        if !self.allowed(0, &lock, "LOOKUP") {
            return;
        }
        let state = self.conn.shared.table.lookup(&lock);
        self.out.push(ext::msg::LOCK_STATE);
        encode_state(&mut self.out, &state, 0);
    }

    /// Writes what the table queued for the session's watches (and the
    /// coalesced states of watches whose changes were dropped) after what
    /// this wakeup already collected.
    fn take_pushes(&mut self) {
        // Nothing is pushed to a session without watches: an UNOBSERVE
        // takes what was queued for its watch.
        if self.watches.is_empty() {
            return;
        }
        let shared = self.conn.shared;
        let mut pushes = std::mem::take(&mut self.pushes);
        shared.table.take_pushes(&self.link, &mut pushes);
        let mut coalesced = 0;
        let mut pushed = 0;
        for push in pushes.drain(..) {
            // A push for a watch already unobserved (queued before its
            // UNOBSERVE was read) is still written: it comes before
            // UNOBSERVED, which the protocol allows; one for a watch id
            // reused since cannot be here (UNOBSERVE takes the queue).
            let flags = if push.coalesced {
                coalesced += 1;
                ext::FLAG_COALESCED
            } else {
                0
            };
            pushed += 1;
            encode_push(&mut self.out, &push, flags);
        }
        self.pushes = pushes;
        if coalesced > 0 {
            // The outbox's bound was hit: said once at info, then at debug.
            if std::mem::replace(&mut self.coalesced_before, true) {
                debug!(remote_addr = %self.remote_addr, session = self.link.id, coalesced, "slow observer: watches told the state now");
            } else {
                tracing::info!(remote_addr = %self.remote_addr, session = self.link.id, coalesced, "slow observer: its connection did not take its STATE pushes, so changes were dropped and its watches told the state now (COALESCED)");
            }
        }
        if pushed > 0 {
            shared
                .config
                .observer
                .observe(&Event::StatePushes { pushed, coalesced });
        }
    }

    fn revoked(&mut self, claim: u32, notice: EndNotice) {
        let reason = match notice {
            EndNotice::Kicked => "removed from queue by administrator",
            _ => "force-release",
        };
        debug!(remote_addr = %self.remote_addr, session = self.link.id, claim, reason, "v2 claim revoked");
        v2::encode_claim_error(
            &mut self.out,
            v2::msg::REVOKED,
            claim,
            ErrorCode::CLAIM_REVOKED,
            reason,
        );
    }

    /// Idle: no claim and no watch.
    fn update_idle(&mut self) {
        if self.claims.is_empty() && self.watches.is_empty() {
            self.set_idle(true);
        }
    }

    fn set_idle(&mut self, idle: bool) {
        if idle == self.idle_since.is_some() {
            return;
        }
        self.idle_since = idle.then(Instant::now);
        self.link.idle.store(idle, Ordering::Release);
    }

    /// Acts on what the table, the wheel or the server decided: the
    /// session's end, a request to close if idle, and each claim the table
    /// changed (granted: push GRANTED; force-released or kicked: REVOKED).
    fn sync(&mut self) -> Option<End> {
        if let Some(notice) = self.link.lease.end_notice() {
            return Some(end_for(notice));
        }
        if self.link.shed.swap(false, Ordering::AcqRel)
            && self.claims.is_empty()
            && self.watches.is_empty()
        {
            return Some(self.idle_end());
        }
        let end = self.apply_changes();
        if end.is_none() {
            self.take_pushes();
        }
        end
    }

    /// Acts on each claim the table changed since the last look.
    fn apply_changes(&mut self) -> Option<End> {
        std::mem::swap(&mut self.changed, &mut *self.link.changed.lock());
        let mut changed = std::mem::take(&mut self.changed);
        let mut end = None;
        for &id in &changed {
            let Some(claim) = self.claims.get_mut(&id) else {
                continue;
            };
            match claim.slot.end_notice() {
                Some(notice @ (EndNotice::Forced | EndNotice::Kicked)) => {
                    self.claims.remove(&id);
                    self.revoked(id, notice);
                }
                Some(notice) => {
                    end = Some(end_for(notice));
                    break;
                }
                None => {
                    if !claim.announced
                        && let Some(token) = claim.slot.granted_token()
                    {
                        claim.announced = true;
                        debug!(remote_addr = %self.remote_addr, lock = %claim.slot.info.lock, token, session = self.link.id, claim = id, "promoted");
                        self.out.extend_from_slice(&v2::granted_frame(id, token));
                    }
                }
            }
        }
        changed.clear();
        self.changed = changed;
        self.update_idle();
        end
    }

    /// Writes what this wakeup collected, in one write.
    async fn flush(&mut self) -> Result<(), WriteFailed> {
        let shared = self.conn.shared;
        let lease_end = shared.table.lease_end(&self.link.lease);
        let written = write_bounded(
            &mut self.conn.stream,
            &self.out,
            shared.config.io_timeout,
            lease_end,
        )
        .await;
        self.out.clear();
        // A burst of pushes (up to the outbox's 256 states of up to a
        // kilobyte each) must not stay allocated for the session's life.
        if self.out.capacity() > OUT_KEPT_CAPACITY {
            self.out.shrink_to(OUT_KEPT_CAPACITY);
        }
        written
    }

    /// Ends every claim at once (held locks handed on, waiters out of their
    /// queues, in one step of the table), then tells the client if there
    /// is anything to tell. When the server chose the ending, the held
    /// claims are released only at the end of the lease (see
    /// [`holds_until_lease_end`]).
    async fn finish(mut self, end: End) {
        let shared = self.conn.shared;
        let reason = end.reason();
        debug!(remote_addr = %self.remote_addr, session = self.link.id, claims = self.claims.len(), reason = reason.as_str(), "v2 session ended");
        #[cfg(feature = "mutations")]
        for slot in std::mem::take(&mut self.released_later) {
            shared.table.end(&slot, ReleaseReason::Graceful);
        }
        // The claims (with their permits) live to the end of this
        // function, so that kept claims never stop counting against
        // `--max-claims`, not even for an instant.
        let watches: Vec<Arc<Watch>> = self.watches.drain().map(|(_, watch)| watch).collect();
        shared.table.unobserve(&watches);
        shared.watches_ended(watches.len());
        self.link.watches.store(0, Ordering::Relaxed);
        drop(watches);
        let _ = self.link.outbox.lock().take_all();
        let claims: Vec<Claim> = self.claims.drain().map(|(_, claim)| claim).collect();
        let slots: Vec<Arc<SessionSlot>> = claims.iter().map(|c| Arc::clone(&c.slot)).collect();
        for slot in &slots {
            shared.grace.leave(slot);
        }
        let promoted = if holds_until_lease_end(reason) {
            // The client may still count on its grants until its lease
            // runs out (its last frame plus the lease): the held claims
            // stay held until then, though the connection closes now; the
            // waiting ones leave their queues at once.
            let release_at = shared.table.lease_end(&self.link.lease);
            let held = shared
                .table
                .end_waiting_keep_held(&slots, reason, release_at);
            report_server_ending(shared, &end, held.len());
            shared.release_when_lease_ends(held, release_at, reason, Some(&self.link));
            false
        } else {
            report_server_ending(shared, &end, 0);
            shared.table.end_claims(&slots, reason)
        };
        drop(claims);
        shared.table.forget_lease(&self.link.lease);
        self.link.idle.store(false, Ordering::Release);
        let (code, text): (ErrorCode, String) = match end {
            End::Quiet(_) | End::FrameTimeout => {
                if promoted {
                    tokio::task::yield_now().await;
                }
                return;
            }
            End::Error(_, code, text) => (code, text.to_owned()),
            End::Protocol(RequestError { code, reason }) => (code, reason),
        };
        // The replies to the frames before the one that ended the session
        // go first.
        if !self.out.is_empty() && self.flush().await.is_err() {
            return;
        }
        self.conn.close_with(code, &text).await;
    }
}

/// A five-byte frame: its type and an id.
fn claim_frame(kind: u8, id: u32) -> [u8; 5] {
    let id = id.to_be_bytes();
    [kind, id[0], id[1], id[2], id[3]]
}

/// Appends `state` with `flags` (the wire's state layout).
fn encode_state(out: &mut Vec<u8>, state: &crate::core::watch::LockState, flags: u8) {
    ext::encode_state(
        out,
        state.event,
        flags,
        state.token,
        state.since_ms,
        state.ended_by,
        state.value_str().as_bytes(),
    );
}

/// Appends the STATE frame of `push` with `flags`.
fn encode_push(out: &mut Vec<u8>, push: &StatePush, flags: u8) {
    out.push(ext::msg::STATE);
    out.extend_from_slice(&push.watch.to_be_bytes());
    encode_state(out, &push.state, flags);
}

/// How the session ends for an end notice on itself or one of its claims.
fn end_for(notice: EndNotice) -> End {
    match notice {
        EndNotice::Expired => End::Quiet(ReleaseReason::Expired),
        EndNotice::Shutdown => SHUTTING_DOWN,
        EndNotice::Forced | EndNotice::Kicked => End::Error(
            ReleaseReason::Force,
            ErrorCode::CLOSED_BY_ADMIN,
            "closed by administrator",
        ),
    }
}
