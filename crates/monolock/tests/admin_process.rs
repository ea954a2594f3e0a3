//! The admin surface of the real binary: the token (flags, variable,
//! SIGHUP), `monolock events`, `monolock info`, `release --token`, escaped
//! names, and the refusal to serve an open admin port without a token.

mod common;

use std::process::Command;

use common::{Follower, MONOLOCK, PATIENCE, ServerProcess, acquire};
use monolock_proto::ServerFrame;
use monolock_testkit::http;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A server with an admin token file; returns it and the file's directory.
fn with_token(token: &str, extra: &[&str]) -> (ServerProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("admin-token");
    std::fs::write(&path, format!("{token}\n")).expect("write token");
    let path = path.to_str().expect("UTF-8 path").to_owned();
    let mut args = vec!["--admin-listen", "127.0.0.1:0", "--admin-token-file", &path];
    args.extend_from_slice(extra);
    (ServerProcess::start(&args), dir)
}

fn cli_env(server: &ServerProcess, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(MONOLOCK)
        .args(args)
        .env(
            "MONOLOCK_ADMIN_ADDRESS",
            server.admin.expect("admin").to_string(),
        )
        .env_remove("MONOLOCK_ADMIN_TOKEN")
        .envs(env.iter().copied())
        .output()
        .expect("run monolock")
}

/// `monolock serve --listen 127.0.0.1:0 ARGS...` run to its exit.
fn serve_exit(args: &[&str]) -> std::process::Output {
    Command::new(MONOLOCK)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .output()
        .expect("run monolock serve")
}

#[test]
fn an_open_admin_port_without_a_token_is_refused_at_startup() {
    let output = serve_exit(&["--admin-listen", "0.0.0.0:0"]);
    assert_eq!(output.status.code(), Some(64));
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("monolock: --admin-listen 0.0.0.0:0 is not loopback: give --admin-token-file (or --admin-tls with --tls-client-ca), or --admin-insecure"),
        "{stderr}"
    );

    let output = serve_exit(&[
        "--admin-listen",
        "127.0.0.1:0",
        "--admin-token-file",
        "/nonexistent/admin-token",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert_eq!(
        stderr.trim_end(),
        "monolock: cannot read the admin token file /nonexistent/admin-token: No such file or directory (os error 2)"
    );
}

#[test]
fn the_cli_sends_the_token_from_a_file_or_the_variable_and_sighup_rotates_it() {
    let (server, dir) = with_token("first-token", &[]);

    let output = cli_env(&server, &["locks"], &[]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("--admin-token-file"), "{stderr}");
    assert!(stderr.contains("MONOLOCK_ADMIN_TOKEN_FILE"), "{stderr}");
    assert!(!stderr.contains("Authorization"), "{stderr}");
    assert!(stderr.contains("401"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");

    let output = cli_env(
        &server,
        &["locks"],
        &[("MONOLOCK_ADMIN_TOKEN", "first-token")],
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout), "no locks held\n");

    let file = dir.path().join("admin-token");
    let file = file.to_str().expect("UTF-8");
    let output = cli_env(&server, &["info", "--admin-token-file", file], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let info = text(&output.stdout);
    assert!(info.starts_with("version"), "{info}");
    assert!(info.contains(env!("CARGO_PKG_VERSION")), "{info}");
    assert!(info.contains("(commit "), "{info}");
    assert!(info.contains("admin listen"), "{info}");

    std::fs::write(dir.path().join("admin-token"), "second-token").expect("rotate");
    server.signal("HUP");
    server.wait_log("reloaded the admin token");
    let output = cli_env(
        &server,
        &["locks"],
        &[("MONOLOCK_ADMIN_TOKEN", "first-token")],
    );
    assert_eq!(output.status.code(), Some(1), "the old token is refused");
    let output = cli_env(&server, &["locks", "--admin-token-file", file], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[test]
fn release_with_a_token_never_releases_the_next_holder() {
    let server = ServerProcess::start(&["--admin-listen", "127.0.0.1:0"]);
    let (mut holder, reply) = acquire(server.addr, "deploy");
    let ServerFrame::Acquired { token } = reply else {
        panic!("{reply:?}")
    };
    let (mut next, reply) = acquire(server.addr, "deploy");
    assert_eq!(reply, ServerFrame::Waiting);

    let token_arg = token.to_string();
    let release = ["release", "deploy", "--token", &token_arg];
    let output = server.cli(&release);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(matches!(
        common::read_frame(&mut holder),
        ServerFrame::Error { code, .. } if code.0 == 0x02
    ));
    let ServerFrame::Acquired { token: next_token } = common::read_frame(&mut next) else {
        panic!("the waiter is promoted")
    };

    // The same command again refuses and names the current holder.
    let output = server.cli(&release);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(&format!("is held by token {next_token}"))
            && stderr.contains("nothing released")
            && stderr.contains("409"),
        "{stderr}"
    );
    let output = server.cli(&["lock", "deploy", "--json"]);
    let lock: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(lock["holder"]["token"], next_token);

    let output = server.cli(&["locks", "--match", "nightly/*"]);
    assert!(output.status.success());
    assert_eq!(text(&output.stdout), "no held lock matches nightly/*\n");
}

#[test]
fn events_follow_every_change_with_names_escaped() {
    let server = ServerProcess::start(&["--admin-listen", "127.0.0.1:0"]);
    let (_held, _) = acquire(server.addr, "before");
    let events = Follower::spawn(Command::new(MONOLOCK).args([
        "events",
        "--admin",
        &server.admin.expect("admin").to_string(),
    ]));
    let next_line = || events.next_line();
    let header = next_line();
    assert!(
        header.starts_with("TIME") && header.contains("DETAIL"),
        "{header}"
    );
    let held = next_line();
    assert!(
        held.contains("  held  ") && held.contains("before"),
        "{held}"
    );

    // A name with a newline and an escape sequence is one escaped line.
    let (evil, reply) = acquire(server.addr, "evil\n\u{1b}[2Jname");
    let ServerFrame::Acquired { token } = reply else {
        panic!("{reply:?}")
    };
    let granted = next_line();
    assert!(granted.contains(" granted "), "{granted}");
    assert!(granted.contains("evil\\n\\u{1b}[2Jname"), "{granted}");
    assert!(granted.contains(&format!("token={token}")), "{granted}");
    drop(evil);
    let released = next_line();
    assert!(released.contains(" released "), "{released}");
    assert!(released.contains("reason=graceful"), "{released}");

    // The tables escape it too.
    let (_evil, _) = acquire(server.addr, "evil\tname");
    let output = server.cli(&["locks"]);
    assert!(
        text(&output.stdout).contains("evil\\tname"),
        "{}",
        text(&output.stdout)
    );
    let output = server.cli(&["lock", "evil\tname"]);
    assert!(
        text(&output.stdout).contains("evil\\tname"),
        "{}",
        text(&output.stdout)
    );
}

/// `--match` goes to the server as `?match=` (a pattern with `*`, `/`, a
/// space and `&` survives the query string) and only matching locks print.
#[test]
fn events_match_prints_only_matching_locks() {
    let server = ServerProcess::start(&["--admin-listen", "127.0.0.1:0"]);
    let (_held, _) = acquire(server.addr, "deploy/a b&c");
    let (_other, _) = acquire(server.addr, "nightly/import");
    let events = Follower::spawn(Command::new(MONOLOCK).args([
        "events",
        "--match",
        "deploy/* b&?",
        "--admin",
        &server.admin.expect("admin").to_string(),
    ]));
    let next_line = || events.next_line();
    assert!(next_line().starts_with("TIME"));
    let held = next_line();
    assert!(held.contains("deploy/a b&c"), "{held}");
    drop(acquire(server.addr, "nightly/other"));
    let (_web, reply) = acquire(server.addr, "deploy/web b&x");
    let ServerFrame::Acquired { token } = reply else {
        panic!("{reply:?}")
    };
    let granted = next_line();
    assert!(
        granted.contains(" granted ") && granted.contains("deploy/web b&x"),
        "{granted}"
    );
    assert!(granted.contains(&format!("token={token}")), "{granted}");
}

/// The lock protocol's port given where the admin API is expected: one
/// line that says which port is which, and no table header first.
#[test]
fn the_protocol_port_as_the_admin_address_is_named_as_such() {
    let server = ServerProcess::start(&["--admin-listen", "127.0.0.1:0"]);
    let protocol = server.addr.to_string();
    for command in ["locks", "events", "info"] {
        let output = server.cli(&[command, "--admin", &protocol]);
        assert_eq!(output.status.code(), Some(1), "{command}: {output:?}");
        assert_eq!(text(&output.stdout), "", "{command}");
        let stderr = text(&output.stderr);
        assert_eq!(stderr.lines().count(), 1, "{command}: {stderr}");
        assert!(
            stderr.contains(&format!("{protocol} did not answer in HTTP"))
                && stderr.contains("--admin-listen"),
            "{command}: {stderr}"
        );
    }
}

#[test]
fn metrics_name_the_build_and_count_refused_admin_requests() {
    let (server, _dir) = with_token("metrics-token", &["--ops-listen", "127.0.0.1:0"]);
    let output = cli_env(&server, &["locks"], &[("MONOLOCK_ADMIN_TOKEN", "wrong")]);
    assert_eq!(output.status.code(), Some(1));
    let metrics = http::get_ok(server.ops.expect("ops"), "/metrics");
    let commit = Command::new(MONOLOCK)
        .arg("--version")
        .output()
        .expect("monolock --version");
    let version = text(&commit.stdout);
    let commit = version
        .split("(commit ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .expect("a commit in --version");
    let series = format!(
        "monolock_build_info{{version=\"{}\",commit=\"{commit}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    assert!(metrics.contains(&series), "{series} not in:\n{metrics}");
    assert!(
        metrics.contains("monolock_admin_unauthorized_total 1"),
        "{metrics}"
    );
}

#[test]
fn a_cross_site_form_post_cannot_release_what_monolock_exec_holds() {
    let server = ServerProcess::start_with_env(
        &["--admin-listen", "127.0.0.1:0"],
        &[(
            "MONOLOCK_ADMIN_ALLOWED_HOST",
            "locks.example.com,proxy.example:8443",
        )],
    );
    let admin = server.admin.expect("admin");
    let events =
        Follower::spawn(Command::new(MONOLOCK).args(["events", "--admin", &admin.to_string()]));
    assert!(events.next_line().starts_with("TIME"));
    let mut holder = Command::new(MONOLOCK)
        .args(["exec", "--server", &server.addr.to_string()])
        .args(["deploy", "--", "sh", "-c", "cat >/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run monolock exec");
    let granted = events.next_line();
    assert!(
        granted.contains(" granted ") && granted.contains("deploy"),
        "{granted}"
    );
    let output = server.cli(&["lock", "deploy", "--json"]);
    let lock: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let token = lock["holder"]["token"].clone();

    // What a web page's form post sends: refused, in one JSON line.
    let (status, answer) = http::raw(
        admin,
        &format!(
            "POST /api/locks/deploy/release HTTP/1.1\r\nHost: {admin}\r\n\
             Origin: http://evil.example\r\nSec-Fetch-Site: cross-site\r\n\
             Content-Type: text/plain"
        ),
    );
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("{\"error\":\"POST refused"), "{answer}");
    assert!(
        !answer.to_ascii_lowercase().contains("access-control-allow"),
        "{answer}"
    );
    // A rebinding name for the reads; the named hosts are served.
    let (status, answer) = http::raw(admin, "GET /api/locks HTTP/1.1\r\nHost: evil.example");
    assert_eq!(status, 403, "{answer}");
    assert!(!answer.contains("deploy"), "{answer}");
    for host in ["locks.example.com", "proxy.example:8443", "localhost"] {
        let (status, answer) =
            http::raw(admin, &format!("GET /api/locks HTTP/1.1\r\nHost: {host}"));
        assert_eq!(status, 200, "{host}: {answer}");
        assert!(answer.contains("deploy"), "{answer}");
    }

    // The holder kept its lock: same token, still running.
    let output = server.cli(&["lock", "deploy", "--json"]);
    let lock: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(lock["holder"]["token"], token, "{lock}");
    assert!(
        holder.try_wait().expect("try_wait").is_none(),
        "exec still holds"
    );

    // The operator's own command still releases it.
    let output = server.cli(&["release", "deploy"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let released = events.next_line();
    assert!(
        released.contains(" released ") && released.contains("deploy"),
        "{released}"
    );
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn a_bad_admin_allowed_host_is_one_line_and_exit_64() {
    let output = serve_exit(&["--admin-allowed-host", "https://locks.example.com"]);
    assert_eq!(output.status.code(), Some(64), "{output:?}");
    let stderr = text(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with(
            "monolock: --admin-allowed-host \"https://locks.example.com\": give the host alone"
        ),
        "{stderr}"
    );
}

#[test]
fn the_token_file_variable_is_read_and_an_empty_file_named() {
    let (server, dir) = with_token("file-token", &[]);
    let file = dir.path().join("admin-token");
    let file = file.to_str().expect("UTF-8");
    let output = cli_env(&server, &["locks"], &[("MONOLOCK_ADMIN_TOKEN_FILE", file)]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").expect("write");
    let empty = empty.to_str().expect("UTF-8");
    for (args, env) in [
        (vec!["locks", "--admin-token-file", empty], vec![]),
        (vec!["locks"], vec![("MONOLOCK_ADMIN_TOKEN_FILE", empty)]),
    ] {
        let output = cli_env(&server, &args, &env);
        assert_eq!(output.status.code(), Some(1));
        let stderr = text(&output.stderr);
        assert_eq!(
            stderr.trim_end(),
            format!(
                "monolock: the admin token file {empty} is empty: write the admin token in it (the one the server's --admin-token-file holds)"
            )
        );
    }
}

/// An HTTP server that answers every request with an HTML 404 page.
fn html_server() -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { break };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).is_ok_and(|n| n == 1) {
                head.push(byte[0]);
            }
            let page = "<html><head><title>404 Not Found</title></head>\n<body><h1>Not Found</h1></body></html>\n";
            let _ = write!(
                stream,
                "HTTP/1.1 404 Not Found\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    addr
}

/// Wrong addresses and names: one line each, with the right status.
#[test]
fn wrong_places_and_names_are_one_line() {
    let html = html_server().to_string();
    let output = Command::new(MONOLOCK)
        .args(["locks", "--admin", &html])
        .output()
        .expect("run");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(!stderr.contains("<html"), "{stderr}");
    assert!(
        stderr.contains("404 Not Found with text/html")
            && stderr.contains("not the monolock admin API")
            && stderr.contains("--admin-listen"),
        "{stderr}"
    );

    let output = Command::new(MONOLOCK)
        .args(["locks", "--admin", "ftp://x:1"])
        .output()
        .expect("run");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("ftp://"), "{stderr}");

    let server = ServerProcess::start(&["--admin-listen", "127.0.0.1:0"]);
    let long = "a".repeat(300);
    for (name, says) in [
        ("", "lock name is empty"),
        (long.as_str(), "300 bytes long"),
    ] {
        for command in [
            &["lock", name][..],
            &["release", name],
            &["kick", name, "10.0.0.1:1"],
        ] {
            let output = server.cli(command);
            let stderr = text(&output.stderr);
            assert_eq!(output.status.code(), Some(64), "{command:?}: {stderr}");
            assert!(
                stderr.contains("invalid lock name") && stderr.contains(says),
                "{command:?}: {stderr}"
            );
            assert!(!stderr.contains("404"), "{stderr}");
        }
    }
}

/// During the startup grace nothing is granted: `locks` and `info` say so
/// instead of showing a free server.
#[test]
fn the_startup_grace_shows_in_locks_and_info() {
    let server = ServerProcess::start(&["--admin-listen", "127.0.0.1:0", "--startup-grace", "60s"]);
    let (_queued, reply) = acquire(server.addr, "graced");
    assert!(matches!(reply, ServerFrame::Waiting), "{reply:?}");
    let output = server.cli(&["locks"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let out = text(&output.stdout);
    assert!(out.starts_with("server in startup grace, "), "{out}");
    assert!(
        out.contains(" ms left") && out.contains("(1 queued)"),
        "{out}"
    );
    let output = server.cli(&["info"]);
    let out = text(&output.stdout);
    let grace = out
        .lines()
        .find(|line| line.starts_with("startup grace"))
        .unwrap_or_else(|| panic!("no grace row:\n{out}"));
    assert!(grace.contains("server in startup grace, "), "{out}");
    let sessions = out.lines().find(|line| line.starts_with("sessions"));
    assert_eq!(
        sessions.map(|line| line.split_whitespace().last()),
        Some(Some("1")),
        "{out}"
    );
}

#[test]
fn leases_are_humanised_in_tables() {
    let server = ServerProcess::start(&["--admin-listen", "127.0.0.1:0"]);
    let (_held, _) = acquire(server.addr, "leased");
    let out = text(&server.cli(&["locks"]).stdout);
    assert!(out.contains("  30s  ") && !out.contains("30000ms"), "{out}");
    let out = text(&server.cli(&["lock", "leased"]).stdout);
    assert!(out.contains("lease     30s\n"), "{out}");
}

/// A child whose stdout and stderr are followed line by line.
struct Watched {
    child: std::process::Child,
    out: std::sync::mpsc::Receiver<String>,
    err: std::sync::mpsc::Receiver<String>,
}

impl Watched {
    fn spawn(command: &mut Command) -> Self {
        use std::io::BufRead;
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        let out = common::lines_of(&mut child);
        let stderr = child.stderr.take().expect("stderr");
        let (tx, err) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, out, err }
    }

    fn line_with(lines: &std::sync::mpsc::Receiver<String>, text: &str) -> String {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no line with {text:?}"));
            if line.contains(text) {
                return line;
            }
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server goes away and comes back on the same address: `events`
/// says it reconnects, and follows the new server; with `--once` it exits.
#[test]
fn events_reconnect_when_the_server_comes_back_unless_once() {
    let first = ServerProcess::start(&["--admin-listen", "127.0.0.1:0"]);
    let admin = first.admin.expect("admin").to_string();
    let events = Watched::spawn(Command::new(MONOLOCK).args(["events", "--admin", &admin]));
    let once = Watched::spawn(Command::new(MONOLOCK).args(["events", "--once", "--admin", &admin]));
    Watched::line_with(&events.out, "TIME");
    Watched::line_with(&once.out, "TIME");
    drop(first);

    Watched::line_with(&events.err, "reconnecting in");
    let mut once = once;
    let deadline = std::time::Instant::now() + PATIENCE;
    let status = loop {
        if let Some(status) = once.child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "--once did not exit");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(1));

    let second = ServerProcess::start(&["--admin-listen", &admin]);
    Watched::line_with(&events.err, "reconnected");
    let (_held, _) = acquire(second.addr, "after-restart");
    let line = Watched::line_with(&events.out, "after-restart");
    assert!(line.contains("granted") || line.contains("held"), "{line}");
}

/// The operator commands against real protocol v2 sessions: each names a
/// v2 claim by its session and claim id, `kick --claim` and `release` end
/// that claim only (REVOKED; the session lives on), and a v1 holder's row
/// reads `1 - -`.
#[tokio::test]
async fn the_cli_names_v2_claims_and_ends_them_one_at_a_time() {
    use monolock_proto::v2::{Mode, ServerFrame as V2};
    use monolock_testkit::v2::RawV2;

    let server = ServerProcess::start(&["--admin-listen", "127.0.0.1:0"]);
    let (_v1, _) = acquire(server.addr, "v1/lock");
    let (mut a, opened_a) = RawV2::open(server.addr, 30_000).await;
    let (mut b, opened_b) = RawV2::open(server.addr, 30_000).await;
    let (sa, sb) = (opened_a.session, opened_b.session);
    assert!(matches!(
        a.acquire(3, Mode::Wait, "deploy").await,
        V2::Acquired { claim: 3, .. }
    ));
    for claim in [9, 10] {
        assert_eq!(
            b.acquire(claim, Mode::Wait, "deploy").await,
            V2::Waiting { claim }
        );
    }

    let output = server.cli(&["locks"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let out = text(&output.stdout);
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        [
            "NAME", "HOLDER", "IDENTITY", "TOKEN", "HELD", "LEASE", "WAITERS", "PROTOCOL",
            "SESSION", "CLAIM"
        ],
        "{out}"
    );
    let row = |name: &str| {
        lines
            .iter()
            .find(|cells| cells[0] == name)
            .unwrap_or_else(|| panic!("{name} in {out}"))
            .clone()
    };
    let sa_text = sa.to_string();
    assert_eq!(
        row("deploy")[6..],
        ["2", "2", sa_text.as_str(), "3"],
        "{out}"
    );
    assert_eq!(row("v1/lock")[6..], ["0", "1", "-", "-"], "{out}");

    let output = server.cli(&["lock", "deploy"]);
    let out = text(&output.stdout);
    assert!(
        out.contains(&format!("session   {sa}\n")) && out.contains("claim     3\n"),
        "{out}"
    );
    let b_addr = out
        .lines()
        .find(|line| line.starts_with("1  "))
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("first waiter in {out}"))
        .to_owned();
    for (position, claim) in [(1, 9), (2, 10)] {
        let line = out
            .lines()
            .find(|line| line.starts_with(&format!("{position}  ")))
            .unwrap_or_else(|| panic!("waiter {position} in {out}"));
        assert!(
            line.ends_with(&format!("2         {sb}        {claim}")),
            "{line:?}"
        );
    }

    let output = server.cli(&["sessions"]);
    let out = text(&output.stdout);
    let session_b: Vec<&str> = out
        .lines()
        .find(|line| line.starts_with(&format!("{sb} ")))
        .unwrap_or_else(|| panic!("session {sb} in {out}"))
        .split_whitespace()
        .collect();
    assert_eq!(session_b[1], b_addr, "{out}");
    assert_eq!(session_b[session_b.len() - 2..], ["0", "2"], "{out}");

    // kick --claim ends claim 10 alone.
    let output = server.cli(&["kick", "deploy", &b_addr, "--claim", "10"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert_eq!(
        text(&output.stdout),
        format!(
            "removed claim 10 of session {sb} at {b_addr} from the queue of deploy \
             (it was told REVOKED; its session lives on)\n"
        )
    );
    assert!(matches!(b.recv().await, V2::Revoked { claim: 10, .. }));
    assert_eq!(b.ping().await, V2::Pong);
    let output = server.cli(&["kick", "deploy", &b_addr, "--claim", "10"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        text(&output.stderr).contains("has no waiter at"),
        "{}",
        text(&output.stderr)
    );

    // release ends claim 3 alone; claim 9 is pushed the lock.
    let output = server.cli(&["release", "deploy"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let out = text(&output.stdout);
    assert!(
        out.contains(&format!("claim 3 of session {sa}")) && out.contains("REVOKED"),
        "{out}"
    );
    assert!(matches!(a.recv().await, V2::Revoked { claim: 3, .. }));
    assert!(matches!(b.recv().await, V2::Granted { claim: 9, .. }));
    assert_eq!(a.ping().await, V2::Pong);

    // monolock events: the snapshot and the events name the claim.
    let events = Follower::spawn(Command::new(MONOLOCK).args([
        "events",
        "--match",
        "deploy",
        "--admin",
        &server.admin.expect("admin").to_string(),
    ]));
    assert!(events.next_line().starts_with("TIME"));
    let held = events.next_line();
    assert!(
        held.contains("  held  ") && held.contains(&format!("session={sb} claim=9 token=")),
        "{held}"
    );
    assert_eq!(b.release(9).await, V2::Released { claim: 9 });
    let released = events.next_line();
    assert!(
        released.contains(" released ")
            && released.contains(&format!("session={sb} claim=9 token="))
            && released.contains("reason=graceful"),
        "{released}"
    );
}
