//! The files `monolock serve` reads (ACL, admin token, TLS files), with the
//! real binary: each is read up to 1 MiB and no further, and an ACL that
//! denies everything is said so at startup and on every reload.

mod common;

use std::{
    path::Path,
    process::{Child, Command, Stdio},
};

use common::{MONOLOCK, PATIENCE};
use monolock_testkit::{pki::Ca, process::ServeLog};
use serde_json::Value;

/// Writes a CA, a server certificate and key, a valid ACL and a token into
/// `dir`.
fn lab_files(dir: &Path) {
    let ca = Ca::new("lab CA");
    let server = ca.server();
    std::fs::write(dir.join("ca.pem"), ca.pem()).expect("write");
    std::fs::write(dir.join("server.pem"), &server.cert_pem).expect("write");
    std::fs::write(dir.join("server.key"), &server.key_pem).expect("write");
    std::fs::write(
        dir.join("acl.json"),
        r#"{"rules":[{"identity":"*","locks":["*"]}]}"#,
    )
    .expect("write");
    std::fs::write(dir.join("token"), "s3cret").expect("write");
}

/// The flags of a server with mTLS, an ACL and an admin token, with the
/// file of `flag` replaced by `file`.
fn flags_with(dir: &Path, flag: &str, file: &str) -> Vec<String> {
    let path = |name: &str| dir.join(name).display().to_string();
    let mut flags = vec![
        ("--tls-cert", path("server.pem")),
        ("--tls-key", path("server.key")),
        ("--tls-client-ca", path("ca.pem")),
        ("--acl-file", path("acl.json")),
        ("--admin-token-file", path("token")),
    ];
    for (name, value) in &mut flags {
        if *name == flag {
            *value = file.to_owned();
        }
    }
    let mut args = vec!["--admin-listen".to_owned(), "127.0.0.1:0".to_owned()];
    for (name, value) in flags {
        args.push(name.to_owned());
        args.push(value);
    }
    args
}

/// Every file flag pointed at a file over 1 MiB, or at `/dev/zero` (which
/// never ends): exit 1 at once with one line naming the file and the bound.
#[test]
fn a_file_over_one_mib_is_refused_at_startup_in_one_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    lab_files(dir.path());
    // Spaces: valid JSON padding, valid PEM surroundings, trimmed tokens;
    // only the size is wrong with it.
    let big = dir.path().join("big");
    std::fs::write(&big, vec![b' '; 1024 * 1024 + 1]).expect("write");
    let big = big.display().to_string();
    let cases = [
        ("--acl-file", "ACL file"),
        ("--admin-token-file", "cannot read the admin token file"),
        ("--tls-cert", "TLS certificate"),
        ("--tls-key", "TLS key"),
        ("--tls-client-ca", "TLS client CA"),
    ];
    for (flag, what) in cases {
        for file in [big.as_str(), "/dev/zero"] {
            let output = Command::new(MONOLOCK)
                .args(["serve", "--listen", "127.0.0.1:0"])
                .args(flags_with(dir.path(), flag, file))
                .output()
                .expect("run monolock");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(1), "{flag} {file}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{flag} {file}: {stderr:?}");
            let expected = format!(
                "monolock: {what} {file}: larger than 1 MiB (1048576 bytes), \
                 the most a configuration file may hold"
            );
            assert!(
                stderr.starts_with(&expected),
                "expected {expected:?}, got {stderr:?}"
            );
        }
    }
}

/// A `monolock serve` child whose JSON diagnostics are followed from the
/// first line (the startup warnings come before the listeners' lines).
struct Diagnostics {
    child: Child,
    log: ServeLog,
}

impl Diagnostics {
    fn start(args: &[String]) -> Self {
        let mut child = Command::new(MONOLOCK)
            .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn monolock serve");
        let log = ServeLog::follow(&mut child);
        Self { child, log }
    }

    /// The next line whose message contains `text` (earlier ones skipped).
    fn wait_log(&self, text: &str) -> Value {
        self.log
            .wait_log(text, PATIENCE)
            .unwrap_or_else(|| panic!("no log line with {text:?}"))
    }

    fn hangup(&self) {
        let status = Command::new("kill")
            .args(["-s", "HUP", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s HUP failed");
    }
}

impl Drop for Diagnostics {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `{"rules": []}` is a valid ACL that denies every ACQUIRE: the server
/// starts, and says so at startup and again on each SIGHUP that loads it.
/// A reload that finds the file over the bound keeps the rules in force.
#[test]
fn an_acl_without_rules_is_warned_about_at_startup_and_on_reload() {
    let dir = tempfile::tempdir().expect("temp dir");
    lab_files(dir.path());
    let acl = dir.path().join("acl.json");
    std::fs::write(&acl, r#"{"rules": []}"#).expect("write");
    let server = Diagnostics::start(&flags_with(dir.path(), "", ""));
    let warning = server.wait_log("the ACL file has no rules: every ACQUIRE is denied");
    assert_eq!(warning["level"], "WARN", "{warning}");
    assert_eq!(warning["file"], acl.display().to_string(), "{warning}");
    server.wait_log("admin API listening");

    server.hangup();
    server.wait_log("the ACL file has no rules");
    server.wait_log("reloaded the ACL");

    // Over the bound on reload: one error line, the (empty) rules stay.
    std::fs::write(&acl, vec![b' '; 1024 * 1024 + 1]).expect("write");
    server.hangup();
    let failed = server.wait_log("ACL reload failed; keeping the previous rules");
    let error = failed["error"].as_str().expect("error");
    assert!(
        error.contains("larger than 1 MiB (1048576 bytes)"),
        "{failed}"
    );

    // A file with rules again: no warning with this reload.
    std::fs::write(&acl, r#"{"rules":[{"identity":"*","locks":["*"]}]}"#).expect("write");
    server.hangup();
    let reloaded = server.wait_log("ACL");
    assert_eq!(reloaded["message"], "reloaded the ACL", "{reloaded}");
    assert_eq!(reloaded["rules"], 1, "{reloaded}");
}

/// A SIGHUP that arrives while a reload runs is never lost, even when the
/// running reload read the ACL before it changed. The running reload is
/// held for as long as the test likes by an admin token file that is a
/// FIFO: the reload blocks reading it until the test writes a token.
#[test]
fn a_sighup_during_a_reload_is_followed_by_another_reload() {
    let dir = tempfile::tempdir().expect("temp dir");
    lab_files(dir.path());
    let token = dir.path().join("token-fifo");
    let made = Command::new("mkfifo")
        .arg(&token)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo failed");
    // Each read of the token (at startup, then once per reload) waits for
    // one of these writes.
    let feed = || {
        let token = token.clone();
        std::thread::spawn(move || std::fs::write(token, "s3cret").expect("write the FIFO"))
    };
    let acl = dir.path().join("acl.json");
    feed();
    let server = Diagnostics::start(&flags_with(
        dir.path(),
        "--admin-token-file",
        &token.display().to_string(),
    ));
    server.wait_log("admin API listening");

    // The first reload reads the ACL (one rule), then waits on the token.
    server.hangup();
    let first = server.wait_log("reloaded the ACL");
    assert_eq!(first["rules"], 1, "{first}");
    // The ACL changes, and a SIGHUP arrives while that reload still runs.
    std::fs::write(
        &acl,
        r#"{"rules":[{"identity":"*","locks":["a/*"]},{"identity":"*","locks":["b/*"]}]}"#,
    )
    .expect("write");
    server.hangup();
    server.wait_log("a reload is");
    // The first reload ends; another one reads the new ACL.
    feed();
    server.wait_log("reloaded the admin token");
    feed();
    let second = server.wait_log("reloaded the ACL");
    assert_eq!(second["rules"], 2, "{second}");
    server.wait_log("reloaded the admin token");
}
