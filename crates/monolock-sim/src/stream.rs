//! One simulated connection as each end sees it: turmoil's TCP stream, plus
//! the faults turmoil has no knob for (a reset of one end or both, a client
//! process that stops doing I/O), and on the server end a record of when
//! bytes last arrived (for the "no grant to a silent session" check).
//!
//! With a send window (runs with stalled readers), what the server writes
//! and the client has not read yet is bounded, as by the two ends' socket
//! buffers: once it is full, the server's writes block until the client
//! reads, so a client that stops reading drives the server into its write
//! io-timeout. Turmoil's own streams never block a write. What the client
//! writes is not bounded: its frames stay whole, so the server's record of
//! arrivals stays the record of frames.

use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll, Waker},
};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::{
    conn::{Conn, End, locked},
    lab::SharedLab,
};

#[derive(Default)]
struct GateState {
    paused: bool,
    wakers: Vec<Waker>,
    /// Streams dropped while paused: a stopped process sends no FIN, so
    /// they are closed when it resumes.
    graveyard: Vec<turmoil::net::TcpStream>,
    /// The process reads nothing while it writes on (a slow observer).
    reads_stalled: bool,
    read_wakers: Vec<Waker>,
}

/// A client process's I/O: while paused, none of its connections reads,
/// writes or closes. Its clock keeps running, and `is_held` keeps being
/// read, which is what a process resumed from a pause does first.
#[derive(Clone, Default)]
pub(crate) struct Gate(Arc<Mutex<GateState>>);

impl Gate {
    pub(crate) fn pause(&self) {
        locked(&self.0).paused = true;
    }

    pub(crate) fn resume(&self) {
        let (wakers, graveyard) = {
            let mut state = locked(&self.0);
            state.paused = false;
            (
                std::mem::take(&mut state.wakers),
                std::mem::take(&mut state.graveyard),
            )
        };
        drop(graveyard);
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Stops (or lets go) the process's reads; its writes go on.
    pub(crate) fn stall_reads(&self, stalled: bool) {
        let wakers = {
            let mut state = locked(&self.0);
            state.reads_stalled = stalled;
            std::mem::take(&mut state.read_wakers)
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    fn reads_open(&self, cx: &Context<'_>) -> bool {
        let mut state = locked(&self.0);
        if state.reads_stalled {
            state.read_wakers.push(cx.waker().clone());
        }
        !state.reads_stalled
    }

    fn is_open(&self, cx: &Context<'_>) -> bool {
        let mut state = locked(&self.0);
        if state.paused {
            state.wakers.push(cx.waker().clone());
        }
        !state.paused
    }

    /// Keeps `stream` open until the process resumes; gives it back if the
    /// process is running.
    fn bury(&self, stream: turmoil::net::TcpStream) -> Option<turmoil::net::TcpStream> {
        let mut state = locked(&self.0);
        if state.paused {
            state.graveyard.push(stream);
            None
        } else {
            Some(stream)
        }
    }
}

/// One end of a simulated connection.
pub(crate) struct SimStream {
    inner: Option<turmoil::net::TcpStream>,
    end: End,
    conn: Conn,
    /// The client process's gate (client end only).
    gate: Option<Gate>,
    /// The server end records arrivals under the client's address.
    server_view: Option<(SharedLab, SocketAddr)>,
    key: SocketAddr,
    lab: SharedLab,
    /// Bytes written while this end's direction was held.
    held_back: Vec<u8>,
}

impl SimStream {
    /// The client end of a connection just opened from `local`; `window`
    /// bounds what the server may write ahead of its reads (else the
    /// lab's bound, if any).
    pub(crate) fn client(
        stream: turmoil::net::TcpStream,
        local: SocketAddr,
        gate: Gate,
        lab: SharedLab,
        window: Option<usize>,
    ) -> Self {
        let conn = lab.conn(local);
        if window.is_some() {
            conn.set_window(window);
        }
        conn.set_open(End::Client, true);
        Self {
            inner: Some(stream),
            end: End::Client,
            conn,
            gate: Some(gate),
            server_view: None,
            key: local,
            lab,
            held_back: Vec::new(),
        }
    }

    /// The server end of a connection accepted from `peer`.
    pub(crate) fn server(
        stream: turmoil::net::TcpStream,
        peer: SocketAddr,
        lab: SharedLab,
    ) -> Self {
        let conn = lab.conn(peer);
        conn.set_open(End::Server, true);
        lab.heard_from(peer);
        lab.lock().checker.connection_opened(peer);
        Self {
            inner: Some(stream),
            end: End::Server,
            conn,
            gate: None,
            server_view: Some((lab.clone(), peer)),
            key: peer,
            lab,
            held_back: Vec::new(),
        }
    }

    /// Ready to do I/O: not reset, not paused. `Err` is the reset.
    fn ready(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<&mut turmoil::net::TcpStream>> {
        if let Err(err) = self.conn.check(self.end, cx) {
            return Poll::Ready(Err(err));
        }
        if let Some(gate) = &self.gate
            && !gate.is_open(cx)
        {
            return Poll::Pending;
        }
        let Some(inner) = self.inner.as_mut() else {
            return Poll::Ready(Err(io::ErrorKind::NotConnected.into()));
        };
        // Bytes held back go out first, in order, once the hold is over.
        while !self.held_back.is_empty() && !self.conn.is_held(self.end) {
            match Pin::new(&mut *inner).poll_write(cx, &self.held_back) {
                Poll::Ready(Ok(n)) => {
                    self.held_back.drain(..n);
                }
                Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(inner))
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        if let (Some(gate), Some(inner)) = (&self.gate, self.inner.take()) {
            self.inner = gate.bury(inner);
        }
        self.conn.set_open(self.end, false);
        if self.conn.closed() {
            self.lab.forget_conn(self.key);
        }
    }
}

impl AsyncRead for SimStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(gate) = &this.gate
            && !gate.reads_open(cx)
        {
            return Poll::Pending;
        }
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        let polled = match this.ready(cx) {
            Poll::Ready(Ok(inner)) => Pin::new(inner).poll_read(cx, buf),
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            Poll::Pending => return Poll::Pending,
        };
        if let Poll::Ready(Ok(())) = &polled {
            this.conn.read(this.end, buf.filled().len() - before);
        }
        if let (Poll::Ready(read), Some((lab, peer))) = (&polled, &this.server_view) {
            match read {
                Ok(()) if buf.filled().len() > before => lab.heard_from(*peer),
                // EOF or a reset: the server's session has seen its end.
                Ok(()) if room => lab.lock().checker.connection_ended(*peer),
                Ok(()) => {}
                Err(_) => lab.lock().checker.connection_ended(*peer),
            }
        }
        polled
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let buf = match this.conn.room(this.end, cx) {
            Some(0) => return Poll::Pending,
            Some(room) => &buf[..buf.len().min(room)],
            None => buf,
        };
        if this.conn.is_held(this.end) {
            this.held_back.extend_from_slice(buf);
            this.conn.wrote(this.end, buf.len());
            return Poll::Ready(Ok(buf.len()));
        }
        let written = match this.ready(cx) {
            Poll::Ready(Ok(inner)) => Pin::new(inner).poll_write(cx, buf),
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            Poll::Pending => Poll::Pending,
        };
        if let Poll::Ready(Ok(n)) = written {
            this.conn.wrote(this.end, n);
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().ready(cx) {
            Poll::Ready(Ok(inner)) => Pin::new(inner).poll_flush(cx),
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            Poll::Pending => Poll::Pending,
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().ready(cx) {
            Poll::Ready(Ok(inner)) => Pin::new(inner).poll_shutdown(cx),
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The client's connector: dials the simulated server and wraps the stream.
#[derive(Clone)]
pub(crate) struct SimConnector {
    pub(crate) gate: Gate,
    pub(crate) lab: SharedLab,
    /// Bounds what the server may write ahead of this client's reads.
    pub(crate) window: Option<usize>,
}

impl monolock_client::Connector for SimConnector {
    type Stream = SimStream;

    async fn connect(&self, addr: &str) -> io::Result<monolock_client::Connection<SimStream>> {
        let stream = turmoil::net::TcpStream::connect(addr).await?;
        let local = stream.local_addr()?;
        Ok(monolock_client::Connection::new(SimStream::client(
            stream,
            local,
            self.gate.clone(),
            self.lab.clone(),
            self.window,
        )))
    }
}
