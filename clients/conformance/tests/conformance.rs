//! The conformance suite as a test: every client in the tree, every
//! scenario, against the real `monolock` binary (see the crate's docs and
//! DRIVER.md). One line per client and scenario, then `N passed, N failed`;
//! the exit status fails the test if any line failed.
//!
//! Arguments filter the lines (`cargo test -p monolock-conformance --test
//! conformance -- python fifo`); `--skip TEXT` leaves lines out.

use std::{path::Path, process::ExitCode};

fn main() -> ExitCode {
    monolock_conformance::run(monolock_conformance::Setup {
        rust_driver: env!("CARGO_BIN_EXE_conformance-driver-rust").into(),
        repo: Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."),
        args: std::env::args().skip(1).collect(),
    })
}
