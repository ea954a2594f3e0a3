//! The Server-Sent Events reader of monolock-testkit.
#![allow(unused_imports)] // each test binary uses a different subset

pub use monolock_testkit::sse::*;
