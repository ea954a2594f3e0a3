//! Runs the Node.js client's test suite (clients/node, `node --test`)
//! against this build's `monolock` binary, so that `cargo test --workspace`
//! covers the Node client too.
//!
//! It installs the package's development dependencies (TypeScript and
//! Node's type declarations, from package-lock.json) when they are missing,
//! compiles, and runs the suite with the binary and a lab PKI (made here
//! with the testkit) in the environment. It fails when Node.js 20 or newer
//! is missing, when any test fails or is skipped, or when none ran.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use monolock_testkit::pki::Files;

const MONOLOCK: &str = env!("CARGO_BIN_EXE_monolock");

/// The identity in the client certificate (the tests expect it in the
/// admin API).
const CLIENT_IDENTITY: &str = "spiffe://test/node-client";

/// The oldest Node.js major the client supports.
const NODE_MAJOR: u32 = 20;

fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/node")
}

/// The major version `node --version` prints (`v20.20.2`), or why not.
fn node_major() -> Result<u32, String> {
    let output = Command::new("node")
        .arg("--version")
        .output()
        .map_err(|err| format!("node could not be run: {err}"))?;
    let version = String::from_utf8_lossy(&output.stdout);
    version
        .trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|major| major.parse().ok())
        .ok_or_else(|| format!("node --version printed {version:?}"))
}

/// Runs `npm ARGS` in the package, showing its output; panics on failure.
fn npm(args: &[&str]) {
    let status = Command::new("npm")
        .args(args)
        .current_dir(package_dir())
        .status()
        .unwrap_or_else(|err| {
            panic!("npm could not be run ({err}): bash .ci/setup.d/node.sh installs it")
        });
    assert!(status.success(), "npm {} failed", args.join(" "));
}

/// The count after `# NAME` in the runner's summary (`# pass 54`).
fn summary(report: &str, name: &str) -> Option<u32> {
    report.lines().find_map(|line| {
        let rest = line.strip_prefix("# ")?.strip_prefix(name)?;
        rest.trim().parse().ok()
    })
}

#[test]
fn node_client_suite_passes_against_the_real_binary() {
    match node_major() {
        Ok(major) if major >= NODE_MAJOR => {}
        Ok(major) => panic!(
            "Node.js {major} is too old: the Node client needs {NODE_MAJOR} or newer (bash .ci/setup.d/node.sh)"
        ),
        Err(why) => panic!(
            "{why}: the Node client's tests need Node.js {NODE_MAJOR} or newer and npm (bash .ci/setup.d/node.sh)"
        ),
    }
    if !package_dir().join("node_modules/typescript").is_dir() {
        npm(&["ci", "--no-audit", "--no-fund"]);
    }
    let pki = Files::for_client_suite("node", CLIENT_IDENTITY);
    let output = Command::new("npm")
        .args(["test"])
        .current_dir(package_dir())
        .env("MONOLOCK_BIN", MONOLOCK)
        .env("MONOLOCK_TEST_PKI", pki.path(""))
        .env_remove("MONOLOCK_ADDRESS")
        .env_remove("NODE_OPTIONS")
        .output()
        .expect("npm runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(output.status.success(), "the Node tests failed");
    assert!(
        summary(&stdout, "pass").unwrap_or(0) > 0,
        "no Node test passed"
    );
    assert_eq!(summary(&stdout, "fail"), Some(0), "a Node test failed");
    assert_eq!(
        summary(&stdout, "skipped"),
        Some(0),
        "a Node test was skipped: every one must run here"
    );
}
