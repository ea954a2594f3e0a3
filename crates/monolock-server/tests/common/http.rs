//! HTTP helpers: the admin API and the ops endpoint on 127.0.0.1:0, a small
//! client (hyper-util), and a parser for the metrics exposition.
#![allow(dead_code)] // each test binary uses a different subset

use std::{collections::BTreeMap, net::SocketAddr, sync::Arc};

use http_body_util::{BodyExt, Empty};
use hyper::{Method, Request, body::Bytes};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use monolock_server::{Metrics, ServerHandle, admin, admin::EffectiveConfig, ops};
use tokio::{net::TcpListener, task::JoinHandle, time::timeout};
use tokio_util::sync::CancellationToken;

use monolock_testkit::PATIENCE;

/// An HTTP server (admin or ops) running in this process.
pub struct HttpServer {
    pub addr: SocketAddr,
    stop: CancellationToken,
    task: JoinHandle<std::io::Result<()>>,
}

impl HttpServer {
    pub async fn admin(handle: ServerHandle, config: EffectiveConfig) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stop = CancellationToken::new();
        let task = tokio::spawn(admin::serve(
            listener,
            handle,
            config,
            stop.clone().cancelled_owned(),
        ));
        Self { addr, stop, task }
    }

    /// The admin listener with an event stream, a token, ...
    pub async fn admin_with(options: admin::AdminOptions) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stop = CancellationToken::new();
        let task = tokio::spawn(admin::serve_with(
            listener,
            options,
            stop.clone().cancelled_owned(),
        ));
        Self { addr, stop, task }
    }

    pub async fn ops(handle: ServerHandle, metrics: Arc<Metrics>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stop = CancellationToken::new();
        let task = tokio::spawn(ops::serve(
            listener,
            handle,
            metrics,
            stop.clone().cancelled_owned(),
        ));
        Self { addr, stop, task }
    }

    pub async fn stop(self) {
        self.stop.cancel();
        timeout(PATIENCE, self.task)
            .await
            .expect("HTTP server stops in time")
            .expect("HTTP server task")
            .expect("HTTP server result");
    }

    pub async fn get(&self, path: &str) -> (u16, String) {
        request(self.addr, Method::GET, path).await
    }

    pub async fn post(&self, path: &str) -> (u16, String) {
        request(self.addr, Method::POST, path).await
    }

    pub async fn delete(&self, path: &str) -> (u16, String) {
        request(self.addr, Method::DELETE, path).await
    }

    /// GET a JSON document; panics unless the status is `expected`.
    pub async fn get_json(&self, path: &str, expected: u16) -> serde_json::Value {
        let (status, body) = self.get(path).await;
        assert_eq!(status, expected, "GET {path}: {body}");
        serde_json::from_str(&body).expect("JSON body")
    }

    /// Scrapes `/metrics` and parses it.
    pub async fn scrape(&self) -> Exposition {
        let (status, body) = self.get("/metrics").await;
        assert_eq!(status, 200, "{body}");
        Exposition::parse(&body)
    }
}

/// One HTTP/1.1 request; returns the status and the body as text.
pub async fn request(addr: SocketAddr, method: Method, path: &str) -> (u16, String) {
    request_as(addr, method, path, None).await
}

/// One HTTP/1.1 request with `Authorization: Bearer <bearer>` if given, and
/// the `X-Requested-By` that every change needs (as monolock sends it).
pub async fn request_as(
    addr: SocketAddr,
    method: Method,
    path: &str,
    bearer: Option<&str>,
) -> (u16, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let mut request = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .header("x-requested-by", "monolock-test");
    if let Some(bearer) = bearer {
        request = request.header("authorization", format!("Bearer {bearer}"));
    }
    let request = request.body(Empty::new()).expect("request");
    let exchange = async {
        let response = client.request(request).await.expect("HTTP request");
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("HTTP body")
            .to_bytes();
        (
            status,
            String::from_utf8(body.to_vec()).expect("UTF-8 body"),
        )
    };
    timeout(PATIENCE, exchange)
        .await
        .expect("HTTP answer in time")
}

/// A parsed Prometheus text exposition: samples by `name{labels}` exactly as
/// written, and the `# TYPE` of every family.
#[derive(Debug, Default)]
pub struct Exposition {
    pub samples: BTreeMap<String, f64>,
    pub types: BTreeMap<String, String>,
}

impl Exposition {
    /// Parses the text format; panics on a line that is not a comment, a
    /// blank or a `series value` pair.
    pub fn parse(text: &str) -> Self {
        let mut parsed = Self::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE line");
                parsed.types.insert(name.to_owned(), kind.to_owned());
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("sample line");
            let value = match value {
                "NaN" => f64::NAN,
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                number => number
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value in {line:?}")),
            };
            assert!(
                parsed.samples.insert(series.to_owned(), value).is_none(),
                "duplicate series {series}"
            );
        }
        parsed
    }

    /// The value of a series; panics if it is missing.
    pub fn value(&self, series: &str) -> f64 {
        *self
            .samples
            .get(series)
            .unwrap_or_else(|| panic!("missing series {series}"))
    }
}
