//! The wire side of the core: a connection from accept to close. The
//! accept loop hands each connection to [`dispatch`], which reads its
//! first frame and serves a version 1 ([`v1`]) or version 2 ([`v2`])
//! session on it; what both share is in [`connection`]. It reaches the
//! table side only through [`Shared`](crate::core::shared::Shared) and the
//! table's own calls; the table side never names anything here.
//!
//! Imports run one way: `dispatch` → `v1`, `v2` → `connection`.

pub(crate) mod accept;
pub(crate) mod connection;
pub(crate) mod dispatch;
pub(crate) mod v1;
pub(crate) mod v2;
