//! The lab PKI shared by the monolock crates' tests.

pub use monolock_testkit::pki::{Ca, Files};
