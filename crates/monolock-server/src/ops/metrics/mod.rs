//! Prometheus metrics: counters fed by server [`Event`]s, gauges read from
//! the [`ServerHandle`] at scrape time, two summaries, and process figures
//! from `/proc/self`.
//!
//! Exposed in the Prometheus text format (version 0.0.4) by the ops
//! endpoint. Every `monolock_releases_total{reason}` and
//! `monolock_protocol_errors_total{code}` series exists from startup at 0, so
//! `rate()` and alerts work before the first event.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use monolock_proto::ErrorCode;
use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric},
    metrics::{
        MetricType,
        counter::{ConstCounter, Counter},
        family::Family,
        gauge::{ConstGauge, Gauge},
    },
    registry::Registry,
};

use crate::{
    AuditLog, Event, HttpStats, Observer, ReleaseReason, ServerEnding, ServerHandle, SessionInfo,
    WatchBound,
};
use process::ProcessCollector;
use summary::Summary;

mod process;
mod summary;

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BoundLabels {
    bound: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProtocolLabels {
    protocol: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProtocolReasonLabels {
    protocol: &'static str,
    reason: &'static str,
}

/// The `protocol` label's values, indexed by [`V1`] and [`V2`].
const PROTOCOLS: [&str; 2] = ["1", "2"];
/// Index of protocol version 1 in [`PROTOCOLS`].
const V1: usize = 0;
/// Index of protocol version 2 in [`PROTOCOLS`].
const V2: usize = 1;

/// Index into [`PROTOCOLS`] of the session an event is about.
fn protocol_index(session: &SessionInfo) -> usize {
    if session.protocol() == 2 { V2 } else { V1 }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: String,
}

/// The server's metrics: an [`Observer`] to pass in
/// [`ServerConfig::observer`](crate::ServerConfig::observer) and a renderer
/// for the ops endpoint.
///
/// ```
/// use std::sync::Arc;
/// use monolock_server::{Metrics, Server, ServerConfig};
///
/// let metrics = Arc::new(Metrics::new());
/// let server = Server::new(ServerConfig::default().with_observer(metrics.clone()));
/// let text = metrics.render(&server.handle());
/// assert!(text.contains("monolock_releases_total{reason=\"expired\"} 0"));
/// assert!(text.contains("# TYPE monolock_wait_seconds summary"));
/// ```
pub struct Metrics {
    registry: Registry,
    connections: ConnectionMetrics,
    ownership: OwnershipMetrics,
    sessions: SessionMetrics,
    watches: WatchMetrics,
    wait: Summary,
    hold: Summary,
}

/// Watches of the values-and-observers extension: how many, what they were
/// pushed, and the OBSERVEs refused at a bound.
struct WatchMetrics {
    watches: Gauge,
    state_pushes: Counter,
    state_pushes_coalesced: Counter,
    /// Indexed like [`WatchBound::ALL`].
    refused: [Counter; WatchBound::ALL.len()],
}

impl WatchMetrics {
    fn register(registry: &mut Registry) -> Self {
        let watches = registered(
            registry,
            "monolock_watches",
            "Watches (OBSERVE) registered over all sessions",
            Gauge::default(),
        );
        let state_pushes = registered(
            registry,
            "monolock_state_pushes",
            "STATE pushes written to watches (initial, changes and coalesced)",
            Counter::default(),
        );
        let state_pushes_coalesced = registered(
            registry,
            "monolock_state_pushes_coalesced",
            "STATE pushes flagged COALESCED: a slow observer's changes were dropped and it was told the state now",
            Counter::default(),
        );
        let refused_family = registered(
            registry,
            "monolock_watches_refused",
            "OBSERVEs refused at a bound: session (--max-watches-per-session, 0x0b) or server (--max-watches, 0x0c)",
            Family::<BoundLabels, Counter>::default(),
        );
        let refused = WatchBound::ALL.map(|bound| {
            refused_family
                .get_or_create(&BoundLabels {
                    bound: bound.as_str(),
                })
                .clone()
        });
        Self {
            watches,
            state_pushes,
            state_pushes_coalesced,
            refused,
        }
    }
}

/// Protocol connections: accepted, refused, shed, ended by the server, and the ERROR frames and heartbeats they carried.
struct ConnectionMetrics {
    connections_active: Gauge,
    accepted: Counter,
    accept_errors: Counter,
    tls_handshake_errors: Counter,
    connections_refused: Counter,
    connections_shed: Counter,
    /// Indexed like [`ServerEnding::ALL`].
    connections_ended_by_server: [Counter; ServerEnding::ALL.len()],
    protocol_errors: Family<CodeLabels, Counter>,
    /// Indexed like [`ErrorCode::ALL`]; other codes go through the family.
    known_protocol_errors: [Counter; ErrorCode::ALL.len()],
}

impl ConnectionMetrics {
    fn register(registry: &mut Registry) -> Self {
        let connections_active = registered(
            registry,
            "monolock_connections_active",
            "Open protocol connections, with or without a session",
            Gauge::default(),
        );
        let accepted = registered(
            registry,
            "monolock_connections_accepted",
            "Protocol connections accepted",
            Counter::default(),
        );
        let accept_errors = registered(
            registry,
            "monolock_accept_errors",
            "Failed accept calls (e.g. out of file descriptors)",
            Counter::default(),
        );
        let tls_handshake_errors = registered(
            registry,
            "monolock_tls_handshake_errors",
            "TLS handshakes that failed or did not complete within io-timeout",
            Counter::default(),
        );
        let connections_refused = registered(
            registry,
            "monolock_connections_refused",
            "Protocol connections refused at --max-connections (ERROR 0x04)",
            Counter::default(),
        );
        let connections_shed = registered(
            registry,
            "monolock_connections_shed",
            "Connections without a whole first frame closed when descriptors ran out",
            Counter::default(),
        );
        let ended_by_server_family = registered(
            registry,
            "monolock_connections_ended_by_server",
            "Connections the server ended on its own, keeping their held claims to the lease's end, by cause",
            Family::<CauseLabels, Counter>::default(),
        );
        let connections_ended_by_server = ServerEnding::ALL.map(|cause| {
            ended_by_server_family
                .get_or_create(&CauseLabels {
                    cause: cause.as_str(),
                })
                .clone()
        });
        let protocol_errors = registered(
            registry,
            "monolock_protocol_errors",
            "ERROR frames sent, by code",
            Family::<CodeLabels, Counter>::default(),
        );
        let known_protocol_errors = ErrorCode::ALL.map(|code| {
            protocol_errors
                .get_or_create(&CodeLabels {
                    code: code.to_string(),
                })
                .clone()
        });
        Self {
            connections_active,
            accepted,
            accept_errors,
            tls_handshake_errors,
            connections_refused,
            connections_shed,
            connections_ended_by_server,
            protocol_errors,
            known_protocol_errors,
        }
    }
}

/// Locks and their ownership: grants, releases, refusals, and the claims kept for connections the server ended.
struct OwnershipMetrics {
    locks_held: Gauge,
    waiters: Gauge,
    acquires: Counter,
    acl_denials: Counter,
    /// Indexed like [`ReleaseReason::ALL`].
    releases: [Counter; ReleaseReason::ALL.len()],
    /// By protocol, indexed like [`PROTOCOLS`].
    grants_by_protocol: [Counter; 2],
    /// By protocol, then indexed like [`ReleaseReason::ALL`].
    releases_by_protocol: [[Counter; ReleaseReason::ALL.len()]; 2],
}

impl OwnershipMetrics {
    fn register(registry: &mut Registry) -> Self {
        let locks_held = registered(
            registry,
            "monolock_locks_held",
            "Locks that have a holder",
            Gauge::default(),
        );
        let waiters = registered(
            registry,
            "monolock_waiters",
            "Sessions queued behind a holder",
            Gauge::default(),
        );
        let acquires = registered(
            registry,
            "monolock_acquires",
            "Grants (fencing tokens issued)",
            Counter::default(),
        );
        let acl_denials = registered(
            registry,
            "monolock_acl_denials",
            "ACQUIREs refused by the ACL (ERROR 0x18)",
            Counter::default(),
        );
        let releases_family = registered(
            registry,
            "monolock_releases",
            "Ends of ownership, by reason",
            Family::<ReasonLabels, Counter>::default(),
        );
        let releases = ReleaseReason::ALL.map(|reason| {
            releases_family
                .get_or_create(&ReasonLabels {
                    reason: reason.as_str(),
                })
                .clone()
        });
        let grants_family = registered(
            registry,
            "monolock_grants",
            "Grants (fencing tokens issued), by protocol version",
            Family::<ProtocolLabels, Counter>::default(),
        );
        let grants_by_protocol = PROTOCOLS.map(|protocol| {
            grants_family
                .get_or_create(&ProtocolLabels { protocol })
                .clone()
        });
        let releases_by_protocol_family = registered(
            registry,
            "monolock_releases_by_protocol",
            "Ends of ownership, by protocol version and reason",
            Family::<ProtocolReasonLabels, Counter>::default(),
        );
        let releases_by_protocol = PROTOCOLS.map(|protocol| {
            ReleaseReason::ALL.map(|reason| {
                releases_by_protocol_family
                    .get_or_create(&ProtocolReasonLabels {
                        protocol,
                        reason: reason.as_str(),
                    })
                    .clone()
            })
        });
        Self {
            locks_held,
            waiters,
            acquires,
            acl_denials,
            releases,
            grants_by_protocol,
            releases_by_protocol,
        }
    }
}

/// Sessions of both protocol versions, and the claims of version 2 sessions.
struct SessionMetrics {
    v2_sessions_active: Gauge,
    v2_idle_sessions_closed: Counter,
    /// By protocol: version 1 sessions admitted (granted at once or
    /// queued), version 2 sessions opened.
    sessions_opened: [Counter; 2],
    v2_claims_held: Gauge,
    v2_claims_waiting: Gauge,
    heartbeats: Counter,
    claims_refused_server_limit: Counter,
    kept_claims: Gauge,
}

impl SessionMetrics {
    fn register(registry: &mut Registry) -> Self {
        let v2_sessions_active = registered(
            registry,
            "monolock_v2_sessions_active",
            "Open protocol v2 sessions (their claims count in locks_held and waiters)",
            Gauge::default(),
        );
        let v2_idle_sessions_closed = registered(
            registry,
            "monolock_v2_idle_sessions_closed",
            "Protocol v2 sessions closed for having no claim (idle timeout, or out of descriptors)",
            Counter::default(),
        );
        let sessions_family = registered(
            registry,
            "monolock_sessions_opened",
            "Sessions begun, by protocol version (v1: an ACQUIRE granted or queued; v2: an OPEN)",
            Family::<ProtocolLabels, Counter>::default(),
        );
        let sessions_opened = PROTOCOLS.map(|protocol| {
            sessions_family
                .get_or_create(&ProtocolLabels { protocol })
                .clone()
        });
        let v2_claims_held = registered(
            registry,
            "monolock_v2_claims_held",
            "Protocol v2 claims holding a lock (they count in locks_held too)",
            Gauge::default(),
        );
        let v2_claims_waiting = registered(
            registry,
            "monolock_v2_claims_waiting",
            "Protocol v2 claims queued behind a holder (they count in waiters too)",
            Gauge::default(),
        );
        let heartbeats = registered(
            registry,
            "monolock_heartbeats",
            "HEARTBEAT frames received",
            Counter::default(),
        );
        let claims_refused_server_limit = registered(
            registry,
            "monolock_claims_refused_server_limit",
            "ACQUIREs refused because the server held --max-claims claims (code 0x0a)",
            Counter::default(),
        );
        let kept_claims = registered(
            registry,
            "monolock_kept_claims",
            "Held claims of connections the server ended, kept until their lease's end (they count in locks_held)",
            Gauge::default(),
        );
        Self {
            kept_claims,
            claims_refused_server_limit,
            heartbeats,
            v2_sessions_active,
            v2_idle_sessions_closed,
            sessions_opened,
            v2_claims_held,
            v2_claims_waiting,
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric registered, every labelled series present at 0.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let connections = ConnectionMetrics::register(&mut registry);
        let ownership = OwnershipMetrics::register(&mut registry);
        let sessions = SessionMetrics::register(&mut registry);
        let watches = WatchMetrics::register(&mut registry);
        registry.register_collector(Box::new(ProcessCollector::new()));
        Self {
            registry,
            connections,
            ownership,
            sessions,
            watches,
            wait: Summary::default(),
            hold: Summary::default(),
        }
    }

    /// Also exposes `monolock_audit_write_errors_total`, read from `errors`
    /// (see [`AuditLog::write_errors_counter`](crate::AuditLog::write_errors_counter)).
    #[must_use]
    pub fn with_audit_write_errors(mut self, errors: Arc<AtomicU64>) -> Self {
        self.read_at_scrape(
            "monolock_audit_write_errors",
            "Audit lines lost to failed writes.",
            MetricType::Counter,
            move || errors.load(Ordering::Relaxed),
        );
        self
    }

    /// Also exposes `monolock_build_info{version,commit} 1`, so dashboards
    /// can tell which build each server runs.
    #[must_use]
    pub fn with_build_info(mut self, commit: &str) -> Self {
        let info = Family::<BuildLabels, Gauge>::default();
        info.get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
            commit: commit.to_owned(),
        })
        .set(1);
        self.registry.register(
            "monolock_build_info",
            "The running build: version and git commit (always 1)",
            info,
        );
        self
    }

    /// Also exposes the limits the server runs with:
    /// `monolock_max_connections` and `monolock_max_claims`.
    #[must_use]
    pub fn with_limits(mut self, max_connections: usize, max_claims: usize) -> Self {
        let (connections, claims) = (max_connections as u64, max_claims as u64);
        self.read_at_scrape(
            "monolock_max_connections",
            "Protocol connections the server takes at once (--max-connections, as fitted to the descriptor limit).",
            MetricType::Gauge,
            move || connections,
        );
        self.read_at_scrape(
            "monolock_max_claims",
            "Claims, held and waiting, the server holds at once (--max-claims).",
            MetricType::Gauge,
            move || claims,
        );
        self
    }

    /// Also exposes the connection counts of the admin listener
    /// (`monolock_admin_http_connections_*`) from `stats`.
    #[must_use]
    pub fn with_admin_http_stats(mut self, stats: Arc<HttpStats>) -> Self {
        let (active, refused, timed_out) = (stats.clone(), stats.clone(), stats);
        self.read_at_scrape(
            "monolock_admin_http_connections_active",
            "Open connections to the admin listener.",
            MetricType::Gauge,
            move || active.active(),
        );
        self.read_at_scrape(
            "monolock_admin_http_connections_refused",
            "Connections to the admin listener refused at --http-max-connections (503).",
            MetricType::Counter,
            move || refused.refused(),
        );
        self.read_at_scrape(
            "monolock_admin_http_connections_timed_out",
            "Admin connections closed by --http-header-timeout or --http-idle-timeout.",
            MetricType::Counter,
            move || timed_out.timed_out(),
        );
        self
    }

    /// Also exposes the connection counts of the ops listener
    /// (`monolock_ops_http_connections_*`) from `stats`.
    #[must_use]
    pub fn with_ops_http_stats(mut self, stats: Arc<HttpStats>) -> Self {
        let (active, refused, timed_out) = (stats.clone(), stats.clone(), stats);
        self.read_at_scrape(
            "monolock_ops_http_connections_active",
            "Open connections to the ops listener.",
            MetricType::Gauge,
            move || active.active(),
        );
        self.read_at_scrape(
            "monolock_ops_http_connections_refused",
            "Connections to the ops listener refused at --http-max-connections (503).",
            MetricType::Counter,
            move || refused.refused(),
        );
        self.read_at_scrape(
            "monolock_ops_http_connections_timed_out",
            "Ops connections closed by --http-header-timeout or --http-idle-timeout.",
            MetricType::Counter,
            move || timed_out.timed_out(),
        );
        self
    }

    /// Also exposes `monolock_admin_unauthorized_total`, read from `refused`
    /// (see [`AdminToken::unauthorized_counter`](crate::AdminToken::unauthorized_counter)).
    #[must_use]
    pub fn with_admin_unauthorized(mut self, refused: Arc<AtomicU64>) -> Self {
        self.read_at_scrape(
            "monolock_admin_unauthorized",
            "Admin requests refused for a missing or wrong bearer token (401).",
            MetricType::Counter,
            move || refused.load(Ordering::Relaxed),
        );
        self
    }

    /// Also exposes the audit log's figures, read at scrape time:
    /// `monolock_audit_write_errors_total`,
    /// `monolock_audit_dropped_lines_total` (dropped because its queue was
    /// full; each run is marked by a `gap` line in the log),
    /// `monolock_audit_queued_lines` and `monolock_audit_queue_capacity`.
    #[must_use]
    pub fn with_audit_log(self, audit: Arc<AuditLog>) -> Self {
        let mut this = self.with_audit_write_errors(audit.write_errors_counter());
        let capacity = u64::try_from(audit.options().capacity).unwrap_or(u64::MAX);
        let dropped = Arc::clone(&audit);
        this.read_at_scrape(
            "monolock_audit_dropped_lines",
            "Audit lines dropped because the queue to a stalled or slow sink was full.",
            MetricType::Counter,
            move || dropped.dropped_lines(),
        );
        this.read_at_scrape(
            "monolock_audit_queued_lines",
            "Audit lines queued for the writer.",
            MetricType::Gauge,
            move || u64::try_from(audit.queued_lines()).unwrap_or(u64::MAX),
        );
        this.read_at_scrape(
            "monolock_audit_queue_capacity",
            "Audit lines the queue holds before the overflow policy applies.",
            MetricType::Gauge,
            move || capacity,
        );
        this
    }

    /// Registers a counter or gauge whose value lives elsewhere.
    fn read_at_scrape(
        &mut self,
        name: &'static str,
        help: &'static str,
        kind: MetricType,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        self.registry.register_collector(Box::new(ReadAtScrape {
            name,
            help,
            kind,
            read: Box::new(read),
        }));
    }

    /// The exposition: gauges read from `handle` now, then every metric.
    pub fn render(&self, handle: &ServerHandle) -> String {
        let counts = handle.counts();
        self.connections
            .connections_active
            .set(i64::try_from(handle.connections()).unwrap_or(i64::MAX));
        self.ownership
            .locks_held
            .set(i64::try_from(counts.locks).unwrap_or(i64::MAX));
        self.ownership
            .waiters
            .set(i64::try_from(counts.waiters).unwrap_or(i64::MAX));
        self.sessions
            .v2_sessions_active
            .set(i64::try_from(handle.sessions_v2()).unwrap_or(i64::MAX));
        self.sessions
            .kept_claims
            .set(i64::try_from(handle.kept_claims()).unwrap_or(i64::MAX));
        let mut out = String::with_capacity(8 * 1024);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        self.wait.encode_text(
            &mut out,
            "monolock_wait_seconds",
            "Time from a valid ACQUIRE to its grant",
        );
        self.hold.encode_text(
            &mut out,
            "monolock_hold_seconds",
            "Ownership durations, from grant to release",
        );
        out
    }

    fn protocol_error(&self, code: ErrorCode) {
        match ErrorCode::ALL.iter().position(|known| *known == code) {
            Some(index) => self.connections.known_protocol_errors[index].inc(),
            None => self
                .connections
                .protocol_errors
                .get_or_create(&CodeLabels {
                    code: code.to_string(),
                })
                .inc(),
        };
    }
}

impl Metrics {
    /// A grant or a release: the ownership counters, the v2 claim gauges
    /// and the summaries.
    fn ownership_changed(&self, event: &Event<'_>) {
        match *event {
            Event::Granted {
                session,
                wait,
                queued,
                ..
            } => {
                self.ownership.acquires.inc();
                let protocol = protocol_index(session);
                self.ownership.grants_by_protocol[protocol].inc();
                if protocol == V2 {
                    self.sessions.v2_claims_held.inc();
                    if queued {
                        self.sessions.v2_claims_waiting.dec();
                    }
                } else if !queued {
                    // A v1 session granted at once (a queued one was
                    // counted when it joined the queue).
                    self.sessions.sessions_opened[V1].inc();
                }
                self.wait.observe(wait.as_secs_f64());
            }
            Event::Released {
                session,
                held,
                reason,
                ..
            } => {
                let index = ReleaseReason::ALL
                    .iter()
                    .position(|known| *known == reason)
                    .unwrap_or_default();
                self.ownership.releases[index].inc();
                let protocol = protocol_index(session);
                self.ownership.releases_by_protocol[protocol][index].inc();
                if protocol == V2 {
                    self.sessions.v2_claims_held.dec();
                }
                self.hold.observe(held.as_secs_f64());
            }
            _ => {}
        }
    }
}

impl Observer for Metrics {
    /// Counts; a few atomic adds (and one short mutex for the summaries).
    fn observe(&self, event: &Event<'_>) {
        match *event {
            Event::Accepted => {
                self.connections.accepted.inc();
            }
            Event::AcceptFailed(_) => {
                self.connections.accept_errors.inc();
            }
            Event::TlsHandshakeFailed => {
                self.connections.tls_handshake_errors.inc();
            }
            Event::Heartbeats(n) => {
                self.sessions.heartbeats.inc_by(n);
            }
            Event::IdleSessionClosed => {
                self.sessions.v2_idle_sessions_closed.inc();
            }
            Event::ConnectionRefused => {
                self.connections.connections_refused.inc();
            }
            Event::ConnectionShed => {
                self.connections.connections_shed.inc();
            }
            Event::ClaimLimitRefused => {
                self.sessions.claims_refused_server_limit.inc();
            }
            Event::ErrorSent(code) => self.protocol_error(code),
            Event::Denied(_) => {
                self.ownership.acl_denials.inc();
            }
            Event::Granted { .. } | Event::Released { .. } => self.ownership_changed(event),
            Event::WaiterJoined(session) => {
                if session.claim.is_some() {
                    self.sessions.v2_claims_waiting.inc();
                } else {
                    self.sessions.sessions_opened[V1].inc();
                }
            }
            Event::WaiterLeft(session) | Event::KickWaiter(session) if session.claim.is_some() => {
                self.sessions.v2_claims_waiting.dec();
            }
            Event::SessionOpened => {
                self.sessions.sessions_opened[V2].inc();
            }
            Event::ConnectionEndedByServer { cause, .. } => {
                let index = ServerEnding::ALL
                    .iter()
                    .position(|known| *known == cause)
                    .unwrap_or_default();
                self.connections.connections_ended_by_server[index].inc();
            }
            Event::WatchesChanged(delta) => {
                self.watches.watches.inc_by(delta);
            }
            Event::WatchRefused(bound) => {
                let index = usize::from(bound == WatchBound::Server);
                self.watches.refused[index].inc();
            }
            Event::StatePushes { pushed, coalesced } => {
                self.watches.state_pushes.inc_by(pushed);
                self.watches.state_pushes_coalesced.inc_by(coalesced);
            }
            _ => {}
        }
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// A counter or a gauge read from elsewhere at scrape time.
struct ReadAtScrape {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    read: Box<dyn Fn() -> u64 + Send + Sync>,
}

impl std::fmt::Debug for ReadAtScrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadAtScrape")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Collector for ReadAtScrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let value = (self.read)();
        let metric = encoder.encode_descriptor(self.name, self.help, None, self.kind)?;
        if self.kind == MetricType::Counter {
            ConstCounter::new(value).encode(metric)
        } else {
            ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX)).encode(metric)
        }
    }
}

/// Registers `metric` and returns the handle that updates it (the registry
/// keeps a clone that reads the same value).
fn registered<M: prometheus_client::registry::Metric + Clone>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registry.register(name, help, metric.clone());
    metric
}
