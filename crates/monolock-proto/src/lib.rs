//! The monolock wire protocol, versions 1 and 2 (the latter in [`v2`],
//! its extension for lock values and observers in [`ext`]).
//!
//! This crate is the single source of the wire format: frame types, their
//! byte layout, the error codes and their classes, the lock-name rules and
//! the fencing-token layout. It does no I/O; servers, clients, fuzzers and
//! tests in other languages' ports all build on these functions.
//!
//! TCP is a stream, so decoding is incremental: every decoder takes the bytes
//! received so far and answers "need more", "here is one frame and how many
//! bytes it used", or a typed error. No input makes a decoder panic.
//!
//! ```
//! use monolock_proto::{decode_request, ClientFrame, LockName, Phase, Lease};
//!
//! let name = LockName::new("nightly/import").unwrap();
//! let bytes = ClientFrame::acquire(Lease::from_millis(2000).unwrap(), name.clone()).to_bytes();
//! // Bytes may arrive in pieces: a prefix is "not yet a frame".
//! assert_eq!(decode_request(&bytes[..5], Phase::AwaitingAcquire).unwrap(), None);
//! let (frame, used) = decode_request(&bytes, Phase::AwaitingAcquire).unwrap().unwrap();
//! assert_eq!(used, bytes.len());
//! assert_eq!(frame, ClientFrame::Acquire { lease: Lease::from_millis(2000).unwrap(), name });
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error_code;
pub mod ext;
mod frame;
mod name;
mod token;
pub mod v2;

pub use error_code::{ErrorClass, ErrorCode};
pub use frame::{
    ACQUIRE_HEADER_LEN, AcquireHeader, ClientFrame, DecodeError, Lease, MAX_ERROR_REASON_LEN,
    PROTOCOL_VERSION, Phase, RequestError, ServerFrame, acquired_frame, decode_acquire_header,
    decode_request, decode_response, msg, waiting_frame,
};
pub use name::{LockName, MAX_NAME_LEN, NameError};
pub use token::{TOKEN_TIME_SHIFT, token_floor_for_unix_seconds, token_unix_seconds};
