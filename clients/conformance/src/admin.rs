//! The server's admin API as the scenarios use it: a lock's holder and
//! queue, and force-release (docs/operations.md, "The admin API").
//!
//! HTTP/1.0 over a plain socket: one request per connection, the response
//! read to its end, so no framing beyond the status line is needed.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::{Check, Failure, PATIENCE};

/// A response: the status code and the JSON body.
#[derive(Debug)]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// The body, parsed (`Null` when empty).
    pub body: Value,
}

/// The admin listener of one server.
#[derive(Clone, Copy, Debug)]
pub struct Admin {
    addr: SocketAddr,
}

impl Admin {
    /// The admin API at `addr`.
    pub fn new(addr: SocketAddr) -> Self {
        Self { addr }
    }

    /// Sends `method path` and reads the whole response.
    pub fn request(&self, method: &str, path: &str) -> Check<Response> {
        let what = format!("{method} http://{}{path}", self.addr);
        let io = |err: std::io::Error| Failure::new(format!("admin API: {what}: {err}"));
        let mut stream = TcpStream::connect_timeout(&self.addr, PATIENCE).map_err(io)?;
        stream.set_read_timeout(Some(PATIENCE)).map_err(io)?;
        stream.set_write_timeout(Some(PATIENCE)).map_err(io)?;
        write!(
            stream,
            // X-Requested-By: the admin API refuses changes without it
            // (a web page cannot send it cross-site).
            "{method} {path} HTTP/1.0\r\nHost: {}\r\nX-Requested-By: monolock-conformance\r\n\
             Content-Length: 0\r\n\r\n",
            self.addr
        )
        .map_err(io)?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).map_err(io)?;
        let text = String::from_utf8_lossy(&raw);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| Failure::new(format!("admin API: {what}: no header end in {text:?}")))?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| Failure::new(format!("admin API: {what}: bad status line {head:?}")))?;
        let body = if body.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(body).map_err(|err| {
                Failure::new(format!(
                    "admin API: {what}: body is not JSON ({err}): {body:?}"
                ))
            })?
        };
        Ok(Response { status, body })
    }

    /// The lock `name` (`holder`, `waiters`), or `None` when nobody holds
    /// it (404).
    pub fn lock(&self, name: &str) -> Check<Option<Value>> {
        let response = self.request("GET", &format!("/api/locks/{}", encode(name)))?;
        match response.status {
            200 => Ok(Some(response.body)),
            404 => Ok(None),
            status => Err(Failure::new(format!(
                "admin API: GET lock {name:?} answered {status}: {}",
                response.body
            ))),
        }
    }

    /// The number of waiters queued on `name` (0 when nobody holds it).
    pub fn waiters(&self, name: &str) -> Check<usize> {
        Ok(self
            .lock(name)?
            .and_then(|lock| lock["waiters"].as_array().map(Vec::len))
            .unwrap_or(0))
    }

    /// The open protocol v2 sessions (`GET /api/sessions`), each with its
    /// `held` and `waiting` counts.
    pub fn sessions(&self) -> Check<Vec<Value>> {
        let response = self.request("GET", "/api/sessions")?;
        match (response.status, response.body["sessions"].as_array()) {
            (200, Some(list)) => Ok(list.clone()),
            (status, _) => Err(Failure::new(format!(
                "admin API: GET /api/sessions answered {status}: {}",
                response.body
            ))),
        }
    }

    /// The watches (OBSERVE) of every open session, summed from
    /// `GET /api/sessions`.
    pub fn watches(&self) -> Check<u64> {
        let sessions = self.sessions()?;
        sessions.iter().try_fold(0, |sum, session| {
            session["watches"]
                .as_u64()
                .map(|watches| sum + watches)
                .ok_or_else(|| {
                    Failure::new(format!(
                        "admin API: a session in /api/sessions without a number of watches: \
                         {session}"
                    ))
                })
        })
    }

    /// Every held lock whose name matches the ACL glob `pattern`
    /// (`GET /api/locks?match=...`).
    pub fn locks_matching(&self, pattern: &str) -> Check<Vec<Value>> {
        let response = self.request("GET", &format!("/api/locks?match={}", encode(pattern)))?;
        match (response.status, response.body["locks"].as_array()) {
            (200, Some(list)) => Ok(list.clone()),
            (status, _) => Err(Failure::new(format!(
                "admin API: GET /api/locks?match={pattern} answered {status}: {}",
                response.body
            ))),
        }
    }

    /// The admin listener's address (an HTTP port, for the wrong-port
    /// scenario).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The holder's fencing token, or `None` when nobody holds `name`.
    pub fn holder_token(&self, name: &str) -> Check<Option<u64>> {
        Ok(self
            .lock(name)?
            .and_then(|lock| lock["holder"]["token"].as_u64()))
    }

    /// Force-releases `name`: the holder gets ERROR 0x02. Fails unless the
    /// server answers 200 (a holder was released).
    pub fn force_release(&self, name: &str) -> Check {
        let response = self.request("POST", &format!("/api/locks/{}/release", encode(name)))?;
        if response.status != 200 {
            return Err(Failure::new(format!(
                "admin API: force-release of {name:?} answered {}: {}",
                response.status, response.body
            )));
        }
        Ok(())
    }

    /// Polls `check` on the admin API until it returns `Some`, for at most
    /// `patience`; `what` names the awaited state in the failure.
    pub fn until<T>(
        &self,
        what: &str,
        patience: Duration,
        mut check: impl FnMut(&Self) -> Check<Option<T>>,
    ) -> Check<T> {
        let deadline = Instant::now() + patience;
        loop {
            if let Some(found) = check(self)? {
                return Ok(found);
            }
            if Instant::now() >= deadline {
                return Err(Failure::new(format!(
                    "admin API: {what} did not happen within {patience:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Percent-encodes a lock name for a path segment.
fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::encode;

    #[test]
    fn names_are_percent_encoded_for_a_path_segment() {
        assert_eq!(encode("nightly/import"), "nightly%2Fimport");
        assert_eq!(encode("a b-c_d.e~"), "a%20b-c_d.e~");
        assert_eq!(encode("é"), "%C3%A9");
    }
}
