//! The whole server as `monolock serve` runs it: the lock server with its
//! ops endpoint, admin API and audit log, started together and stopped in
//! one order (see [`Service`]).

use std::{future::Future, io, sync::Arc, time::Duration};

use tokio::{net::TcpListener, task::JoinHandle};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::{
    AclFileAuthorizer, AdminIdentities, AdminToken, AllowedHosts, AuditLog, EventHub, HttpLimits,
    HttpStats, Metrics, Observer, Observers, Reloader, Server, ServerConfig, ServerHandle,
    ServerTls,
    ops::admin::{self, AdminOptions, EffectiveConfig},
    ops::{self, OPS_SHUTDOWN_GRACE, OpsOptions},
};

/// The listeners a [`Service`] serves, already bound (tests bind port 0).
#[derive(Debug)]
pub struct Listeners {
    /// The lock protocol.
    pub protocol: TcpListener,
    /// `/metrics`, `/healthz`, `/readyz`; needs [`ServiceBuilder::with_metrics`].
    pub ops: Option<TcpListener>,
    /// The admin API.
    pub admin: Option<TcpListener>,
}

/// How long the shutdown waits for the event hub to send its last events
/// (it takes one [`FLUSH_INTERVAL`](crate::ops::live::FLUSH_INTERVAL) unless its
/// thread is starved of CPU).
pub const EVENT_FLUSH_PATIENCE: Duration = Duration::from_secs(1);

/// The lock server with its operations parts, and their shutdown order.
///
/// Shutdown order, each step after the one before has finished:
///
/// 1. `/healthz` and `/readyz` turn 503 and nothing is granted any more;
/// 2. the protocol listener closes and every session gets ERROR 0x01 and is
///    closed;
/// 3. the event hub sends what it has gathered (the sessions' last
///    `released` events, reason `shutdown`; bounded by a second), then the admin API sends what each event
///    stream has queued and stops (it runs on a thread of its own: see
///    [`admin::spawn`]);
/// 4. the audit log writes what is queued and closes (bounded in time);
/// 5. the ops endpoint stays up for its grace period
///    ([`OPS_SHUTDOWN_GRACE`]) so probes and scrapes see the whole shutdown,
///    then stops.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use monolock_server::{Listeners, ServerConfig, Service};
///
/// let listeners = Listeners {
///     protocol: tokio::net::TcpListener::bind("127.0.0.1:0").await?,
///     ops: None,
///     admin: None,
/// };
/// // Shut down at once; `monolock serve` waits for SIGTERM here.
/// Service::builder(ServerConfig::default())
///     .build()
///     .run(listeners, async {})
///     .await
/// # }
/// ```
pub struct Service {
    server: Server,
    parts: ServiceBuilder,
    reloader: Reloader,
}

/// Builds a [`Service`]: the operations parts first, then
/// [`build`](ServiceBuilder::build), which fixes the server's observers.
/// Only the built service hands out a [`ServerHandle`], so a handle always
/// points at the server that runs.
#[must_use = "a builder does nothing until built and run"]
pub struct ServiceBuilder {
    config: ServerConfig,
    metrics: Option<Arc<Metrics>>,
    audit: Option<Arc<AuditLog>>,
    events: Option<Arc<EventHub>>,
    admin_config: EffectiveConfig,
    admin_token: Option<Arc<AdminToken>>,
    admin_tls: Option<Arc<ServerTls>>,
    ops_tls: Option<Arc<ServerTls>>,
    allowed_hosts: Arc<AllowedHosts>,
    commit: String,
    ops_grace: Duration,
    reload_tls: Option<Arc<ServerTls>>,
    reload_acl: Option<Arc<AclFileAuthorizer>>,
    http_limits: HttpLimits,
    admin_http_stats: Arc<HttpStats>,
    ops_http_stats: Arc<HttpStats>,
    admin_identities: Option<Arc<AdminIdentities>>,
}

impl Service {
    /// Starts building a service around a server with `config`.
    pub fn builder(config: ServerConfig) -> ServiceBuilder {
        ServiceBuilder {
            config,
            metrics: None,
            audit: None,
            events: None,
            admin_config: EffectiveConfig::default(),
            admin_token: None,
            admin_tls: None,
            ops_tls: None,
            allowed_hosts: Arc::default(),
            commit: String::new(),
            ops_grace: OPS_SHUTDOWN_GRACE,
            reload_tls: None,
            reload_acl: None,
            http_limits: HttpLimits::default(),
            admin_http_stats: Arc::default(),
            ops_http_stats: Arc::default(),
            admin_identities: None,
        }
    }

    /// A handle to the server, to inspect and control it while it runs.
    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// What SIGHUP reloads: every reloadable part the service was built
    /// with (the protocol TLS and ACL given to the builder, the audit log,
    /// the admin token).
    pub fn reloader(&self) -> &Reloader {
        &self.reloader
    }

    /// Serves until `shutdown` resolves (or the protocol server fails),
    /// then shuts down in the order given on [`Service`].
    ///
    /// # Errors
    /// An ops listener without metrics ([`io::ErrorKind::InvalidInput`]);
    /// a listener's address that cannot be read; what stopped the protocol
    /// server.
    pub async fn run(
        self,
        listeners: Listeners,
        shutdown: impl Future<Output = ()> + Send,
    ) -> io::Result<()> {
        let Self {
            server,
            mut parts,
            reloader: _,
        } = self;
        let Listeners {
            protocol,
            ops,
            admin,
        } = listeners;
        let ops = ops_with_metrics(ops, parts.metrics.clone())?;
        let mut admin_config = std::mem::take(&mut parts.admin_config);
        name_listeners(
            &mut admin_config,
            &protocol,
            ops.as_ref().map(|(listener, _)| listener),
            admin.as_ref(),
        )?;

        let handle = server.handle();
        let admin_stop = CancellationToken::new();
        let admin_task = admin.map(|listener| {
            let options = parts.admin_options(handle.clone(), admin_config);
            admin::spawn(listener, options, admin_stop.clone().cancelled_owned())
        });
        let admin_task = admin_task.transpose()?;
        let mut running = tokio::spawn(server.run(protocol));
        let ops_stop = CancellationToken::new();
        let ops_task = ops.map(|(listener, metrics)| {
            let stop = ops_stop.clone().cancelled_owned();
            let options = parts.ops_options(handle.clone(), metrics);
            tokio::spawn(ops::serve_with(listener, options, stop))
        });

        tokio::select! {
            result = &mut running => {
                admin_stop.cancel();
                ops_stop.cancel();
                return joined(result);
            }
            () = shutdown => {}
        }
        // 1 and 2.
        handle.shutdown();
        joined(running.await)?;
        // 3.
        if let Some(events) = &parts.events
            && !events.flush(EVENT_FLUSH_PATIENCE).await
        {
            warn!(
                waited_ms = u64::try_from(EVENT_FLUSH_PATIENCE.as_millis()).unwrap_or(u64::MAX),
                "the event hub did not flush in time; event streams may miss the last events"
            );
        }
        admin_stop.cancel();
        if let Some(admin) = admin_task
            && let Err(err) = admin.join().await
        {
            warn!(error = %err, "admin API stopped with an error");
        }
        // 4.
        if let Some(audit) = &parts.audit {
            audit.close().await;
        }
        // 5.
        if let Some(ops_task) = ops_task {
            stop_ops_after_grace(parts.ops_grace, &ops_stop, ops_task).await;
        }
        info!("shutdown complete");
        Ok(())
    }
}

/// Step 5 of the shutdown: the ops endpoint answers for `grace` more (the
/// last scrape sees the shutdown), then stops.
async fn stop_ops_after_grace(
    grace: Duration,
    stop: &CancellationToken,
    task: JoinHandle<io::Result<()>>,
) {
    info!(
        grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
        "protocol listener closed; ops endpoint stays up for the grace period"
    );
    tokio::time::sleep(grace).await;
    stop.cancel();
    join_http("ops endpoint", Some(task)).await;
}

/// The ops listener with the metrics it serves; an ops listener without
/// metrics is a mistake of the caller.
fn ops_with_metrics(
    ops: Option<TcpListener>,
    metrics: Option<Arc<Metrics>>,
) -> io::Result<Option<(TcpListener, Arc<Metrics>)>> {
    match (ops, metrics) {
        (Some(listener), Some(metrics)) => Ok(Some((listener, metrics))),
        (Some(_), None) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an ops listener needs metrics (ServiceBuilder::with_metrics)",
        )),
        (None, _) => Ok(None),
    }
}

/// Writes the listeners' addresses into the configuration `/api/info`
/// shows.
fn name_listeners(
    config: &mut EffectiveConfig,
    protocol: &TcpListener,
    ops: Option<&TcpListener>,
    admin: Option<&TcpListener>,
) -> io::Result<()> {
    let local = |listener: &TcpListener| listener.local_addr().map(|addr| addr.to_string());
    config.listen = local(protocol)?;
    config.ops_listen = ops.map(local).transpose()?;
    config.admin_listen = admin.map(local).transpose()?;
    Ok(())
}

impl ServiceBuilder {
    /// What the admin listener serves, from what the service was built with.
    fn admin_options(&self, handle: ServerHandle, config: EffectiveConfig) -> AdminOptions {
        let mut options = AdminOptions::new(handle, config)
            .with_http_limits(self.http_limits)
            .with_http_stats(self.admin_http_stats.clone())
            .with_commit(self.commit.clone())
            .with_allowed_hosts(self.allowed_hosts.clone());
        if let Some(events) = &self.events {
            options = options.with_events(events.clone());
        }
        if let Some(token) = &self.admin_token {
            options = options.with_token(token.clone());
        }
        if let Some(identities) = &self.admin_identities {
            options = options.with_admin_identities(identities.clone());
        }
        if let Some(tls) = &self.admin_tls {
            options = options.with_tls(tls.clone());
        }
        options
    }

    /// What the ops listener serves, from what the service was built with.
    fn ops_options(&self, handle: ServerHandle, metrics: Arc<Metrics>) -> OpsOptions {
        let mut options = OpsOptions::new(handle, metrics)
            .with_http_limits(self.http_limits)
            .with_http_stats(self.ops_http_stats.clone())
            .with_allowed_hosts(self.allowed_hosts.clone());
        if let Some(tls) = &self.ops_tls {
            options = options.with_tls(tls.clone());
        }
        options
    }
}

impl ServiceBuilder {
    /// Counts the server's events into `metrics`, served by the ops
    /// listener.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Writes ownership events to `audit`, closed at shutdown and reopened
    /// by the reloader.
    pub fn with_audit(mut self, audit: Arc<AuditLog>) -> Self {
        self.audit = Some(audit);
        self
    }

    /// Feeds the admin API's live event stream (`GET /api/events`) and
    /// dashboard from `events`.
    pub fn with_events(mut self, events: Arc<EventHub>) -> Self {
        self.events = Some(events);
        self
    }

    /// Requires `Authorization: Bearer` with `token` on the admin API; the
    /// reloader re-reads its file.
    pub fn with_admin_token(mut self, token: Arc<AdminToken>) -> Self {
        self.admin_token = Some(token);
        self
    }

    /// Serves the admin API over TLS (mTLS when `tls` verifies clients).
    pub fn with_admin_tls(mut self, tls: Arc<ServerTls>) -> Self {
        self.admin_tls = Some(tls);
        self
    }

    /// Serves the ops endpoint over TLS (mTLS when `tls` verifies clients).
    pub fn with_ops_tls(mut self, tls: Arc<ServerTls>) -> Self {
        self.ops_tls = Some(tls);
        self
    }

    /// Names the admin and ops listeners serve in `Host` besides their
    /// own (`--admin-allowed-host`); see [`crate::WebGuard`].
    pub fn with_allowed_hosts(mut self, allowed: Arc<AllowedHosts>) -> Self {
        self.allowed_hosts = allowed;
        self
    }

    /// Without an admin token, makes only the client certificates that
    /// `identities` names administrators (see [`AdminIdentities`]).
    pub fn with_admin_identities(mut self, identities: Arc<AdminIdentities>) -> Self {
        self.admin_identities = Some(identities);
        self
    }

    /// Bounds the connections of the admin and ops listeners (each has
    /// its own cap of `limits.max_connections`).
    pub fn with_http_limits(mut self, limits: HttpLimits) -> Self {
        self.http_limits = limits;
        self
    }

    /// Counts the connections of the admin listener into `admin` and of
    /// the ops listener into `ops` (see [`Metrics::with_admin_http_stats`]).
    pub fn with_http_stats(mut self, admin: Arc<HttpStats>, ops: Arc<HttpStats>) -> Self {
        self.admin_http_stats = admin;
        self.ops_http_stats = ops;
        self
    }

    /// The git commit `/api/info` reports.
    pub fn with_commit(mut self, commit: impl Into<String>) -> Self {
        self.commit = commit.into();
        self
    }

    /// What `/api/info` reports; its addresses are filled in from the
    /// listeners.
    pub fn with_admin_config(mut self, config: EffectiveConfig) -> Self {
        self.admin_config = config;
        self
    }

    /// How long the ops listener outlives the protocol listener
    /// (default [`OPS_SHUTDOWN_GRACE`]).
    pub fn with_ops_grace(mut self, grace: Duration) -> Self {
        self.ops_grace = grace;
        self
    }

    /// Lets the reloader re-read the protocol listener's TLS files (the
    /// `ServerTls` the [`ServerConfig`] serves).
    pub fn reload_tls(mut self, tls: Arc<ServerTls>) -> Self {
        self.reload_tls = Some(tls);
        self
    }

    /// Lets the reloader re-read the ACL file (the authorizer the
    /// [`ServerConfig`] checks).
    pub fn reload_acl(mut self, acl: Arc<AclFileAuthorizer>) -> Self {
        self.reload_acl = Some(acl);
        self
    }

    /// The service: the server with every observer given so far (metrics,
    /// audit log, event hub, after the config's own), and the reloader of
    /// every reloadable part.
    pub fn build(self) -> Service {
        let mut observers: Vec<Arc<dyn Observer>> = Vec::new();
        if let Some(metrics) = &self.metrics {
            observers.push(metrics.clone());
        }
        if let Some(audit) = &self.audit {
            observers.push(audit.clone());
        }
        if let Some(events) = &self.events {
            observers.push(events.clone());
        }
        let mut config = self.config.clone();
        if !observers.is_empty() {
            observers.insert(0, Arc::clone(&config.observer));
            config = config.with_observer(Arc::new(Observers(observers)));
        }
        let mut reloader = Reloader::default();
        if let Some(tls) = &self.reload_tls {
            reloader = reloader.with_tls(tls.clone());
        }
        if let Some(acl) = &self.reload_acl {
            reloader = reloader.with_acl(acl.clone());
        }
        if let Some(audit) = &self.audit {
            reloader = reloader.with_audit(audit.clone());
        }
        if let Some(token) = &self.admin_token {
            reloader = reloader.with_admin_token(token.clone());
        }
        Service {
            server: Server::new(config),
            parts: self,
            reloader,
        }
    }
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("parts", &self.parts)
            .field("reloader", &self.reloader)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ServiceBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceBuilder")
            .field("config", &self.config)
            .field("metrics", &self.metrics.is_some())
            .field("audit", &self.audit)
            .field("ops_grace", &self.ops_grace)
            .finish_non_exhaustive()
    }
}

fn joined(result: Result<io::Result<()>, tokio::task::JoinError>) -> io::Result<()> {
    result.map_err(|err| io::Error::other(format!("server task failed: {err}")))?
}

async fn join_http(what: &str, task: Option<JoinHandle<io::Result<()>>>) {
    let Some(task) = task else { return };
    match task.await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => warn!(error = %err, "{what} stopped with an error"),
        Err(err) => warn!(error = %err, "{what} task failed"),
    }
}
