//! Lock names: exact UTF-8 bytes, 1..=255 of them.

use std::{borrow::Borrow, fmt, sync::Arc};

use crate::ErrorCode;

/// The longest lock name in bytes. A protocol constant, not a setting.
pub const MAX_NAME_LEN: usize = 255;

/// Why a byte string is not a lock name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name has no bytes.
    #[error("lock name is empty")]
    Empty,
    /// The name has more than [`MAX_NAME_LEN`] bytes.
    #[error("lock name is {len} bytes long; the limit is {MAX_NAME_LEN}")]
    TooLong {
        /// The length that was given.
        len: usize,
    },
    /// The bytes are not UTF-8.
    #[error("lock name is not valid UTF-8")]
    NotUtf8,
}

impl NameError {
    /// The ERROR code a server answers this with.
    pub const fn code(&self) -> ErrorCode {
        match self {
            Self::Empty => ErrorCode::EMPTY_NAME,
            Self::TooLong { .. } => ErrorCode::NAME_TOO_LONG,
            Self::NotUtf8 => ErrorCode::NAME_NOT_UTF8,
        }
    }
}

/// A valid lock name: 1..=255 bytes of UTF-8, compared byte for byte.
///
/// Names are never trimmed, case-folded or normalised: `a`, `A` and ` a`
/// are three different locks. Cloning is cheap (a shared pointer).
///
/// ```
/// use monolock_proto::{LockName, NameError};
///
/// assert_eq!(LockName::new("deploy/web").unwrap().as_str(), "deploy/web");
/// assert_ne!(LockName::new("a").unwrap(), LockName::new("A").unwrap());
/// assert_eq!(LockName::new(""), Err(NameError::Empty));
/// assert!(LockName::new("x".repeat(256)).is_err());
/// assert!(LockName::from_bytes(&[0xff]).is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(Arc<str>);

impl LockName {
    /// Validates a name given as text.
    ///
    /// # Errors
    /// [`NameError::Empty`] or [`NameError::TooLong`].
    pub fn new(name: impl AsRef<str>) -> Result<Self, NameError> {
        let name = name.as_ref();
        check_len(name.len())?;
        Ok(Self(Arc::from(name)))
    }

    /// Validates a name given as raw bytes, as it arrives on the wire.
    ///
    /// # Errors
    /// [`NameError::Empty`], [`NameError::TooLong`] or [`NameError::NotUtf8`],
    /// checked in that order.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, NameError> {
        check_len(bytes.len())?;
        let text = std::str::from_utf8(bytes).map_err(|_| NameError::NotUtf8)?;
        Ok(Self(Arc::from(text)))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name's bytes, exactly as sent on the wire.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The length in bytes (1..=255).
    #[allow(clippy::len_without_is_empty)] // a LockName is never empty
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// Checks a name length against the protocol's bounds.
pub(crate) const fn check_len(len: usize) -> Result<(), NameError> {
    if len == 0 {
        Err(NameError::Empty)
    } else if len > MAX_NAME_LEN {
        Err(NameError::TooLong { len })
    } else {
        Ok(())
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for LockName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for LockName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for LockName {
    type Error = NameError;
    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl TryFrom<String> for LockName {
    type Error = NameError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_and_exact_bytes() {
        assert!(LockName::new("x".repeat(255)).is_ok());
        assert_eq!(
            LockName::new("x".repeat(256)),
            Err(NameError::TooLong { len: 256 })
        );
        // 85 three-byte characters are exactly 255 bytes.
        assert_eq!(LockName::new("€".repeat(85)).unwrap().len(), 255);
        assert!(LockName::new("€".repeat(86)).is_err());
        assert_ne!(LockName::new(" a").unwrap(), LockName::new("a").unwrap());
        assert_eq!(LockName::from_bytes(b"\xc3"), Err(NameError::NotUtf8));
        assert_eq!(NameError::NotUtf8.code(), ErrorCode::NAME_NOT_UTF8);
    }
}
