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

#[test]
fn completions_and_pages_show_only_what_a_user_can_run() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (output, out, err) = run(&["completions", shell], &[]);
        assert!(output.status.success(), "{shell}: {err}");
        assert!(out.contains("exec"), "{shell}: {out}");
        assert!(
            !out.contains("exec-sentinel"),
            "{shell} offers the internal command"
        );
    }
    // Every page the main page names exists.
    let (_, page, _) = run(&["man"], &[]);
    for word in page.split_whitespace() {
        if let Some(name) = word.strip_prefix("monolock\\-") {
            let name = name.trim_end_matches(['(', '1', ')', ',', '.']);
            if name == "SUBCOMMAND" {
                continue;
            }
            let (output, _, err) = run(&["man", name], &[]);
            assert!(
                output.status.success(),
                "monolock-{name}(1) is named: {err}"
            );
        }
    }
    assert!(!page.contains("monolock\\-help"), "{page}");
    // Pages name the variables, as --help does.
    let (_, page, _) = run(&["man", "exec"], &[]);
    for variable in ["MONOLOCK_ADDRESS", "MONOLOCK_RETRY_FOR", "MONOLOCK_TLS_CA"] {
        assert!(
            page.contains(variable),
            "{variable} missing from monolock-exec(1)"
        );
    }
    let (_, page, _) = run(&["man", "locks"], &[]);
    assert!(page.contains("MONOLOCK_ADMIN_TOKEN_FILE"), "{page}");
}
