//! Reloading on SIGHUP: TLS files, the ACL file, the audit log file, the
//! admin token file.
//!
//! Each part reloads on its own; a part that fails keeps its previous, good
//! state and the failure is logged. A working configuration is never
//! replaced by a broken one.

use std::sync::Arc;

use tracing::{error, info};

use crate::{
    AclError, AclFileAuthorizer, AdminToken, AdminTokenError, AuditError, AuditLog, ServerTls,
    TlsError,
};

/// What can be reloaded, and the entry point the signal handler calls.
///
/// ```no_run
/// # async fn example(tls: std::sync::Arc<monolock_server::ServerTls>) {
/// use monolock_server::Reloader;
///
/// let reloader = Reloader::default().with_tls(tls);
/// let report = reloader.reload().await; // on every SIGHUP
/// assert!(report.is_ok(), "{:?}", report.errors());
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct Reloader {
    tls: Option<Arc<ServerTls>>,
    acl: Option<Arc<AclFileAuthorizer>>,
    audit: Option<Arc<AuditLog>>,
    admin_token: Option<Arc<AdminToken>>,
}

/// The outcome of one reload, per part (`None`: the part is not configured).
#[derive(Debug)]
pub struct ReloadReport {
    /// Re-reading the TLS certificate, key and client CA.
    pub tls: Option<Result<(), TlsError>>,
    /// Re-reading the ACL file; the number of rules now in force.
    pub acl: Option<Result<usize, AclError>>,
    /// Reopening the audit log file.
    pub audit: Option<Result<(), AuditError>>,
    /// Re-reading the admin token file.
    pub admin_token: Option<Result<(), AdminTokenError>>,
}

impl ReloadReport {
    /// True if no configured part failed.
    pub fn is_ok(&self) -> bool {
        self.errors().is_empty()
    }

    /// One line per failed part.
    pub fn errors(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if let Some(Err(err)) = &self.tls {
            errors.push(err.to_string());
        }
        if let Some(Err(err)) = &self.acl {
            errors.push(err.to_string());
        }
        if let Some(Err(err)) = &self.audit {
            errors.push(err.to_string());
        }
        if let Some(Err(err)) = &self.admin_token {
            errors.push(err.to_string());
        }
        errors
    }
}

impl Reloader {
    /// Reloads this TLS configuration.
    #[must_use]
    pub fn with_tls(mut self, tls: Arc<ServerTls>) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Reloads this ACL.
    #[must_use]
    pub fn with_acl(mut self, acl: Arc<AclFileAuthorizer>) -> Self {
        self.acl = Some(acl);
        self
    }

    /// Reopens this audit log.
    #[must_use]
    pub fn with_audit(mut self, audit: Arc<AuditLog>) -> Self {
        self.audit = Some(audit);
        self
    }

    /// Re-reads this admin token file.
    #[must_use]
    pub fn with_admin_token(mut self, token: Arc<AdminToken>) -> Self {
        self.admin_token = Some(token);
        self
    }

    /// Reloads every configured part and logs each outcome. New TLS
    /// connections and new ACQUIREs use the new state at once; open sessions
    /// are untouched.
    pub async fn reload(&self) -> ReloadReport {
        let tls = self.tls.as_ref().map(|tls| {
            let result = tls.reload();
            match &result {
                Ok(()) => info!(cert = %tls.files().cert.display(), "reloaded TLS files"),
                Err(err) => {
                    error!(error = %err, "TLS reload failed; keeping the previous configuration")
                }
            }
            result
        });
        let acl = self.acl.as_ref().map(|acl| {
            let result = acl.reload();
            match &result {
                Ok(rules) => info!(file = %acl.path().display(), rules, "reloaded the ACL"),
                Err(err) => error!(error = %err, "ACL reload failed; keeping the previous rules"),
            }
            result
        });
        let audit = match &self.audit {
            Some(audit) => {
                let result = audit.reopen().await;
                match &result {
                    Ok(()) => info!(audit_log = %audit.target(), "reopened the audit log"),
                    Err(err) => {
                        error!(error = %err, "audit log reopen failed; writing to the old handle")
                    }
                }
                Some(result)
            }
            None => None,
        };
        let admin_token = self.admin_token.as_ref().map(|token| {
            let result = token.reload();
            match &result {
                Ok(()) => info!(file = %token.path().display(), "reloaded the admin token"),
                Err(err) => {
                    error!(error = %err, "admin token reload failed; keeping the previous token")
                }
            }
            result
        });
        ReloadReport {
            tls,
            acl,
            audit,
            admin_token,
        }
    }
}
