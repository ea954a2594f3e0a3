//! The shared protocol vectors of the extension (`vectors/v2x-*.json`):
//! the files are the ones `vectors/v2x.py` writes from its descriptions,
//! and `vectors/check_frames.py`, written apart from it, decodes every
//! frame of them again against docs/protocol.md (see the vectors' README).
//!
//! Both are Python 3 programs with no dependency; a missing `python3`
//! fails these tests rather than skipping them.

use std::{path::PathBuf, process::Command};

fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("vectors")
}

/// Runs `python3 SCRIPT ARGS` in the vectors directory and fails with its
/// output unless it exits 0.
fn run_script(script: &str, args: &[&str]) -> String {
    let dir = vectors_dir();
    let output = Command::new("python3")
        .arg("-B") // no __pycache__ in the source tree
        .arg(dir.join(script))
        .args(args)
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|err| panic!("cannot run python3 {script}: {err}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python3 {script} {args:?} failed ({}):\n{stdout}{stderr}",
        output.status
    );
    stdout
}

#[test]
fn v2x_vectors_are_the_ones_v2x_py_writes() {
    let out = run_script("v2x.py", &["--check"]);
    assert!(out.contains("up to date"), "unexpected output: {out}");
}

#[test]
fn every_frame_of_every_v2x_vector_decodes() {
    let out = run_script("check_frames.py", &[]);
    let files = std::fs::read_dir(vectors_dir())
        .expect("the vectors directory")
        .filter_map(Result::ok)
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with("v2x-") && name.ends_with(".json")
        })
        .count();
    assert!(files >= 19, "only {files} v2x vectors");
    assert!(
        out.starts_with(&format!("{files} vectors, ")) && out.contains(" 0 failed"),
        "check_frames.py did not check all {files} vectors: {out}"
    );
}
