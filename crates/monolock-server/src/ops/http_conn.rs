//! How the admin and ops listeners take connections: a cap per listener,
//! a header-read timeout and an idle keep-alive timeout, so that no
//! client, idle or slow, holds descriptors the protocol needs.
//!
//! The timeouts follow Go's `http.Server` (`ReadHeaderTimeout`,
//! `IdleTimeout`) and nginx (`client_header_timeout`, `keepalive_timeout`):
//!
//! - a new connection has the header timeout, from accept (and the TLS
//!   handshake within it), to send a whole request head;
//! - between requests, a kept-alive connection may stay silent for the
//!   idle timeout; once the first byte of the next request arrives, the
//!   head must be whole within the header timeout;
//! - while a response is being sent (an event stream sends a keep-alive
//!   comment every 15 s), the connection is closed only if no byte has
//!   moved either way for the idle timeout: its client stopped reading.
//!
//! One connection over the cap is answered `503` with `Connection: close`
//! in one non-blocking write and closed at once.

use std::{
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use axum::{Router, body::Body, extract::Request, response::Response};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::{rt::TokioIo, service::TowerToHyperService};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::Semaphore,
    time::Instant,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::debug;

use crate::{ServerTls, ops::tls::identity_of_certificate};

/// Default for `--http-header-timeout`.
pub const DEFAULT_HTTP_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default for `--http-idle-timeout`.
pub const DEFAULT_HTTP_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default for `--http-max-connections`, per listener.
pub const DEFAULT_HTTP_MAX_CONNECTIONS: usize = 128;

/// What the body of the `503` to a connection over the cap says.
const OVER_CAP_RESPONSE: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
Connection: close\r\nContent-Type: text/plain\r\nContent-Length: 21\r\n\r\n\
too many connections\n";

/// The bounds of one HTTP listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Time to send a whole request head (from accept, or from the first
    /// byte of a later request on a kept-alive connection).
    pub header_timeout: Duration,
    /// Time a kept-alive connection may wait for its next request, and a
    /// connection with a response under way may go without a byte moving.
    pub idle_timeout: Duration,
    /// Connections open at once; one more gets `503` and is closed.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            header_timeout: DEFAULT_HTTP_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_HTTP_IDLE_TIMEOUT,
            max_connections: DEFAULT_HTTP_MAX_CONNECTIONS,
        }
    }
}

/// Counts of one HTTP listener, for metrics.
#[derive(Debug, Default)]
pub struct HttpStats {
    active: AtomicU64,
    refused: AtomicU64,
    timed_out: AtomicU64,
}

impl HttpStats {
    /// Connections open now.
    pub fn active(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }

    /// Connections refused at the cap since start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Connections closed by the header or idle timeout since start.
    pub fn timed_out(&self) -> u64 {
        self.timed_out.load(Ordering::Relaxed)
    }
}

/// The identity of an HTTP client's certificate under mTLS (as
/// [`identity_of_certificate`] gives it), in each request's extensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIdentity(pub Arc<str>);

/// Serves `app` on `listener` within `limits` until `shutdown` resolves,
/// then lets each connection finish its response and waits for them all.
///
/// # Errors
/// None today: failed accepts are backed off and retried.
pub(crate) async fn serve(
    listener: TcpListener,
    tls: Option<Arc<ServerTls>>,
    app: Router,
    limits: HttpLimits,
    stats: Arc<HttpStats>,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(AtomicU64::new(0));
    let tracker = TaskTracker::new();
    let stop = CancellationToken::new();
    tokio::pin!(shutdown);
    let mut backoff = crate::core::server::ACCEPT_BACKOFF_MIN;
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, remote_addr) = match accepted {
            Ok(accepted) => {
                backoff = crate::core::server::ACCEPT_BACKOFF_MIN;
                accepted
            }
            Err(err) => {
                debug!(error = %err, "HTTP accept failed; backing off");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(crate::core::server::ACCEPT_BACKOFF_MAX);
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            debug!(%remote_addr, "HTTP listener at its connection cap: refused");
            refuse(tcp, &refusals);
            continue;
        };
        let connection = Connection {
            app: app.clone(),
            limits,
            stats: Arc::clone(&stats),
            stop: stop.clone(),
            remote_addr,
        };
        let tls = tls.clone();
        tracker.spawn(async move {
            connection.stats.active.fetch_add(1, Ordering::Relaxed);
            connection.run(tcp, tls).await;
            connection.stats.active.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
    drop(listener);
    stop.cancel();
    tracker.close();
    tracker.wait().await;
    Ok(())
}

/// Refused connections drained at once; the rest are closed right after
/// their 503 is written.
const MAX_REFUSALS_IN_FLIGHT: u64 = 8;

/// How long a refused connection's request is read and dropped, so the
/// close does not turn into a reset that destroys the 503.
const REFUSAL_DRAIN: Duration = Duration::from_millis(200);

/// Answers `503` in one non-blocking write, then closes; a few refusals at
/// a time are drained briefly first.
fn refuse(tcp: TcpStream, in_flight: &Arc<AtomicU64>) {
    let _ = tcp.try_write(OVER_CAP_RESPONSE);
    if in_flight.fetch_add(1, Ordering::AcqRel) >= MAX_REFUSALS_IN_FLIGHT {
        in_flight.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let in_flight = Arc::clone(in_flight);
    tokio::spawn(async move {
        let mut tcp = tcp;
        let _ = socket2::SockRef::from(&tcp).shutdown(std::net::Shutdown::Write);
        let mut sink = [0u8; 1024];
        let _ = tokio::time::timeout(REFUSAL_DRAIN, async {
            while matches!(
                tokio::io::AsyncReadExt::read(&mut tcp, &mut sink).await,
                Ok(n) if n > 0
            ) {}
        })
        .await;
        in_flight.fetch_sub(1, Ordering::AcqRel);
    });
}

struct Connection {
    app: Router,
    limits: HttpLimits,
    stats: Arc<HttpStats>,
    stop: CancellationToken,
    remote_addr: SocketAddr,
}

impl Connection {
    async fn run(&self, tcp: TcpStream, tls: Option<Arc<ServerTls>>) {
        let activity = Arc::new(Activity::new());
        let watched = Watched {
            inner: tcp,
            activity: Arc::clone(&activity),
        };
        match tls {
            None => self.http(watched, None, activity).await,
            Some(tls) => {
                let handshake = tokio::time::timeout_at(
                    activity.deadline(&self.limits),
                    tls.acceptor().accept(watched),
                );
                let stream = tokio::select! {
                    () = self.stop.cancelled() => return,
                    handshake = handshake => handshake,
                };
                match stream {
                    Ok(Ok(stream)) => {
                        let identity = match stream.get_ref().1.peer_certificates() {
                            Some([leaf, ..]) => {
                                Some(ClientIdentity(Arc::from(identity_of_certificate(leaf))))
                            }
                            _ => None,
                        };
                        self.http(stream, identity, activity).await;
                    }
                    Ok(Err(err)) => {
                        debug!(remote_addr = %self.remote_addr, error = %err, "HTTPS handshake failed");
                    }
                    Err(_) => {
                        self.stats.timed_out.fetch_add(1, Ordering::Relaxed);
                        debug!(remote_addr = %self.remote_addr, "HTTPS handshake not complete within the header timeout");
                    }
                }
            }
        }
    }

    async fn http<IO>(&self, io: IO, identity: Option<ClientIdentity>, activity: Arc<Activity>)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let app = TowerToHyperService::new(self.app.clone());
        let counting = Arc::clone(&activity);
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            if let Some(identity) = &identity {
                request.extensions_mut().insert(identity.clone());
            }
            let in_flight = InFlight::start(Arc::clone(&counting));
            let response = hyper::service::Service::call(&app, request);
            async move {
                let response: Response = response.await?;
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    Body::new(Guarded {
                        inner: body,
                        _in_flight: in_flight,
                    })
                }))
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        // The timeouts are ours (below), kept apart as header and idle.
        builder.header_read_timeout(None);
        let conn = builder.serve_connection(TokioIo::new(io), service);
        tokio::pin!(conn);
        let mut stopping = false;
        loop {
            let deadline = activity.deadline(&self.limits);
            tokio::select! {
                _ = conn.as_mut() => return,
                () = self.stop.cancelled(), if !stopping => {
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                }
                () = activity.changed.notified() => {}
                () = tokio::time::sleep_until(deadline) => {
                    if activity.deadline(&self.limits) <= Instant::now() {
                        self.stats.timed_out.fetch_add(1, Ordering::Relaxed);
                        debug!(remote_addr = %self.remote_addr, "HTTP connection timed out");
                        return;
                    }
                }
            }
        }
    }
}

/// What the connection is doing, for its timeouts.
struct Activity {
    state: parking_lot::Mutex<ActivityState>,
    /// Woken when a change may bring the deadline closer (a request starts
    /// or ends, the first byte of a head arrives).
    changed: tokio::sync::Notify,
}

struct ActivityState {
    /// Requests whose response is not yet wholly sent.
    in_flight: usize,
    /// Requests taken on this connection.
    requests: u64,
    /// When the connection last had no request (accept, or the end of the
    /// last response).
    waiting_since: Instant,
    /// The first byte read while waiting, if any.
    first_byte_at: Option<Instant>,
    /// The last byte read or written.
    last_io: Instant,
}

impl Activity {
    fn new() -> Self {
        let now = Instant::now();
        Self {
            state: parking_lot::Mutex::new(ActivityState {
                in_flight: 0,
                requests: 0,
                waiting_since: now,
                first_byte_at: None,
                last_io: now,
            }),
            changed: tokio::sync::Notify::new(),
        }
    }

    /// When the connection must be closed if nothing changes meanwhile.
    fn deadline(&self, limits: &HttpLimits) -> Instant {
        let state = self.state.lock();
        if state.in_flight > 0 {
            return state.last_io + limits.idle_timeout;
        }
        match state.first_byte_at {
            Some(first) => first + limits.header_timeout,
            None if state.requests == 0 => state.waiting_since + limits.header_timeout,
            None => state.waiting_since + limits.idle_timeout,
        }
    }

    fn read(&self) {
        let now = Instant::now();
        let mut state = self.state.lock();
        state.last_io = now;
        if state.in_flight == 0 && state.first_byte_at.is_none() {
            state.first_byte_at = Some(now);
            drop(state);
            self.changed.notify_one();
        }
    }

    fn wrote(&self) {
        self.state.lock().last_io = Instant::now();
    }
}

/// A request under way; its response's body carries it until it is sent.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: Arc<Activity>) -> Self {
        {
            let mut state = activity.state.lock();
            state.in_flight += 1;
            state.requests += 1;
            state.first_byte_at = None;
        }
        activity.changed.notify_one();
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.in_flight -= 1;
        if state.in_flight == 0 {
            state.waiting_since = Instant::now();
            state.first_byte_at = None;
        }
        drop(state);
        self.0.changed.notify_one();
    }
}

/// A response body that ends its request's [`InFlight`] when dropped.
struct Guarded {
    inner: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Guarded {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A stream that notes every byte it moves in its [`Activity`].
struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, bytes);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
