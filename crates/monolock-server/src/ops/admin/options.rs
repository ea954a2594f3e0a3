//! What an admin listener is configured with.

use std::sync::Arc;

use super::json::EffectiveConfig;
use crate::{
    AdminIdentities, AdminToken, AllowedHosts, EventHub, ServerHandle, ServerTls,
    ops::http_conn::{HttpLimits, HttpStats},
};

/// What the admin listener serves, beyond the lock table itself.
#[derive(Clone)]
pub struct AdminOptions {
    pub(super) handle: ServerHandle,
    pub(super) config: EffectiveConfig,
    pub(super) commit: String,
    pub(super) events: Option<Arc<EventHub>>,
    pub(super) token: Option<Arc<AdminToken>>,
    pub(super) tls: Option<Arc<ServerTls>>,
    pub(super) allowed_hosts: Arc<AllowedHosts>,
    pub(super) http_limits: HttpLimits,
    pub(super) http_stats: Arc<HttpStats>,
    pub(super) identities: Option<Arc<AdminIdentities>>,
}

impl std::fmt::Debug for AdminOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminOptions")
            .field("config", &self.config)
            .field("events", &self.events.is_some())
            .field("token", &self.token.as_ref().map(|token| token.path()))
            .field("tls", &self.tls.as_ref().map(|tls| tls.is_mutual()))
            .field("allowed_hosts", &self.allowed_hosts)
            .field("http_limits", &self.http_limits)
            .finish_non_exhaustive()
    }
}

impl AdminOptions {
    /// The API over `handle`, showing `config` in `/api/info`; no event
    /// stream, no authentication.
    pub fn new(handle: ServerHandle, config: EffectiveConfig) -> Self {
        Self {
            handle,
            config,
            commit: "unknown".to_owned(),
            events: None,
            token: None,
            tls: None,
            allowed_hosts: Arc::default(),
            http_limits: HttpLimits::default(),
            http_stats: Arc::default(),
            identities: None,
        }
    }

    /// Without a token, only client certificates whose identity
    /// `identities` names are administrators (mTLS; see
    /// [`AdminIdentities`]). With a token, the token decides.
    #[must_use]
    pub fn with_admin_identities(mut self, identities: Arc<AdminIdentities>) -> Self {
        self.identities = Some(identities);
        self
    }

    /// Bounds the listener's connections: header and idle timeouts and a
    /// cap (see [`HttpLimits`]).
    #[must_use]
    pub fn with_http_limits(mut self, limits: HttpLimits) -> Self {
        self.http_limits = limits;
        self
    }

    /// Counts the listener's connections into `stats` (for metrics).
    #[must_use]
    pub fn with_http_stats(mut self, stats: Arc<HttpStats>) -> Self {
        self.http_stats = stats;
        self
    }

    /// Serves `GET /api/events` and the dashboard from `events` (which must
    /// also be one of the server's observers).
    #[must_use]
    pub fn with_events(mut self, events: Arc<EventHub>) -> Self {
        self.events = Some(events);
        self
    }

    /// Requires `Authorization: Bearer <token>` on every request.
    #[must_use]
    pub fn with_token(mut self, token: Arc<AdminToken>) -> Self {
        self.token = Some(token);
        self
    }

    /// Serves HTTPS with `tls` (the protocol's certificate; with its client
    /// CA, every admin client must present a certificate: mTLS).
    #[must_use]
    pub fn with_tls(mut self, tls: Arc<ServerTls>) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Serves these names in `Host` (and as a page's origin) besides the
    /// listener's own (`--admin-allowed-host`); see [`WebGuard`](crate::WebGuard).
    #[must_use]
    pub fn with_allowed_hosts(mut self, allowed: Arc<AllowedHosts>) -> Self {
        self.allowed_hosts = allowed;
        self
    }

    /// The commit `/api/info` names.
    #[must_use]
    pub fn with_commit(mut self, commit: impl Into<String>) -> Self {
        self.commit = commit.into();
        self
    }
}
