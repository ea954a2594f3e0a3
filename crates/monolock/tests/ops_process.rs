//! The operations surface of the real binary: `serve -h`, startup
//! validation, the operator commands against a running server, the audit log
//! on stdout, SIGHUP reopening, and the shutdown order seen by probes.

mod common;

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use common::{MONOLOCK, PATIENCE, ServerProcess, acquire, read_frame};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use monolock_proto::{ClientFrame, ErrorCode, Lease, LockName, ServerFrame, decode_response};
use monolock_testkit::{pki::Ca, sys};
use serde_json::Value;

fn expect_error(stream: &mut TcpStream, code: ErrorCode) {
    match read_frame(stream) {
        ServerFrame::Error { code: got, .. } => assert_eq!(got, code),
        other => panic!("expected ERROR {code}, got {other:?}"),
    }
}

fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        let uri = format!("http://{addr}{path}").parse().expect("uri");
        let response = tokio::time::timeout(PATIENCE, client.get(uri))
            .await
            .map_err(|_| "timeout".to_owned())?
            .map_err(|err| err.to_string())?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|err| err.to_string())?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn serve_help_lists_every_flag_with_its_env_and_default() {
    let output = Command::new(MONOLOCK)
        .args(["serve", "-h"])
        .output()
        .expect("run monolock");
    assert!(output.status.success());
    let help = text(&output.stdout);
    let table = [
        (
            "--listen",
            "MONOLOCK_LISTEN_ADDRESS",
            "[default: 127.0.0.1:7070]",
        ),
        (
            "--ops-listen",
            "MONOLOCK_OPS_LISTEN_ADDRESS",
            "[default: off]",
        ),
        (
            "--admin-listen",
            "MONOLOCK_ADMIN_LISTEN_ADDRESS",
            "[default: off]",
        ),
        ("--tls-cert", "MONOLOCK_TLS_CERT", "[default: none]"),
        ("--tls-key", "MONOLOCK_TLS_KEY", "[default: none]"),
        (
            "--tls-client-ca",
            "MONOLOCK_TLS_CLIENT_CA",
            "[default: none]",
        ),
        ("--acl-file", "MONOLOCK_ACL_FILE", "[default: none"),
        ("--audit-log", "MONOLOCK_AUDIT_LOG", "[default: off]"),
        (
            "--audit-overflow",
            "MONOLOCK_AUDIT_OVERFLOW",
            "[default: drop]",
        ),
        ("--audit-queue", "MONOLOCK_AUDIT_QUEUE", "[default: 65536]"),
        ("--io-timeout", "MONOLOCK_IO_TIMEOUT", "[default: 5s]"),
        (
            "--max-watches-per-session",
            "MONOLOCK_MAX_WATCHES_PER_SESSION",
            "[default: 1024]",
        ),
        ("--max-watches", "MONOLOCK_MAX_WATCHES", "[default: 100000]"),
        (
            "--ops-shutdown-grace",
            "MONOLOCK_OPS_SHUTDOWN_GRACE",
            "[default: 2s]",
        ),
        ("--log-level", "MONOLOCK_LOG_LEVEL", "[default: info]"),
        ("--log-format", "MONOLOCK_LOG_FORMAT", "[default: text]"),
    ];
    for (flag, env, default) in table {
        let line = help
            .lines()
            .find(|line| line.trim_start().starts_with(&format!("{flag} ")))
            .unwrap_or_else(|| panic!("no line for {flag}:\n{help}"));
        assert!(line.contains(&format!("[env: {env}=")), "{flag}: {line}");
        assert!(line.contains(default), "{flag}: {line}");
    }
}

/// Invalid combinations: exit 64, exactly one line naming the problem.
#[test]
fn invalid_combinations_fail_with_one_line() {
    // (flags, environment, the one line expected on stderr)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (
            &["--tls-key", "k.pem"],
            &[],
            "monolock: --tls-key requires --tls-cert",
        ),
        (
            &["--tls-cert", "c.pem"],
            &[],
            "monolock: --tls-cert requires --tls-key",
        ),
        (
            &[],
            &[("MONOLOCK_TLS_CLIENT_CA", "ca.pem")],
            "monolock: --tls-client-ca requires --tls-cert and --tls-key",
        ),
        (
            &[
                "--acl-file",
                "acl.json",
                "--tls-cert",
                "c.pem",
                "--tls-key",
                "k.pem",
            ],
            &[],
            "monolock: --acl-file requires --tls-client-ca",
        ),
        (
            &["--ops-listen", "here"],
            &[],
            "monolock: --ops-listen \"here\"",
        ),
    ];
    for (args, env, expected) in cases {
        let output = Command::new(MONOLOCK)
            .arg("serve")
            .args(*args)
            .envs(env.iter().copied())
            .output()
            .expect("run monolock");
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr:?}");
        assert!(stderr.starts_with(expected), "{args:?}: {stderr}");
    }
}

/// Writes a CA, a server certificate and key into `dir`.
fn lab_pki(dir: &Path) {
    let ca = Ca::new("lab CA");
    let server = ca.server();
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write");
    std::fs::write(dir.join("server.pem"), &server.cert_pem).expect("write");
    std::fs::write(dir.join("server.key"), &server.key_pem).expect("write");
}

/// Unusable files: exit 1, one line naming the file and the reason.
#[test]
fn unusable_files_fail_at_startup_naming_file_and_reason() {
    let dir = tempfile::tempdir().expect("temp dir");
    lab_pki(dir.path());
    let path = |name: &str| dir.path().join(name).display().to_string();
    std::fs::write(
        dir.path().join("acl.json"),
        r#"{"rules":[{"locks":["*"]}]}"#,
    )
    .expect("write");
    std::fs::write(dir.path().join("bad.json"), "{\"rules\": [").expect("write");
    std::fs::write(dir.path().join("garbage.pem"), "hello").expect("write");
    let tls = [
        "--tls-cert".to_owned(),
        path("server.pem"),
        "--tls-key".to_owned(),
        path("server.key"),
        "--tls-client-ca".to_owned(),
        path("ca.pem"),
    ];
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            [&tls[..], &["--acl-file".to_owned(), path("acl.json")]].concat(),
            format!(
                "monolock: ACL file {}: rule 1: has no identity",
                path("acl.json")
            ),
        ),
        (
            [&tls[..], &["--acl-file".to_owned(), path("bad.json")]].concat(),
            format!("monolock: ACL file {}: EOF while parsing", path("bad.json")),
        ),
        (
            [&tls[..], &["--acl-file".to_owned(), path("missing.json")]].concat(),
            format!("monolock: ACL file {}: No such file", path("missing.json")),
        ),
        (
            vec![
                "--tls-cert".to_owned(),
                path("garbage.pem"),
                "--tls-key".to_owned(),
                path("server.key"),
            ],
            format!(
                "monolock: TLS certificate {}: no PEM certificate found",
                path("garbage.pem")
            ),
        ),
        (
            vec![
                "--tls-cert".to_owned(),
                path("server.pem"),
                "--tls-key".to_owned(),
                path("ca.pem"),
            ],
            format!(
                "monolock: TLS key {}: no PEM private key found",
                path("ca.pem")
            ),
        ),
        (
            vec!["--audit-log".to_owned(), path("no/such/dir/audit.jsonl")],
            format!(
                "monolock: cannot open audit log {}",
                path("no/such/dir/audit.jsonl")
            ),
        ),
    ];
    for (args, expected) in cases {
        let output = Command::new(MONOLOCK)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(&args)
            .output()
            .expect("run monolock");
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr:?}");
        assert!(
            stderr.starts_with(&expected),
            "expected {expected:?}, got {stderr:?}"
        );
    }
}

#[test]
fn operator_commands_audit_on_stdout_and_the_shutdown_order() {
    let mut server = ServerProcess::start(&[
        "--admin-listen",
        "127.0.0.1:0",
        "--ops-listen",
        "127.0.0.1:0",
        "--audit-log",
        "-",
    ]);
    let (mut holder, reply) = acquire(server.addr, "nightly/import");
    let ServerFrame::Acquired { token } = reply else {
        panic!("{reply:?}")
    };
    let (mut first, reply) = acquire(server.addr, "nightly/import");
    assert_eq!(reply, ServerFrame::Waiting);
    let (mut second, reply) = acquire(server.addr, "nightly/import");
    assert_eq!(reply, ServerFrame::Waiting);
    let (_other, _) = acquire(server.addr, "shard-3");

    // The table.
    let output = server.cli(&["locks"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let table = text(&output.stdout);
    let mut rows = table.lines();
    let header = rows.next().expect("header");
    assert!(header.starts_with("NAME"), "{table}");
    for column in ["HOLDER", "IDENTITY", "TOKEN", "HELD", "LEASE", "WAITERS"] {
        assert!(header.contains(column), "{table}");
    }
    let row = rows.next().expect("a row");
    assert!(row.starts_with("nightly/import"), "{table}");
    assert!(
        row.contains(&holder.local_addr().unwrap().to_string()),
        "{table}"
    );
    assert!(row.contains(&token.to_string()), "{table}");
    assert!(row.trim_end().ends_with('2'), "two waiters: {table}");
    assert!(
        rows.next().expect("a row").starts_with("shard-3"),
        "{table}"
    );

    // JSON, with a glob.
    let output = server.cli(&["locks", "--match", "nightly/*", "--json"]);
    assert!(output.status.success());
    let json: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(json["locks"].as_array().unwrap().len(), 1);
    assert_eq!(json["locks"][0]["holder"]["token"], token);

    // One lock, a name with `/`.
    let output = server.cli(&["lock", "nightly/import", "--json"]);
    assert!(output.status.success());
    let lock: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let listed = lock["waiters"][0]["remote_addr"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(listed, first.local_addr().unwrap().to_string());
    let output = server.cli(&["lock", "nightly/import"]);
    let detail = text(&output.stdout);
    assert!(detail.contains(&listed), "{detail}");

    // Kick the first waiter by its listed address; the other keeps its place.
    let output = server.cli(&["kick", "nightly/import", &listed]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains(&listed));
    expect_error(&mut first, ErrorCode::CLOSED_BY_ADMIN);

    // Force-release: the holder is told, the remaining waiter promoted.
    let output = server.cli(&["release", "nightly/import"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(text(&output.stdout).contains(&token.to_string()));
    expect_error(&mut holder, ErrorCode::CLOSED_BY_ADMIN);
    let ServerFrame::Acquired { token: promoted } = read_frame(&mut second) else {
        panic!("promotion pushed");
    };
    assert!(promoted > token);

    // Errors: one line, exit 1.
    let output = server.cli(&["lock", "nightly/export"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("monolock: lock \"nightly/export\" has no holder"),
        "{stderr}"
    );
    let output = server.cli(&["kick", "nightly/import", "127.0.0.1:1"]);
    assert_eq!(output.status.code(), Some(1));
    let output = Command::new(MONOLOCK)
        .args(["locks", "--admin", &server.addr.to_string()])
        .output()
        .expect("run monolock");
    assert_eq!(
        output.status.code(),
        Some(1),
        "the protocol port is not the admin API"
    );

    // Shutdown: probes see 503 while the protocol port is already closed,
    // within the ops grace period; then exit 0.
    let ops = server.ops.expect("ops address");
    assert_eq!(http_get(ops, "/healthz"), Ok((200, "ok".to_owned())));
    server.signal("TERM");
    let deadline = Instant::now() + PATIENCE;
    while TcpStream::connect(server.addr).is_ok() {
        assert!(Instant::now() < deadline, "protocol port still open");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(http_get(ops, "/healthz").map(|(status, _)| status), Ok(503));
    assert_eq!(http_get(ops, "/readyz").map(|(status, _)| status), Ok(503));
    let metrics = http_get(ops, "/metrics")
        .expect("metrics during the grace period")
        .1;
    assert!(
        metrics.contains("monolock_releases_total{reason=\"force\"} 1"),
        "{metrics}"
    );
    assert_eq!(server.wait_exit().code(), Some(0));
    assert!(
        http_get(ops, "/healthz").is_err(),
        "ops listener closed after the grace"
    );

    // stdout carried the audit log and nothing else.
    let mut stdout = String::new();
    server
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .expect("read stdout");
    let events: Vec<String> = stdout
        .lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line).expect("audit lines are JSON");
            let reason = value["reason"]
                .as_str()
                .map(|r| format!(" {r}"))
                .unwrap_or_default();
            format!(
                "{} {}{reason}",
                value["event"].as_str().unwrap(),
                value["lock"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        events[..6],
        [
            "granted nightly/import",
            "granted shard-3",
            "kick_waiter nightly/import",
            "released nightly/import force",
            "force_release nightly/import",
            "granted nightly/import",
        ]
    );
    // Sessions end in any order at shutdown.
    let mut last: Vec<&str> = events[6..].iter().map(String::as_str).collect();
    last.sort_unstable();
    assert_eq!(
        last,
        [
            "released nightly/import shutdown",
            "released shard-3 shutdown"
        ]
    );
}

#[test]
fn sighup_reopens_the_audit_file_for_logrotate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let audit = dir.path().join("audit.jsonl");
    let rotated = dir.path().join("audit.jsonl.1");
    let mut server = ServerProcess::start(&["--audit-log", &audit.display().to_string()]);
    let (holder, _) = acquire(server.addr, "before");
    drop(holder);
    std::fs::rename(&audit, &rotated).expect("rename");
    // Wait until the release is audited (in the renamed file) before
    // rotating, so the split between the files is exact.
    let deadline = Instant::now() + PATIENCE;
    while std::fs::read_to_string(&rotated)
        .expect("rotated")
        .lines()
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "release not audited");
        std::thread::sleep(Duration::from_millis(5));
    }
    server.signal("HUP");
    server.wait_log("reopened the audit log");
    let (holder, _) = acquire(server.addr, "after");
    drop(holder);
    server.signal("TERM");
    assert_eq!(server.wait_exit().code(), Some(0));

    let events = |path: &Path| -> Vec<String> {
        std::fs::read_to_string(path)
            .expect("audit file")
            .lines()
            .map(|line| {
                let value: Value = serde_json::from_str(line).expect("JSON");
                format!(
                    "{} {}",
                    value["event"].as_str().unwrap(),
                    value["lock"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(events(&rotated), ["granted before", "released before"]);
    assert_eq!(events(&audit), ["granted after", "released after"]);
}

/// One value of the exposition, by its full series name.
fn metric(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

fn scrape(server: &ServerProcess) -> String {
    let (status, body) = http_get(server.ops.expect("ops"), "/metrics").expect("scrape");
    assert_eq!(status, 200);
    body
}

/// The process's resident memory, from /proc.
fn rss_kib(server: &ServerProcess) -> u64 {
    sys::resident_bytes(server.child.id()).expect("VmRSS") / 1024
}

/// `cycles` grant/release cycles on one lock, ending with the lock held by
/// the returned stream: its grant proves every earlier release happened,
/// so each cycle made exactly two audit events.
fn churn(server: &ServerProcess, held: Option<TcpStream>, cycles: usize) -> TcpStream {
    drop(held);
    let grant = || {
        let mut stream = TcpStream::connect(server.addr).expect("connect");
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        let acquire = ClientFrame::acquire(
            Lease::from_millis(30_000).expect("lease"),
            LockName::new("stall").expect("name"),
        );
        stream.write_all(&acquire.to_bytes()).expect("send");
        // WAITING then the pushed ACQUIRED may arrive in one read.
        let mut buf = Vec::new();
        loop {
            while let Some((frame, used)) = decode_response(&buf).expect("valid frame") {
                match frame {
                    ServerFrame::Acquired { .. } => return stream,
                    ServerFrame::Waiting => buf.drain(..used),
                    other => panic!("{other:?}"),
                };
            }
            let mut chunk = [0u8; 64];
            let n = stream.read(&mut chunk).expect("read");
            assert!(n > 0, "closed before the grant");
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    for _ in 0..cycles {
        drop(grant());
    }
    grant()
}

/// A server whose `--audit-log -` nobody reads, past the point where its
/// audit writer is blocked and its queue (64 lines) full; and the lock it
/// holds for the test.
fn stalled(ops: bool) -> (ServerProcess, TcpStream) {
    let mut args = vec!["--audit-log", "-", "--audit-queue", "64"];
    if ops {
        // The ops grace is not what these tests look at: none.
        args.extend(["--ops-listen", "127.0.0.1:0", "--ops-shutdown-grace", "0s"]);
    }
    let server = ServerProcess::start(&args);
    // The pipe (64 KiB) and the writer's batch fill up: the writer blocks.
    let held = churn(&server, None, 1_000);
    server.wait_log("audit log queue full");
    (server, held)
}

/// A log shipper that stopped reading: `--audit-log -` into a pipe nobody
/// reads. Grants go on, memory stays bounded (every line past the queue is
/// dropped and counted, none is kept), and SIGTERM still finishes.
#[test]
fn a_stalled_audit_reader_bounds_memory_and_shutdown() {
    let (mut server, held) = stalled(true);
    let before = scrape(&server);
    let dropped = metric(&before, "monolock_audit_dropped_lines_total");
    assert!(dropped > 0, "{before}");
    let rss = rss_kib(&server);

    let cycles = 2_000;
    let held = churn(&server, Some(held), cycles);
    let after = scrape(&server);
    assert_eq!(
        metric(&after, "monolock_audit_dropped_lines_total") - dropped,
        2 * cycles as u64 + 2,
        "every line of a stalled sink is dropped and counted, none queued"
    );
    assert!(metric(&after, "monolock_audit_queued_lines") <= 64);
    let grown = rss_kib(&server).saturating_sub(rss);
    assert!(
        grown < 2_048,
        "RSS grew by {grown} KiB over {cycles} cycles"
    );

    drop(held);
    server.signal("TERM");
    server.wait_log("audit log did not drain before shutdown");
    assert_eq!(server.wait_exit().code(), Some(0));
}

/// A SIGHUP while the audit sink is stalled neither stops grants nor the
/// next SIGTERM.
#[test]
fn sighup_then_sigterm_with_a_stalled_audit_reader() {
    let (mut server, held) = stalled(false);
    server.signal("HUP");
    server.wait_log("SIGHUP: reloading");
    let held = churn(&server, Some(held), 10);
    drop(held);
    server.signal("TERM");
    server.wait_log("SIGTERM: shutting down");
    assert_eq!(server.wait_exit().code(), Some(0));
}

/// Once a stalled reader reads again, one `gap` line stands where the
/// dropped lines were, with their count, and the lines after it flow.
#[test]
fn a_gap_line_marks_what_a_stalled_reader_missed() {
    let (mut server, held) = stalled(true);
    let dropped = metric(&scrape(&server), "monolock_audit_dropped_lines_total");
    assert!(dropped > 0);

    let stdout = server.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        std::io::BufRead::lines(std::io::BufReader::new(stdout))
            .map_while(Result::ok)
            .map(|line| serde_json::from_str::<Value>(&line).expect("audit lines are JSON"))
            .collect::<Vec<_>>()
    });
    server.wait_log("audit log flowing again");
    // The sink flows: the next release is written, not dropped.
    drop(held);
    let deadline = std::time::Instant::now() + PATIENCE;
    while metric(&scrape(&server), "monolock_locks_held") > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the lock was not released"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(
        metric(&scrape(&server), "monolock_audit_dropped_lines_total"),
        dropped
    );
    server.signal("TERM");
    assert_eq!(server.wait_exit().code(), Some(0));

    // A writer that stalled more than once (a loaded machine: the pipe
    // took some lines between drops) writes a gap line each time; together
    // they count every dropped line.
    let lines = reader.join().expect("the audit reader");
    let gaps: Vec<usize> = (0..lines.len())
        .filter(|&at| lines[at]["event"] == "gap")
        .collect();
    assert!(!gaps.is_empty(), "no gap line in {} lines", lines.len());
    let mut lost = 0;
    for &at in &gaps {
        assert!(lines[at]["since"].is_string(), "{}", lines[at]);
        lost += lines[at]["lost"].as_u64().expect("a count of lost lines");
    }
    assert_eq!(lost, dropped, "every dropped line is counted in a gap line");
    let after_last_gap = &lines[gaps[gaps.len() - 1]..];
    assert!(
        after_last_gap
            .iter()
            .any(|line| line["event"] == "released" && line["lock"] == "stall"),
        "the release after the sink flowed again was written"
    );
}
