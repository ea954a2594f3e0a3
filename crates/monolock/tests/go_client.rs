//! Runs the Go client's checks and tests (clients/go: `go vet ./...`, then
//! `go test ./...`) against this build's `monolock` binary, so that
//! `cargo test --workspace` covers the Go client too.
//!
//! The Go tests start the binary named by `MONOLOCK_BIN` themselves and
//! make their own throwaway PKI. The module is standard library only, so
//! the Go tool is kept off the network (`GOPROXY=off`, `GOTOOLCHAIN=local`).
//! This test fails when Go is missing, when vet reports anything, when a
//! Go test fails or is skipped, or when none ran.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

const MONOLOCK: &str = env!("CARGO_BIN_EXE_monolock");

fn go_module() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/go")
}

/// `go ARGS` in the module, with the build cache and GOPATH under the
/// target directory unless the environment names them.
fn go(args: &[&str]) -> Output {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("go");
    let mut command = Command::new("go");
    command
        .args(args)
        .current_dir(go_module())
        .env("MONOLOCK_BIN", MONOLOCK)
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env_remove("MONOLOCK_ADDRESS");
    for (var, dir) in [("GOCACHE", "cache"), ("GOPATH", "path")] {
        if std::env::var_os(var).is_none() {
            command.env(var, scratch.join(dir));
        }
    }
    match command.output() {
        Ok(output) => output,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => panic!(
            "the Go toolchain is missing (`go` is not on PATH): install Debian's golang-go \
             (Go >= 1.19), or run `bash .ci/test`, which installs it through .ci/setup.d/go.sh"
        ),
        Err(err) => panic!("cannot run `go {}`: {err}", args.join(" ")),
    }
}

fn show(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    format!("{stdout}{stderr}")
}

#[test]
fn go_client_is_vet_clean_and_its_tests_pass_against_the_real_binary() {
    let vet = go(&["vet", "./..."]);
    let report = show(&vet);
    assert!(vet.status.success(), "`go vet ./...` in clients/go failed");
    assert!(report.trim().is_empty(), "`go vet` reported something");

    let test = go(&["test", "-count=1", "-v", "./..."]);
    let report = show(&test);
    assert!(test.status.success(), "the Go client's tests failed");
    let passed = report
        .lines()
        .filter(|line| line.trim_start().starts_with("--- PASS"))
        .count();
    assert!(passed > 0, "no Go test ran");
    assert!(
        !report
            .lines()
            .any(|line| line.trim_start().starts_with("--- SKIP")),
        "a Go test was skipped: every one must run here"
    );
}
