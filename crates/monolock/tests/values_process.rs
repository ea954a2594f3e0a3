//! Values and observers on the real binary: the watch bound flag in
//! FEATURES, a claim's value in `/api/locks`, `/api/sessions`,
//! `monolock locks`, `monolock lock`, the audit log, and the watch metrics.

mod common;

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::Path,
    time::Instant,
};

use common::{PATIENCE, ServerProcess};
use monolock_proto::{
    Lease, LockName,
    ext::{self, ClientFrame as ExtFrame, Response, ServerFrame as ExtServer},
    v2::{ClientFrame, Mode, ServerFrame},
};
use monolock_testkit::http;
use serde_json::Value;

/// A blocking session with the extension granted.
struct Session {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Session {
    /// OPEN and HELLO in one write; OPENED, then FEATURES (returned).
    fn open(addr: SocketAddr) -> (Self, ExtServer) {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let mut session = Self {
            stream,
            buf: Vec::new(),
        };
        let mut bytes = ClientFrame::Open {
            lease: Lease::from_millis(30_000).expect("lease"),
        }
        .to_bytes();
        ExtFrame::Hello {
            features: ext::FEATURE_VALUES_AND_OBSERVERS,
        }
        .encode(&mut bytes);
        session.send(&bytes);
        assert!(matches!(
            session.recv(),
            Response::Base(ServerFrame::Opened { .. })
        ));
        let Response::Ext(features) = session.recv() else {
            panic!("expected FEATURES");
        };
        (session, features)
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    fn recv(&mut self) -> Response {
        loop {
            if let Some((frame, used)) = ext::decode_response(&self.buf).expect("valid frame") {
                self.buf.drain(..used);
                return frame;
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).expect("read");
            assert!(n > 0, "closed before a whole frame");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn ask(&mut self, frame: &ExtFrame) -> Response {
        self.send(&frame.to_bytes());
        self.recv()
    }
}

/// An admin API answer's JSON body.
fn get_json(server: &ServerProcess, path: &str) -> Value {
    let answer = http::get_ok(server.admin.expect("admin"), path);
    serde_json::from_str(http::body(&answer)).expect("JSON")
}

fn name(text: &str) -> LockName {
    LockName::new(text).expect("name")
}

/// The audit log's lines once it has at least `count` of them.
fn audit_lines(path: &Path, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("JSON line"))
            .collect();
        if lines.len() >= count {
            return lines;
        }
        assert!(Instant::now() < deadline, "audit log: {text}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn values_show_everywhere_an_operator_looks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = dir.path().join("audit.jsonl");
    let server = ServerProcess::start(&[
        "--admin-listen",
        "127.0.0.1:0",
        "--ops-listen",
        "127.0.0.1:0",
        "--audit-log",
        audit.to_str().expect("UTF-8 path"),
        "--max-watches-per-session",
        "2",
    ]);
    let (mut leader, features) = Session::open(server.addr);
    assert_eq!(
        features,
        ExtServer::Features {
            features: 1,
            max_watches: 2
        }
    );
    let reply = leader.ask(&ExtFrame::AcquireValue {
        claim: 1,
        mode: Mode::Wait,
        name: name("deploy"),
        value: "10.0.0.7:9000".to_owned(),
    });
    let Response::Base(ServerFrame::Acquired { token, .. }) = reply else {
        panic!("expected ACQUIRED, got {reply:?}");
    };
    let (mut follower, _) = Session::open(server.addr);
    assert_eq!(
        follower.ask(&ExtFrame::Observe {
            watch: 7,
            name: name("deploy"),
        }),
        Response::Ext(ExtServer::Observing { watch: 7 })
    );
    let Response::Ext(ExtServer::State { state, .. }) = follower.recv() else {
        panic!("expected the INITIAL state");
    };
    assert_eq!(
        (state.token, state.value.as_str()),
        (token, "10.0.0.7:9000")
    );

    let locks = get_json(&server, "/api/locks");
    assert_eq!(locks["locks"][0]["holder"]["value"], "10.0.0.7:9000");
    let output = server.cli(&["locks"]);
    assert!(output.status.success());
    let table = String::from_utf8_lossy(&output.stdout).into_owned();
    let header = table.lines().next().expect("header");
    assert!(header.trim_end().ends_with("VALUE"), "{table}");
    assert!(
        table
            .lines()
            .nth(1)
            .expect("row")
            .trim_end()
            .ends_with("10.0.0.7:9000"),
        "{table}"
    );

    assert_eq!(
        leader.ask(&ExtFrame::Proclaim {
            claim: 1,
            value: "10.0.0.7:9001".to_owned(),
        }),
        Response::Ext(ExtServer::Proclaimed { claim: 1 })
    );
    let Response::Ext(ExtServer::State { state, .. }) = follower.recv() else {
        panic!("expected the VALUE push");
    };
    assert_eq!(state.value, "10.0.0.7:9001");
    let output = server.cli(&["lock", "deploy"]);
    let detail = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(detail.contains("value     10.0.0.7:9001\n"), "{detail}");
    let sessions = get_json(&server, "/api/sessions");
    let listed = sessions["sessions"].as_array().expect("sessions");
    assert_eq!(listed[0]["claims"][0]["value"], "10.0.0.7:9001");
    assert_eq!(listed[0]["claims"][0]["state"], "held");
    assert_eq!(listed[1]["watches"], 1);

    // The audit log: the grant with its value, then the replacement.
    let lines = audit_lines(&audit, 2);
    assert_eq!(lines[0]["event"], "granted");
    assert_eq!(lines[0]["value"], "10.0.0.7:9000");
    assert_eq!(lines[1]["event"], "value");
    assert_eq!(lines[1]["token"], token);
    assert_eq!(lines[1]["value"], "10.0.0.7:9001");

    // The session bound from the flag, and the metrics.
    assert_eq!(
        follower.ask(&ExtFrame::Observe {
            watch: 8,
            name: name("other"),
        }),
        Response::Ext(ExtServer::Observing { watch: 8 })
    );
    follower.recv();
    let refused = follower.ask(&ExtFrame::Observe {
        watch: 9,
        name: name("third"),
    });
    assert!(
        matches!(refused, Response::Base(ServerFrame::Refused { claim: 9, code, .. }) if code.0 == 0x0b),
        "{refused:?}"
    );
    // Pushes written: the two INITIAL states and the VALUE.
    let metrics = http::get_ok(server.ops.expect("ops"), "/metrics");
    for line in [
        "monolock_watches 2\n",
        "monolock_state_pushes_total 3\n",
        "monolock_state_pushes_coalesced_total 0\n",
        "monolock_watches_refused_total{bound=\"session\"} 1\n",
        "monolock_watches_refused_total{bound=\"server\"} 0\n",
    ] {
        assert!(metrics.contains(line), "{line:?} missing from:\n{metrics}");
    }
}
