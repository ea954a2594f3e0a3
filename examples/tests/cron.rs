//! The crontab line and the systemd units of the cron recipe: the crontab
//! command runs as cron would run it, and the units pass
//! `systemd-analyze verify`.

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    time::Duration,
};

use common::{Lab, workspace_binary};
use monolock_client::Client;
use monolock_examples::fence;

const DIR: &str = env!("CARGO_MANIFEST_DIR");
const INSTALLED_JOB: &str = "/usr/local/bin/fenced-postgres.sh";
const INSTALLED_MONOLOCK: &str = "/usr/local/bin/monolock";

/// The command field of the crontab's job line (`/etc/cron.d` format: five
/// time fields and a user before it), with the job's installed path
/// pointing at the example.
fn crontab_command() -> String {
    let crontab = std::fs::read_to_string(Path::new(DIR).join("cron/nightly-import.crontab"))
        .expect("read the crontab");
    let line = crontab
        .lines()
        .find(|line| line.contains("monolock exec"))
        .expect("a job line");
    let command = line.splitn(7, ' ').nth(6).expect("a command field");
    command.replace(INSTALLED_JOB, &format!("{DIR}/fenced-postgres.sh"))
}

/// Runs `command` with `/bin/sh`, as cron does, with `monolock` on PATH.
fn run_as_cron(command: &str, server: &str, lab: &Lab) -> Output {
    let monolock = workspace_binary("monolock");
    let bin = monolock.parent().expect("bin dir");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("/bin/sh")
        .args(["-c", command])
        .env("PATH", path)
        .env("MONOLOCK_ADDRESS", server)
        .env("DATABASE_URL", lab.postgres.url())
        .env_remove("PAUSE_BEFORE_WRITE")
        .output()
        .expect("run sh")
}

#[test]
fn the_crontab_line_runs_once_skips_quietly_when_busy_and_fails_loudly() {
    let lab = Lab::start(fence::SCHEMA);
    let command = crontab_command();
    let server = lab.addr.to_string();

    // Busy: another host holds the lock. exec says 75, the line says 0, and
    // the job never ran.
    let client = Client::new(server.clone());
    let other = lab
        .runtime
        .block_on(client.acquire("nightly-import", Duration::from_secs(30)))
        .expect("hold the lock");
    let (exec_part, _) = command.split_once(';').expect("exec; status handling");
    let out = run_as_cron(exec_part, &server, &lab);
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let out = run_as_cron(&command, &server, &lab);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("holding"));
    lab.runtime.block_on(other.release()).expect("release");
    // The server sees the close a moment later; until then the lock is busy.
    common::eventually("the lock freed", || {
        lab.handle.lock("nightly-import").is_none().then_some(())
    });

    // Free: this host runs the job, which writes under its token.
    let out = run_as_cron(&command, &server, &lab);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let token = common::number_after(&stdout, "wrote nightly-import under token ");
    let stored = lab
        .runtime
        .block_on(fence::current_token(&lab.db, "nightly-import"));
    assert_eq!(stored.expect("read"), Some(token));

    // The lock server is down: 69, which cron mails and monitoring sees.
    let down = format!("127.0.0.1:{}", common::free_port());
    let out = run_as_cron(&command, &down, &lab);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
}

#[test]
fn the_systemd_units_verify() {
    let service = std::fs::read_to_string(Path::new(DIR).join("systemd/nightly-import.service"))
        .expect("read the service");
    assert!(service.contains("monolock exec --no-wait"));
    assert!(service.contains("\nSuccessExitStatus=75\n"));
    let Some(analyze) = find_on_path("systemd-analyze") else {
        eprintln!("systemd-analyze is not installed: the units were not verified");
        return;
    };
    // verify checks that ExecStart's program exists: point it at the build.
    let dir = tempfile::tempdir().expect("tempdir");
    let monolock = workspace_binary("monolock");
    std::fs::write(
        dir.path().join("nightly-import.service"),
        service.replace(INSTALLED_MONOLOCK, &monolock.display().to_string()),
    )
    .expect("write the service");
    std::fs::copy(
        Path::new(DIR).join("systemd/nightly-import.timer"),
        dir.path().join("nightly-import.timer"),
    )
    .expect("copy the timer");
    let out = Command::new(analyze)
        .args([
            "verify",
            "--man=no",
            "nightly-import.service",
            "nightly-import.timer",
        ])
        .current_dir(dir.path())
        .output()
        .expect("run systemd-analyze");
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}
