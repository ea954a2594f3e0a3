//! The Java form's runtime: `java` with the recipe's classes, the client
//! and the PostgreSQL JDBC driver on its class path, once Maven has built
//! them from the current source (`mvn package` in clients/java, whose
//! reactor lists examples/java). `.ci/setup.d/java.sh` installs the JDK and
//! Maven and resolves the dependencies ahead.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

/// examples/java.
pub fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("java")
}

/// The recipe's main class.
pub const FENCED_POSTGRES: &str = "dev.monolock.examples.FencedPostgres";

/// The test program that runs the recipe's `write` once per token.
pub const BOUNDARY_WRITES: &str = "dev.monolock.examples.BoundaryWrites";

/// `java` with the example's class path, built once per test binary.
pub fn command(main_class: &str) -> Command {
    static READY: OnceLock<()> = OnceLock::new();
    READY.get_or_init(|| {
        let reactor = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/java");
        let status = Command::new("mvn")
            .args([
                "-q",
                "-B",
                "-DskipTests",
                "-pl",
                "../../examples/java",
                "-am",
                "package",
            ])
            .current_dir(&reactor)
            .status()
            .unwrap_or_else(|err| {
                panic!(
                    "mvn could not be run ({err}): bash .ci/setup.d/java.sh installs a JDK 17 and Maven"
                )
            });
        assert!(status.success(), "building examples/java with Maven failed");
    });
    let target = example_dir().join("target");
    let classpath = format!(
        "{}:{}:{}",
        target.join("classes").display(),
        target.join("test-classes").display(),
        target.join("lib/*").display()
    );
    let mut command = Command::new("java");
    command
        .args(["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp"])
        .arg(classpath)
        .arg(main_class)
        .env_remove("JAVA_TOOL_OPTIONS");
    command
}
