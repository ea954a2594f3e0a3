//! The Node.js form's runtime: `node`, once the client is compiled from the
//! current source and the example's packages (pg, and the client linked
//! from clients/node) are installed (`npm ci` in examples/node, which builds
//! the client through its `prepare` script). `.ci/setup.d/node.sh`
//! installs Node.js and does it ahead.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

/// examples/node.
pub fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("node")
}

/// The Node form of the fenced-postgres recipe.
pub fn fenced_postgres_script() -> PathBuf {
    example_dir().join("fenced-postgres.mjs")
}

/// Runs `npm ARGS` in `dir`; panics with what to do when it fails.
fn npm(dir: &Path, args: &[&str]) {
    let status = Command::new("npm")
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap_or_else(|err| {
            panic!(
                "npm could not be run ({err}): bash .ci/setup.d/node.sh installs Node.js and npm"
            )
        });
    assert!(
        status.success(),
        "npm {} in {} failed",
        args.join(" "),
        dir.display()
    );
}

/// `node`, with the client and the example's packages in place.
pub fn command() -> Command {
    static READY: OnceLock<()> = OnceLock::new();
    READY.get_or_init(|| {
        let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/node");
        if client.join("node_modules/typescript").is_dir() {
            npm(&client, &["run", "build"]);
        } else {
            npm(&client, &["ci", "--no-audit", "--no-fund"]);
        }
        if !example_dir().join("node_modules/pg").is_dir() {
            npm(&example_dir(), &["ci", "--no-audit", "--no-fund"]);
        }
    });
    let mut command = Command::new("node");
    command.env_remove("NODE_OPTIONS");
    command
}
