//! Runs the Java client's tests (clients/java: `mvn -q -B test`, every
//! module, JUnit 5 through Surefire) against this build's `monolock`
//! binary, so that `cargo test --workspace` covers the Java client too.
//! Earlier Surefire reports are removed first (not `mvn clean`, which would
//! pull the jars from under a conformance run using them).
//!
//! The Java tests start the binary named by `MONOLOCK_BIN` themselves and
//! make their own throwaway PKI with the `openssl` command. Maven resolves
//! its plugins and the test dependencies (JUnit, ShedLock, the PostgreSQL
//! driver) from the local repository that `.ci/setup.d/java.sh` fills; the
//! client itself has no runtime dependency. This test fails when Maven or a
//! JDK 17 is missing, when a Java test fails or is skipped, or when none
//! ran.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

const MONOLOCK: &str = env!("CARGO_BIN_EXE_monolock");

fn project() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/java")
}

/// The value of `attribute="N"` in the first `<testsuite` element of a
/// Surefire XML report.
fn count(report: &str, attribute: &str) -> u32 {
    let Some(suite) = report.find("<testsuite") else {
        return 0;
    };
    let head = &report[suite..];
    let head = &head[..head.find('>').unwrap_or(head.len())];
    let key = format!(" {attribute}=\"");
    head.find(&key)
        .and_then(|at| {
            let rest = &head[at + key.len()..];
            rest[..rest.find('"')?].parse().ok()
        })
        .unwrap_or(0)
}

const MODULES: [&str; 2] = ["client", "shedlock"];

#[test]
fn java_client_tests_pass_against_the_real_binary() {
    for module in MODULES {
        let reports = project().join(module).join("target/surefire-reports");
        if let Err(err) = fs::remove_dir_all(&reports)
            && err.kind() != std::io::ErrorKind::NotFound
        {
            panic!("cannot remove {}: {err}", reports.display());
        }
    }
    let output = Command::new("mvn")
        .args(["-q", "-B", "test"])
        .current_dir(project())
        .env("MONOLOCK_BIN", MONOLOCK)
        .env_remove("MONOLOCK_ADDRESS")
        .output()
        .unwrap_or_else(|err| {
            panic!(
                "Maven could not be run ({err}): install Debian's maven and openjdk-17-jdk-headless, \
                 or run `bash .ci/setup.d/java.sh` through .ci/test"
            )
        });
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        output.status.success(),
        "`mvn -q -B test` in clients/java failed"
    );

    let (mut tests, mut skipped, mut failed) = (0, 0, 0);
    for module in MODULES {
        let reports = project().join(module).join("target/surefire-reports");
        let entries = fs::read_dir(&reports)
            .unwrap_or_else(|err| panic!("no Surefire reports in {}: {err}", reports.display()));
        let mut module_tests = 0;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|ext| ext == "xml") {
                let report = fs::read_to_string(&path)
                    .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
                module_tests += count(&report, "tests");
                skipped += count(&report, "skipped");
                failed += count(&report, "failures") + count(&report, "errors");
            }
        }
        assert!(
            module_tests > 0,
            "no Java test ran in clients/java/{module}"
        );
        tests += module_tests;
    }
    println!("Java tests: {tests} run, {failed} failed, {skipped} skipped");
    assert_eq!(failed, 0, "a Java test failed");
    assert_eq!(
        skipped, 0,
        "a Java test was skipped: every one must run here"
    );
}
