//! The command line itself: help, version, completions, manual pages and
//! environment variables, run as the real binary.

use std::process::{Command, Output};

const MONOLOCK: &str = env!("CARGO_BIN_EXE_monolock");

fn run(args: &[&str], env: &[(&str, &str)]) -> (Output, String, String) {
    let output = Command::new(MONOLOCK)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("ran monolock");
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    let err = String::from_utf8_lossy(&output.stderr).into_owned();
    (output, out, err)
}

#[test]
fn no_arguments_print_the_help_as_a_usage_error() {
    let (output, out, err) = run(&[], &[]);
    assert_eq!(output.status.code(), Some(64), "{err}");
    assert!(out.is_empty());
    for word in [
        "Usage: monolock <COMMAND>",
        "exec",
        "serve",
        "completions",
        "man",
    ] {
        assert!(err.contains(word), "{word} missing from:\n{err}");
    }
    assert!(
        !err.contains("exec-sentinel"),
        "internal commands stay hidden"
    );
}

#[test]
fn the_version_names_the_commit() {
    let (output, out, _) = run(&["-V"], &[]);
    assert!(output.status.success());
    assert!(
        out.starts_with("monolock 0.") && out.contains("(commit "),
        "{out}"
    );
}

#[test]
fn completions_and_manual_pages_come_from_the_flags() {
    let (output, out, err) = run(&["completions", "bash"], &[]);
    assert!(output.status.success(), "{err}");
    assert!(
        out.contains("--kill-grace") && out.contains("--retry-for"),
        "{out}"
    );
    let (output, out, err) = run(&["man", "exec"], &[]);
    assert!(output.status.success(), "{err}");
    assert!(out.contains(".TH monolock-exec 1"), "{out}");
    assert!(out.contains("conflict\\-exit\\-code"), "{out}");
    let (output, out, _) = run(&["man"], &[]);
    assert!(output.status.success());
    assert!(out.contains(".TH monolock 1"), "{out}");
    let (output, _, err) = run(&["man", "nope"], &[]);
    assert_eq!(output.status.code(), Some(64), "{err}");
}

#[test]
fn an_empty_variable_means_unset() {
    // Nothing listens on port 1: the command is refused before running,
    // after the variables parsed (empty: defaults) and the connect failed.
    let blank = [
        ("MONOLOCK_LEASE", ""),
        ("MONOLOCK_WAIT", ""),
        ("MONOLOCK_KILL_GRACE", ""),
        ("MONOLOCK_RETRY", ""),
        ("MONOLOCK_RETRY_FOR", ""),
        ("MONOLOCK_ADDRESS", "127.0.0.1:1"),
    ];
    let (output, out, err) = run(&["exec", "x", "--", "echo", "RAN"], &blank);
    assert_eq!(output.status.code(), Some(69), "{err}");
    assert!(err.contains("could not connect"), "{err}");
    assert!(out.is_empty());
    // A value that is set is used, and checked.
    let (output, _, err) = run(
        &["exec", "x", "--", "true"],
        &[("MONOLOCK_KILL_GRACE", "580000000000y")],
    );
    assert_eq!(output.status.code(), Some(64), "{err}");
    assert!(
        err.contains("--kill-grace") && err.contains("too long"),
        "{err}"
    );
}
