//! Exit codes: the same as `monolock exec`'s, so that one monitoring rule
//! covers the shell and the Rust forms of a job.

use std::{fmt, process::ExitCode};

/// Bad flags or a missing setting (EX_USAGE).
pub const USAGE: u8 = 64;
/// The lock server or the database could not be reached (EX_UNAVAILABLE).
pub const UNAVAILABLE: u8 = 69;
/// The lock was busy and the program was told not to wait (EX_TEMPFAIL).
pub const NOT_ACQUIRED: u8 = 75;
/// The lock was lost, or the database refused the write as fenced off.
pub const LOST: u8 = 79;
/// Any other failure (a database error during the write).
pub const FAILURE: u8 = 1;

/// Why a program stops: one line for stderr and the exit code.
#[derive(Debug)]
pub struct Failure {
    /// The process exit code.
    pub code: u8,
    /// What happened, in one line.
    pub message: String,
}

impl Failure {
    /// A failure with this code and message.
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Prints `PROGRAM: message` for a failure and turns the outcome into the
/// process's exit code: the programs end here, never in a panic.
pub fn report(program: &str, outcome: Result<(), Failure>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("{program}: {failure}");
            ExitCode::from(failure.code)
        }
    }
}

/// Error text with its whole `source()` chain, on one line.
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
