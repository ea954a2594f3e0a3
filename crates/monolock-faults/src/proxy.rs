//! A fault-injecting TCP proxy on loopback.
//!
//! Clients connect to the proxy; it dials the backend and copies bytes both
//! ways, applying the faults currently set for each direction:
//!
//! - [`Direction::Pass`]: copy at once;
//! - [`Direction::Delay`]: copy after a fixed delay, in order;
//! - [`Direction::Hold`]: a black hole that keeps the bytes (and any close)
//!   and delivers them, in order, once the direction passes again, as TCP
//!   retransmission would after a partition heals;
//! - [`Direction::Drop`]: discard the bytes; a close is kept back until the
//!   direction passes again.
//!
//! [`FaultProxy::reset_all`] resets every connection (the client side
//! first, then the server side); [`FaultProxy::reset_clients`] resets only
//! the client side and leaves the server side silent. [`FaultProxy::switch_backend`] is a
//! failover address (VIP): new connections go to the new backend and every
//! existing one is fenced (both directions dropped), so the old server's
//! sessions see only silence.
//!
//! One task per proxied connection owns both sockets, so a reset closes
//! them in a chosen order and nothing outlives the proxy.

use std::{
    collections::VecDeque,
    io,
    net::SocketAddr,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use socket2::SockRef;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinSet,
    time::{Instant, sleep_until},
};

use crate::{clock::mono_ns, task::AbortOnDrop};

/// What happens to the bytes travelling one way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Copied at once.
    Pass,
    /// Copied after this delay.
    Delay(Duration),
    /// Kept (with any close) and delivered when the direction passes again.
    Hold,
    /// Discarded; a close is kept back until the direction passes again.
    Drop,
}

/// The faults of both directions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Faults {
    /// Client to server.
    pub to_server: Direction,
    /// Server to client.
    pub to_client: Direction,
}

impl Faults {
    /// No fault.
    pub const PASS: Self = Self::both(Direction::Pass);
    /// A partition: nothing crosses either way.
    pub const BLACK_HOLE: Self = Self::both(Direction::Hold);

    /// The same fault both ways.
    pub const fn both(direction: Direction) -> Self {
        Self {
            to_server: direction,
            to_client: direction,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Control {
    faults: Faults,
    reset: Option<Reset>,
}

/// Which sides a reset reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reset {
    /// RST to the client, then to the server.
    Both,
    /// RST to the client only; the server side goes silent (a middlebox
    /// that lost its state).
    ClientOnly,
}

struct Inner {
    /// `None`: the failover address points nowhere (clients see a reset).
    backend: Mutex<Option<SocketAddr>>,
    defaults: Mutex<Faults>,
    connections: Mutex<Vec<watch::Sender<Control>>>,
    fenced: Mutex<Vec<watch::Sender<Control>>>,
    accepted: Mutex<u64>,
    /// CLOCK_MONOTONIC when a connection last applied a fault change.
    applied: Arc<AtomicU64>,
}

// A std mutex everywhere: never held across an await.
fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The proxy. Dropping it closes every proxied connection.
pub struct FaultProxy {
    addr: SocketAddr,
    inner: Arc<Inner>,
    _accept: AbortOnDrop<()>,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:0` and forwards to `backend`.
    ///
    /// # Errors
    /// The bind error.
    pub async fn start(backend: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            backend: Mutex::new(Some(backend)),
            defaults: Mutex::new(Faults::PASS),
            connections: Mutex::new(Vec::new()),
            fenced: Mutex::new(Vec::new()),
            accepted: Mutex::new(0),
            applied: Arc::new(AtomicU64::new(0)),
        });
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&inner)));
        Ok(Self {
            addr,
            inner,
            _accept: AbortOnDrop(accept),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        *locked(&self.inner.accepted)
    }

    /// Applies `faults` to every open connection and to new ones. The
    /// connections apply it asynchronously: [`FaultProxy::applied_after`]
    /// tells when they did.
    pub fn set_faults(&self, faults: Faults) {
        *locked(&self.inner.defaults) = faults;
        for c in locked(&self.inner.connections).iter() {
            c.send_modify(|control| control.faults = faults);
        }
    }

    /// Waits (at most `limit`) until a connection has applied a fault change
    /// after `after_ns`, and returns when (CLOCK_MONOTONIC). A fault takes
    /// effect then, not when it was asked for. The change has no
    /// notification, so this polls every millisecond, bounded.
    pub async fn applied_after(&self, after_ns: u64, limit: Duration) -> Option<u64> {
        let deadline = Instant::now() + limit;
        loop {
            let at = self.inner.applied.load(Ordering::Acquire);
            if at > after_ns {
                return Some(at);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Resets every open connection: RST to the client, then to the server.
    pub fn reset_all(&self) {
        self.reset(Reset::Both);
    }

    /// Resets the client side of every open connection and leaves the
    /// server side open and silent (as a middlebox that lost its state):
    /// the client learns at once, the server only by the lease.
    pub fn reset_clients(&self) {
        self.reset(Reset::ClientOnly);
    }

    fn reset(&self, reset: Reset) {
        let mut fenced = locked(&self.inner.fenced);
        for c in locked(&self.inner.connections).drain(..) {
            c.send_modify(|control| control.reset = Some(reset));
            fenced.push(c);
        }
    }

    /// Points new connections at `backend` (`None`: nowhere, they are
    /// reset); open connections are left as they are.
    pub fn set_backend(&self, backend: Option<SocketAddr>) {
        *locked(&self.inner.backend) = backend;
    }

    /// Fences every open connection for good: both directions dropped, no
    /// close or reset passed on, no later fault applied. The peers see
    /// silence, as when a failed primary's address is taken away.
    pub fn fence_all(&self) {
        let mut fenced = locked(&self.inner.fenced);
        for c in locked(&self.inner.connections).drain(..) {
            c.send_modify(|control| control.faults = Faults::both(Direction::Drop));
            fenced.push(c);
        }
    }

    /// Fails over: fences every open connection and sends new ones to
    /// `backend`.
    pub fn switch_backend(&self, backend: SocketAddr) {
        self.fence_all();
        self.set_backend(Some(backend));
    }
}

async fn accept_loop(listener: TcpListener, inner: Arc<Inner>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                *locked(&inner.accepted) += 1;
                let backend = *locked(&inner.backend);
                let (control, watcher) = watch::channel(Control {
                    faults: *locked(&inner.defaults),
                    reset: None,
                });
                locked(&inner.connections).push(control);
                connections.spawn(proxy_connection(client, backend, watcher, Arc::clone(&inner.applied)));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One direction's queue: data and a possible close, with delivery times.
#[derive(Default)]
struct Lane {
    queue: VecDeque<(Instant, Item)>,
    queued_bytes: usize,
    /// The source closed (or failed) while the lane dropped: kept back.
    deferred_end: Option<Item>,
    /// The source has ended; read no more.
    source_done: bool,
    /// The close has been delivered.
    delivered_end: bool,
}

enum Item {
    Data(Vec<u8>),
    Eof,
    Reset,
}

/// Stop reading a source while this much is queued for its destination.
const MAX_QUEUED: usize = 1 << 20;

impl Lane {
    fn can_read(&self) -> bool {
        !self.source_done && self.queued_bytes < MAX_QUEUED
    }

    fn push(&mut self, direction: Direction, item: Item) {
        let now = Instant::now();
        match direction {
            Direction::Drop => {
                if !matches!(item, Item::Data(_)) {
                    self.deferred_end = Some(item);
                }
            }
            // Held items wait for `release`; they are stamped far ahead.
            Direction::Hold => self.enqueue(far_future(now), item),
            Direction::Pass => self.enqueue(now, item),
            Direction::Delay(delay) => self.enqueue(now + delay, item),
        }
    }

    fn enqueue(&mut self, at: Instant, item: Item) {
        if let Item::Data(data) = &item {
            self.queued_bytes += data.len();
        }
        self.queue.push_back((at, item));
    }

    /// The direction's fault changed: held items become due, a deferred
    /// close is queued once the lane passes again.
    fn refault(&mut self, direction: Direction) {
        let now = Instant::now();
        let due = match direction {
            Direction::Hold | Direction::Drop => return,
            Direction::Pass => now,
            Direction::Delay(delay) => now + delay,
        };
        for (at, _) in &mut self.queue {
            if *at > due {
                *at = due;
            }
        }
        if let Some(end) = self.deferred_end.take() {
            self.enqueue(due, end);
        }
    }

    fn next_due(&self) -> Option<Instant> {
        self.queue.front().map(|(at, _)| *at)
    }
}

fn far_future(now: Instant) -> Instant {
    now + Duration::from_secs(86_400 * 365)
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Sets SO_LINGER to zero so that closing sends RST.
fn arm_reset(stream: &TcpStream) {
    let _ = SockRef::from(stream).set_linger(Some(Duration::ZERO));
}

fn reset_both(client: TcpStream, server: TcpStream) {
    arm_reset(&client);
    drop(client);
    arm_reset(&server);
    drop(server);
}

async fn proxy_connection(
    client: TcpStream,
    backend: Option<SocketAddr>,
    mut control: watch::Receiver<Control>,
    applied: Arc<AtomicU64>,
) {
    let _ = client.set_nodelay(true);
    let connected = match backend {
        Some(backend) => TcpStream::connect(backend).await,
        None => Err(io::ErrorKind::NotConnected.into()),
    };
    let server = match connected {
        Ok(server) => server,
        Err(_) => {
            // Like a dead address behind a VIP: the client sees a reset.
            arm_reset(&client);
            return;
        }
    };
    let _ = server.set_nodelay(true);
    let mut faults = control.borrow().faults;
    let mut up = Lane::default(); // client -> server
    let mut down = Lane::default(); // server -> client
    let mut client_buf = vec![0u8; 16 * 1024];
    let mut server_buf = vec![0u8; 16 * 1024];
    let (mut client, mut server) = (client, server);
    loop {
        if up.delivered_end && down.delivered_end {
            return;
        }
        let up_due = up.next_due();
        let down_due = down.next_due();
        tokio::select! {
            // Faults first: once a change is seen, no byte passes under the
            // old ones.
            biased;
            changed = control.changed() => {
                if changed.is_err() {
                    // The proxy is going away: close both sides quietly.
                    return;
                }
                let now = *control.borrow_and_update();
                match now.reset {
                    Some(Reset::Both) => {
                        reset_both(client, server);
                        return;
                    }
                    Some(Reset::ClientOnly) => {
                        arm_reset(&client);
                        drop(client);
                        // The server side stays open and silent until the
                        // proxy goes away.
                        std::future::pending::<()>().await;
                        return;
                    }
                    None => {}
                }
                faults = now.faults;
                up.refault(faults.to_server);
                down.refault(faults.to_client);
                applied.fetch_max(mono_ns(), Ordering::AcqRel);
            }
            read = client.read(&mut client_buf), if up.can_read() => {
                let item = match read {
                    Ok(0) => { up.source_done = true; Item::Eof }
                    Ok(n) => Item::Data(client_buf[..n].to_vec()),
                    Err(_) => { up.source_done = true; Item::Reset }
                };
                up.push(faults.to_server, item);
            }
            read = server.read(&mut server_buf), if down.can_read() => {
                let item = match read {
                    Ok(0) => { down.source_done = true; Item::Eof }
                    Ok(n) => Item::Data(server_buf[..n].to_vec()),
                    Err(_) => { down.source_done = true; Item::Reset }
                };
                down.push(faults.to_client, item);
            }
            () = sleep_until_opt(up_due) => {
                match deliver(&mut up, &mut server).await {
                    Delivered::Ok => {}
                    Delivered::Reset => { reset_both(client, server); return; }
                }
            }
            () = sleep_until_opt(down_due) => {
                match deliver(&mut down, &mut client).await {
                    Delivered::Ok => {}
                    Delivered::Reset => { reset_both(client, server); return; }
                }
            }
        }
    }
}

enum Delivered {
    Ok,
    Reset,
}

/// Delivers the lane's first item to `to`.
async fn deliver(lane: &mut Lane, to: &mut TcpStream) -> Delivered {
    let Some((_, item)) = lane.queue.pop_front() else {
        return Delivered::Ok;
    };
    match item {
        Item::Data(data) => {
            lane.queued_bytes -= data.len();
            if to.write_all(&data).await.is_err() {
                return Delivered::Reset;
            }
            Delivered::Ok
        }
        Item::Eof => {
            let _ = to.shutdown().await;
            lane.delivered_end = true;
            Delivered::Ok
        }
        Item::Reset => Delivered::Reset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> (SocketAddr, AbortOnDrop<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut tasks = JoinSet::new();
            while let Ok((mut s, _)) = listener.accept().await {
                tasks.spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        (addr, AbortOnDrop(task))
    }

    async fn round_trip(stream: &mut TcpStream, byte: u8) -> io::Result<u8> {
        stream.write_all(&[byte]).await?;
        let mut buf = [0u8; 1];
        stream.read_exact(&mut buf).await?;
        Ok(buf[0])
    }

    #[tokio::test]
    async fn hold_delivers_in_order_after_healing() {
        let (echo, _echo) = echo_server().await;
        let proxy = FaultProxy::start(echo).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut c, 1).await.unwrap(), 1);
        proxy.set_faults(Faults::BLACK_HOLE);
        c.write_all(&[2, 3]).await.unwrap();
        let mut buf = [0u8; 2];
        let held = tokio::time::timeout(Duration::from_millis(200), c.read_exact(&mut buf)).await;
        assert!(held.is_err(), "nothing crosses a black hole");
        proxy.set_faults(Faults::PASS);
        tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(buf, [2, 3]);
    }

    #[tokio::test]
    async fn delay_is_applied_and_reset_reaches_the_client() {
        let (echo, _echo) = echo_server().await;
        let proxy = FaultProxy::start(echo).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.set_faults(Faults {
            to_server: Direction::Delay(Duration::from_millis(50)),
            to_client: Direction::Delay(Duration::from_millis(50)),
        });
        let start = Instant::now();
        assert_eq!(round_trip(&mut c, 9).await.unwrap(), 9);
        assert!(start.elapsed() >= Duration::from_millis(100));
        proxy.reset_all();
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
            .await
            .unwrap();
        assert!(
            matches!(&read, Err(e) if e.kind() == io::ErrorKind::ConnectionReset),
            "{read:?}"
        );
    }

    #[tokio::test]
    async fn switching_backends_fences_old_connections() {
        let (first, _first) = echo_server().await;
        let (second, _second) = echo_server().await;
        let proxy = FaultProxy::start(first).await.unwrap();
        let mut old = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut old, 1).await.unwrap(), 1);
        proxy.switch_backend(second);
        let mut new = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut new, 2).await.unwrap(), 2);
        proxy.set_faults(Faults::PASS);
        let fenced =
            tokio::time::timeout(Duration::from_millis(200), round_trip(&mut old, 3)).await;
        assert!(fenced.is_err(), "a fenced connection stays silent");
        assert_eq!(proxy.accepted(), 2);
    }
}
