//! The lab PKI shared by the monolock crates' tests.
#![allow(unused_imports)] // each test binary uses a different subset

pub use monolock_testkit::pki::*;
