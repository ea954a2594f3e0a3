//! The protocol core: what a connection, a claim and a lock are, and the
//! rules between them. Nothing here knows the admin API, the audit log,
//! metrics, the dashboard, TLS files or the ACL file: those observe the
//! core through [`Observer`](events::Observer), read it through
//! [`ServerHandle`](server::ServerHandle), and plug in through the traits
//! of [`config`] ([`Authorizer`](config::Authorizer),
//! [`ProtocolTls`](config::ProtocolTls)).
//!
//! # Rooms
//!
//! - **The table side**, at this level: the lock table (`table.rs`), what
//!   it and a session share (`slot.rs`; for watches, `watch.rs`), the
//!   lease wheel (`leases.rs`),
//!   the startup grace (`grace.rs`), tokens (`token.rs`, `token_floor.rs`,
//!   `clock.rs`) and the events it reports (`events.rs`). It never names
//!   the wire side.
//! - **The wire side**, in [`wire`]: the accept loop, the first frame's
//!   dispatch, the version 1 and version 2 sessions, and what a connection
//!   is.
//! - **The seam** between them: the configuration (`config.rs`), the
//!   state every connection shares (`shared.rs`), admission (the
//!   connection and claim bounds, `admission.rs`) and the handle
//!   (`server.rs`).
//!
//! Core modules reach each other by their paths (`crate::core::...`),
//! never through the crate root, whose names include the operations side;
//! `tests/layering.rs` fails on an import that breaks a rule.
//!
//! # How a session ends: the words for it
//!
//! A session ends once, for one cause, and each layer names that cause in
//! its own terms. From the outside in:
//!
//! | type | who says it | to whom |
//! |---|---|---|
//! | `EndNotice` (`slot.rs`) | the table or the lease wheel | the session task: "you were forced, kicked, expired, or the server is going down" |
//! | `End` (`wire/connection.rs`) | the session task | itself: close quietly, or send this ERROR, drain and close |
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
pub(crate) mod watch;
pub(crate) mod wire;
