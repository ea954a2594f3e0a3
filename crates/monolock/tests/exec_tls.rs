//! `monolock exec` over TLS and mTLS, against a server running in the test
//! with certificates made at test time.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
};

use monolock_server::{ServerConfig, ServerHandle};
use monolock_testkit::{
    PATIENCE, eventually,
    pki::{Ca, Files},
};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, BufReader},
    process::{Child, Command},
};

const MONOLOCK: &str = env!("CARGO_BIN_EXE_monolock");

const EXIT_USAGE: i32 = 64;

/// The identity in the client certificate.
const IDENTITY: &str = "spiffe://prod/worker/exec";

/// An mTLS server, and the files a client needs to reach it.
struct MtlsServer {
    addr: SocketAddr,
    handle: ServerHandle,
    files: Files,
    /// The CA that signed the server's certificate.
    ca: PathBuf,
    /// A client certificate with [`IDENTITY`], and its key.
    cert: PathBuf,
    key: PathBuf,
}

impl MtlsServer {
    async fn start() -> Self {
        let server_ca = Ca::new("server CA");
        let client_ca = Ca::new("client CA");
        let files = Files::new();
        let tls = files.server_tls(&server_ca.server(), Some(&client_ca));
        let ca = files.ca("ca.pem", &server_ca);
        let (cert, key) = files.leaf("client", &client_ca.client_uri(IDENTITY));

        let (addr, handle, _) =
            monolock_testkit::spawn_server(ServerConfig::default().with_tls(tls)).await;
        Self {
            addr,
            handle,
            files,
            ca,
            cert,
            key,
        }
    }

    /// `monolock exec --server ADDR` with `args`, `env`, and stdin piped.
    fn spawn(&self, args: &[&str], env: &[(&str, &PathBuf)]) -> Child {
        Command::new(MONOLOCK)
            .arg("exec")
            .args(["--server", &self.addr.to_string()])
            .args(args)
            .envs(env.iter().map(|(name, path)| (name, path.as_os_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn monolock exec")
    }
}

impl Drop for MtlsServer {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

/// Closes `child`'s stdin and waits for it to exit; returns the status,
/// the rest of stdout (unless taken before) and stderr.
async fn finish(mut child: Child) -> (ExitStatus, String, String) {
    drop(child.stdin.take());
    let (mut stdout, mut stderr) = (String::new(), String::new());
    let out = child.stdout.take();
    let mut err = child.stderr.take().expect("stderr");
    let run = async {
        let read_out = async {
            match out {
                Some(mut out) => out.read_to_string(&mut stdout).await.map(drop),
                None => Ok(()),
            }
        };
        let (read_out, read_err, status) =
            tokio::join!(read_out, err.read_to_string(&mut stderr), child.wait(),);
        read_out.expect("stdout");
        read_err.expect("stderr");
        status.expect("wait")
    };
    let status = tokio::time::timeout(PATIENCE, run)
        .await
        .expect("exec exits in time");
    (status, stdout, stderr)
}

fn path(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_over_mtls_runs_the_command_with_the_token_and_identity() {
    let server = MtlsServer::start().await;
    let name = "mtls-job";
    // The command prints its token, then holds the lock until stdin closes.
    let mut running = server.spawn(
        &[
            "--tls-ca",
            path(&server.ca),
            "--tls-cert",
            path(&server.cert),
            "--tls-key",
            path(&server.key),
            name,
            "--",
            "sh",
            "-c",
            r#"echo "$MONOLOCK_TOKEN"; cat >/dev/null"#,
        ],
        &[],
    );
    let mut lines = BufReader::new(running.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(PATIENCE, lines.next_line())
        .await
        .expect("a line in time")
        .expect("stdout readable")
        .expect("the token before EOF");
    let token: u64 = line.trim().parse().expect("a decimal token");
    let held = server
        .handle
        .lock(name)
        .expect("held while the command runs");
    assert_eq!(held.holder.token, token);
    assert_eq!(&*held.holder.identity, IDENTITY);
    let (status, _, err) = finish(running).await;
    assert!(status.success(), "{status:?} {err}");
    eventually("the release", || server.handle.lock(name).is_none()).await;

    // The same from the environment, the name checked as a DNS name.
    let env = [
        ("MONOLOCK_TLS_CA", &server.ca),
        ("MONOLOCK_TLS_CERT", &server.cert),
        ("MONOLOCK_TLS_KEY", &server.key),
    ];
    let running = server.spawn(
        &[
            "--tls-server-name",
            "localhost",
            name,
            "--",
            "sh",
            "-c",
            r#"echo "$MONOLOCK_TOKEN""#,
        ],
        &env,
    );
    let (status, out, err) = finish(running).await;
    assert!(status.success(), "{status:?} {err}");
    assert!(out.trim().parse::<u64>().expect("a token") > token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_flag_mistakes_exit_64_with_one_line() {
    let server = MtlsServer::start().await;
    let marker = server.files.path("ran");
    let touch = format!("touch '{}'", marker.display());
    let missing = server.files.path("missing.pem");
    let cases: [(&[&str], &str); 5] = [
        (
            &[
                "--tls-ca",
                path(&server.ca),
                "--tls-cert",
                path(&server.cert),
            ],
            "--tls-cert needs --tls-key",
        ),
        (
            &["--tls-ca", path(&server.ca), "--tls-key", path(&server.key)],
            "--tls-key needs --tls-cert",
        ),
        (
            &[
                "--tls-cert",
                path(&server.cert),
                "--tls-key",
                path(&server.key),
            ],
            "need --tls-ca",
        ),
        (&["--tls-ca", path(&missing)], path(&missing)),
        (
            // A certificate where the key should be.
            &[
                "--tls-ca",
                path(&server.ca),
                "--tls-cert",
                path(&server.cert),
                "--tls-key",
                path(&server.cert),
            ],
            path(&server.cert),
        ),
    ];
    for (flags, says) in cases {
        let mut args = flags.to_vec();
        args.extend(["job", "--", "sh", "-c", &touch]);
        let (status, _, err) = finish(server.spawn(&args, &[])).await;
        assert_eq!(status.code(), Some(EXIT_USAGE), "{flags:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{flags:?}: one line, got {err:?}");
        assert!(err.starts_with("monolock exec: "), "{err}");
        assert!(
            err.contains(says),
            "{flags:?}: {err:?} should mention {says}"
        );
    }
    assert!(!marker.exists(), "the command ran");
    assert_eq!(server.handle.counts().waiters, 0);
    assert!(server.handle.lock("job").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_handshake_is_a_usage_error_and_never_retried() {
    let server = MtlsServer::start().await;
    // No client certificate: the mTLS server refuses the handshake, and
    // would every time.
    let (status, _, err) = finish(server.spawn(
        &["--tls-ca", path(&server.ca), "--retry", "job", "--", "true"],
        &[],
    ))
    .await;
    assert_eq!(status.code(), Some(EXIT_USAGE), "{err}");
    assert_eq!(err.lines().count(), 1, "not retried: {err:?}");
    assert!(err.contains("could not connect"), "{err}");

    // Plain TCP to the TLS port: named, not "unexpected message type".
    let (status, _, err) = finish(server.spawn(&["--retry", "job", "--", "true"], &[])).await;
    assert_eq!(status.code(), Some(EXIT_USAGE), "{err}");
    assert_eq!(err.lines().count(), 1, "not retried: {err:?}");
    assert!(err.contains("the server speaks TLS"), "{err}");

    // A server whose certificate does not match the expected name.
    let (status, _, err) = finish(server.spawn(
        &[
            "--tls-ca",
            path(&server.ca),
            "--tls-cert",
            path(&server.cert),
            "--tls-key",
            path(&server.key),
            "--tls-server-name",
            "locks.elsewhere",
            "job",
            "--",
            "true",
        ],
        &[],
    ))
    .await;
    assert_eq!(status.code(), Some(EXIT_USAGE), "{err}");
    assert!(err.contains("could not connect"), "{err}");
}

/// TLS asked for, plain text answered: one line that says so and what to
/// do, never retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_at_a_plaintext_server_says_the_server_does_not_speak_tls() {
    let tls = MtlsServer::start().await;
    let (addr, handle, _) = monolock_testkit::spawn_server(ServerConfig::default()).await;
    let child = Command::new(MONOLOCK)
        .args(["exec", "--server", &addr.to_string(), "--retry"])
        .args(["--tls-ca", path(&tls.ca), "job", "--", "echo", "RAN"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn monolock exec");
    let (status, out, err) = finish(child).await;
    handle.shutdown();
    assert_eq!(status.code(), Some(EXIT_USAGE), "{err}");
    assert_eq!(err.lines().count(), 1, "not retried: {err:?}");
    assert!(err.contains("the server does not speak TLS"), "{err}");
    assert!(err.contains("drop --tls-ca"), "{err}");
    assert!(out.is_empty());
}
