//! A session whose connection the server ends on its own (a bad frame, a
//! frame left half sent) keeps its held claims until its last frame plus
//! its lease. Over the real binary, the operator sees it meanwhile: the
//! ending is counted by cause, the kept claims are a gauge, the session
//! stays in `/api/sessions` as ended, and its claims still count against
//! `--max-claims` until they are released.

mod common;

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::{Duration, Instant},
};

use common::{PATIENCE, ServerProcess};
use monolock_proto::{
    ErrorCode, Lease, LockName,
    v2::{self, ClientFrame, Mode, ServerFrame},
};
use monolock_testkit::http;
use serde_json::Value;

/// The holder's lease: long enough that every look below happens while its
/// claims are kept, on a loaded machine.
const LEASE: Duration = Duration::from_secs(8);

/// A raw version 2 connection over a blocking socket.
struct Raw {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    fn open(addr: SocketAddr, lease: Duration) -> Self {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let mut raw = Self {
            stream,
            buf: Vec::new(),
        };
        let millis = u32::try_from(lease.as_millis()).expect("lease");
        raw.send(&ClientFrame::Open {
            lease: Lease::from_millis(millis).expect("lease"),
        });
        assert!(matches!(raw.recv(), ServerFrame::Opened { .. }));
        raw
    }

    fn send(&mut self, frame: &ClientFrame) {
        self.stream.write_all(&frame.to_bytes()).expect("send");
    }

    fn acquire(&mut self, claim: u32, name: &str) -> ServerFrame {
        self.send(&ClientFrame::Acquire {
            claim,
            mode: Mode::Try,
            name: LockName::new(name).expect("name"),
        });
        self.recv()
    }

    fn recv(&mut self) -> ServerFrame {
        loop {
            if let Some((frame, used)) = v2::decode_response(&self.buf).expect("valid frame") {
                self.buf.drain(..used);
                return frame;
            }
            let mut chunk = [0u8; 512];
            let n = self.stream.read(&mut chunk).expect("read");
            assert!(n > 0, "closed before a whole frame");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Reads until the server closes; true if an ERROR came first.
    fn read_to_close(&mut self) -> bool {
        let mut errored = false;
        loop {
            match v2::decode_response(&self.buf) {
                Ok(Some((frame, used))) => {
                    errored |= matches!(frame, ServerFrame::Error { .. });
                    self.buf.drain(..used);
                    continue;
                }
                Ok(None) => {}
                Err(err) => panic!("bad frame from the server: {err}"),
            }
            let mut chunk = [0u8; 512];
            match self.stream.read(&mut chunk) {
                Ok(0) => return errored,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => return errored,
                Err(err) => panic!("the server did not close the connection: {err}"),
            }
        }
    }
}

/// The value of the metric series `series` (name and labels as printed).
fn metric(ops: SocketAddr, series: &str) -> Option<u64> {
    let answer = http::get_ok(ops, "/metrics");
    http::body(&answer)
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{series} ")))
        .map(|value| value.trim().parse().expect("a number"))
}

/// Waits, at most `within`, until `series` reads `want`.
fn wait_metric(ops: SocketAddr, series: &str, want: u64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let now = metric(ops, series);
        if now == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{series} is {now:?}, not {want}, after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn sessions(admin: SocketAddr) -> Vec<Value> {
    let answer = http::get_ok(admin, "/api/sessions");
    let list: Value = serde_json::from_str(http::body(&answer)).expect("JSON");
    list["sessions"].as_array().expect("sessions").clone()
}

/// Opens a session that holds `lock`, then sends a bad frame: the server
/// answers ERROR and closes, keeping the claim. Returns when the ACQUIRE
/// was sent (no later than the server's last frame of the session).
fn hold_then_break(addr: SocketAddr, lock: &str) -> Instant {
    let mut holder = Raw::open(addr, LEASE);
    let acquired_at = Instant::now();
    assert!(matches!(
        holder.acquire(1, lock),
        ServerFrame::Acquired { claim: 1, .. }
    ));
    holder.stream.write_all(&[0xee]).expect("send");
    assert!(holder.read_to_close(), "a bad frame is answered with ERROR");
    acquired_at
}

#[test]
fn a_server_ending_and_its_kept_claims_are_counted_until_they_are_released() {
    let server = ServerProcess::start(&["--ops-listen", "127.0.0.1:0"]);
    let ops = server.ops.expect("ops");
    for cause in ["write_io_timeout", "read_io_timeout", "protocol_error"] {
        let series = format!("monolock_connections_ended_by_server_total{{cause=\"{cause}\"}}");
        assert_eq!(metric(ops, &series), Some(0), "{series} from startup");
    }
    assert_eq!(metric(ops, "monolock_kept_claims"), Some(0));

    let acquired_at = hold_then_break(server.addr, "kept");

    let protocol_errors = "monolock_connections_ended_by_server_total{cause=\"protocol_error\"}";
    wait_metric(ops, protocol_errors, 1, PATIENCE);
    assert_eq!(metric(ops, "monolock_kept_claims"), Some(1));
    assert_eq!(metric(ops, "monolock_locks_held"), Some(1));
    assert!(
        Instant::now() < acquired_at + LEASE,
        "too slow to look while the claim is kept"
    );

    // At the lease's end the claim is released.
    wait_metric(ops, "monolock_kept_claims", 0, LEASE + PATIENCE);
    assert!(
        Instant::now() >= acquired_at + LEASE,
        "the kept claim was released before its lease's end"
    );
    assert_eq!(metric(ops, "monolock_locks_held"), Some(0));
    assert_eq!(metric(ops, protocol_errors), Some(1));
}

#[test]
fn a_session_the_server_ended_is_listed_as_ended_until_its_claims_are_released() {
    let server = ServerProcess::start(&["--admin-listen", "127.0.0.1:0"]);
    let admin = server.admin.expect("admin");

    let acquired_at = hold_then_break(server.addr, "kept");

    let listed = sessions(admin);
    assert!(
        Instant::now() < acquired_at + LEASE,
        "too slow to look while the claim is kept"
    );
    assert_eq!(listed.len(), 1, "{listed:?}");
    let ended = &listed[0];
    assert_eq!(ended["state"], "ended", "{ended}");
    assert_eq!(ended["reason"], "protocol_error", "{ended}");
    assert_eq!(ended["held"], 1, "{ended}");
    assert_eq!(ended["waiting"], 0, "{ended}");
    let release_at = ended["release_at"].as_str().expect("release_at");
    assert!(release_at.ends_with('Z'), "{release_at}");

    // At the lease's end the claim is released and the session goes.
    let deadline = acquired_at + LEASE + PATIENCE;
    while !sessions(admin).is_empty() {
        assert!(Instant::now() < deadline, "the ended session stayed listed");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        Instant::now() >= acquired_at + LEASE,
        "the ended session went before its lease's end"
    );
}

#[test]
fn a_frame_left_half_sent_is_counted_as_a_read_io_timeout() {
    let server = ServerProcess::start(&["--ops-listen", "127.0.0.1:0", "--io-timeout", "300ms"]);
    let ops = server.ops.expect("ops");
    let mut holder = Raw::open(server.addr, LEASE);
    assert!(matches!(
        holder.acquire(1, "half"),
        ServerFrame::Acquired { claim: 1, .. }
    ));
    // The first bytes of an ACQUIRE, and no more.
    let mut frame = Vec::new();
    ClientFrame::Acquire {
        claim: 2,
        mode: Mode::Try,
        name: LockName::new("other").expect("name"),
    }
    .encode(&mut frame);
    holder.stream.write_all(&frame[..3]).expect("send");
    assert!(!holder.read_to_close(), "closed without a frame");
    wait_metric(
        ops,
        "monolock_connections_ended_by_server_total{cause=\"read_io_timeout\"}",
        1,
        PATIENCE,
    );
    assert_eq!(metric(ops, "monolock_kept_claims"), Some(1));
}

#[test]
fn kept_claims_count_against_max_claims_until_they_are_released() {
    let server = ServerProcess::start(&["--max-claims", "1"]);
    let acquired_at = hold_then_break(server.addr, "kept");

    // The ended session's claim still fills the server's one place.
    let mut other = Raw::open(server.addr, Duration::from_secs(30));
    match other.acquire(1, "elsewhere") {
        ServerFrame::Refused { claim: 1, code, .. } => {
            assert_eq!(code, ErrorCode::SERVER_CLAIM_LIMIT);
        }
        frame => panic!("expected REFUSED 0x0a while the claim is kept, got {frame:?}"),
    }
    assert!(
        Instant::now() < acquired_at + LEASE,
        "too slow to look while the claim is kept"
    );

    // Once it is released at the lease's end, the place is free.
    let deadline = acquired_at + LEASE + PATIENCE;
    let mut claim = 2;
    loop {
        match other.acquire(claim, "elsewhere") {
            ServerFrame::Acquired { .. } => break,
            ServerFrame::Refused { code, .. } => {
                assert_eq!(code, ErrorCode::SERVER_CLAIM_LIMIT);
                assert!(Instant::now() < deadline, "the kept claim never ended");
            }
            frame => panic!("unexpected {frame:?}"),
        }
        claim += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        Instant::now() >= acquired_at + LEASE,
        "the kept claim stopped counting before its lease's end"
    );
}
