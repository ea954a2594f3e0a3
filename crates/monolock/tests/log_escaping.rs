//! Client-supplied strings cannot forge log lines: a lock name holding a
//! newline, a fake `INFO` line, NUL and an escape sequence goes through
//! every path that logs a name (a v1 and a v2 grant, a force-release and
//! a kick by an administrator, an ACL denial over mTLS). In the text
//! format each is escaped and stays on its own line; in the JSON format
//! every line is valid JSON and carries the name intact.

mod common;

use std::{
    io::Write,
    net::{SocketAddr, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    time::Instant,
};

use common::{MONOLOCK, PATIENCE, read_frame};
use monolock_proto::{ClientFrame, Lease, LockName, ServerFrame, v2};
use monolock_testkit::{
    pki::{Ca, Files, TlsDir},
    process::{ServeLog, serve},
};

/// A name forging a log line (a newline and a fake administrator line),
/// plus an escape sequence
/// (no NUL: it goes through a command line; the raw frames add one).
const FORGED: &str =
    "x\n2026-01-01T00:00:00.000000Z  INFO force-release by administrator\u{1b}[31m";

fn path(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

struct Lab {
    child: Child,
    lines: ServeLog,
    addr: SocketAddr,
    admin: SocketAddr,
    _tls: TlsDir,
    files: Files,
    ca: std::path::PathBuf,
    client_ca: Ca,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Lab {
    /// A server with mTLS, an ACL that allows `ok/*` only, an admin
    /// listener, debug logs in `format`.
    fn start(format: &str) -> Self {
        let server_ca = Ca::new("server CA");
        let client_ca = Ca::new("client CA");
        let tls = TlsDir::new(&server_ca.server(), Some(&client_ca));
        let files = Files::new();
        let ca = files.ca("ca.pem", &server_ca);
        let acl = files.path("acl.json");
        std::fs::write(
            &acl,
            r#"{"rules": [{"identity": "spiffe://t/*", "locks": ["ok/*"]}]}"#,
        )
        .expect("write the ACL");
        let mut command = Command::new(MONOLOCK);
        command.stdout(Stdio::null());
        let flags = [
            ["--log-level", "debug"],
            ["--log-format", format],
            ["--admin-listen", "127.0.0.1:0"],
            ["--tls-cert", path(&tls.cert)],
            ["--tls-key", path(&tls.key)],
            ["--tls-client-ca", path(&tls.client_ca)],
            ["--acl-file", path(&acl)],
        ];
        let serving =
            serve(command, &flags.concat(), PATIENCE).unwrap_or_else(|err| panic!("{err}"));
        Self {
            child: serving.child,
            lines: serving.log,
            addr: serving.addr,
            admin: serving.admin.expect("admin"),
            _tls: tls,
            files,
            ca,
            client_ca,
        }
    }

    /// Lines until one contains `text` (all of them, that one last).
    fn lines_until(&self, text: &str) -> Vec<String> {
        let deadline = Instant::now() + PATIENCE;
        let mut seen = Vec::new();
        loop {
            let line = self
                .lines
                .next_line_before(deadline)
                .unwrap_or_else(|| panic!("no line with {text:?} after {seen:#?}"));
            let done = line.contains(text);
            seen.push(line);
            if done {
                return seen;
            }
        }
    }

    /// A TLS client connection with identity `spiffe://t/client`.
    fn exec_denied(&self, name: &str) {
        let (cert, key) = self
            .files
            .leaf("client", &self.client_ca.client_uri("spiffe://t/client"));
        let status = Command::new(MONOLOCK)
            .args(["exec", "--server", &self.addr.to_string()])
            .args(["--tls-ca", path(&self.ca)])
            .args(["--tls-cert", path(&cert), "--tls-key", path(&key)])
            .args([name, "--", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run monolock exec");
        assert!(!status.success(), "the ACL denies {name:?}");
    }
}

/// Runs the paths that need mTLS with `name`: an ACL denial, then a hold
/// of `ok/<name>` (granted), a waiter kicked and the holder
/// force-released by an administrator. Returns the lines logged until the
/// last of them. (The plaintext v1 and v2 grants: see the last test.)
fn every_path(lab: &Lab, name: &str) -> Vec<String> {
    let mut lines = Vec::new();
    // ACL denial (the name is not under ok/).
    lab.exec_denied(name);
    lines.extend(lab.lines_until("denied by ACL"));
    // A hold needs a name the ACL allows.
    let held = format!("ok/{name}");
    let (cert, key) = lab
        .files
        .leaf("holder", &lab.client_ca.client_uri("spiffe://t/holder"));
    let mut holder = Command::new(MONOLOCK)
        .args(["exec", "--server", &lab.addr.to_string()])
        .args(["--tls-ca", path(&lab.ca)])
        .args(["--tls-cert", path(&cert), "--tls-key", path(&key)])
        .args([held.as_str(), "--", "sh", "-c", "cat >/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run monolock exec");
    lines.extend(lab.lines_until("granted"));
    let mut waiter = Command::new(MONOLOCK)
        .args(["exec", "--server", &lab.addr.to_string()])
        .args(["--tls-ca", path(&lab.ca)])
        .args(["--tls-cert", path(&cert), "--tls-key", path(&key)])
        .args([held.as_str(), "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run monolock exec");
    let output = Command::new(MONOLOCK)
        .args(["lock", &held, "--json"])
        .env("MONOLOCK_ADMIN_ADDRESS", lab.admin.to_string())
        .env_remove("MONOLOCK_ADMIN_TOKEN")
        .output()
        .expect("run monolock lock");
    let mut lock: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    let deadline = Instant::now() + PATIENCE;
    while lock["waiters"].as_array().is_none_or(Vec::is_empty) {
        assert!(Instant::now() < deadline, "the waiter never queued");
        let output = Command::new(MONOLOCK)
            .args(["lock", &held, "--json"])
            .env("MONOLOCK_ADMIN_ADDRESS", lab.admin.to_string())
            .env_remove("MONOLOCK_ADMIN_TOKEN")
            .output()
            .expect("run monolock lock");
        lock = serde_json::from_slice(&output.stdout).unwrap_or_default();
    }
    let waiter_addr = lock["waiters"][0]["remote_addr"]
        .as_str()
        .expect("waiter")
        .to_owned();
    let admin = |args: &[&str]| {
        let output = Command::new(MONOLOCK)
            .args(args)
            .env("MONOLOCK_ADMIN_ADDRESS", lab.admin.to_string())
            .env_remove("MONOLOCK_ADMIN_TOKEN")
            .output()
            .expect("run monolock");
        assert!(output.status.success(), "{output:?}");
    };
    admin(&["kick", &held, &waiter_addr]);
    lines.extend(lab.lines_until("waiter removed by administrator"));
    admin(&["release", &held]);
    lines.extend(lab.lines_until("force-released by administrator"));
    let _ = holder.kill();
    let _ = holder.wait();
    let _ = waiter.kill();
    let _ = waiter.wait();
    lines
}

#[test]
fn text_logs_escape_client_strings_on_every_path() {
    let lab = Lab::start("text");
    let lines = every_path(&lab, FORGED);
    let escaped = r"x\n2026-01-01T00:00:00.000000Z  INFO force-release by administrator\u{1b}[31m";
    for line in &lines {
        assert!(
            !line.contains('\0') && !line.contains('\u{1b}'),
            "a raw control character reached the log: {line:?}"
        );
        assert!(
            !line.starts_with("2026-01-01"),
            "a forged line: {line:?}\nin {lines:#?}"
        );
    }
    for path in [
        "denied by ACL",
        "granted",
        "waiter removed by administrator",
        "force-released by administrator",
    ] {
        let line = lines
            .iter()
            .find(|line| line.contains(path))
            .unwrap_or_else(|| panic!("no {path:?} line in {lines:#?}"));
        assert!(line.contains(escaped), "{path}: {line}");
    }
}

#[test]
fn json_logs_stay_valid_json_with_the_name_intact() {
    let lab = Lab::start("json");
    let lines = every_path(&lab, FORGED);
    let mut carried = 0;
    for line in &lines {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|err| panic!("not JSON ({err}): {line:?}"));
        if value["lock"]
            .as_str()
            .is_some_and(|lock| lock.ends_with(FORGED))
        {
            carried += 1;
        }
    }
    assert!(carried >= 4, "the name intact on every path: {lines:#?}");
}

/// The plaintext version 1 and 2 grant lines, escaped as well.
#[test]
fn grant_lines_of_both_versions_are_escaped() {
    let mut command = Command::new(MONOLOCK);
    command.stdout(Stdio::null());
    let serving =
        serve(command, &["--log-level", "debug"], PATIENCE).unwrap_or_else(|err| panic!("{err}"));
    let (mut child, addr) = (serving.child, serving.addr);
    let deadline = Instant::now() + PATIENCE;
    let next = || serving.log.next_line_before(deadline).expect("a line");
    let mut v1 = TcpStream::connect(addr).expect("connect");
    v1.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let lease = Lease::from_millis(30_000).expect("lease");
    v1.write_all(
        &ClientFrame::acquire(lease, LockName::new(format!("v1{FORGED}\0")).expect("name"))
            .to_bytes(),
    )
    .expect("ACQUIRE");
    assert!(matches!(read_frame(&mut v1), ServerFrame::Acquired { .. }));
    let mut v2 = TcpStream::connect(addr).expect("connect");
    v2.write_all(&v2::ClientFrame::Open { lease }.to_bytes())
        .expect("OPEN");
    let acquire = v2::ClientFrame::Acquire {
        claim: 1,
        mode: v2::Mode::Wait,
        name: LockName::new(format!("v2{FORGED}\0")).expect("name"),
    };
    v2.write_all(&acquire.to_bytes()).expect("ACQUIRE");
    let mut grants = 0;
    while grants < 2 {
        let line = next();
        assert!(!line.starts_with("2026-01-01"), "a forged line: {line:?}");
        if line.contains("granted") {
            assert!(line.contains(r"x\n2026-01-01"), "{line}");
            assert!(line.contains(r"\u{1b}[31m\u{0}"), "{line}");
            grants += 1;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}
