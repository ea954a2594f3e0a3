//! The real `monolock` binary as a process: signals, exit codes, bad flags.

mod common;

use std::{
    io::{Read, Write},
    net::TcpStream,
    process::Command,
};

use common::{MONOLOCK, ServerProcess, acquire, read_frame};
use monolock_proto::{ErrorCode, ServerFrame};

#[test]
fn sigterm_sends_error_0x01_and_exits_zero() {
    let mut server = ServerProcess::start(&[]);
    let (mut holder, reply) = acquire(server.addr, "deploy");
    assert!(matches!(reply, ServerFrame::Acquired { .. }), "{reply:?}");
    let (mut waiter, reply) = acquire(server.addr, "deploy");
    assert_eq!(reply, ServerFrame::Waiting);

    server.signal("TERM");
    for stream in [&mut holder, &mut waiter] {
        match read_frame(stream) {
            ServerFrame::Error { code, .. } => assert_eq!(code, ErrorCode::SHUTTING_DOWN),
            other => panic!("expected ERROR 0x01, got {other:?}"),
        }
        let mut rest = [0u8; 16];
        assert_eq!(
            stream.read(&mut rest).expect("read EOF"),
            0,
            "closed after ERROR"
        );
    }
    let status = server.wait_exit();
    assert_eq!(status.code(), Some(0), "graceful shutdown exits 0");
    // The protocol port is closed.
    assert!(TcpStream::connect(server.addr).is_err());
}

#[test]
fn sigint_also_shuts_down_gracefully() {
    let mut server = ServerProcess::start(&[]);
    let (mut holder, _) = acquire(server.addr, "cron");
    server.signal("INT");
    assert!(matches!(
        read_frame(&mut holder),
        ServerFrame::Error {
            code: ErrorCode::SHUTTING_DOWN,
            ..
        }
    ));
    assert_eq!(server.wait_exit().code(), Some(0));
}

#[test]
fn sighup_does_not_stop_the_server() {
    let server = ServerProcess::start(&[]);
    let (mut holder, reply) = acquire(server.addr, "hup");
    let ServerFrame::Acquired { token } = reply else {
        panic!("{reply:?}")
    };
    server.signal("HUP");
    server.wait_log("SIGHUP");
    holder.write_all(&[0x02]).expect("heartbeat");
    assert_eq!(read_frame(&mut holder), ServerFrame::Acquired { token });
}

/// Each bad value exits non-zero at once with exactly one line on stderr.
#[test]
fn bad_flag_values_fail_with_one_line() {
    /// Arguments, environment, and the flag the error line must name.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case] = &[
        (&["--io-timeout", "soon"], &[], "--io-timeout"),
        (&["--io-timeout", "0s"], &[], "--io-timeout"),
        (&["--listen", "localhost"], &[], "--listen"),
        (&["--log-level", "chatty"], &[], "--log-level"),
        (&["--log-format", "xml"], &[], "--log-format"),
        (&[], &[("MONOLOCK_IO_TIMEOUT", "5 parsecs")], "--io-timeout"),
        (&["--no-such-flag"], &[], "--no-such-flag"),
    ];
    for (args, env, mentions) in cases {
        let output = Command::new(MONOLOCK)
            .arg("serve")
            .args(*args)
            .envs(env.iter().copied())
            .output()
            .expect("run monolock");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {stderr}");
        assert_eq!(
            stderr.lines().count(),
            1,
            "{args:?}: one line, got {stderr:?}"
        );
        assert!(stderr.contains(mentions), "{args:?}: {stderr}");
    }
}

#[test]
fn a_port_in_use_fails_with_one_clear_line() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let output = Command::new(MONOLOCK)
        .args([
            "serve",
            "--listen",
            &addr,
            "--log-level",
            "error",
            "--log-format",
            "text",
        ])
        .output()
        .expect("run monolock");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("monolock:"))
        .collect();
    assert_eq!(ours.len(), 1, "{stderr}");
    assert!(ours[0].contains(&addr), "{stderr}");
}

#[test]
fn flag_beats_env_beats_default() {
    // The env value is invalid: if the flag did not win, startup would fail.
    // (That env alone fails startup: see bad_flag_values_fail_with_one_line.)
    let server =
        ServerProcess::start_with_env(&["--io-timeout", "2s"], &[("MONOLOCK_IO_TIMEOUT", "bogus")]);
    drop(server);
    let output = Command::new(MONOLOCK)
        .args(["serve", "-h"])
        .output()
        .expect("run monolock");
    let help = String::from_utf8_lossy(&output.stdout);
    for needle in [
        "MONOLOCK_LISTEN_ADDRESS",
        "MONOLOCK_IO_TIMEOUT",
        "MONOLOCK_LOG_LEVEL",
        "MONOLOCK_LOG_FORMAT",
        "127.0.0.1:7070",
    ] {
        assert!(help.contains(needle), "serve -h lacks {needle}:\n{help}");
    }
}
