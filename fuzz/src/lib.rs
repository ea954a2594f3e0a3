//! The properties the fuzz targets check. The same file is compiled into
//! `monolock-faults`' corpus-replay test, so a normal `cargo test` replays
//! every input in `fuzz/regressions/` against exactly these checks.
#![forbid(unsafe_code)]

pub mod checks;
