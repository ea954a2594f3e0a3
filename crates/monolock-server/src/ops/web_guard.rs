//! What the admin and ops listeners refuse from a web page in the
//! operator's browser.
//!
//! The threat: the operator has the admin API on loopback (no token, the
//! default) and opens any web page. That page can make the browser send
//!
//! - a "simple" cross-site request (a form post: `POST`, `Content-Type:
//!   text/plain`), which needs no CORS preflight and reaches the server
//!   even though the page never sees the answer: enough to force-release a
//!   lock;
//! - any request at all as *same-origin*, by DNS rebinding: a hostile name
//!   that first resolves to the attacker and then to `127.0.0.1`, so the
//!   page reads `/api/locks` and `/api/events` and sends what it likes.
//!
//! Both are closed here, once, as a layer over both routers
//! ([`WebGuard::layer`]), in the way Jupyter's Host and Origin checks and
//! `kubectl proxy`'s accepted hosts do:
//!
//! 1. **`Host`** (every request): served only when it names this listener:
//!    an IP address (an IP literal cannot be rebound: the browser connects
//!    to the very address it names), `localhost`, or a name given with
//!    `--admin-allowed-host`; with a port, the listener's port (or the
//!    name's). A request without `Host` (HTTP/1.0, a load balancer's check)
//!    is served: a browser always sends one. Anything else is a 403 naming
//!    the flag. On the ops listener the check applies when it is bound to
//!    loopback only: off loopback, Prometheus scrapes it by DNS names of
//!    its own (see [`HostCheck`]).
//! 2. **State-changing requests** (any method but `GET` and `HEAD`) are
//!    refused with 403 when they carry `Sec-Fetch-Site: cross-site` or
//!    `same-site`, or an `Origin` that is not the request's own (`Host`) or
//!    a named host; and they must carry [`REQUEST_HEADER`], a header no page
//!    can add to a cross-site request without a CORS preflight, which is
//!    never granted (no `Access-Control-Allow-*` header is ever sent). The
//!    CLI and the dashboard send it.
//!
//! The bearer token, when configured, is checked after these (inside this
//! layer): a refusal here counts no unauthorized request. On a listener
//! with a token, a change that carries `Authorization: Bearer` needs no
//! [`REQUEST_HEADER`] (see [`WebGuard::with_bearer_token`]).
//!
//! The checks read headers as bytes and allocate nothing on a request that
//! passes.

use std::{fmt, net::IpAddr, sync::Arc};

use axum::{
    Json, Router,
    extract::{Request, State},
    http::{HeaderMap, Method, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use tracing::debug;

use crate::ops::admin::json::ErrorBody;

/// The header every state-changing admin request must carry (any value):
/// no web page can add it to a cross-site request without a preflight.
/// `monolock` sends `X-Requested-By: monolock`, the dashboard
/// `X-Requested-By: monolock-dashboard`.
pub const REQUEST_HEADER: &str = "x-requested-by";

/// A name given with `--admin-allowed-host` is not a host.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "--admin-allowed-host {value:?}: {problem} (expected HOST or HOST:PORT, e.g. locks.example.com or locks.example.com:8443)"
)]
pub struct AllowedHostError {
    /// The value as given.
    pub value: String,
    /// What is wrong with it.
    pub problem: &'static str,
}

/// One named host: lower-cased, IPv6 in brackets; `None` matches any port.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Named {
    host: Box<str>,
    port: Option<u16>,
}

/// Names, beyond the listener's own, that the admin and ops listeners
/// answer to (`--admin-allowed-host`): the name a reverse proxy passes on
/// in `Host`, or the page's origin behind one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    names: Vec<Named>,
}

impl AllowedHosts {
    /// Parses `HOST` (any port) or `HOST:PORT` (that port only) for each
    /// value; `HOST` is a DNS name, an IPv4 address or a bracketed IPv6
    /// address.
    ///
    /// # Errors
    /// The first value that is not a host, as one line.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a str>) -> Result<Self, AllowedHostError> {
        let names = values
            .into_iter()
            .map(|value| {
                let error = |problem| AllowedHostError {
                    value: value.to_owned(),
                    problem,
                };
                let trimmed = value.trim();
                if trimmed.is_empty() {
                    return Err(error("is empty"));
                }
                if trimmed.contains("://") {
                    return Err(error("give the host alone, without a scheme"));
                }
                if trimmed.contains('/') {
                    return Err(error("give the host alone, without a path"));
                }
                let Some((host, port)) = split_authority(trimmed.as_bytes()) else {
                    return Err(error("is not HOST or HOST:PORT"));
                };
                let port = match port {
                    Some(port) => Some(parse_port(port).ok_or(error("has no valid port"))?),
                    None => None,
                };
                if !is_host(host) {
                    return Err(error("is not HOST or HOST:PORT"));
                }
                let host = String::from_utf8_lossy(host).to_ascii_lowercase();
                Ok(Named {
                    host: host.into(),
                    port,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { names })
    }

    /// How many names there are.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// True if no name is given.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// True if `host` (lower or upper case) with `port` is a named host.
    fn contains(&self, host: &[u8], port: Option<u16>) -> bool {
        self.names.iter().any(|named| {
            named.host.as_bytes().eq_ignore_ascii_case(host)
                && (named.port.is_none() || named.port == port)
        })
    }
}

impl fmt::Display for AllowedHosts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, named) in self.names.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&named.host)?;
            if let Some(port) = named.port {
                write!(f, ":{port}")?;
            }
        }
        Ok(())
    }
}

/// Where the `Host` check applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostCheck {
    /// Every request (the admin listener).
    Always,
    /// Only if the listener is bound to a loopback address (the ops
    /// listener: off loopback, scrapers name it by DNS names of their own,
    /// as the documented Prometheus configuration does, and what it serves
    /// is counters and health, with no lock names).
    OnLoopback,
}

/// The checks of this module for one listener.
#[derive(Clone, Debug)]
pub struct WebGuard {
    port: u16,
    check_host: bool,
    allowed: Arc<AllowedHosts>,
    /// A bearer token guards the listener: a change carrying
    /// `Authorization: Bearer` needs no [`REQUEST_HEADER`].
    bearer_marks: bool,
}

impl WebGuard {
    /// The guard of a listener bound to `local` (its port is the one a
    /// `Host` may name), accepting the names in `allowed` too.
    pub fn new(local: std::net::SocketAddr, check: HostCheck, allowed: Arc<AllowedHosts>) -> Self {
        let check_host = match check {
            HostCheck::Always => true,
            HostCheck::OnLoopback => local.ip().is_loopback(),
        };
        Self {
            port: local.port(),
            check_host,
            allowed,
            bearer_marks: false,
        }
    }

    /// For a listener that requires a bearer token: a change that carries
    /// `Authorization: Bearer ...` needs no [`REQUEST_HEADER`]. No page can
    /// send `Authorization` to another site without a CORS preflight (it
    /// is not a safelisted header), which is never granted; and the token
    /// itself is checked after this guard. Scripts written for an API that
    /// only asks for the token keep working.
    #[must_use]
    pub fn with_bearer_token(mut self) -> Self {
        self.bearer_marks = true;
        self
    }

    /// `router` behind this guard.
    pub fn layer(self, router: Router) -> Router {
        router.layer(middleware::from_fn_with_state(Arc::new(self), guard))
    }

    /// Why `request` is refused, if it is.
    fn refusal(
        &self,
        method: &Method,
        headers: &HeaderMap,
        authority: Option<&[u8]>,
    ) -> Option<String> {
        let mut hosts = headers.get_all(header::HOST).iter();
        let host = hosts.next().map(|value| value.as_bytes());
        if hosts.next().is_some() {
            return Some("the request has more than one Host header".to_owned());
        }
        if self.check_host {
            for name in [authority, host].into_iter().flatten() {
                if !self.host_allowed(name) {
                    return Some(format!(
                        "Host {:?} is not a name of this listener, so the request was refused \
                         (it may come from a web page by DNS rebinding): use an IP address, \
                         localhost:{}, or give the name with --admin-allowed-host",
                        String::from_utf8_lossy(name),
                        self.port
                    ));
                }
            }
        }
        if method == Method::GET || method == Method::HEAD {
            return None;
        }
        if let Some(site) = headers.get("sec-fetch-site").map(|v| v.as_bytes())
            && (site.eq_ignore_ascii_case(b"cross-site") || site.eq_ignore_ascii_case(b"same-site"))
        {
            return Some(format!(
                "{method} refused: the browser marked it Sec-Fetch-Site: {} (sent by another web \
                 site); the admin API takes changes from its own page, monolock and scripts only",
                String::from_utf8_lossy(site)
            ));
        }
        if let Some(origin) = headers.get(header::ORIGIN).map(|v| v.as_bytes())
            && !self.origin_allowed(origin, host)
        {
            return Some(format!(
                "{method} refused: the request comes from origin {:?}, a web page that is not this \
                 listener's own; behind a reverse proxy, give its name with --admin-allowed-host",
                String::from_utf8_lossy(origin)
            ));
        }
        let marked = headers
            .get(REQUEST_HEADER)
            .is_some_and(|value| !value.as_bytes().trim_ascii().is_empty())
            || (self.bearer_marks
                && headers.get(header::AUTHORIZATION).is_some_and(|value| {
                    value
                        .as_bytes()
                        .get(..7)
                        .is_some_and(|scheme| scheme.eq_ignore_ascii_case(b"bearer "))
                }));
        if !marked {
            return Some(format!(
                "{method} refused: a change needs the header X-Requested-By (any value, e.g. \
                 curl -H 'X-Requested-By: me'), which no web page can send from another site; \
                 monolock and the dashboard send it"
            ));
        }
        None
    }

    /// True if a `Host` value (or a request target's authority) names this
    /// listener.
    fn host_allowed(&self, value: &[u8]) -> bool {
        let Some((host, port)) = split_authority(value) else {
            return false;
        };
        let port = match port {
            Some(port) => match parse_port(port) {
                Some(port) => Some(port),
                None => return false,
            },
            None => None,
        };
        if self.allowed.contains(host, port) {
            return true;
        }
        let own = host.eq_ignore_ascii_case(b"localhost") || ip_literal(host).is_some();
        own && port.is_none_or(|port| port == self.port)
    }

    /// True if `origin` is the request's own (`scheme://` and exactly the
    /// `Host`) or a named host's.
    fn origin_allowed(&self, origin: &[u8], host: Option<&[u8]>) -> bool {
        let Some(authority) = origin
            .strip_prefix(b"http://")
            .or_else(|| origin.strip_prefix(b"https://"))
        else {
            return false; // `null`, or not a web origin
        };
        if host.is_some_and(|host| host.eq_ignore_ascii_case(authority)) {
            return true;
        }
        match split_authority(authority) {
            Some((name, port)) => {
                let port = match port {
                    Some(port) => match parse_port(port) {
                        Some(port) => Some(port),
                        None => return false,
                    },
                    None => None,
                };
                self.allowed.contains(name, port)
            }
            None => false,
        }
    }
}

async fn guard(State(guard): State<Arc<WebGuard>>, request: Request, next: Next) -> Response {
    let authority = request.uri().authority().map(|a| a.as_str().as_bytes());
    match guard.refusal(request.method(), request.headers(), authority) {
        None => next.run(request).await,
        Some(error) => {
            debug!(method = %request.method(), path = request.uri().path(), %error, "refused a request a web page could have sent");
            (StatusCode::FORBIDDEN, Json(ErrorBody { error })).into_response()
        }
    }
}

/// `host[:port]` or `[v6][:port]` into the host (brackets kept) and the
/// port's bytes; `None` if it is neither.
fn split_authority(value: &[u8]) -> Option<(&[u8], Option<&[u8]>)> {
    if value.first() == Some(&b'[') {
        let close = value.iter().position(|&b| b == b']')?;
        let (host, rest) = value.split_at(close + 1);
        return match rest {
            [] => Some((host, None)),
            [b':', port @ ..] => Some((host, Some(port))),
            _ => None,
        };
    }
    match value.iter().rposition(|&b| b == b':') {
        Some(colon) => Some((&value[..colon], Some(&value[colon + 1..]))),
        None => Some((value, None)),
    }
}

fn parse_port(port: &[u8]) -> Option<u16> {
    if port.is_empty() || port.len() > 5 || !port.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(port).ok()?.parse().ok()
}

/// The address of an IP literal: `1.2.3.4` or `[::1]`.
fn ip_literal(host: &[u8]) -> Option<IpAddr> {
    let text = std::str::from_utf8(host).ok()?;
    match text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6),
        None => text.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4),
    }
}

/// A DNS name (letters, digits, `-`, `.`, `_`), an IPv4 address or a
/// bracketed IPv6 address.
fn is_host(host: &[u8]) -> bool {
    if host.first() == Some(&b'[') {
        return ip_literal(host).is_some();
    }
    !host.is_empty()
        && host.len() <= 253
        && host
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(port: u16, allowed: &[&str]) -> WebGuard {
        let allowed = AllowedHosts::parse(allowed.iter().copied()).expect("valid");
        WebGuard::new(
            ([127, 0, 0, 1], port).into(),
            HostCheck::Always,
            Arc::new(allowed),
        )
    }

    #[test]
    fn hosts_are_the_listeners_own_or_named() {
        let guard = guard(7071, &["locks.example.com", "proxy.example:8443"]);
        for ok in [
            "127.0.0.1:7071",
            "127.0.0.1",
            "10.0.0.5:7071",
            "[::1]:7071",
            "[::]:7071",
            "[fe80::1]",
            "localhost",
            "LOCALHOST:7071",
            "locks.example.com",
            "locks.example.com:1",
            "proxy.example:8443",
        ] {
            assert!(guard.host_allowed(ok.as_bytes()), "{ok}");
        }
        for refused in [
            "",
            "evil.example",
            "evil.example:7071",
            "localhost:7072",
            "localhost.:7071",
            "127.0.0.1:7072",
            "127.0.0.1:",
            "127.0.0.1:x",
            "127.0.0.1:65536",
            "[::1]x",
            "[::1",
            "::1",
            "proxy.example",
            "proxy.example:443",
            "127.0.0.1.nip.io:7071",
            "0x7f.1:7071",
        ] {
            assert!(!guard.host_allowed(refused.as_bytes()), "{refused}");
        }
    }

    #[test]
    fn origins_are_the_requests_own_or_named() {
        let guard = guard(7071, &["locks.example.com"]);
        let host = Some(&b"127.0.0.1:7071"[..]);
        assert!(guard.origin_allowed(b"http://127.0.0.1:7071", host));
        assert!(guard.origin_allowed(b"https://127.0.0.1:7071", host));
        assert!(guard.origin_allowed(b"https://locks.example.com", host));
        assert!(!guard.origin_allowed(b"http://localhost:7071", host));
        assert!(!guard.origin_allowed(b"http://10.0.0.9:7071", host));
        assert!(!guard.origin_allowed(b"null", host));
        assert!(!guard.origin_allowed(b"http://evil.example", host));
        assert!(!guard.origin_allowed(b"http://127.0.0.1:7071", None));
        assert!(!guard.origin_allowed(b"file://", host));
    }

    #[test]
    fn the_ops_listener_checks_host_on_loopback_only() {
        let none = Arc::new(AllowedHosts::default());
        let loopback = WebGuard::new(
            ([127, 0, 0, 1], 9090).into(),
            HostCheck::OnLoopback,
            none.clone(),
        );
        let wildcard = WebGuard::new(([0, 0, 0, 0], 9090).into(), HostCheck::OnLoopback, none);
        let mut headers = HeaderMap::new();
        headers.insert(
            header::HOST,
            "locks-1.internal:9090".parse().expect("value"),
        );
        assert!(loopback.refusal(&Method::GET, &headers, None).is_some());
        assert!(wildcard.refusal(&Method::GET, &headers, None).is_none());
    }
}
