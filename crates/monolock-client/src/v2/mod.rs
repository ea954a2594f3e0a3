//! Protocol version 2: one connection is a session carrying many claims.
//!
//! - [`exchange`]: the session's reply matching and timing, pure.
//! - [`session`]: the task that drives one session, and a claim's handle.
//! - [`pool`]: which session takes a claim, when one is opened, and which
//!   addresses speak version 1 only.
//! - [`watch`]: a watch's bounded mailbox.

pub(crate) mod exchange;
pub(crate) mod pool;
pub(crate) mod session;
pub(crate) mod watch;
