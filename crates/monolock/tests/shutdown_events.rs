//! The end of a server's life on its event stream, with the real binary: a
//! subscriber to `GET /api/events` sees every holder's `released` with
//! reason `shutdown` after SIGTERM, before the stream ends.

mod common;

use std::{
    collections::BTreeSet,
    io::{Read, Write},
    net::TcpStream,
};

use common::{PATIENCE, ServerProcess, acquire, read_frame};
use monolock_proto::ServerFrame;
use serde_json::Value;

/// `GET /api/events` over HTTP/1.0 (the body is the bare stream, ended by
/// the close); returns the stream once its snapshot has arrived, the
/// snapshot, and what was read after it.
fn subscribe(server: &ServerProcess) -> (TcpStream, Value, Vec<u8>) {
    let admin = server.admin.expect("admin");
    let mut stream = TcpStream::connect(admin).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    // The listener's own address as Host: the admin API refuses other names.
    write!(
        stream,
        "GET /api/events HTTP/1.0\r\nHost: {admin}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .expect("request");
    let mut text = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = stream.read(&mut chunk).expect("the snapshot in time");
        assert!(n > 0, "the stream ended before its snapshot");
        text.extend_from_slice(&chunk[..n]);
        let so_far = String::from_utf8_lossy(&text);
        if let Some(start) = so_far.find("event: snapshot\ndata: ")
            && let Some(end) = so_far[start..].find("\n\n")
        {
            let data = &so_far[start + "event: snapshot\ndata: ".len()..start + end];
            let snapshot = serde_json::from_str(data).expect("snapshot JSON");
            assert!(so_far.starts_with("HTTP/1.0 200"), "{so_far}");
            let after = so_far.as_bytes()[start + end + 2..].to_vec();
            return (stream, snapshot, after);
        }
    }
}

#[test]
fn a_subscriber_sees_every_shutdown_release_after_sigterm() {
    let mut server = ServerProcess::start(&["--admin-listen", "127.0.0.1:0"]);
    let mut tokens = BTreeSet::new();
    let mut holders = Vec::new();
    for i in 0..5 {
        let (stream, reply) = acquire(server.addr, &format!("sigterm/{i}"));
        let ServerFrame::Acquired { token } = reply else {
            panic!("granted: {reply:?}");
        };
        tokens.insert(token);
        holders.push(stream);
    }
    let (mut events, snapshot, mut rest) = subscribe(&server);
    assert_eq!(snapshot["locks"].as_array().map(Vec::len), Some(5));

    // Clients as they behave: each reads its ERROR 0x01 and closes at once.
    let closing: Vec<_> = holders
        .into_iter()
        .map(|mut stream| {
            std::thread::spawn(move || {
                let frame = read_frame(&mut stream);
                assert!(matches!(frame, ServerFrame::Error { .. }), "{frame:?}");
            })
        })
        .collect();
    server.signal("TERM");

    events
        .read_to_end(&mut rest)
        .expect("the stream ends in time");
    let rest = String::from_utf8(rest).expect("UTF-8");
    let released: BTreeSet<u64> = rest
        .split("\n\n")
        .filter_map(|block| block.strip_prefix("event: released\ndata: "))
        .map(|data| {
            let event: Value = serde_json::from_str(data).expect("JSON");
            assert_eq!(event["reason"], "shutdown", "{event}");
            event["token"].as_u64().expect("token")
        })
        .collect();
    assert_eq!(released, tokens, "every holder's shutdown release: {rest}");
    for client in closing {
        client.join().expect("told");
    }
    assert!(server.wait_exit().success());
}
