//! A Server-Sent Events reader over a raw TCP socket: an HTTP/1.0 request,
//! so the answer's body is the bare stream, delimited by the close.

use std::{net::SocketAddr, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::timeout,
};

use crate::patience::PATIENCE;

/// One event: its name (`None` for a comment) and its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    pub name: Option<String>,
    pub data: String,
}

impl SseEvent {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|err| panic!("{:?} data is not JSON ({err}): {}", self.name, self.data))
    }
}

/// A subscriber to `GET /api/events`.
pub struct SseClient {
    stream: TcpStream,
    buf: Vec<u8>,
    pub status: u16,
    pub head: String,
    /// The snapshot read by a helper that opened the stream, for the test.
    pub pending_snapshot: Option<serde_json::Value>,
}

impl SseClient {
    /// Connects, asks for `/api/events` and reads the response head.
    pub async fn open(addr: SocketAddr, bearer: Option<&str>) -> Self {
        Self::open_path(addr, "/api/events", bearer).await
    }

    /// Connects, asks for `path` and reads the response head.
    pub async fn open_path(addr: SocketAddr, path: &str, bearer: Option<&str>) -> Self {
        let stream = TcpStream::connect(addr).await.expect("connect");
        Self::open_on(stream, path, bearer).await
    }

    /// Asks for `path` on `stream` (already connected) and reads the head.
    pub async fn open_on(mut stream: TcpStream, path: &str, bearer: Option<&str>) -> Self {
        let auth = bearer
            .map(|token| format!("Authorization: Bearer {token}\r\n"))
            .unwrap_or_default();
        let host = stream.peer_addr().expect("peer address");
        let request = format!(
            "GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: text/event-stream\r\n{auth}\r\n"
        );
        stream
            .write_all(request.as_bytes())
            .await
            .expect("send request");
        let mut client = Self {
            stream,
            buf: Vec::new(),
            status: 0,
            head: String::new(),
            pending_snapshot: None,
        };
        let end = client
            .fill_until(|buf| find(buf, b"\r\n\r\n"))
            .await
            .expect("a response head");
        let head: Vec<u8> = client.buf.drain(..end + 4).collect();
        client.head = String::from_utf8(head).expect("UTF-8 head");
        client.status = client
            .head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .expect("a status code");
        client
    }

    /// Reads until `found` returns an index, or the stream ends (`None`).
    async fn fill_until(&mut self, found: impl Fn(&[u8]) -> Option<usize>) -> Option<usize> {
        let read = async {
            loop {
                if let Some(index) = found(&self.buf) {
                    return Some(index);
                }
                let mut chunk = [0u8; 8192];
                match self.stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                }
            }
        };
        timeout(PATIENCE, read).await.expect("SSE data in time")
    }

    /// The next event or comment; `None` when the stream ended.
    pub async fn next(&mut self) -> Option<SseEvent> {
        let end = self.fill_until(|buf| find(buf, b"\n\n")).await?;
        let block: Vec<u8> = self.buf.drain(..end + 2).collect();
        let text = String::from_utf8(block).expect("UTF-8 event");
        let mut event = SseEvent {
            name: None,
            data: String::new(),
        };
        for line in text.lines() {
            if let Some(name) = line.strip_prefix("event: ") {
                event.name = Some(name.to_owned());
            } else if let Some(data) = line.strip_prefix("data: ") {
                event.data.push_str(data);
            } else if let Some(comment) = line.strip_prefix(':') {
                event.data.push_str(comment.trim());
            }
        }
        Some(event)
    }

    /// The next named event (comments skipped).
    pub async fn next_event(&mut self) -> SseEvent {
        loop {
            let event = self.next().await.expect("the stream goes on");
            if event.name.is_some() {
                return event;
            }
        }
    }

    /// Skips events until one named `name`; returns it.
    pub async fn until(&mut self, name: &str) -> SseEvent {
        loop {
            let event = self.next_event().await;
            if event.name.as_deref() == Some(name) {
                return event;
            }
        }
    }

    /// Everything left until the server closes, as text (bounded by
    /// [`PATIENCE`]).
    pub async fn rest(&mut self, within: Duration) -> String {
        let read = async {
            let mut chunk = [0u8; 64 * 1024];
            loop {
                match self.stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                }
            }
        };
        timeout(within, read)
            .await
            .expect("the stream ends in time");
        String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned()
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}
