//! The Python form's interpreter: the virtual environment that
//! `.ci/setup.d/psycopg.sh` makes in the target directory (psycopg from
//! PyPI), else `python3` on `PATH`. The tests install nothing: without
//! psycopg they fail with one message naming the setup file.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::Command,
    sync::OnceLock,
};

/// The setup step that installs psycopg for these tests.
const SETUP: &str = ".ci/setup.d/psycopg.sh";

/// The interpreter that runs the Python form, checked once to import
/// psycopg and the monolock client.
pub fn interpreter() -> &'static Path {
    static CHECKED: OnceLock<PathBuf> = OnceLock::new();
    CHECKED.get_or_init(|| {
        let python = venv_python().unwrap_or_else(|| PathBuf::from("python3"));
        let out = Command::new(&python)
            .args(["-c", "import psycopg, monolock"])
            .env("PYTHONPATH", path(&[]))
            .output();
        let missing = match out {
            Ok(out) if out.status.success() => None,
            // The last line of the traceback: "No module named 'psycopg'".
            Ok(out) => Some(
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .to_owned(),
            ),
            Err(err) => Some(err.to_string()),
        };
        if let Some(why) = missing {
            panic!(
                "psycopg is missing for {}: run `source .ci/lib.sh; source {SETUP}` \
                 (bash .ci/test does), which installs psycopg[binary] into \
                 <target dir>/python-venv ({why})",
                python.display()
            );
        }
        python
    })
}

/// A command running [`interpreter`] with the monolock client importable
/// from source and no bytecode written into the tree.
pub fn command() -> Command {
    let mut command = Command::new(interpreter());
    command
        .env("PYTHONPATH", path(&[]))
        .env("PYTHONDONTWRITEBYTECODE", "1");
    command
}

/// A `PYTHONPATH` of `extra` and the monolock client's source.
pub fn path(extra: &[&str]) -> OsString {
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python/src");
    let dirs = extra.iter().map(PathBuf::from).chain([client]);
    std::env::join_paths(dirs).expect("a PYTHONPATH")
}

/// `<target dir>/python-venv/bin/python3`, where the setup step puts it.
fn venv_python() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    // <target>/<profile>/deps/<test executable>
    let python = exe.ancestors().nth(3)?.join("python-venv/bin/python3");
    python.is_file().then_some(python)
}
