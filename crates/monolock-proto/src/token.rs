//! The fencing-token layout.
//!
//! A server issues `token = max(previous + 1, unix_seconds << 20)`: one
//! strictly increasing sequence per process whose high bits follow the wall
//! clock, so a restarted or standby server continues above the old one as
//! long as grants are more than a second apart and its clock is not behind.

/// Tokens carry the unix second of their grant shifted left by this much.
pub const TOKEN_TIME_SHIFT: u32 = 20;

/// The smallest token a server may issue in the given unix second.
///
/// ```
/// use monolock_proto::{token_floor_for_unix_seconds, token_unix_seconds};
///
/// let token = token_floor_for_unix_seconds(1_786_190_400);
/// assert_eq!(token_unix_seconds(token), 1_786_190_400);
/// assert!(token < 1 << 53); // safe as a JSON number for centuries
/// ```
pub const fn token_floor_for_unix_seconds(unix_seconds: u64) -> u64 {
    unix_seconds.saturating_mul(1 << TOKEN_TIME_SHIFT)
}

/// Roughly the unix second at which a token was granted.
pub const fn token_unix_seconds(token: u64) -> u64 {
    token >> TOKEN_TIME_SHIFT
}
