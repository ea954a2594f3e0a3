//! The one table of clients held to the suite, and how each is prepared
//! (once per run) and started (once per driver).
//!
//! A client joins the suite with one entry here and a driver that speaks
//! `DRIVER.md`. An entry whose file is absent from the tree is not run (the
//! client has not landed yet); once the file is there, everything the
//! client needs must work: a missing toolchain, a failed build or a driver
//! that does not start fails every scenario of that client. Nothing is
//! ever skipped.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use crate::{Check, Failure, Lab, driver::Driver, driver::Launch};

/// A client of the suite.
pub struct ClientSpec {
    /// The name printed on every line of its run on protocol v2 (`rust`,
    /// `python`, ...).
    pub name: &'static str,
    /// The name of its run forced to protocol v1 (`open` with `force_v1`).
    pub name_v1: &'static str,
    /// A file, relative to the repository, whose presence puts the client
    /// in the suite; `None`: always in it.
    pub present_if: Option<&'static str>,
    /// Builds what its driver needs, once per run, and says how to start
    /// the driver; `Err` says what failed and what to install or run.
    pub prepare: fn(&Lab) -> Result<Launch, String>,
}

/// Every client, in the order the report lists them.
pub const CLIENTS: &[ClientSpec] = &[
    ClientSpec {
        name: "rust",
        name_v1: "rust-v1",
        present_if: None,
        prepare: |lab| Ok(Launch::program(&lab.rust_driver)),
    },
    ClientSpec {
        name: "python",
        name_v1: "python-v1",
        present_if: Some("clients/python/src/monolock/__init__.py"),
        prepare: prepare_python,
    },
    ClientSpec {
        name: "go",
        name_v1: "go-v1",
        present_if: Some("clients/go/go.mod"),
        prepare: |lab| {
            let driver = lab.scratch.path().join("go-driver");
            let dir = lab.repo_path("clients/go");
            let mut build = Command::new("go");
            build
                .args(["build", "-o"])
                .arg(&driver)
                .arg("./cmd/monolock-conformance-driver")
                .current_dir(&dir);
            run_step(build, "go", "build the Go driver")?;
            Ok(Launch::program(driver))
        },
    },
    ClientSpec {
        name: "node",
        name_v1: "node-v1",
        present_if: Some("clients/node/package.json"),
        prepare: |lab| {
            let dir = lab.repo_path("clients/node");
            if !dir.join("node_modules").is_dir() {
                let mut install = Command::new("npm");
                install.arg("ci").current_dir(&dir);
                run_step(install, "npm", "install the Node client's dependencies")?;
            }
            let mut build = Command::new("npm");
            build.args(["run", "build"]).current_dir(&dir);
            run_step(build, "npm", "build the Node client")?;
            if !dir.join("dist/conformance/driver.js").is_file() {
                return Err("`npm run build` made no dist/conformance/driver.js: \
                            is clients/node/conformance/driver.ts missing?"
                    .into());
            }
            Ok(Launch::program("node")
                .arg("dist/conformance/driver.js")
                .cwd(dir))
        },
    },
    ClientSpec {
        name: "java",
        name_v1: "java-v1",
        present_if: Some("clients/java/pom.xml"),
        prepare: prepare_java,
    },
];

impl ClientSpec {
    /// Whether the client is in the tree (and so in the suite).
    pub fn present(&self, repo: &Path) -> bool {
        self.present_if.is_none_or(|file| repo.join(file).is_file())
    }
}

/// A client after its preparation step, in one of its two runs: on
/// protocol v2 (its default), or forced to v1.
#[derive(Clone)]
pub struct Prepared {
    /// Its entry in [`CLIENTS`].
    pub spec: &'static ClientSpec,
    /// How to start its driver, or why it cannot be started.
    pub launch: Result<Launch, String>,
    /// Every `open` of its drivers asks for protocol v1 (`force_v1`).
    pub force_v1: bool,
}

impl Prepared {
    /// The name of this run (`rust`, `rust-v1`, ...).
    pub fn name(&self) -> &'static str {
        if self.force_v1 {
            self.spec.name_v1
        } else {
            self.spec.name
        }
    }

    /// Starts driver number `n` of this client for a scenario.
    pub fn driver(&self, lab: &Lab, n: usize) -> Check<Driver> {
        let label = format!("{}#{n}", self.name());
        match &self.launch {
            Ok(launch) => Driver::spawn(self.name(), label, launch, &lab.monolock, self.force_v1),
            Err(why) => Err(Failure::of(
                self.name(),
                format!("the {} client could not be prepared: {why}", self.spec.name),
            )),
        }
    }

    /// Starts `count` drivers of this client, numbered from `first`.
    pub fn drivers(&self, lab: &Lab, first: usize, count: usize) -> Check<Vec<Driver>> {
        (first..first + count)
            .map(|n| self.driver(lab, n))
            .collect()
    }
}

/// The Python driver: the interpreter `python3` on `PATH` names (asked
/// once, so that no wrapper such as a pyenv shim runs for every driver)
/// running the driver from source.
fn prepare_python(lab: &Lab) -> Result<Launch, String> {
    let mut ask = Command::new("python3");
    ask.args([
        "-c",
        "import sys; sys.exit('Python 3.9 or later is needed') if sys.version_info < (3, 9) \
         else print(sys.executable)",
    ]);
    let interpreter = run_step(ask, "python3", "find Python 3.9 or later")?;
    let interpreter = interpreter.trim();
    if interpreter.is_empty() {
        return Err("python3 does not name its own executable (sys.executable is empty)".into());
    }
    let src: PathBuf = lab.repo_path("clients/python/src");
    Ok(Launch::program(interpreter)
        .arg(lab.repo_path("clients/python/conformance/driver.py"))
        .env("PYTHONPATH", src)
        .env("PYTHONDONTWRITEBYTECODE", "1"))
}

/// The Java driver: the client and driver jars Maven packages in
/// clients/java (tests skipped: `java_client.rs` runs them), started on a
/// small heap with a fixed set of JVM threads so that thread counts read
/// from /proc measure the client alone.
fn prepare_java(lab: &Lab) -> Result<Launch, String> {
    let dir = lab.repo_path("clients/java");
    let mut package = Command::new("mvn");
    package
        .args([
            "-q",
            "-B",
            "-DskipTests",
            "-pl",
            "testkit,client,conformance",
            "package",
        ])
        .current_dir(&dir);
    run_step(package, "mvn", "package the Java client and its driver")?;
    let jars = [
        dir.join("testkit/target/monolock-testkit-0.1.0.jar"),
        dir.join("client/target/monolock-client-0.1.0.jar"),
        dir.join("conformance/target/monolock-conformance-0.1.0.jar"),
    ];
    if let Some(missing) = jars.iter().find(|jar| !jar.is_file()) {
        return Err(format!("`mvn package` made no {}", missing.display()));
    }
    let classpath = std::env::join_paths(&jars).map_err(|err| format!("the jars' paths: {err}"))?;
    Ok(Launch::program("java")
        .arg("-XX:+UseSerialGC")
        .arg("-XX:TieredStopAtLevel=1")
        .arg("-XX:-UseDynamicNumberOfCompilerThreads")
        .arg("-Xmx128m")
        .arg("-cp")
        .arg(classpath)
        .arg("dev.monolock.conformance.Driver"))
}

/// Runs one preparation command and returns its standard output; `Err`
/// names it, with the end of its output, or says that `tool` is missing.
fn run_step(mut command: Command, tool: &str, what: &str) -> Result<String, String> {
    let shown = format!("{command:?}");
    let output = command.output().map_err(|err| {
        if err.kind() == std::io::ErrorKind::NotFound {
            format!("cannot {what}: `{tool}` is not installed or not on PATH ({err})")
        } else {
            format!("cannot {what}: {shown}: {err}")
        }
    })?;
    if output.status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let tail: Vec<&str> = text.lines().rev().take(15).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(format!(
        "cannot {what}: {shown} exited with {}: {}",
        output.status,
        tail.join(" | ")
    ))
}
