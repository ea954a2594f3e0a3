//! The admin API's client: where the API is (`--admin`, its TLS flags
//! and token), one request with its answer decoded, and every failure as
//! one line.
//!
//! The admin token, when the server wants one, comes from
//! `--admin-token-file` or else `$MONOLOCK_ADMIN_TOKEN`.
//!
//! An admin listener served with `--admin-tls` is reached over HTTPS with
//! `--admin-ca` (and, under mTLS, `--admin-cert`/`--admin-key`), through
//! the client crate's [`TlsConnector`]: the same rustls `ring` setup and
//! certificate errors as `monolock exec --tls-ca`.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::Args;
use http_body_util::{BodyExt, Empty};
use hyper::{Method, Request, StatusCode, Uri, body::Bytes, client::conn::http1};
use hyper_util::rt::TokioIo;
use monolock_client::{Connector as _, TcpConnector, TlsConnector};
use monolock_server::admin::ErrorBody;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde::de::DeserializeOwned;

use crate::{args::EXIT_USAGE, render::chain};

/// Default for `--admin`: the default `--admin-listen` of a local server.
const DEFAULT_ADMIN: &str = "127.0.0.1:7071";

/// How long one request may take, connection included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything but RFC 3986's unreserved characters is encoded, so a name
/// with `/`, `?`, `%` or spaces is exactly one path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Checks the admin flags and starts the runtime a command runs on; on
/// failure, the line is printed and the exit status returned: 64 for
/// flags that contradict each other, 1 for a runtime that cannot start.
pub fn runtime(admin: &AdminArgs) -> Result<tokio::runtime::Runtime, ExitCode> {
    if let Err(line) = admin.transport() {
        eprintln!("monolock: {line}");
        return Err(ExitCode::from(EXIT_USAGE));
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| {
            eprintln!("monolock: cannot start the runtime: {err}");
            ExitCode::FAILURE
        })
}

/// Where the admin API is and how to print its answers.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// Admin API of the server: HOST:PORT, or an http:// or https:// URL.
    #[arg(long, env = "MONOLOCK_ADMIN_ADDRESS", default_value = DEFAULT_ADMIN, value_name = "ADDR")]
    pub(crate) admin: String,

    /// Speak HTTPS to the admin API, trusting the CA certificates in this
    /// PEM file (a HOST:PORT address then means https://).
    #[arg(long, env = "MONOLOCK_ADMIN_CA", value_name = "FILE")]
    admin_ca: Option<PathBuf>,

    /// Client certificate chain (PEM, leaf first) for an admin listener
    /// under mTLS; needs --admin-key and --admin-ca.
    #[arg(long, env = "MONOLOCK_ADMIN_CERT", value_name = "FILE")]
    admin_cert: Option<PathBuf>,

    /// The client certificate's private key (PEM); needs --admin-cert.
    #[arg(long, env = "MONOLOCK_ADMIN_KEY", value_name = "FILE")]
    admin_key: Option<PathBuf>,

    /// File holding the admin bearer token (as the server's
    /// --admin-token-file) [default: $MONOLOCK_ADMIN_TOKEN, else none].
    #[arg(long, env = TOKEN_FILE_VARIABLE, value_name = "PATH")]
    admin_token_file: Option<PathBuf>,

    /// Print the API's JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The CA file and, for mTLS, the client certificate and key files.
type TlsFiles<'a> = (&'a PathBuf, Option<(&'a PathBuf, &'a PathBuf)>);

/// The variable holding the admin token itself (a file is preferred: a
/// variable is visible to every process of the same user).
const TOKEN_VARIABLE: &str = "MONOLOCK_ADMIN_TOKEN";

/// The variable naming the admin token's file, as the server reads it.
const TOKEN_FILE_VARIABLE: &str = "MONOLOCK_ADMIN_TOKEN_FILE";

/// What to do about a 401: where the token goes.
const TOKEN_HINT: &str = "give the token the server's --admin-token-file holds, with --admin-token-file FILE, $MONOLOCK_ADMIN_TOKEN_FILE or $MONOLOCK_ADMIN_TOKEN";

impl AdminArgs {
    /// The bearer token to send, if any.
    fn token(&self) -> Result<Option<String>, String> {
        match &self.admin_token_file {
            Some(path) => {
                let token = std::fs::read_to_string(path).map_err(|err| {
                    format!("cannot read the admin token file {}: {err}", path.display())
                })?;
                match token.trim() {
                    "" => Err(format!(
                        "the admin token file {} is empty: write the admin token in it (the one the server's --admin-token-file holds)",
                        path.display()
                    )),
                    token => Ok(Some(token.to_owned())),
                }
            }
            None => Ok(std::env::var(TOKEN_VARIABLE)
                .ok()
                .map(|token| token.trim().to_owned())
                .filter(|token| !token.is_empty())),
        }
    }

    /// The admin API's base URL and, for https://, the TLS connector the
    /// flags describe; a contradiction between them is one line.
    fn endpoint(&self) -> Result<(String, Option<TlsConnector>), String> {
        let (url, tls) = self.transport()?;
        let Some((ca, identity)) = tls else {
            return Ok((url, None));
        };
        let mut builder = TlsConnector::builder().with_ca_file(ca);
        if let Some((cert, key)) = identity {
            builder = builder.with_client_cert_files(cert, key);
        }
        let tls = builder
            .build()
            .map_err(|err| chain(&err as &(dyn std::error::Error + 'static)))?;
        Ok((url, Some(tls)))
    }

    /// The base URL and, for HTTPS, the CA and the client identity; a
    /// contradiction between the address and the TLS flags is one line.
    pub(crate) fn transport(&self) -> Result<(String, Option<TlsFiles<'_>>), String> {
        let url = base_url(&self.admin, self.admin_ca.is_some());
        if let Some((scheme, _)) = url.split_once("://")
            && scheme != "http"
            && scheme != "https"
        {
            return Err(format!(
                "--admin {}: {scheme}:// is not a scheme of the admin API; give HOST:PORT, or an http:// or https:// URL",
                self.admin
            ));
        }
        let https = url.starts_with("https://");
        let identity = match (&self.admin_cert, &self.admin_key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (Some(_), None) => {
                return Err("--admin-cert needs --admin-key (its private key)".to_owned());
            }
            (None, Some(_)) => {
                return Err("--admin-key needs --admin-cert (its certificate)".to_owned());
            }
            (None, None) => None,
        };
        match (&self.admin_ca, https) {
            (Some(ca), true) => Ok((url, Some((ca, identity)))),
            (None, true) => Err(format!(
                "the admin address {url} is HTTPS: give --admin-ca (the CA that signed the admin listener's certificate)"
            )),
            (Some(_), false) => Err(format!(
                "--admin-ca needs an https:// admin address or HOST:PORT, not {url}"
            )),
            (None, false) if identity.is_some() => {
                Err("--admin-cert and --admin-key need --admin-ca (TLS is off)".to_owned())
            }
            (None, false) => Ok((url, None)),
        }
    }
}

pub(crate) fn encode(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// `admin` as a base URL: kept if it has a scheme, else `https://` when TLS
/// was asked for and `http://` otherwise.
fn base_url(admin: &str, tls: bool) -> String {
    let admin = admin.trim_end_matches('/');
    if admin.contains("://") {
        admin.to_owned()
    } else if tls {
        format!("https://{admin}")
    } else {
        format!("http://{admin}")
    }
}

/// Sends one request and returns the response (head only; the body is
/// read by the caller), bounded by [`REQUEST_TIMEOUT`]; errors are one line.
pub(crate) async fn send(
    admin: &AdminArgs,
    method: Method,
    path: &str,
    accept: &str,
) -> Result<(String, hyper::Response<hyper::body::Incoming>), String> {
    let (base, tls) = admin.endpoint()?;
    let url = format!("{base}{path}");
    let uri: Uri = url
        .parse()
        .map_err(|err| format!("invalid admin address {:?}: {err}", admin.admin))?;
    let authority = match uri.authority() {
        Some(authority) if authority.port().is_some() => authority.to_string(),
        Some(authority) => format!("{authority}:{}", if tls.is_some() { 443 } else { 80 }),
        None => return Err(format!("invalid admin address {:?}: no host", admin.admin)),
    };
    // Origin form and a Host header, as an HTTP/1.1 client sends them.
    let target = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let mut request = Request::builder()
        .method(method)
        .uri(target)
        .header(hyper::header::HOST, authority.as_str())
        .header(hyper::header::ACCEPT, accept)
        .header(monolock_server::REQUEST_HEADER, "monolock");
    if let Some(token) = admin.token()? {
        request = request.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|err| format!("invalid admin address {:?}: {err}", admin.admin))?;
    let exchange = async {
        let mut sender = match &tls {
            None => handshake(TcpConnector.connect(&authority).await?.into_stream()).await?,
            Some(tls) => handshake(tls.connect(&authority).await?.into_stream()).await?,
        };
        sender
            .send_request(request)
            .await
            .map_err(|err| Box::new(err) as Box<dyn std::error::Error + Send + Sync>)
    };
    match tokio::time::timeout(REQUEST_TIMEOUT, exchange).await {
        Ok(Ok(response)) => Ok((url, response)),
        Ok(Err(err)) if is_not_http(err.as_ref()) => Err(format!(
            "{authority} did not answer in HTTP: is it the lock protocol's port (--listen) \
             rather than the admin listener (--admin-listen), or an HTTPS listener (give --admin-ca)?"
        )),
        Ok(Err(err)) => Err(format!(
            "cannot reach the admin API at {url}: {}",
            chain(err.as_ref())
        )),
        Err(_) => Err(no_answer(&url)),
    }
}

/// True if the peer answered, but not in HTTP (hyper could not parse it).
fn is_not_http(err: &(dyn std::error::Error + 'static)) -> bool {
    err.downcast_ref::<hyper::Error>()
        .is_some_and(hyper::Error::is_parse)
}

/// HTTP/1.1 over one connection (plain TCP or TLS); the connection is
/// driven by its own task for as long as the response body is read.
async fn handshake<S>(
    stream: S,
) -> Result<http1::SendRequest<Empty<Bytes>>, Box<dyn std::error::Error + Send + Sync>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    Ok(sender)
}

fn no_answer(url: &str) -> String {
    format!(
        "no answer from the admin API at {url} within {}s",
        REQUEST_TIMEOUT.as_secs()
    )
}

/// The API's error message of a failed request, as one line. An answer
/// that is not the API's JSON (an HTML error page, say) is named for what
/// it is, never printed.
pub(crate) async fn refusal(url: &str, response: hyper::Response<hyper::body::Incoming>) -> String {
    let status = response.status();
    let kind = content_type(&response);
    let body = match tokio::time::timeout(REQUEST_TIMEOUT, response.into_body().collect()).await {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(err)) => return format!("cannot read the answer of {url}: {err}"),
        Err(_) => return no_answer(url),
    };
    let text = String::from_utf8_lossy(&body);
    if status == StatusCode::UNAUTHORIZED {
        return format!(
            "the admin API refused the request: missing or wrong admin token ({status}); {TOKEN_HINT}"
        );
    }
    match serde_json::from_str::<ErrorBody>(&text) {
        Ok(body) => describe_status(status, &body.error),
        Err(_) if text.trim().is_empty() => describe_status(status, ""),
        Err(_) => not_the_api(url, &format!("{status} with {kind}")),
    }
}

/// The answer's media type, for naming what answered (`no body type` when
/// it has none).
fn content_type(response: &hyper::Response<hyper::body::Incoming>) -> String {
    response
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .map_or_else(|| "no body type".to_owned(), |kind| kind.trim().to_owned())
}

/// One line for an HTTP server that is not monolock's admin API.
fn not_the_api(url: &str, answered: &str) -> String {
    format!(
        "{url} answered {answered}, not the monolock admin API's JSON: give --admin the server's --admin-listen address"
    )
}

/// One request; on 2xx the body (newline-terminated) and its decoded value,
/// otherwise the API's error message as one line.
pub(crate) async fn call<T: DeserializeOwned>(
    admin: &AdminArgs,
    method: Method,
    path: &str,
) -> Result<(String, T), String> {
    let (url, response) = send(admin, method, path, "application/json").await?;
    if !response.status().is_success() {
        return Err(refusal(&url, response).await);
    }
    let (status, kind) = (response.status(), content_type(&response));
    let body = match tokio::time::timeout(REQUEST_TIMEOUT, response.into_body().collect()).await {
        Ok(Ok(body)) => body.to_bytes(),
        Ok(Err(err)) => return Err(format!("cannot read the answer of {url}: {err}")),
        Err(_) => return Err(no_answer(&url)),
    };
    let text = String::from_utf8_lossy(&body).into_owned();
    let value = serde_json::from_str(&text).map_err(|err| {
        if kind == "application/json" {
            format!("unexpected answer from {url}: {err}")
        } else {
            not_the_api(url.as_str(), &format!("{status} with {kind}"))
        }
    })?;
    let mut body = text;
    if !body.ends_with('\n') {
        body.push('\n');
    }
    Ok((body, value))
}

fn describe_status(status: StatusCode, message: &str) -> String {
    if message.is_empty() {
        format!("admin API answered {status}")
    } else {
        format!("{message} ({status})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_encoded_segment() {
        assert_eq!(encode("nightly/import"), "nightly%2Fimport");
        assert_eq!(encode("a b?%é"), "a%20b%3F%25%C3%A9");
        assert_eq!(encode("[::1]:5000"), "%5B%3A%3A1%5D%3A5000");
        assert_eq!(encode("x-y_z.~"), "x-y_z.~");
    }

    #[test]
    fn admin_address_forms() {
        assert_eq!(base_url("127.0.0.1:7071", false), "http://127.0.0.1:7071");
        assert_eq!(base_url("127.0.0.1:7071", true), "https://127.0.0.1:7071");
        assert_eq!(
            base_url("http://ops.example:80/", false),
            "http://ops.example:80"
        );
    }
}
