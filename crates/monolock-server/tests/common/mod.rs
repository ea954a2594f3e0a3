//! The shared helpers of monolock-testkit: an in-process server on
//! 127.0.0.1:0, a raw-bytes peer, `eventually` and the one patience.
#![allow(unused_imports)] // each test binary uses a different subset

pub use monolock_testkit::{
    PATIENCE, Peer, TestServer, acquire_bytes, eventually, patience::within,
};
