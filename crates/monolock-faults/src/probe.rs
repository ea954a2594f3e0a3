//! Raw-protocol peers: a heartbeat probe that measures round trips, and
//! the hostile clients of the slow-and-hostile scenario.
//!
//! These speak bytes directly (through `monolock_proto`) rather than use
//! the client library, because they must misbehave on purpose or measure
//! each round trip exactly.

use std::{net::SocketAddr, time::Duration};

use monolock_proto::{ClientFrame, Lease, LockName, ServerFrame, decode_response};
use rand::Rng;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::{Instant, timeout, timeout_at},
};

/// A probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// I/O failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// No reply in time.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    /// The server closed the connection.
    #[error("the server closed the connection")]
    Closed,
    /// The server sent something a v1 server never sends.
    #[error("bad frame: {0}")]
    BadFrame(String),
    /// Invalid lock name or lease.
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// A raw session: one ACQUIRE, then heartbeats with measured round trips.
pub struct Probe {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Probe {
    /// Connects and sends ACQUIRE; returns the probe and the first reply.
    ///
    /// # Errors
    /// [`ProbeError`].
    pub async fn acquire(
        addr: SocketAddr,
        lock: &str,
        lease: Duration,
        limit: Duration,
    ) -> Result<(Self, ServerFrame), ProbeError> {
        let mut probe = Self::send_acquire(addr, lock, lease, limit).await?;
        let first = probe.next_frame(limit).await?;
        Ok((probe, first))
    }

    /// Connects and sends ACQUIRE without waiting for the reply.
    ///
    /// # Errors
    /// [`ProbeError`].
    pub async fn send_acquire(
        addr: SocketAddr,
        lock: &str,
        lease: Duration,
        limit: Duration,
    ) -> Result<Self, ProbeError> {
        let name = LockName::new(lock).map_err(|e| ProbeError::Invalid(e.to_string()))?;
        let lease =
            Lease::from_duration(lease).ok_or_else(|| ProbeError::Invalid("lease".into()))?;
        let stream = timeout(limit, TcpStream::connect(addr))
            .await
            .map_err(|_| ProbeError::Timeout(limit))??;
        stream.set_nodelay(true)?;
        let mut probe = Self {
            stream,
            buf: Vec::new(),
        };
        probe
            .stream
            .write_all(&ClientFrame::acquire(lease, name).to_bytes())
            .await?;
        Ok(probe)
    }

    /// The connection, for tests that close it in a particular way.
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    /// Reads the next frame, at most `limit`.
    ///
    /// # Errors
    /// [`ProbeError`].
    pub async fn next_frame(&mut self, limit: Duration) -> Result<ServerFrame, ProbeError> {
        let deadline = Instant::now() + limit;
        loop {
            match decode_response(&self.buf) {
                Ok(Some((frame, used))) => {
                    self.buf.drain(..used);
                    return Ok(frame);
                }
                Ok(None) => {}
                Err(err) => return Err(ProbeError::BadFrame(err.to_string())),
            }
            let mut chunk = [0u8; 512];
            let n = tokio::time::timeout_at(deadline, self.stream.read(&mut chunk))
                .await
                .map_err(|_| ProbeError::Timeout(limit))??;
            if n == 0 {
                return Err(ProbeError::Closed);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends one heartbeat and waits for its reply; returns the reply and
    /// the round trip.
    ///
    /// # Errors
    /// [`ProbeError`].
    pub async fn heartbeat(
        &mut self,
        limit: Duration,
    ) -> Result<(ServerFrame, Duration), ProbeError> {
        let sent = Instant::now();
        self.stream
            .write_all(&ClientFrame::Heartbeat.to_bytes())
            .await?;
        let frame = self.next_frame(limit).await?;
        Ok((frame, sent.elapsed()))
    }
}

/// The bytes of an ACQUIRE with an arbitrary declared name length.
pub fn acquire_bytes(lease_ms: u32, name_len: u16, name: &[u8]) -> Vec<u8> {
    let mut out = vec![0x01, 0x01];
    out.extend_from_slice(&lease_ms.to_be_bytes());
    out.extend_from_slice(&name_len.to_be_bytes());
    out.extend_from_slice(name);
    out
}

/// Why a never-reading client stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// A write failed: the server closed the connection (what io-timeout
    /// does to a client that does not read).
    Closed,
    /// The time limit passed with the connection still open.
    TimedOut,
    /// It sent all it was allowed to.
    Sent,
}

/// A client that claims a lock, reads the first reply, then floods
/// heartbeats and never reads again, so that the server's writes block.
/// It keeps sending (at most `max_bytes`) and keeps its connection open
/// until the server closes it, or `limit` has passed: its own writes
/// blocking is no sign that the server gave up (a loaded server drains a
/// flood slowly long before its replies fill the socket buffers), and
/// closing early would end the session gracefully instead of by
/// io-timeout. Its lock stays held until its last frame + `lease`, the
/// server's rule for an ending it chooses. Returns the heartbeat bytes sent
/// and why it stopped.
pub async fn never_reading(
    addr: SocketAddr,
    lock: &str,
    lease: Duration,
    max_bytes: usize,
    limit: Duration,
) -> std::io::Result<(usize, Stopped)> {
    let deadline = Instant::now() + limit;
    let mut stream = TcpStream::connect(addr).await?;
    let name = lock.as_bytes();
    stream
        .write_all(&acquire_bytes(
            u32::try_from(lease.as_millis()).unwrap_or(u32::MAX),
            name.len() as u16,
            name,
        ))
        .await?;
    // The first reply is read (so the flood cannot land in the same read
    // as the ACQUIRE); nothing after it ever is.
    let mut first = [0u8; 9];
    stream.read_exact(&mut first[..1]).await?;
    if first[0] == monolock_proto::msg::ACQUIRED {
        stream.read_exact(&mut first[1..]).await?;
    }
    let chunk = vec![0x02u8; 64 * 1024];
    let mut sent = 0;
    while sent < max_bytes {
        match timeout_at(deadline, stream.write_all(&chunk)).await {
            Ok(Ok(())) => sent += chunk.len(),
            Ok(Err(_)) => return Ok((sent, Stopped::Closed)),
            Err(_) => return Ok((sent, Stopped::TimedOut)),
        }
    }
    Ok((sent, Stopped::Sent))
}

/// Slowloris: an ACQUIRE one byte per `gap`, at most `max_bytes` bytes.
/// Returns how many bytes went out before the server closed (or all).
pub async fn slowloris(
    addr: SocketAddr,
    lock: &str,
    gap: Duration,
    max_bytes: usize,
) -> std::io::Result<usize> {
    let mut stream = TcpStream::connect(addr).await?;
    let name = lock.as_bytes();
    let bytes = acquire_bytes(60_000, name.len() as u16, name);
    let mut sent = 0;
    for byte in bytes.iter().take(max_bytes) {
        if stream.write_all(&[*byte]).await.is_err() {
            break;
        }
        sent += 1;
        // Stop early once the server has closed: a read returns at once.
        let mut probe = [0u8; 64];
        if let Ok(Ok(0) | Err(_)) = timeout(gap, stream.read(&mut probe)).await {
            break;
        }
    }
    Ok(sent)
}

/// Sends `bytes` and reads until the server closes (at most `limit`);
/// returns the first frame the server sent, if any.
pub async fn send_and_read(
    addr: SocketAddr,
    bytes: &[u8],
    limit: Duration,
) -> std::io::Result<Option<ServerFrame>> {
    let mut stream = TcpStream::connect(addr).await?;
    // The server may refuse (and close) before everything is written.
    let _ = stream.write_all(bytes).await;
    let mut buf = Vec::new();
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some((frame, _))) = decode_response(&buf) {
            return Ok(Some(frame));
        }
        let mut chunk = [0u8; 512];
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return Ok(None),
        }
    }
}

/// Random garbage, sometimes starting like an ACQUIRE.
pub fn random_garbage(rng: &mut impl Rng, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    rng.fill_bytes(&mut bytes);
    if rng.random_bool(0.5) && len > 1 {
        bytes[0] = 0x01;
        bytes[1] = 0x01;
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_bytes_match_the_codec() {
        let name = LockName::new("abc").unwrap();
        let lease = Lease::from_millis(1500).unwrap();
        assert_eq!(
            acquire_bytes(1500, 3, b"abc"),
            ClientFrame::acquire(lease, name).to_bytes()
        );
    }
}
