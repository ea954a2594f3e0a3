//! No client, idle or busy, crowds out the others: the protocol
//! listener's connection limit and its refusal, the descriptor reserve
//! that keeps the ops listener reachable, and the admin and ops
//! listeners' timeouts and caps, over the real binary.

mod common;

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    process::Command,
    time::{Duration, Instant},
};

use common::{MONOLOCK, PATIENCE, ServerProcess, acquire, read_frame};
use monolock_proto::{ErrorCode, LockName, ServerFrame, v2};
use monolock_testkit::v2::blocking::{open_v2, read_v2_frame};

/// Reads until the server closes; the bytes read. Panics if it does not
/// close within `within`.
fn read_to_close(stream: &mut TcpStream, within: Duration) -> Vec<u8> {
    stream.set_read_timeout(Some(within)).expect("timeout");
    let mut got = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(err) => panic!("the server did not close the connection within {within:?}: {err}"),
        }
    }
}

/// One `GET` on a fresh connection; the whole response (the server closes).
fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    String::from_utf8_lossy(&read_to_close(&mut stream, PATIENCE)).into_owned()
}

/// The value of an unlabelled metric.
fn metric(addr: SocketAddr, name: &str) -> u64 {
    let body = http_get(addr, "/metrics");
    body.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{body}"))
        .trim()
        .parse()
        .expect("a number")
}

/// A connection over `--max-connections` is told ERROR 0x04 with its reason
/// at once, and the count shows in metrics; once one closes, a new
/// connection is served again.
#[test]
fn a_connection_over_max_connections_is_refused_at_once() {
    let server = ServerProcess::start(&["--max-connections", "3", "--ops-listen", "127.0.0.1:0"]);
    let ops = server.ops.expect("ops");
    let mut held: Vec<TcpStream> = (0..3)
        .map(|i| {
            let (stream, reply) = acquire(server.addr, &format!("held-{i}"));
            assert!(matches!(reply, ServerFrame::Acquired { .. }));
            stream
        })
        .collect();

    let started = Instant::now();
    let mut over = TcpStream::connect(server.addr).expect("connect");
    over.set_read_timeout(Some(PATIENCE)).expect("timeout");
    // The client says nothing: the refusal must not wait for it.
    match read_frame(&mut over) {
        ServerFrame::Error { code, reason } => {
            assert_eq!(code, ErrorCode::TOO_MANY_CONNECTIONS);
            assert!(reason.contains("--max-connections"), "{reason}");
        }
        other => panic!("expected ERROR 0x04, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the refusal waited for io-timeout"
    );
    read_to_close(&mut over, PATIENCE);
    assert_eq!(metric(ops, "monolock_connections_refused_total"), 1);
    assert_eq!(metric(ops, "monolock_max_connections"), 3);

    // One holder leaves: its place is free again (the server sees the
    // close a moment later; each refused try is bounded).
    drop(held.pop());
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (_stream, reply) = acquire(server.addr, "after");
        match reply {
            ServerFrame::Acquired { .. } => break,
            ServerFrame::Error { code, .. } => {
                assert_eq!(code, ErrorCode::TOO_MANY_CONNECTIONS);
                assert!(Instant::now() < deadline, "the freed place never came back");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// A full protocol listener starves nothing else: on a server with few
/// descriptors, sessions each holding a claim fill the protocol listener;
/// the next connection is refused with a frame, and the ops listener still
/// answers, because the limit is fitted below the descriptor limit.
#[test]
fn a_full_protocol_listener_leaves_the_ops_listener_and_a_refusal_reachable() {
    let mut child = Command::new("prlimit");
    child.args(["--nofile=160:160", "--", MONOLOCK]);
    let server = ServerProcess::start_with_command(
        child,
        &[
            "--ops-listen",
            "127.0.0.1:0",
            "--http-max-connections",
            "16",
        ],
    );
    let ops = server.ops.expect("ops");
    let limit = metric(ops, "monolock_max_connections");
    assert!(
        limit < 160 - 16,
        "the limit {limit} leaves no reserve under 160 descriptors"
    );
    let mut held = Vec::new();
    let refusal = loop {
        assert!(held.len() <= 160, "never refused");
        let (stream, reply) = acquire(server.addr, &format!("lock-{}", held.len()));
        match reply {
            ServerFrame::Acquired { .. } => held.push(stream),
            ServerFrame::Error { code, .. } => break code,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(refusal, ErrorCode::TOO_MANY_CONNECTIONS);
    assert_eq!(held.len() as u64, limit);
    assert!(http_get(ops, "/healthz").starts_with("HTTP/1.1 200"));
    assert_eq!(metric(ops, "monolock_connections_active"), limit);
}

/// A connection to the ops listener that sends nothing is closed after
/// `--http-header-timeout`; today it stays open for ever.
#[test]
fn a_silent_http_connection_is_closed_after_the_header_timeout() {
    let server = ServerProcess::start(&[
        "--ops-listen",
        "127.0.0.1:0",
        "--http-header-timeout",
        "300ms",
    ]);
    let ops = server.ops.expect("ops");
    let started = Instant::now();
    let mut silent = TcpStream::connect(ops).expect("connect");
    read_to_close(&mut silent, Duration::from_secs(15));
    assert!(started.elapsed() >= Duration::from_millis(300));
    // A partial request head is bounded the same way.
    let mut partial = TcpStream::connect(ops).expect("connect");
    partial
        .write_all(b"GET /healthz HTTP/1.1\r\nHo")
        .expect("send");
    read_to_close(&mut partial, Duration::from_secs(15));
    assert_eq!(
        metric(ops, "monolock_ops_http_connections_timed_out_total"),
        2
    );
}

/// A kept-alive connection waiting for its next request is closed after
/// `--http-idle-timeout`, not before, and not after the (longer) header
/// timeout.
#[test]
fn a_kept_alive_http_connection_is_closed_after_the_idle_timeout() {
    let server = ServerProcess::start(&[
        "--ops-listen",
        "127.0.0.1:0",
        "--http-header-timeout",
        "60s",
        "--http-idle-timeout",
        "400ms",
    ]);
    let ops = server.ops.expect("ops");
    let mut stream = TcpStream::connect(ops).expect("connect");
    // The server's idle wait starts after the request was sent: a lower
    // bound the client can measure.
    let sent = Instant::now();
    write!(stream, "GET /healthz HTTP/1.1\r\nHost: {ops}\r\n\r\n").expect("send");
    let mut response = Vec::new();
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    while !response.ends_with(b"ok") {
        let mut chunk = [0u8; 512];
        let n = stream.read(&mut chunk).expect("read the response");
        assert!(n > 0, "closed before the response");
        response.extend_from_slice(&chunk[..n]);
    }
    let rest = read_to_close(&mut stream, Duration::from_secs(30));
    assert!(rest.is_empty());
    let waited = sent.elapsed();
    assert!(
        waited >= Duration::from_millis(400),
        "closed after {waited:?}"
    );
    assert!(waited < Duration::from_secs(30));
}

/// One connection over `--http-max-connections` is answered 503 at once;
/// the others are unaffected, and a place freed is taken again.
#[test]
fn an_http_connection_over_the_cap_gets_503_at_once() {
    let server =
        ServerProcess::start(&["--ops-listen", "127.0.0.1:0", "--http-max-connections", "2"]);
    let ops = server.ops.expect("ops");
    let first = TcpStream::connect(ops).expect("connect");
    let second = TcpStream::connect(ops).expect("connect");
    // The server has taken both once a third is refused: wait for that.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let answer = http_get(ops, "/healthz");
        if answer.starts_with("HTTP/1.1 503") {
            assert!(answer.contains("too many connections"), "{answer}");
            break;
        }
        assert!(Instant::now() < deadline, "never refused: {answer}");
    }
    drop((first, second));
    let deadline = Instant::now() + PATIENCE;
    loop {
        let answer = http_get(ops, "/healthz");
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "the places never came back");
    }
    assert!(metric(ops, "monolock_ops_http_connections_refused_total") >= 1);
}

/// `--idle-timeout 0s` turns the idle timeout off (as Redis's `timeout 0`):
/// a session idle longer than another server's idle timeout stays open.
#[test]
fn idle_timeout_zero_turns_it_off() {
    let off = ServerProcess::start(&["--idle-timeout", "0s"]);
    let short = ServerProcess::start(&["--idle-timeout", "300ms"]);
    let mut off_session = open_v2(off.addr);
    let mut short_session = open_v2(short.addr);
    match read_v2_frame(&mut short_session) {
        v2::ServerFrame::Error { code, .. } => assert_eq!(code, ErrorCode::IDLE_SESSION),
        other => panic!("expected ERROR 0x03, got {other:?}"),
    }
    // The session on the server without idle timeout has been idle at
    // least as long; it still takes a claim.
    let acquire = v2::ClientFrame::Acquire {
        claim: 1,
        mode: v2::Mode::Wait,
        name: LockName::new("still-open").expect("name"),
    };
    off_session.write_all(&acquire.to_bytes()).expect("ACQUIRE");
    assert!(matches!(
        read_v2_frame(&mut off_session),
        v2::ServerFrame::Acquired { claim: 1, .. }
    ));
}
