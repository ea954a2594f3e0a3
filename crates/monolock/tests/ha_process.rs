//! The high-availability flags of the real binary: `--token-floor`,
//! `--startup-grace`, and readiness for systemd's `Type=notify`.

mod common;

use std::{os::unix::net::UnixDatagram, process::Command};

use common::{MONOLOCK, PATIENCE, ServerProcess, acquire};
use monolock_proto::ServerFrame;
use monolock_testkit::http;

/// Acquires `name` and returns the token, waiting for the push if the
/// previous holder's close has not reached the server yet.
/// Frames are read byte-exactly, so a push that arrives in the same read
/// as the WAITING is not lost.
fn hold(addr: std::net::SocketAddr, name: &str) -> (std::net::TcpStream, u64) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let mut frame = vec![0x01, 0x01];
    frame.extend_from_slice(&30_000u32.to_be_bytes());
    frame.extend_from_slice(&(name.len() as u16).to_be_bytes());
    frame.extend_from_slice(name.as_bytes());
    stream.write_all(&frame).expect("send");
    loop {
        let mut kind = [0u8; 1];
        stream.read_exact(&mut kind).expect("a reply");
        match kind[0] {
            0x11 => continue, // WAITING: the push follows
            0x12 => {
                let mut token = [0u8; 8];
                stream.read_exact(&mut token).expect("token");
                return (stream, u64::from_be_bytes(token));
            }
            other => panic!("unexpected frame type {other:#04x}"),
        }
    }
}

/// Runs `monolock serve` with `args`, expecting it to fail at startup;
/// returns the exit code and stderr.
fn fails_at_startup(args: &[&str]) -> (i32, String) {
    let output = Command::new(MONOLOCK)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .output()
        .expect("run monolock serve");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code().unwrap_or(-1), stderr)
}

#[test]
fn bad_grace_and_bad_floor_files_are_one_line_at_startup() {
    for bad in ["soon", "1x", "3d"] {
        let (code, stderr) = fails_at_startup(&["--startup-grace", bad]);
        assert_eq!(code, 64, "--startup-grace {bad}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("--startup-grace"), "{stderr}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let corrupt = dir.path().join("corrupt");
    std::fs::write(&corrupt, "garbage\n").expect("write");
    let unwritable = dir.path().join("no-such-dir").join("tokens");
    for path in [&corrupt, &unwritable] {
        let text = path.to_str().expect("utf-8 path");
        let (code, stderr) = fails_at_startup(&["--token-floor", text]);
        assert_eq!(code, 1, "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(text), "the line names the file: {stderr}");
    }
}

/// SIGKILL and an immediate restart, with and without a floor file: the
/// first token of the new process is above every token of the old one
/// (without a file, thanks to the start one second ahead).
#[test]
fn tokens_rise_across_a_kill_and_a_fast_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let floor = dir.path().join("tokens");
    let floor_arg = floor.to_str().expect("utf-8 path");
    for args in [&[][..], &["--token-floor", floor_arg][..]] {
        let mut highest = 0;
        for _ in 0..3 {
            let mut server = ServerProcess::start(args);
            let (stream, first) = hold(server.addr, "fence");
            assert!(first > highest, "{args:?}: {first} <= {highest}");
            drop(stream);
            for _ in 0..20 {
                let (stream, token) = hold(server.addr, "fence");
                highest = highest.max(token);
                drop(stream);
            }
            server.child.kill().expect("SIGKILL");
            server.wait_exit();
        }
    }
    let text = std::fs::read_to_string(&floor).expect("the missing file was created");
    assert!(text.starts_with("monolock-token-floor 1\n"), "{text}");
}

/// With `NOTIFY_SOCKET` set, READY=1 arrives once the listeners are bound.
#[test]
fn readiness_is_sent_to_the_notify_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notify");
    let socket = UnixDatagram::bind(&path).expect("bind");
    socket.set_read_timeout(Some(PATIENCE)).expect("timeout");
    let notify = path.to_str().expect("utf-8 path");
    let server = ServerProcess::start_with_env(
        &["--ops-listen", "127.0.0.1:0", "--startup-grace", "2s"],
        &[("NOTIFY_SOCKET", notify)],
    );
    let mut buf = [0u8; 256];
    let n = socket.recv(&mut buf).expect("a notification");
    let message = String::from_utf8_lossy(&buf[..n]);
    assert!(message.lines().any(|l| l == "READY=1"), "{message:?}");
    // The ops port was bound before READY=1 (it answers now), and
    // readiness reports the grace.
    let ops = server.ops.expect("ops");
    let (_, body) = http::get(ops, "/readyz");
    assert!(body.contains("startup grace: "), "{body}");
    let (_stream, reply) = acquire(server.addr, "g");
    assert_eq!(reply, ServerFrame::Waiting);
}
