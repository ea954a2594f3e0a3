//! Headless Chromium driven over WebDriver (chromedriver), from Debian's
//! `chromium` and `chromium-driver` packages (.ci/setup.d/chromium.sh).
//!
//! Written against the W3C WebDriver HTTP API directly: the handful of
//! calls a test needs (navigate, run a script, find, click, type, take a
//! screenshot) are a few lines each over the HTTP client the tests already
//! use, where a WebDriver crate would pull in a second HTTP stack.
#![allow(dead_code)] // each test binary uses a different subset

use std::{
    io::{BufRead, BufReader, Read, Write},
    process::{Child, Command, Stdio},
    time::Duration,
};

use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, body::Bytes};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use serde_json::{Value, json};
use tokio::time::{Instant, timeout};

/// Long enough that only a real hang trips it (a cold browser start on a
/// busy machine takes seconds).
pub const BROWSER_PATIENCE: Duration = Duration::from_secs(30);

/// A chromedriver process and one browser session.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium session
    /// with a new empty profile, `width` x `height` pixels.
    pub async fn start(width: u32, height: u32) -> Self {
        let mut driver = Command::new("chromedriver")
            .args(["--port=0", "--allowed-ips=127.0.0.1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| {
                panic!(
                    "cannot run chromedriver ({err}): the browser tests need Debian's chromium \
                     and chromium-driver packages (.ci/setup.d/chromium.sh installs them)"
                )
            });
        let stdout = driver.stdout.take().expect("chromedriver stdout");
        let port = tokio::task::spawn_blocking(move || {
            let mut lines = BufReader::new(stdout).lines();
            let port = lines.by_ref().map_while(Result::ok).find_map(|line| {
                line.split("started successfully on port ")
                    .nth(1)
                    .and_then(|rest| rest.trim_end_matches('.').trim().parse::<u16>().ok())
            });
            // Keep draining so chromedriver never blocks on a full pipe.
            std::thread::spawn(move || lines.for_each(drop));
            port
        })
        .await
        .expect("reading chromedriver's output")
        .expect("chromedriver announces its port");
        let profile = tempfile::tempdir().expect("profile directory");
        let args = json!([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.path().display()),
        ]);
        let mut browser = Self {
            driver,
            port,
            session: String::new(),
            _profile: profile,
        };
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"args": args, "binary": "/usr/bin/chromium"},
        }}});
        let created = browser
            .call(Method::POST, "/session", Some(capabilities))
            .await;
        browser.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned();
        browser
    }

    /// One WebDriver command; returns its `value` (a WebDriver error fails
    /// the test).
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        self.try_call(method, path, body)
            .await
            .unwrap_or_else(|error| panic!("{error}"))
    }

    /// One WebDriver command; its `value`, or the WebDriver error.
    async fn try_call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = Request::builder()
            .method(method)
            .uri(format!("http://127.0.0.1:{}{path}", self.port))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("request");
        let exchange = async {
            let response = client.request(request).await.expect("WebDriver request");
            let bytes = response
                .into_body()
                .collect()
                .await
                .expect("WebDriver body")
                .to_bytes();
            serde_json::from_slice::<Value>(&bytes).expect("WebDriver JSON")
        };
        let answer = timeout(BROWSER_PATIENCE, exchange)
            .await
            .expect("WebDriver answers in time");
        let value = answer["value"].clone();
        if let Some(error) = value.get("error") {
            return Err(format!("WebDriver {path}: {error}: {}", value["message"]));
        }
        Ok(value)
    }

    fn at(&self, path: &str) -> String {
        format!("/session/{}{path}", self.session)
    }

    /// Opens `url` and waits for it to load.
    pub async fn goto(&self, url: &str) {
        self.call(Method::POST, &self.at("/url"), Some(json!({"url": url})))
            .await;
    }

    /// Runs `script` (a function body; `return` gives the result).
    pub async fn eval(&self, script: &str) -> Value {
        self.call(
            Method::POST,
            &self.at("/execute/sync"),
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Evaluates `script` until it returns something truthy (not null,
    /// false, 0 or ""); returns it. Fails after [`BROWSER_PATIENCE`].
    pub async fn wait_for(&self, what: &str, script: &str) -> Value {
        let deadline = Instant::now() + BROWSER_PATIENCE;
        loop {
            let value = self.eval(script).await;
            let truthy = match &value {
                Value::Null | Value::Bool(false) => false,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return value;
            }
            assert!(Instant::now() < deadline, "the page never showed: {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The element matching the CSS `selector` (the first).
    pub async fn find(&self, selector: &str) -> String {
        let found = self
            .call(
                Method::POST,
                &self.at("/element"),
                Some(json!({"using": "css selector", "value": selector})),
            )
            .await;
        // An object with one entry: the protocol's element key and the id.
        found
            .as_object()
            .and_then(|object| object.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element for {selector}: {found}"))
            .to_owned()
    }

    /// A real click on the element matching `selector`. The page redraws
    /// its rows as events arrive, so an element found a moment ago may be
    /// replaced before the click lands ("stale element reference"): then
    /// the element is found again, within the browser's patience.
    pub async fn click(&self, selector: &str) {
        let deadline = Instant::now() + BROWSER_PATIENCE;
        loop {
            let element = self.find(selector).await;
            let clicked = self
                .try_call(
                    Method::POST,
                    &self.at(&format!("/element/{element}/click")),
                    Some(json!({})),
                )
                .await;
            match clicked {
                Ok(_) => return,
                Err(error) if error.contains("stale element") && Instant::now() < deadline => {}
                Err(error) => panic!("{error}"),
            }
        }
    }

    /// Types `text` into the element matching `selector`.
    pub async fn type_into(&self, selector: &str, text: &str) {
        let element = self.find(selector).await;
        self.call(
            Method::POST,
            &self.at(&format!("/element/{element}/value")),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let png = self.call(Method::GET, &self.at("/screenshot"), None).await;
        base64::engine::general_purpose::STANDARD
            .decode(png.as_str().expect("base64 PNG"))
            .expect("valid base64")
    }

    /// Ends the session (the browser exits) and chromedriver.
    pub async fn quit(mut self) {
        let path = self.at("");
        self.call(Method::DELETE, &path, None).await;
        self.session.clear();
    }
}

impl Drop for Browser {
    /// Also on a failed test: end the session with a blocking request so the
    /// browser does not outlive chromedriver, then stop chromedriver.
    fn drop(&mut self) {
        if !self.session.is_empty()
            && let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.port))
        {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = write!(
                stream,
                "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                self.session
            );
            let _ = stream.read_to_end(&mut Vec::new());
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
