//! The operator commands against an admin listener served over HTTPS and
//! mTLS by the real binary (`monolock serve --admin-tls`), with
//! certificates made at test time.

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
};

use common::{Follower, MONOLOCK, ServerProcess};
use monolock_testkit::pki::{Ca, Files, TlsDir};

/// The identity in the operator's client certificate.
const OPERATOR: &str = "spiffe://prod/operator";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn path(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

/// A server whose protocol and admin listeners require client
/// certificates, and the files an operator needs to reach it.
struct Lab {
    server: ServerProcess,
    _tls: TlsDir,
    files: Files,
    /// The CA that signed the server's certificate.
    ca: PathBuf,
    /// A client certificate with [`OPERATOR`], and its key.
    cert: PathBuf,
    key: PathBuf,
}

impl Lab {
    fn start() -> Self {
        let server_ca = Ca::new("server CA");
        let client_ca = Ca::new("client CA");
        let tls = TlsDir::new(&server_ca.server(), Some(&client_ca));
        let files = Files::new();
        let ca = files.ca("ca.pem", &server_ca);
        let (cert, key) = files.leaf("operator", &client_ca.client_uri(OPERATOR));
        let server = ServerProcess::start(&[
            "--admin-listen",
            "127.0.0.1:0",
            "--admin-tls",
            "--tls-cert",
            path(&tls.cert),
            "--tls-key",
            path(&tls.key),
            "--tls-client-ca",
            path(&tls.client_ca),
            "--admin-identity",
            OPERATOR,
        ]);
        Self {
            server,
            _tls: tls,
            files,
            ca,
            cert,
            key,
        }
    }

    fn admin(&self) -> String {
        self.server.admin.expect("admin").to_string()
    }

    /// `monolock ARGS` with the operator's certificate from the
    /// environment and `extra` variables on top.
    fn command(&self, args: &[&str], extra: &[(&str, &str)]) -> Command {
        let mut command = Command::new(MONOLOCK);
        command
            .args(args)
            .env("MONOLOCK_ADMIN_ADDRESS", self.admin())
            .env("MONOLOCK_ADMIN_CA", &self.ca)
            .env("MONOLOCK_ADMIN_CERT", &self.cert)
            .env("MONOLOCK_ADMIN_KEY", &self.key)
            .env_remove("MONOLOCK_ADMIN_TOKEN")
            .envs(extra.iter().copied());
        command
    }

    fn cli(&self, args: &[&str]) -> Output {
        self.command(args, &[]).output().expect("run monolock")
    }
}

/// Asserts a failed command printed exactly one line containing `says`.
fn fails_with_one_line(output: &Output, code: i32, says: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line, got {stderr:?}");
    assert!(stderr.starts_with("monolock: "), "{stderr}");
    assert!(stderr.contains(says), "{stderr:?} should mention {says}");
    assert!(output.stdout.is_empty(), "{}", text(&output.stdout));
}

#[test]
fn locks_kick_release_and_events_work_over_mtls_and_a_wrong_ca_fails_in_one_line() {
    let lab = Lab::start();

    // `events` follows the stream over mTLS (HOST:PORT means https://
    // once --admin-ca is given).
    let events = Follower::spawn(&mut lab.command(&["events"], &[]));
    let next_event = || events.next_line();
    let header = next_event();
    assert!(header.starts_with("TIME"), "{header}");

    // A holder over the protocol's mTLS, holding until it is released.
    let server = lab.server.addr.to_string();
    let mut holder = Command::new(MONOLOCK)
        .args(["exec", "--server", &server])
        .args(["--tls-ca", path(&lab.ca)])
        .args(["--tls-cert", path(&lab.cert)])
        .args(["--tls-key", path(&lab.key)])
        .args(["deploy", "--", "sh", "-c", "cat >/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run monolock exec");
    let granted = next_event();
    assert!(
        granted.contains(" granted ") && granted.contains("deploy"),
        "{granted}"
    );
    assert!(granted.contains(OPERATOR), "{granted}");

    let output = lab.cli(&["locks"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let table = text(&output.stdout);
    assert!(
        table.contains("deploy") && table.contains(OPERATOR),
        "{table}"
    );

    // A waiter, kicked over mTLS.
    let mut waiter = Command::new(MONOLOCK)
        .args(["exec", "--server", &server])
        .args(["--tls-ca", path(&lab.ca)])
        .args(["--tls-cert", path(&lab.cert)])
        .args(["--tls-key", path(&lab.key)])
        .args(["deploy", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run monolock exec");
    let queued = next_event();
    assert!(
        queued.contains(" queued ") && queued.contains("deploy"),
        "{queued}"
    );
    let output = lab.cli(&["lock", "deploy", "--json"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let lock: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let waiter_addr = lock["waiters"][0]["remote_addr"]
        .as_str()
        .expect("a waiter")
        .to_owned();
    let output = lab.cli(&["kick", "deploy", &waiter_addr]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    // exec speaks protocol v2: its waiter is a claim of a session.
    let removed = text(&output.stdout);
    assert!(
        removed.starts_with("removed claim ")
            && removed.contains(&format!("at {waiter_addr} from the queue of deploy")),
        "{removed}"
    );
    let kicked = next_event();
    assert!(kicked.contains("kick_waiter"), "{kicked}");
    let _ = waiter.kill();
    let _ = waiter.wait();

    // The URL form, flags instead of variables.
    let url = format!("https://{}", lab.admin());
    let output = Command::new(MONOLOCK)
        .args(["release", "deploy", "--admin", &url])
        .args(["--admin-ca", path(&lab.ca)])
        .args(["--admin-cert", path(&lab.cert)])
        .args(["--admin-key", path(&lab.key)])
        .env_remove("MONOLOCK_ADMIN_TOKEN")
        .output()
        .expect("run monolock release");
    assert!(output.status.success(), "{}", text(&output.stderr));
    let released = text(&output.stdout);
    assert!(
        released.starts_with("released deploy: claim ") && released.contains("was told REVOKED"),
        "{released}"
    );
    let released = next_event();
    assert!(
        released.contains(" released ") && released.contains("deploy"),
        "{released}"
    );

    // A CA that did not sign the server's certificate.
    let wrong = lab.files.ca("wrong.pem", &Ca::new("another CA"));
    let output = lab
        .command(&["locks"], &[("MONOLOCK_ADMIN_CA", path(&wrong))])
        .output()
        .expect("run monolock");
    fails_with_one_line(
        &output,
        1,
        &format!("cannot reach the admin API at https://{}", lab.admin()),
    );
    assert!(text(&output.stderr).contains("certificate"), "{output:?}");

    // No client certificate: the mTLS listener refuses the handshake.
    let output = lab
        .command(&["info"], &[])
        .env_remove("MONOLOCK_ADMIN_CERT")
        .env_remove("MONOLOCK_ADMIN_KEY")
        .output()
        .expect("run monolock");
    fails_with_one_line(&output, 1, "admin API at https://");

    // Plain HTTP against the HTTPS listener: one line that points at
    // --admin-ca.
    let output = Command::new(MONOLOCK)
        .args(["locks", "--admin", &lab.admin()])
        .env_remove("MONOLOCK_ADMIN_TOKEN")
        .env_remove("MONOLOCK_ADMIN_CA")
        .output()
        .expect("run monolock");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("--admin-ca"), "{stderr}");

    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn admin_tls_flag_mistakes_exit_64_with_one_line() {
    let files = Files::new();
    let ca = files.ca("ca.pem", &Ca::new("some CA"));
    let cases: [(&[&str], &str); 4] = [
        (
            &["--admin", "https://127.0.0.1:7071"],
            "is HTTPS: give --admin-ca",
        ),
        (
            &["--admin", "http://127.0.0.1:7071", "--admin-ca", path(&ca)],
            "--admin-ca needs an https:// admin address",
        ),
        (
            &["--admin-ca", path(&ca), "--admin-cert", path(&ca)],
            "--admin-cert needs --admin-key",
        ),
        (
            &["--admin-cert", path(&ca), "--admin-key", path(&ca)],
            "need --admin-ca (TLS is off)",
        ),
    ];
    for (flags, says) in cases {
        let output = Command::new(MONOLOCK)
            .arg("locks")
            .args(flags)
            .env_remove("MONOLOCK_ADMIN_ADDRESS")
            .env_remove("MONOLOCK_ADMIN_CA")
            .env_remove("MONOLOCK_ADMIN_CERT")
            .env_remove("MONOLOCK_ADMIN_KEY")
            .output()
            .expect("run monolock");
        fails_with_one_line(&output, 64, says);
    }
    // A CA file that cannot be read is an unusable file: 1, naming it.
    let missing = files.path("missing.pem");
    let output = Command::new(MONOLOCK)
        .args(["locks", "--admin-ca", path(&missing)])
        .env_remove("MONOLOCK_ADMIN_ADDRESS")
        .output()
        .expect("run monolock");
    fails_with_one_line(&output, 1, path(&missing));
}

/// Under mTLS without a token, a valid certificate is an administrator
/// only if its identity is named (`--admin-identity`, or the ACL file's
/// `admin` list). A worker's certificate cannot force-release another
/// identity's lock, and the refusal is logged with its identity.
#[test]
fn only_named_certificates_are_administrators() {
    const WORKER: &str = "spiffe://dev/worker/1";
    const ALICE: &str = "spiffe://prod/ops/alice";
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let tls = TlsDir::new(&server_ca.server(), Some(&client_ca));
    let files = Files::new();
    let ca = files.ca("ca.pem", &server_ca);
    let (operator_cert, operator_key) = files.leaf("operator", &client_ca.client_uri(OPERATOR));
    let (worker_cert, worker_key) = files.leaf("worker", &client_ca.client_uri(WORKER));
    let (alice_cert, alice_key) = files.leaf("alice", &client_ca.client_uri(ALICE));
    let acl = files.path("acl.json");
    std::fs::write(
        &acl,
        format!(
            r#"{{"rules": [{{"identity": "{OPERATOR}", "locks": ["*"]}}], "admin": ["spiffe://prod/ops/*"]}}"#
        ),
    )
    .expect("write the ACL");
    let server = ServerProcess::start(&[
        "--admin-listen",
        "127.0.0.1:0",
        "--admin-tls",
        "--tls-cert",
        path(&tls.cert),
        "--tls-key",
        path(&tls.key),
        "--tls-client-ca",
        path(&tls.client_ca),
        "--acl-file",
        path(&acl),
        "--admin-identity",
        OPERATOR,
    ]);
    let admin = server.admin.expect("admin").to_string();
    let cli = |cert: &Path, key: &Path, args: &[&str]| {
        Command::new(MONOLOCK)
            .args(args)
            .env("MONOLOCK_ADMIN_ADDRESS", &admin)
            .env("MONOLOCK_ADMIN_CA", &ca)
            .env("MONOLOCK_ADMIN_CERT", cert)
            .env("MONOLOCK_ADMIN_KEY", key)
            .env_remove("MONOLOCK_ADMIN_TOKEN")
            .output()
            .expect("run monolock")
    };
    let protocol = server.addr.to_string();
    let mut holder = Command::new(MONOLOCK)
        .args(["exec", "--server", &protocol])
        .args(["--tls-ca", path(&ca)])
        .args(["--tls-cert", path(&operator_cert)])
        .args(["--tls-key", path(&operator_key)])
        .args(["deploy", "--", "sh", "-c", "echo held; cat >/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run monolock exec");
    let held = common::lines_of(&mut holder)
        .recv_timeout(common::PATIENCE)
        .expect("the holder runs");
    assert_eq!(held, "held");

    // The worker's certificate is valid, but names no administrator.
    let output = cli(&worker_cert, &worker_key, &["release", "deploy"]);
    assert!(!output.status.success(), "{output:?}");
    assert!(
        text(&output.stderr).contains("not an administrator"),
        "{output:?}"
    );
    let refusal = server.wait_log("admin request refused");
    assert_eq!(refusal["identity"], WORKER, "{refusal}");
    let output = cli(&worker_cert, &worker_key, &["locks"]);
    assert!(
        !output.status.success(),
        "reads are refused too: {output:?}"
    );

    // The lock is still held; the named operator and the ACL's admin
    // pattern both are administrators.
    let output = cli(&alice_cert, &alice_key, &["lock", "deploy", "--json"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let lock: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(lock["holder"]["identity"], OPERATOR, "{lock}");
    let output = cli(&operator_cert, &operator_key, &["release", "deploy"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let _ = holder.kill();
    let _ = holder.wait();
}
