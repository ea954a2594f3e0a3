//! Bearer-token authentication for the admin listener.
//!
//! The token is the content of a file (surrounding whitespace trimmed), so it
//! never appears in a process list or an environment dump, and SIGHUP
//! re-reads it (see [`Reloader`](crate::Reloader)): rotate by writing the
//! new token and sending SIGHUP. Every request but the page's static shell
//! must carry `Authorization: Bearer <token>`; the comparison takes the same
//! time whatever prefix matches (`subtle`), and a refusal is a 401 counted
//! in `monolock_admin_unauthorized_total`.

use std::{
    io,
    path::{Path, PathBuf},
    sync::{
        Arc, PoisonError, RwLock,
        atomic::{AtomicU64, Ordering},
    },
};

use subtle::ConstantTimeEq;

use crate::ops::acl::AclFileAuthorizer;

/// The admin token file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AdminTokenError {
    /// The file could not be read, or is over
    /// [`MAX_CONFIG_FILE_BYTES`](crate::MAX_CONFIG_FILE_BYTES).
    #[error("cannot read the admin token file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The file holds no token (or one with inner whitespace or control
    /// characters, which no `Authorization` header could carry).
    #[error("the admin token file {} {problem}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, e.g. "is empty".
        problem: &'static str,
    },
}

/// The admin token, reloadable, with a count of refused requests.
#[derive(Debug)]
pub struct AdminToken {
    path: PathBuf,
    token: RwLock<Arc<[u8]>>,
    unauthorized: Arc<AtomicU64>,
}

impl AdminToken {
    /// Reads the token from `path`.
    ///
    /// # Errors
    /// [`AdminTokenError`] if the file cannot be read or holds no usable token.
    pub fn load(path: impl Into<PathBuf>) -> Result<Self, AdminTokenError> {
        let path = path.into();
        let token = read_token(&path)?;
        Ok(Self {
            path,
            token: RwLock::new(token),
            unauthorized: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The file the token is read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file again; on failure the previous token stays in force.
    ///
    /// # Errors
    /// As [`AdminToken::load`].
    pub fn reload(&self) -> Result<(), AdminTokenError> {
        let token = read_token(&self.path)?;
        *self.token.write().unwrap_or_else(PoisonError::into_inner) = token;
        Ok(())
    }

    /// True if `authorization` (the header's value) is `Bearer <token>`.
    /// Counts a refusal.
    pub fn check(&self, authorization: Option<&[u8]>) -> bool {
        let presented = authorization
            .and_then(|value| strip_prefix_ignore_case(value, b"bearer "))
            .map(<[u8]>::trim_ascii);
        let expected = Arc::clone(&self.token.read().unwrap_or_else(PoisonError::into_inner));
        let ok = presented.is_some_and(|presented| bool::from(presented.ct_eq(&expected)));
        if !ok {
            self.unauthorized.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// Requests refused so far.
    pub fn unauthorized(&self) -> u64 {
        self.unauthorized.load(Ordering::Relaxed)
    }

    /// A shared view of [`AdminToken::unauthorized`], for metrics.
    pub fn unauthorized_counter(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.unauthorized)
    }
}

/// Which client certificates are administrators on an admin listener
/// served with mTLS and no token: those whose identity is named by
/// `--admin-identity` (exactly) or by the ACL file's `admin` list (a
/// pattern, re-read on SIGHUP). Every other certificate, however valid,
/// is refused (403), and the refusal is logged with its identity.
#[derive(Debug, Default)]
pub struct AdminIdentities {
    named: Vec<String>,
    acl: Option<Arc<AclFileAuthorizer>>,
    refused: AtomicU64,
}

impl AdminIdentities {
    /// The identities named on the command line.
    pub fn new(named: impl IntoIterator<Item = String>) -> Self {
        Self {
            named: named.into_iter().filter(|name| !name.is_empty()).collect(),
            acl: None,
            refused: AtomicU64::new(0),
        }
    }

    /// Also the identities the ACL file's `admin` list names.
    #[must_use]
    pub fn with_acl(mut self, acl: Arc<AclFileAuthorizer>) -> Self {
        self.acl = Some(acl);
        self
    }

    /// True if `identity` is an administrator; counts a refusal.
    pub fn allows(&self, identity: &str) -> bool {
        let ok = !identity.is_empty()
            && (self.named.iter().any(|name| name == identity)
                || self.acl.as_ref().is_some_and(|acl| acl.is_admin(identity)));
        if !ok {
            self.refused.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }

    /// True if no identity can be an administrator now (none named, and
    /// the ACL's `admin` list empty or absent).
    pub fn names_none(&self) -> bool {
        self.named.is_empty()
            && self
                .acl
                .as_ref()
                .is_none_or(|acl| acl.current().admin_patterns() == 0)
    }

    /// Requests refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

fn strip_prefix_ignore_case<'a>(value: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    let head = value.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &value[prefix.len()..])
}

fn read_token(path: &Path) -> Result<Arc<[u8]>, AdminTokenError> {
    let bytes =
        crate::ops::config_file::read_bounded(path).map_err(|source| AdminTokenError::Read {
            path: path.to_owned(),
            source,
        })?;
    let token = bytes.trim_ascii();
    let invalid = |problem| AdminTokenError::Invalid {
        path: path.to_owned(),
        problem,
    };
    if token.is_empty() {
        return Err(invalid("is empty"));
    }
    if token.iter().any(|b| !b.is_ascii_graphic()) {
        return Err(invalid(
            "holds whitespace, control or non-ASCII characters inside the token",
        ));
    }
    Ok(Arc::from(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_checked_and_refusals_counted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        std::fs::write(&path, "s3cret-token\n").expect("write");
        let token = AdminToken::load(&path).expect("load");
        assert!(token.check(Some(b"Bearer s3cret-token")));
        assert!(token.check(Some(b"bearer s3cret-token")));
        assert!(!token.check(Some(b"Bearer s3cret-toke")));
        assert!(!token.check(Some(b"Bearer s3cret-token2")));
        assert!(!token.check(Some(b"Basic s3cret-token")));
        assert!(!token.check(None));
        assert_eq!(token.unauthorized(), 4);

        std::fs::write(&path, "rotated").expect("write");
        token.reload().expect("reload");
        assert!(token.check(Some(b"Bearer rotated")));
        assert!(!token.check(Some(b"Bearer s3cret-token")));

        std::fs::write(&path, "  \n").expect("write");
        let err = token.reload().expect_err("empty");
        assert!(err.to_string().ends_with("is empty"), "{err}");
        assert!(token.check(Some(b"Bearer rotated")), "kept the old token");
    }
}
