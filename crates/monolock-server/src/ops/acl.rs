//! The access-control list: which mTLS identity may claim which locks.
//!
//! ```json
//! {"rules": [{"identity": "spiffe://prod/worker/*", "locks": ["nightly/*", "shard-?"]}],
//!  "admin": ["spiffe://prod/operator/*"]}
//! ```
//!
//! `admin` (optional) names the identities whose certificates are
//! administrators on an admin listener served with mTLS and no token
//! (`--admin-tls --tls-client-ca`), beside those named by
//! `--admin-identity`. It grants no lock.
//!
//! Deny by default. A lock is allowed if *any* rule whose identity pattern
//! matches the client's identity has a lock pattern that matches the lock
//! name. Rule order is irrelevant and there are no deny rules. Patterns use
//! the [`Glob`] language.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, PoisonError, RwLock},
};

use monolock_proto::LockName;
use serde::Deserialize;
use tracing::warn;

use crate::{Authorizer, Glob};

/// Why an ACL file was refused. Displays as one line naming the file.
#[derive(Debug, thiserror::Error)]
pub enum AclError {
    /// The file could not be read, is over
    /// [`MAX_CONFIG_FILE_BYTES`](crate::MAX_CONFIG_FILE_BYTES), or is not
    /// UTF-8.
    #[error("ACL file {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not JSON of the expected shape.
    #[error("ACL file {}: {source}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where and why parsing failed.
        #[source]
        source: serde_json::Error,
    },
    /// The `admin` list is invalid.
    #[error("ACL file {}: admin {problem}", path.display())]
    Admin {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A rule is incomplete.
    #[error("ACL file {}: rule {rule}: {problem}", path.display())]
    Rule {
        /// The file.
        path: PathBuf,
        /// The rule's position, counting from 1.
        rule: usize,
        /// What is wrong with it.
        problem: &'static str,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AclFile {
    rules: Vec<RuleFile>,
    #[serde(default)]
    admin: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default)]
    identity: Option<String>,
    #[serde(default)]
    locks: Option<Vec<String>>,
}

/// One rule: an identity pattern and the lock patterns it grants.
#[derive(Clone, Debug)]
pub struct AclRule {
    /// Which identities the rule applies to.
    pub identity: Glob,
    /// Which locks those identities may claim.
    pub locks: Vec<Glob>,
}

/// A parsed, valid ACL.
///
/// ```
/// use monolock_server::Acl;
///
/// let acl = Acl::from_json(r#"{"rules":[{"identity":"spiffe://prod/worker/*","locks":["nightly/*","shard-?"]}]}"#).unwrap();
/// assert!(acl.allows("spiffe://prod/worker/7", "nightly/import"));
/// assert!(acl.allows("spiffe://prod/worker/7", "shard-3"));
/// assert!(!acl.allows("spiffe://prod/worker/7", "shard-31"));
/// assert!(!acl.allows("spiffe://dev/worker/7", "nightly/import"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct Acl {
    rules: Vec<AclRule>,
    admins: Vec<Glob>,
}

impl Acl {
    /// Parses an ACL from JSON text.
    ///
    /// # Errors
    /// As [`Acl::load`], with an empty path.
    pub fn from_json(text: &str) -> Result<Self, AclError> {
        Self::parse(Path::new(""), text)
    }

    /// Reads and validates an ACL file.
    ///
    /// # Errors
    /// [`AclError::Read`] if the file cannot be read, [`AclError::Parse`] for
    /// bad JSON or unknown fields, [`AclError::Rule`] for a rule without an
    /// identity or without lock patterns.
    pub fn load(path: &Path) -> Result<Self, AclError> {
        let text =
            crate::ops::config_file::read_bounded_text(path).map_err(|source| AclError::Read {
                path: path.to_owned(),
                source,
            })?;
        Self::parse(path, &text)
    }

    fn parse(path: &Path, text: &str) -> Result<Self, AclError> {
        let file: AclFile = serde_json::from_str(text).map_err(|source| AclError::Parse {
            path: path.to_owned(),
            source,
        })?;
        let mut rules = Vec::with_capacity(file.rules.len());
        for (index, rule) in file.rules.into_iter().enumerate() {
            let problem = |problem| AclError::Rule {
                path: path.to_owned(),
                rule: index + 1,
                problem,
            };
            let identity = match rule.identity {
                Some(identity) if !identity.is_empty() => identity,
                _ => return Err(problem("has no identity")),
            };
            let locks = match rule.locks {
                Some(locks) if !locks.is_empty() => locks,
                _ => return Err(problem("has no lock patterns")),
            };
            if locks.iter().any(String::is_empty) {
                return Err(problem("has an empty lock pattern"));
            }
            rules.push(AclRule {
                identity: Glob::new(&identity),
                locks: locks.iter().map(|lock| Glob::new(lock)).collect(),
            });
        }
        if file.admin.iter().any(String::is_empty) {
            return Err(AclError::Admin {
                path: path.to_owned(),
                problem: "has an empty identity",
            });
        }
        let admins = file
            .admin
            .iter()
            .map(|identity| Glob::new(identity))
            .collect();
        Ok(Self { rules, admins })
    }

    /// How many patterns the `admin` list holds.
    pub fn admin_patterns(&self) -> usize {
        self.admins.len()
    }

    /// True if the file's `admin` list names `identity` (never the empty
    /// identity of a client without a certificate).
    pub fn is_admin(&self, identity: &str) -> bool {
        !identity.is_empty() && self.admins.iter().any(|glob| glob.matches(identity))
    }

    /// The rules, in file order.
    pub fn rules(&self) -> &[AclRule] {
        &self.rules
    }

    /// True if some rule matching `identity` has a pattern matching `lock`.
    pub fn allows(&self, identity: &str, lock: &str) -> bool {
        self.rules.iter().any(|rule| {
            rule.identity.matches(identity) && rule.locks.iter().any(|glob| glob.matches(lock))
        })
    }
}

/// An [`Acl`] read from a file that can be re-read while the server runs.
///
/// A failed reload keeps the rules in force: a working configuration is
/// never replaced by a broken one.
#[derive(Debug)]
pub struct AclFileAuthorizer {
    path: PathBuf,
    current: RwLock<Arc<Acl>>,
}

impl AclFileAuthorizer {
    /// Loads `path`.
    ///
    /// # Errors
    /// As [`Acl::load`].
    pub fn load(path: impl Into<PathBuf>) -> Result<Self, AclError> {
        let path = path.into();
        let acl = Acl::load(&path)?;
        Ok(Self {
            path,
            current: RwLock::new(Arc::new(acl)),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Re-reads the file; on success the new rules apply to every ACQUIRE
    /// from now on (sessions already admitted are not re-checked). Returns
    /// the number of rules now in force.
    ///
    /// # Errors
    /// As [`Acl::load`]; the previous rules stay in force.
    pub fn reload(&self) -> Result<usize, AclError> {
        let acl = Acl::load(&self.path)?;
        let rules = acl.rules.len();
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(acl);
        self.warn_if_no_rules();
        Ok(rules)
    }

    /// Logs a warning if the rules in force are none (`{"rules": []}`): a
    /// valid ACL that denies every ACQUIRE, which is rarely what was meant.
    /// [`AclFileAuthorizer::reload`] calls it; call it once at startup,
    /// after logging has started. True if it warned.
    pub fn warn_if_no_rules(&self) -> bool {
        let empty = self.current().rules.is_empty();
        if empty {
            warn!(
                file = %self.path.display(),
                "the ACL file has no rules: every ACQUIRE is denied; add a rule for the identities that may lock"
            );
        }
        empty
    }

    /// True if the rules in force name `identity` an administrator.
    pub fn is_admin(&self, identity: &str) -> bool {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .is_admin(identity)
    }

    /// The rules in force.
    pub fn current(&self) -> Arc<Acl> {
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Authorizer for AclFileAuthorizer {
    fn allows(&self, identity: &str, lock: &LockName) -> bool {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .allows(identity, lock.as_str())
    }
}

impl Authorizer for Acl {
    fn allows(&self, identity: &str, lock: &LockName) -> bool {
        Acl::allows(self, identity, lock.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(json: &str) -> String {
        Acl::parse(Path::new("/etc/monolock/acl.json"), json)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn invalid_files_name_the_file_and_the_reason_in_one_line() {
        let cases = [
            (r#"{"rules":[{"locks":["a"]}]}"#, "rule 1: has no identity"),
            (
                r#"{"rules":[{"identity":"","locks":["a"]}]}"#,
                "rule 1: has no identity",
            ),
            (
                r#"{"rules":[{"identity":"x","locks":["a"]},{"identity":"y"}]}"#,
                "rule 2: has no lock patterns",
            ),
            (
                r#"{"rules":[{"identity":"y","locks":[]}]}"#,
                "rule 1: has no lock patterns",
            ),
            (
                r#"{"rules":[{"identity":"y","locks":"a"}]}"#,
                "invalid type",
            ),
            (
                r#"{"rules":[{"identity":"y","lock":["a"]}]}"#,
                "unknown field",
            ),
            (r#"{"rules":["#, "EOF"),
            ("", "EOF"),
        ];
        for (json, reason) in cases {
            let err = error_of(json);
            assert!(
                err.starts_with("ACL file /etc/monolock/acl.json: "),
                "{err}"
            );
            assert!(err.contains(reason), "{json}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }

    #[test]
    fn no_rules_denies_everything() {
        let acl = Acl::from_json(r#"{"rules":[]}"#).unwrap();
        assert!(!acl.allows("anyone", "anything"));
    }
}
