//! Valid protocol frames, built by `monolock-proto` itself.
#![allow(dead_code)] // each test binary uses a different subset

use monolock_proto::{ClientFrame, Lease, LockName};

/// The bytes of a valid ACQUIRE.
pub fn acquire(name: &str, lease_ms: u32) -> Vec<u8> {
    ClientFrame::acquire(
        Lease::from_millis(lease_ms).expect("positive lease"),
        LockName::new(name).expect("valid lock name"),
    )
    .to_bytes()
}

/// The bytes of a HEARTBEAT.
pub fn heartbeat() -> Vec<u8> {
    ClientFrame::Heartbeat.to_bytes()
}
