//! Who gets a descriptor: the connection limit (`--max-connections`), the
//! refusal of a connection over it, and the order in which connections are
//! closed when the process runs out of descriptors anyway.
//!
//! The model is PostgreSQL's `max_connections` with its reserved slots and
//! Redis's `maxclients` with its reserved descriptors: the protocol
//! listener takes at most `--max-connections` connections, a limit the
//! server keeps below the descriptor limit by a reserve
//! ([`RESERVED_DESCRIPTORS`] plus the HTTP listeners' own caps). One more
//! connection is accepted, told ERROR 0x04 and closed, so a client over the
//! limit learns it at once instead of waiting in the backlog.
//!
//! When descriptors run out all the same (`accept` fails with EMFILE), the
//! server frees them in this order, one step per failed `accept`:
//!
//! 1. connections that have not sent a whole first frame (they cost a
//!    descriptor and promise nothing; each is told ERROR 0x04);
//! 2. then idle version 2 sessions (no claim) that have been open for at
//!    least one io-timeout, each told ERROR 0x03. A session just opened is
//!    never idle in this sense: its first ACQUIRE may be on its way.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use monolock_proto::{ErrorCode, ServerFrame};
use tokio::{io::AsyncReadExt, net::TcpStream, time::Instant};
use tokio_util::sync::CancellationToken;

/// Descriptors the server keeps for itself beyond the HTTP listeners'
/// caps: listening sockets, the audit log, the token floor, files read on
/// SIGHUP, `/proc/self` at scrape time, and the refusals in flight
/// ([`MAX_REFUSALS_IN_FLIGHT`]). As Redis's `CONFIG_MIN_RESERVED_FDS`.
pub const RESERVED_DESCRIPTORS: u64 = 32;

/// Default for [`ServerConfig::max_connections`](crate::ServerConfig):
/// no limit of the server's own. `monolock serve` sets it to the open-file
/// limit less the reserve unless `--max-connections` asks for fewer: one
/// session is one descriptor, and a fleet of a million sessions must not
/// meet a lower default.
pub const DEFAULT_MAX_CONNECTIONS: usize = usize::MAX;

/// Refused connections drained at once (the rest are closed right after
/// their ERROR is written); part of [`RESERVED_DESCRIPTORS`].
pub const MAX_REFUSALS_IN_FLIGHT: usize = 8;

/// How long a refused connection is drained after its ERROR, so that the
/// client's first frame, if it is already on its way, does not turn the
/// close into a reset that destroys the ERROR.
const REFUSAL_DRAIN: Duration = Duration::from_millis(200);

/// The reason in the ERROR 0x04 of a connection over the limit.
pub(crate) const OVER_LIMIT_REASON: &str = "too many connections: server at --max-connections";

/// The reason in the ERROR 0x04 of a connection closed to free its
/// descriptor.
pub(crate) const SHED_REASON: &str = "too many connections: server out of descriptors";

/// The largest `--max-connections` that leaves `reserve` descriptors of
/// `descriptor_limit` free: `None` when nothing is left.
pub fn connections_within(descriptor_limit: u64, reserve: u64) -> Option<usize> {
    let left = descriptor_limit.checked_sub(reserve)?;
    (left > 0).then(|| usize::try_from(left).unwrap_or(usize::MAX))
}

/// Connections accepted whose first frame is not yet whole, by the
/// client's address (unique among open connections to one listener).
#[derive(Default)]
pub(crate) struct PendingConnections {
    open: parking_lot::Mutex<HashMap<SocketAddr, CancellationToken>>,
    refusals_in_flight: AtomicUsize,
}

/// A connection's place among the pending ones; leaves it when dropped.
/// Kept by the task while it waits for the first frame (inside the boxed
/// handshake, so no session's task grows by it).
pub(crate) struct Pending<'a> {
    registry: &'a PendingConnections,
    addr: SocketAddr,
    /// Cancelled when the server closes this connection to free its
    /// descriptor.
    pub(crate) shed: CancellationToken,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.registry.open.lock().remove(&self.addr);
    }
}

impl PendingConnections {
    /// Files a connection just accepted from `addr`.
    pub(crate) fn register(&self, addr: SocketAddr) {
        self.open.lock().insert(addr, CancellationToken::new());
    }

    /// The place of the connection from `addr`, if it was filed (a
    /// connection served by `ServerHandle::serve_stream` is not).
    pub(crate) fn take(&self, addr: SocketAddr) -> Option<Pending<'_>> {
        let shed = self.open.lock().get(&addr)?.clone();
        Some(Pending {
            registry: self,
            addr,
            shed,
        })
    }

    /// Removes the connection from `addr` (it ended before its first
    /// frame's wait began).
    pub(crate) fn forget(&self, addr: SocketAddr) {
        self.open.lock().remove(&addr);
    }

    /// Asks every pending connection to close; returns how many.
    pub(crate) fn shed_all(&self) -> usize {
        let open = std::mem::take(&mut *self.open.lock());
        for token in open.values() {
            token.cancel();
        }
        open.len()
    }

    /// Pending connections now.
    pub(crate) fn len(&self) -> usize {
        self.open.lock().len()
    }

    /// Tells `tcp` ERROR 0x04 and closes it, without waiting on the
    /// client: the frame goes out in one non-blocking write (it is a few
    /// dozen bytes, and the socket's buffer is empty), then a few refusals
    /// at a time are drained briefly in the background.
    pub(crate) fn refuse(self: &Arc<Self>, tcp: TcpStream, reason: &str) {
        let frame = ServerFrame::Error {
            code: ErrorCode::TOO_MANY_CONNECTIONS,
            reason: reason.to_owned(),
        }
        .to_bytes();
        let _ = tcp.try_write(&frame);
        if self.refusals_in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_REFUSALS_IN_FLIGHT {
            self.refusals_in_flight.fetch_sub(1, Ordering::AcqRel);
            return;
        }
        tokio::spawn(drain_refused(tcp, Arc::clone(self)));
    }
}

/// Shuts the write side (the ERROR is all the client gets) and reads what
/// the client sent for a moment, then closes.
async fn drain_refused(mut tcp: TcpStream, registry: Arc<PendingConnections>) {
    let _ = socket2::SockRef::from(&tcp).shutdown(std::net::Shutdown::Write);
    let mut sink = [0u8; 256];
    let deadline = Instant::now() + REFUSAL_DRAIN;
    let _ = tokio::time::timeout_at(deadline, async {
        while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
    registry.refusals_in_flight.fetch_sub(1, Ordering::AcqRel);
}

/// Claims (held and waiting, both protocol versions) the server has
/// admitted and not yet ended, against `--max-claims`, and the most there
/// were since memory was last given back.
#[derive(Default)]
pub(crate) struct ClaimCount(Arc<AtomicUsize>, AtomicUsize, Arc<AtomicUsize>);

/// One admitted claim; ends its count when dropped.
pub(crate) struct ClaimPermit(Arc<AtomicUsize>);

impl Drop for ClaimPermit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Kept claims (see [`ClaimCount::keep`]); ends their count when dropped.
pub(crate) struct KeptClaims {
    admitted: Arc<AtomicUsize>,
    kept: Arc<AtomicUsize>,
    claims: usize,
}

impl Drop for KeptClaims {
    fn drop(&mut self) {
        self.kept.fetch_sub(self.claims, Ordering::AcqRel);
        self.admitted.fetch_sub(self.claims, Ordering::AcqRel);
    }
}

/// The reason in the refusal (code 0x0a) of a claim over `--max-claims`.
pub(crate) fn claim_limit_reason(max: usize) -> String {
    format!("server claim limit reached: it holds --max-claims {max} claims (held and waiting)")
}

impl ClaimCount {
    /// A permit for one more claim, or `None` if `max` are admitted.
    pub(crate) fn try_admit(&self, max: usize) -> Option<ClaimPermit> {
        let before = self.0.fetch_add(1, Ordering::AcqRel);
        if before >= max {
            self.0.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        self.1.fetch_max(before + 1, Ordering::Relaxed);
        Some(ClaimPermit(Arc::clone(&self.0)))
    }

    /// Keeps counting `claims` held claims of a connection the server
    /// ended (their permits are about to go) until the returned guard
    /// drops, when they are released; they count as kept meanwhile.
    pub(crate) fn keep(&self, claims: usize) -> KeptClaims {
        self.0.fetch_add(claims, Ordering::AcqRel);
        self.2.fetch_add(claims, Ordering::AcqRel);
        KeptClaims {
            admitted: Arc::clone(&self.0),
            kept: Arc::clone(&self.2),
            claims,
        }
    }

    /// Held claims of connections the server ended, kept until their
    /// lease's end.
    pub(crate) fn kept(&self) -> usize {
        self.2.load(Ordering::Acquire)
    }

    /// Ends one claim admitted by a permit that was forgotten.
    pub(crate) fn end_one(&self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }

    /// Claims admitted now.
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

/// How often the server looks whether a burst of claims has ended.
pub(crate) const RECLAIM_INTERVAL: Duration = Duration::from_secs(5);

/// Bursts smaller than this are not worth a trim.
const RECLAIM_MIN_CLAIMS: usize = 4096;

impl ClaimCount {
    /// True (once per burst) when at least [`RECLAIM_MIN_CLAIMS`] claims
    /// were admitted at once since the last reclaim and three quarters of
    /// them have ended: then the lock table's map is shrunk and the heap
    /// trimmed.
    ///
    /// Why: glibc's allocator keeps what a burst freed (measured with
    /// `claim-memory`: after 25 bursts of 102,400 claims the RSS stayed at
    /// the peak), and a map keeps its capacity. Shrinking and trimming
    /// gives it back; see docs/operations.md, "Limits", for the figures.
    pub(crate) fn burst_ended(&self) -> bool {
        let now = self.0.load(Ordering::Acquire);
        let high = self.1.load(Ordering::Relaxed);
        if high >= RECLAIM_MIN_CLAIMS && now <= high / 4 {
            self.1.store(now, Ordering::Relaxed);
            return true;
        }
        false
    }
}

/// Returns the allocator's free memory to the OS (glibc's `malloc_trim`:
/// free pages at the top of each heap and, since glibc 2.8, the free
/// pages inside them). Elsewhere a no-op.
#[allow(unsafe_code)]
pub(crate) fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes a size and touches only the allocator's own
    // state, under its own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}
