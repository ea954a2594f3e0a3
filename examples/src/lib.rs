//! The recipes of `docs/recipes.md` as code a user can copy: a job that
//! fences its PostgreSQL write with the lock's token (`fenced-postgres`) and
//! leader election (`leader`). This library holds what both programs share:
//! the exit codes, the database connection and the SQL, which lives in
//! `examples/sql/` so that the docs and the tests read the very same text.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cli;
pub mod db;
pub mod exit;
pub mod fence;
pub mod leader;
