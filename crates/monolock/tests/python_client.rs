//! Runs the Python client's test suite (clients/python/tests, standard
//! library `unittest`) against this build's `monolock` binary, so that
//! `cargo test --workspace` covers the Python client too.
//!
//! The suite gets the binary and the lab PKI (made here with the
//! testkit, written to a temporary directory) through environment
//! variables; its output is shown, and this test fails when any Python
//! test fails, is skipped, or none ran.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use monolock_testkit::pki::Files;

const MONOLOCK: &str = env!("CARGO_BIN_EXE_monolock");

/// The identity in the client certificate (the tests expect it in the
/// admin API).
const CLIENT_IDENTITY: &str = "spiffe://test/python-client";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The count from unittest's `Ran N tests` line.
fn tests_run(report: &str) -> Option<u32> {
    report.lines().find_map(|line| {
        line.strip_prefix("Ran ")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

#[test]
fn python_client_suite_passes_against_the_real_binary() {
    let pki = Files::for_client_suite("python", CLIENT_IDENTITY);
    let python = repo_root().join("clients/python");
    let output = Command::new("python3")
        .args(["-X", "dev", "-m", "unittest", "discover", "-v"])
        .args(["-s", "tests", "-t", "tests"])
        .current_dir(&python)
        .env("PYTHONPATH", python.join("src"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("MONOLOCK_BIN", MONOLOCK)
        .env("MONOLOCK_TEST_PKI", pki.path(""))
        .env_remove("MONOLOCK_ADDRESS")
        .output()
        .expect("python3 runs (Python >= 3.9 is needed for the Python client's tests)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // unittest reports on stderr; show everything, as cargo shows a test's output.
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(output.status.success(), "the Python tests failed");
    let ran = tests_run(&stderr).unwrap_or(0);
    assert!(ran > 0, "no Python test ran");
    // The summary reads `OK (skipped=N)` when a test was skipped.
    assert!(
        !stderr.lines().any(|line| line.starts_with("OK (skipped=")),
        "a Python test was skipped: every one must run here"
    );
}
