//! Test support shared by the monolock crates' tests (never a runtime
//! dependency): a lab PKI made at test time with rcgen, the server's TLS
//! files on disk, and rustls clients.
#![forbid(unsafe_code)]

pub mod pki;
