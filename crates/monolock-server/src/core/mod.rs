//! The protocol core: what a connection, a claim and a lock are, and the
//! rules between them. Nothing here knows the admin API, the audit log,
//! metrics or the dashboard: those observe the core through
//! [`Observer`](events::Observer) and read it through
//! [`ServerHandle`](server::ServerHandle).
//!
//! # How a session ends: the words for it
//!
//! A session ends once, for one cause, and each layer names that cause in
//! its own terms. From the outside in:
//!
//! | type | who says it | to whom |
//! |---|---|---|
//! | `EndNotice` (`slot.rs`) | the table or the lease wheel | the session task: "you were forced, kicked, expired, or the server is going down" |
//! | `End` (`session.rs`) | the session task | itself: close quietly, or send this ERROR, drain and close |
//! | [`ReleaseReason`](events::ReleaseReason) (`events.rs`) | the session task | observers (audit log, metrics, live events): why the claim ended |
//! | [`Ending`](table::Ending) (`table.rs`) | the table | an administrator whose request found the session already ending |
//! | `LossReason` (the Rust client) | the client | the program holding the guard: why the claim is gone |
//!
//! On the wire only two of these show: ERROR `0x01` (shutdown) and `0x02`
//! (closed by an administrator); expiry and io-timeout close the
//! connection without a frame (docs/protocol.md, "The session").

pub(crate) mod admission;
pub(crate) mod clock;
pub(crate) mod config;
pub(crate) mod events;
pub(crate) mod grace;
pub(crate) mod leases;
pub(crate) mod server;
pub(crate) mod shared;
pub(crate) mod slot;
pub(crate) mod table;
pub(crate) mod token;
pub(crate) mod token_floor;
pub(crate) mod wire;
