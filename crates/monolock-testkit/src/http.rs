//! Raw HTTP requests over a blocking std socket, for tests that drive a
//! server process (or any listener) from outside: no client library, no
//! runtime, the whole answer as text. Every read is bounded by
//! [`PATIENCE`].

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
};

use crate::patience::PATIENCE;

/// An HTTP/1.0 `GET path`; the status and the whole answer (head and
/// body), read to the close.
pub fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    exchange(
        addr,
        &format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n"),
    )
}

/// An HTTP/1.0 `GET path` that must answer `HTTP/1.0 200`; the whole
/// answer.
pub fn get_ok(addr: SocketAddr, path: &str) -> String {
    let (_, answer) = get(addr, path);
    assert!(answer.starts_with("HTTP/1.0 200"), "GET {path}: {answer}");
    answer
}

/// One HTTP/1.1 request from `head` (request line and headers, without
/// the blank line), sent with `Connection: close` and no body; the status
/// and the whole answer.
pub fn raw(addr: SocketAddr, head: &str) -> (u16, String) {
    exchange(
        addr,
        &format!("{head}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"),
    )
}

/// The body of a whole answer (after the blank line), `""` if none.
pub fn body(answer: &str) -> &str {
    answer.split_once("\r\n\r\n").map_or("", |(_, body)| body)
}

fn exchange(addr: SocketAddr, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    stream.write_all(request.as_bytes()).expect("send");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("read");
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    (status, answer)
}
