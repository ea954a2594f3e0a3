//! Records the git commit the binary is built from, for `monolock -V` and the
//! `monolock_build_info` metric: `env!("MONOLOCK_GIT_COMMIT")` in the crate.
//! A build outside a git checkout (a source tarball) says `unknown`, unless
//! the builder sets MONOLOCK_GIT_COMMIT itself.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=MONOLOCK_GIT_COMMIT");
    let commit = std::env::var("MONOLOCK_GIT_COMMIT")
        .ok()
        .filter(|commit| !commit.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=MONOLOCK_GIT_COMMIT={commit}");
    // Build again when HEAD moves: a checkout of another branch changes HEAD,
    // a new commit changes the branch's ref (loose or packed).
    for path in ["HEAD", "packed-refs"] {
        if let Some(path) = git(&["rev-parse", "--git-path", path]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(path) = git(&["rev-parse", "--git-path", &reference])
    {
        println!("cargo:rerun-if-changed={path}");
    }
}
