//! The dashboard (`GET /`) in a real headless Chromium: it follows real
//! clients live, asks for the admin token, acts on clicks, survives a
//! dropped stream, and stays fast at 10,000 locks.
//!
//! `MONOLOCK_DASHBOARD_SCREENSHOT=docs/dashboard.png` makes the 10,000-lock
//! test also save a screenshot of the page under load;
//! `MONOLOCK_DASHBOARD_V2_SCREENSHOT=PATH` makes the protocol v2 test save
//! one of v2 claims and their sessions.

mod common;
#[path = "common/ext.rs"]
mod ext_client;
#[path = "common/http.rs"]
mod http;
#[path = "common/webdriver.rs"]
mod webdriver;

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use common::{Peer, TestServer, acquire_bytes};
use http::HttpServer;
use monolock_proto::{
    ServerFrame,
    v2::{Mode, ServerFrame as V2Frame},
};
use monolock_server::{
    AdminToken, EventHub, ServerConfig, ServerHandle,
    admin::{self, AdminOptions, EffectiveConfig},
};
use monolock_testkit::v2::RawV2;
use serde_json::Value;
use tokio::{net::TcpListener, task::JoinHandle};
use tokio_util::sync::CancellationToken;
use webdriver::Browser;

/// A server whose admin listener shares its event hub.
struct Lab {
    server: TestServer,
    hub: Arc<EventHub>,
}

impl Lab {
    async fn start() -> Self {
        let hub = Arc::new(EventHub::new().expect("hub"));
        let server =
            TestServer::start_with(ServerConfig::default().with_observer(hub.clone())).await;
        Self { server, hub }
    }

    fn options(&self) -> AdminOptions {
        let effective = EffectiveConfig {
            listen: self.server.addr.to_string(),
            ..EffectiveConfig::default()
        };
        AdminOptions::new(self.server.handle.clone(), effective)
            .with_events(self.hub.clone())
            .with_commit("test")
    }
}

/// The admin listener on a given address, so it can be stopped and started
/// again where the page expects it.
struct Admin {
    stop: CancellationToken,
    task: JoinHandle<std::io::Result<()>>,
}

impl Admin {
    async fn start(addr: SocketAddr, options: AdminOptions) -> Self {
        let listener = TcpListener::bind(addr).await.expect("bind admin");
        let stop = CancellationToken::new();
        let task = tokio::spawn(admin::serve_with(
            listener,
            options,
            stop.clone().cancelled_owned(),
        ));
        Self { stop, task }
    }

    async fn stop(self) {
        self.stop.cancel();
        tokio::time::timeout(common::PATIENCE, self.task)
            .await
            .expect("admin stops in time")
            .expect("admin task")
            .expect("admin result");
    }
}

fn selector(name: &str) -> String {
    format!("#viewport .row[data-lock=\"{name}\"]")
}

fn row_present(name: &str) -> String {
    format!(
        "return document.querySelector('{}') !== null",
        selector(name).replace('\'', "\\'")
    )
}

/// Waits for the confirmation dialog; returns what it says will happen.
async fn confirmation(browser: &Browser) -> String {
    let text = browser
        .wait_for(
            "the confirmation dialog",
            "const m = document.getElementById('confirm');
             return m.classList.contains('open') ? document.getElementById('confirm-text').textContent : null",
        )
        .await;
    text.as_str().expect("text").to_owned()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

async fn free_addr() -> SocketAddr {
    let probe = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    probe.local_addr().expect("addr")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_follows_real_clients_and_force_releases_on_a_click() {
    let lab = Lab::start().await;
    let addr = free_addr().await;
    let admin = Admin::start(addr, lab.options()).await;
    let browser = Browser::start(1280, 800).await;
    browser.goto(&format!("http://{addr}/")).await;
    browser
        .wait_for("the stream is live", "return window.__monolock.connected")
        .await;

    // A lock granted to a real client is on the page within 1 s.
    let (mut holder, token) = lab.server.hold("build/main", 30_000).await;
    let granted_at = now_ms();
    browser
        .wait_for("the new lock", &row_present("build/main"))
        .await;
    let shown_at = browser
        .eval("return window.__monolock.shownAt['build/main']")
        .await
        .as_u64()
        .expect("shown time");
    let delay = shown_at.saturating_sub(granted_at);
    println!("grant to row on the page: {delay} ms");
    assert!(delay < 1000, "the grant took {delay} ms to show");
    let row = browser
        .eval(&format!(
            "return document.querySelector('{}').innerText",
            selector("build/main")
        ))
        .await;
    let row = row.as_str().expect("row text");
    assert!(row.contains(&token.to_string()), "{row}");
    assert!(row.contains(&holder.local_addr().to_string()), "{row}");

    // Waiters show in FIFO order, in the row and in the detail panel.
    let mut first = lab.server.wait_in_line("build/main", 30_000).await;
    let mut second = lab.server.wait_in_line("build/main", 30_000).await;
    browser.click(&selector("build/main")).await;
    let order = browser
        .wait_for(
            "two waiters in the queue panel",
            "const rows = [...document.querySelectorAll('#queue tbody tr')];
             return rows.length === 2 ? rows.map(r => r.dataset.waiter) : null",
        )
        .await;
    assert_eq!(
        order,
        Value::from(vec![
            first.local_addr().to_string(),
            second.local_addr().to_string()
        ])
    );

    // A name with control characters is shown escaped, never raw.
    let (_evil, _) = lab.server.hold("evil\n\u{1b}[2Jname", 30_000).await;
    let shown = browser
        .wait_for(
            "the escaped name",
            "const cells = [...document.querySelectorAll('#viewport .row .name')];
             const cell = cells.find(c => c.textContent.startsWith('evil'));
             return cell ? cell.textContent : null",
        )
        .await;
    assert_eq!(shown, "evil\\n\\u{1b}[2Jname");

    // A released lock disappears.
    let (other, _) = lab.server.hold("tmp/scratch", 30_000).await;
    browser
        .wait_for("the other lock", &row_present("tmp/scratch"))
        .await;
    drop(other);
    browser
        .wait_for(
            "the released lock is gone",
            &row_present("tmp/scratch").replace("!==", "==="),
        )
        .await;

    // Force-release: the confirmation says what will happen; the click
    // ends the real holder's claim with ERROR 0x02.
    browser
        .click(&format!("{} button.release", selector("build/main")))
        .await;
    let text = confirmation(&browser).await;
    let text = text.as_str();
    assert!(text.contains("ERROR 0x02"), "{text}");
    assert!(text.contains(&holder.local_addr().to_string()), "{text}");
    assert!(
        text.contains(&first.local_addr().to_string()),
        "names the next holder: {text}"
    );
    assert!(
        lab.server.handle.lock("build/main").is_some(),
        "nothing before the confirmation"
    );
    browser.click("#confirm-ok").await;
    let (code, _) = holder.expect_error_then_close().await;
    assert_eq!(code, 0x02);
    let ServerFrame::Acquired { token: next } = first.recv().await else {
        panic!("the first waiter is promoted");
    };
    browser
        .wait_for(
            "the new holder",
            &format!(
                "return document.querySelector('{}').innerText.includes('{next}')",
                selector("build/main")
            ),
        )
        .await;

    // Kick: the remaining waiter, named in the confirmation, gets ERROR 0x02.
    let kicked = second.local_addr().to_string();
    browser
        .wait_for(
            "one waiter left in the panel",
            "return document.querySelectorAll('#queue tbody tr').length === 1",
        )
        .await;
    browser.click("#queue button.kick").await;
    let text = confirmation(&browser).await;
    let text = text.as_str();
    assert!(
        text.contains(&kicked) && text.contains("ERROR 0x02"),
        "{text}"
    );
    browser.click("#confirm-ok").await;
    let (code, _) = second.expect_error_then_close().await;
    assert_eq!(code, 0x02);
    browser
        .wait_for(
            "the empty queue",
            "return document.querySelectorAll('#queue tbody tr').length === 0",
        )
        .await;

    // The stream drops (the admin listener restarts); meanwhile the table
    // changes. The page reconnects, takes a new snapshot, and shows it.
    admin.stop().await;
    browser
        .wait_for(
            "the page notices the drop",
            "return !window.__monolock.connected",
        )
        .await;
    drop(first);
    drop(second);
    let (_late, _) = lab.server.hold("after/restart", 30_000).await;
    let admin = Admin::start(addr, lab.options()).await;
    browser
        .wait_for(
            "a second snapshot",
            "return window.__monolock.connected && window.__monolock.snapshots >= 2",
        )
        .await;
    browser
        .wait_for("the new lock", &row_present("after/restart"))
        .await;
    browser
        .wait_for(
            "the lock released while disconnected is gone",
            &row_present("build/main").replace("!==", "==="),
        )
        .await;

    browser.quit().await;
    admin.stop().await;
    lab.server.stop().await;
}

/// A protocol v2 claim shows as "sS · cC" in its row (in full in the
/// tooltip), as "session S · claim C" in the queue panel, the details and
/// the sessions list; the page's kick and force-release
/// end that claim only (REVOKED), and its session lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v2_claim_shows_its_session_and_ends_alone_on_a_click() {
    let lab = Lab::start().await;
    let admin = HttpServer::admin_with(lab.options()).await;
    let browser = Browser::start(1280, 800).await;
    browser.goto(&format!("http://{}/", admin.addr)).await;
    browser
        .wait_for("the stream is live", "return window.__monolock.connected")
        .await;

    let (mut a, opened_a) = RawV2::open(lab.server.addr, 30_000).await;
    let (mut b, opened_b) = RawV2::open(lab.server.addr, 30_000).await;
    let (sa, sb) = (opened_a.session, opened_b.session);
    assert!(matches!(
        a.acquire(3, Mode::Wait, "v2/held").await,
        V2Frame::Acquired { claim: 3, .. }
    ));
    assert_eq!(
        b.acquire(9, Mode::Wait, "v2/held").await,
        V2Frame::Waiting { claim: 9 }
    );
    assert!(matches!(
        b.acquire(4, Mode::Wait, "v2/other").await,
        V2Frame::Acquired { claim: 4, .. }
    ));
    let b_addr = lab.server.handle.lock("v2/held").expect("held").waiters[0].remote_addr;

    browser
        .wait_for("the v2 lock", &row_present("v2/held"))
        .await;
    let row = browser
        .wait_for(
            "the holder's session and claim in the row",
            &format!(
                "const row = document.querySelector('{}');
                 if (!row) return null;
                 const t = row.innerText, holder = row.querySelector('.holder').title;
                 return t.includes('s{sa} · c3') && t.includes('s{sb} · c9')
                   && holder.includes('session {sa} · claim 3') ? t : null",
                selector("v2/held")
            ),
        )
        .await;
    println!("row: {row}");

    // The queue panel keys the waiter by address and claim; the sessions
    // list shows each session with its claims.
    browser.click(&selector("v2/held")).await;
    let waiter = browser
        .wait_for(
            "the v2 waiter in the queue panel",
            "const rows = [...document.querySelectorAll('#queue tbody tr')];
             return rows.length === 1 ? [rows[0].dataset.waiter, rows[0].innerText] : null",
        )
        .await;
    assert_eq!(waiter[0], format!("{b_addr}#9"));
    assert!(
        waiter[1]
            .as_str()
            .is_some_and(|t| t.contains(&format!("session {sb} · claim 9"))),
        "{waiter}"
    );
    let listed = browser
        .wait_for(
            "both sessions with their claims",
            "const s = [...document.querySelectorAll('#sessions .session')];
             return s.length === 2 ? s.map(x => [x.dataset.session, [...x.querySelectorAll('.claim')].map(c => c.textContent)]) : null",
        )
        .await;
    assert_eq!(
        listed,
        serde_json::json!([
            [sa.to_string(), ["claim 3 · holds v2/held"]],
            [
                sb.to_string(),
                [
                    "claim 4 · holds v2/other",
                    "claim 9 · waits for v2/held (#1 in line)"
                ]
            ],
        ])
    );

    if let Ok(path) = std::env::var("MONOLOCK_DASHBOARD_V2_SCREENSHOT") {
        std::fs::write(&path, browser.screenshot().await).expect("write the screenshot");
        println!("screenshot written to {path}");
    }

    // Kick: the confirmation names the claim; b's claim 9 is revoked and
    // its session, with claim 4, lives on.
    browser.click("#queue button.kick").await;
    let text = confirmation(&browser).await;
    assert!(
        text.contains(&format!("session {sb} · claim 9")) && text.contains("REVOKED"),
        "{text}"
    );
    browser.click("#confirm-ok").await;
    assert!(matches!(b.recv().await, V2Frame::Revoked { claim: 9, .. }));
    assert_eq!(b.ping().await, V2Frame::Pong);
    assert!(lab.server.handle.lock("v2/other").is_some());
    browser
        .wait_for(
            "the empty queue",
            "return document.querySelectorAll('#queue tbody tr').length === 0",
        )
        .await;

    // Force-release: a's claim 3 is revoked, its session lives on.
    browser
        .click(&format!("{} button.release", selector("v2/held")))
        .await;
    let text = confirmation(&browser).await;
    assert!(
        text.contains(&format!("session {sa} · claim 3")) && text.contains("REVOKED"),
        "{text}"
    );
    browser.click("#confirm-ok").await;
    assert!(matches!(a.recv().await, V2Frame::Revoked { claim: 3, .. }));
    assert_eq!(a.ping().await, V2Frame::Pong);
    browser
        .wait_for(
            "the released lock is gone",
            &row_present("v2/held").replace("!==", "==="),
        )
        .await;
    browser
        .wait_for(
            "one session with claims left",
            "return document.querySelectorAll('#sessions .session').length === 1",
        )
        .await;

    browser.quit().await;
    admin.stop().await;
    lab.server.stop_and_drop((a, b)).await;
}

/// A claim's value shows beside its holder in the row and in the lock's
/// details, and follows a PROCLAIM live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holders_value_shows_beside_it_and_follows_proclaim() {
    use monolock_proto::ext::{ClientFrame as ExtFrame, Response, ServerFrame as ExtServer};
    let lab = Lab::start().await;
    let admin = HttpServer::admin_with(lab.options()).await;
    let browser = Browser::start(1280, 800).await;
    browser.goto(&format!("http://{}/", admin.addr)).await;
    browser
        .wait_for("the stream is live", "return window.__monolock.connected")
        .await;
    let (mut leader, session) = ext_client::RawExt::open(lab.server.addr, 30_000).await;
    leader.hold(1, "leader", "10.0.0.7:9000").await;
    let holder_cell = |value: &str| {
        format!(
            "const row = document.querySelector('{}');
             if (!row) return null;
             const cell = row.querySelector('.holder');
             return cell.textContent === 's{session} · c1 · {value}' ? cell.title : null",
            selector("leader")
        )
    };
    let title = browser
        .wait_for("the value beside the holder", &holder_cell("10.0.0.7:9000"))
        .await;
    assert!(
        title
            .as_str()
            .is_some_and(|t| t.ends_with(" · 10.0.0.7:9000")),
        "{title}"
    );
    leader
        .send(&ExtFrame::Proclaim {
            claim: 1,
            value: "10.0.0.7:9001".to_owned(),
        })
        .await;
    assert_eq!(
        leader.recv().await,
        Response::Ext(ExtServer::Proclaimed { claim: 1 })
    );
    browser
        .wait_for("the new value", &holder_cell("10.0.0.7:9001"))
        .await;
    browser.click(&selector("leader")).await;
    browser
        .wait_for(
            "the value in the lock's details",
            "const dts = [...document.querySelectorAll('aside dt')];
             const dt = dts.find((d) => d.textContent === 'value');
             return dt && dt.nextSibling.textContent === '10.0.0.7:9001'",
        )
        .await;
    browser.quit().await;
    admin.stop().await;
    lab.server.stop_and_drop(leader).await;
}

/// The page asks for the token, says so when a token is refused (instead
/// of showing the same dialog again), and asks only once per tab.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_asks_for_the_admin_token_and_says_when_it_is_refused() {
    let lab = Lab::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("token");
    std::fs::write(&path, "page-token").expect("write");
    let token = Arc::new(AdminToken::load(&path).expect("token"));
    let admin = HttpServer::admin_with(lab.options().with_token(token.clone())).await;
    let (_holder, _) = lab.server.hold("secret/lock", 30_000).await;

    let browser = Browser::start(1024, 700).await;
    browser.goto(&format!("http://{}/", admin.addr)).await;
    let prompt = browser
        .wait_for(
            "the token prompt",
            "return document.getElementById('login').classList.contains('open')
               ? document.getElementById('login-text').textContent : null",
        )
        .await;
    assert!(
        !prompt.as_str().expect("text").contains("refused"),
        "nothing was refused yet: {prompt}"
    );
    assert_eq!(
        browser
            .eval(&row_present("secret/lock").replace("return ", "return !"))
            .await,
        Value::Bool(true),
        "nothing is shown without the token"
    );
    // No snapshot yet: the table says it is loading, not that no lock is held.
    assert_eq!(
        browser
            .eval("return document.getElementById('empty').textContent")
            .await,
        "loading…"
    );

    // A wrong token: the dialog comes back saying it was refused.
    browser.type_into("#login-token", "wrong-token").await;
    browser.click("#login-ok").await;
    let refused = browser
        .wait_for(
            "the refusal",
            "const t = document.getElementById('login-text').textContent;
             return document.getElementById('login').classList.contains('open')
               && t.toLowerCase().includes('token refused') ? t : null",
        )
        .await;
    println!("after a wrong token: {refused}");

    browser.type_into("#login-token", "page-token").await;
    browser.click("#login-ok").await;
    browser
        .wait_for("the lock", &row_present("secret/lock"))
        .await;
    let stored = browser
        .eval("return sessionStorage.getItem('monolock-admin-token')")
        .await;
    assert_eq!(stored, "page-token");
    assert_eq!(
        browser
            .eval("return document.getElementById('count').textContent")
            .await,
        "1 lock"
    );

    // A reload of the page does not ask again.
    browser.goto(&format!("http://{}/", admin.addr)).await;
    browser
        .wait_for("the lock again", &row_present("secret/lock"))
        .await;
    assert_eq!(
        browser
            .eval("return document.getElementById('login').classList.contains('open')")
            .await,
        Value::Bool(false)
    );
    browser.quit().await;
    admin.stop().await;
    lab.server.stop().await;
}

/// What an operator sees at 1280x800: every column fits beside the side
/// panel (the Release button is on screen, held times and tokens are not
/// cut), and a lock granted after the page loaded shows its lease at once.
/// The screenshot is written to the test's target directory (its path is
/// printed) to be looked at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_1280_by_800_rows_fit_and_new_grants_show_their_lease() {
    let lab = Lab::start().await;
    let admin = HttpServer::admin_with(lab.options()).await;
    let names = (0..12).map(|i| {
        let service = ["billing", "deploy", "nightly/import", "search-indexer"][i % 4];
        (
            format!("{service}/shard-{i:02}/leader"),
            format!("spiffe://prod/{service}/worker-{i}"),
        )
    });
    let sessions = hold_in_memory(&lab.server.handle, names).await;
    common::eventually("12 locks held", || lab.server.handle.counts().locks == 12).await;
    let mut waiters = Vec::new();
    for _ in 0..3 {
        waiters.push(
            lab.server
                .wait_in_line("billing/shard-00/leader", 20_000)
                .await,
        );
    }

    let browser = Browser::start(1280, 800).await;
    browser.goto(&format!("http://{}/", admin.addr)).await;
    browser
        .wait_for(
            "12 locks on the page",
            "return document.getElementById('count').textContent === '12 locks'",
        )
        .await;
    let size = browser
        .eval("return [window.innerWidth, window.innerHeight]")
        .await;
    println!("viewport: {size}");

    browser.click(&selector("billing/shard-00/leader")).await;
    browser
        .wait_for(
            "the queue panel",
            "return document.querySelectorAll('#queue tbody tr').length === 3",
        )
        .await;

    // The first row's Release button is on screen: inside the window and
    // the table's visible area, and what is drawn at its centre (nothing
    // covers it); nothing scrolls sideways.
    let geometry = browser
        .eval(
            "const b = document.querySelector('#viewport .row button.release');
             const r = b.getBoundingClientRect(), v = document.getElementById('viewport');
             const box = v.getBoundingClientRect();
             const hit = document.elementFromPoint((r.left + r.right) / 2, (r.top + r.bottom) / 2);
             return {left: r.left, right: r.right, top: r.top, bottom: r.bottom,
                     width: window.innerWidth, height: window.innerHeight,
                     table_right: box.left + v.clientLeft + v.clientWidth,
                     table_scroll: v.scrollWidth - v.clientWidth,
                     page_scroll: document.documentElement.scrollWidth - window.innerWidth,
                     hit: hit === b || b.contains(hit)}",
        )
        .await;
    let number = |key: &str| geometry[key].as_f64().expect("a number");
    assert!(
        number("left") >= 0.0
            && number("right") <= number("width")
            && number("right") <= number("table_right")
            && number("top") >= 0.0
            && number("bottom") <= number("height")
            && geometry["hit"] == true,
        "the Release button is off-screen: {geometry}"
    );
    assert!(
        number("table_scroll") <= 0.0 && number("page_scroll") <= 0.0,
        "the table scrolls sideways: {geometry}"
    );
    // Held times, tokens and leases are whole, not cut by an ellipsis.
    let cut = browser
        .eval(
            "const row = document.querySelector('#viewport .row');
             const fits = (i, text) => {
               const c = row.children[i], before = c.textContent;
               if (text !== undefined) c.textContent = text;
               const ok = c.scrollWidth <= c.clientWidth;
               c.textContent = before;
               return ok ? null : (text || before);
             };
             return [fits(3), fits(4, '2m 13s'), fits(4, '23h 59m'), fits(5, '10.5s'), fits(5, '500ms')]
               .filter((x) => x !== null)",
        )
        .await;
    assert_eq!(cut, Value::Array(Vec::new()), "cut cells");

    // Granted after the page loaded: the lease is there as soon as the row.
    let (_late, _) = lab.server.hold("deploy/web-frontend", 45_000).await;
    let lease = browser
        .wait_for(
            "the new lock's row",
            &format!(
                "const r = document.querySelector('{}');
                 return r ? (r.children[5].textContent || 'blank') : null",
                selector("deploy/web-frontend")
            ),
        )
        .await;
    assert_eq!(lease, "45s", "the lease of a lock granted after load");
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-1280x800.png");
    std::fs::write(&path, browser.screenshot().await).expect("write the screenshot");
    println!("screenshot at 1280x800: {}", path.display());

    drop(sessions);
    drop(waiters);
    browser.quit().await;
    admin.stop().await;
    lab.server.stop().await;
}

/// Sets the filter to `pattern` (typed as an operator types it, or set
/// at once) and checks that the page leaves exactly the rows the server's
/// own glob (`/api/locks?match=`) names; returns them.
async fn filtered(
    browser: &Browser,
    admin: &HttpServer,
    pattern: &str,
    typed: bool,
) -> Vec<String> {
    let glob = if pattern.contains(['*', '?']) {
        pattern.to_owned()
    } else {
        format!("*{pattern}*")
    };
    let query = percent_encoding::utf8_percent_encode(&glob, percent_encoding::NON_ALPHANUMERIC);
    let (status, body) = admin.get(&format!("/api/locks?match={query}")).await;
    assert_eq!(status, 200, "{body}");
    let list: Value = serde_json::from_str(&body).expect("JSON");
    let mut expected: Vec<String> = list["locks"]
        .as_array()
        .expect("locks")
        .iter()
        .map(|lock| lock["name"].as_str().expect("name").to_owned())
        .collect();
    expected.sort();
    let set = format!(
        "const f = document.getElementById('filter'); f.value = {}; f.dispatchEvent(new Event('input')); return true",
        Value::from(if typed { "" } else { pattern })
    );
    browser.eval(&set).await;
    if typed {
        browser.type_into("#filter", pattern).await;
    }
    // Once the page has drawn this very filter, the rows it left.
    let shown = browser
        .wait_for(
            &format!("the filter {pattern:?}"),
            &format!(
                "if (window.__monolock.filter !== {}) return null;
                 return [...document.querySelectorAll('#viewport .row')]
                   .filter((r) => r.style.display !== 'none' && r.dataset.lock !== undefined)
                   .map((r) => r.dataset.lock)",
                Value::from(pattern)
            ),
        )
        .await;
    let mut shown: Vec<String> = serde_json::from_value(shown).expect("names");
    shown.sort();
    assert_eq!(
        shown, expected,
        "the page and the server disagree on {pattern:?}"
    );
    shown
}

/// The filter is the server's glob: patterns with `-`, `.`, `/`, `?`, `*`,
/// brackets, backslashes and non-ASCII leave exactly the rows the server's
/// `?match=` names (never every row), and a pattern the API would refuse
/// is shown as invalid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filter_leaves_exactly_what_the_servers_glob_matches() {
    let lab = Lab::start().await;
    let admin = HttpServer::admin_with(lab.options()).await;
    let names = [
        "shard-1",
        "shard-2",
        "shard-é",
        "shard-10",
        "shard-?",
        "shard.1",
        "shard/1",
        "a[1]-b",
        "a[12]-b",
        "x.y",
        "xzy",
        "back\\slash",
        "naïve/日本-1",
        "emoji-😀",
        "star*name",
    ];
    let mut holders = Vec::new();
    for name in names {
        holders.push(lab.server.hold(name, 30_000).await.0);
    }
    let browser = Browser::start(1280, 800).await;
    browser.goto(&format!("http://{}/", admin.addr)).await;
    browser
        .wait_for(
            "every lock",
            &format!(
                "return document.getElementById('count').textContent === '{} locks'",
                names.len()
            ),
        )
        .await;

    // Typed as an operator types it: the placeholder's own example.
    let shown = filtered(&browser, &admin, "shard-?", true).await;
    assert_eq!(shown, ["shard-1", "shard-2", "shard-?", "shard-é"]);
    for (pattern, typed) in [
        ("shard-*", true),
        ("shard.?", true),
        ("*/*", true),
        ("a[1]-?", true),
        ("a[1?]-b", true),
        ("x.y", true),
        ("*\\*", true),
        ("naïve/*-?", true),
        ("日本", true),
        ("star*", true),
        ("*\\*name", false),
        ("emoji-?", false),
        ("-", true),
        ("no-such-lock", true),
    ] {
        filtered(&browser, &admin, pattern, typed).await;
    }

    // Longer than the API's ?match= allows: shown as invalid, no rows.
    browser
        .eval("const f = document.getElementById('filter'); f.value = 'x'.repeat(1025); f.dispatchEvent(new Event('input')); return true")
        .await;
    let invalid = browser
        .wait_for(
            "the invalid filter",
            "const c = document.getElementById('count');
             return c.classList.contains('bad') ? c.textContent : null",
        )
        .await;
    assert!(
        invalid
            .as_str()
            .is_some_and(|t| t.starts_with("invalid filter")),
        "{invalid}"
    );
    assert_eq!(
        browser
            .eval("return [...document.querySelectorAll('#viewport .row')].filter((r) => r.style.display !== 'none').length")
            .await,
        0
    );

    drop(holders);
    browser.quit().await;
    admin.stop().await;
    lab.server.stop().await;
}

/// Holds one lock per name through in-memory sessions (no sockets): each
/// is a real protocol session driven by `serve_stream`. The returned client
/// ends keep them open.
async fn hold_in_memory(
    handle: &ServerHandle,
    names: impl Iterator<Item = (String, String)>,
) -> Vec<tokio::io::DuplexStream> {
    use tokio::io::AsyncWriteExt;
    let mut clients = Vec::new();
    for (i, (name, identity)) in names.enumerate() {
        // Room for the ACQUIRE and the reply: nobody reads this end.
        let (mut client, server) = tokio::io::duplex(512);
        let handle = handle.clone();
        let remote: SocketAddr = format!(
            "10.{}.{}.{}:{}",
            (i >> 16) & 0xff,
            (i >> 8) & 0xff,
            i & 0xff,
            40_000 + i % 20_000
        )
        .parse()
        .expect("address");
        tokio::spawn(async move { handle.serve_stream(server, remote, &identity).await });
        client
            .write_all(&acquire_bytes(1, 600_000, name.as_bytes()))
            .await
            .expect("ACQUIRE into the pipe");
        clients.push(client);
    }
    clients
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_locks_stay_fast_through_a_virtualised_list() {
    const LOCKS: usize = 10_000;
    let lab = Lab::start().await;
    let admin = HttpServer::admin_with(lab.options()).await;
    let services = ["billing", "deploy", "etl", "search", "shard", "nightly"];
    let names = (0..LOCKS).map(|i| {
        let service = services[i % services.len()];
        (
            format!("{service}/{:05}/leader", i),
            format!("spiffe://prod/{service}/worker-{}", i % 97),
        )
    });
    let sessions = hold_in_memory(&lab.server.handle, names).await;
    common::eventually("10,000 locks held", || {
        lab.server.handle.counts().locks == LOCKS
    })
    .await;

    // Queues on a few locks, from real clients.
    let mut waiters: Vec<Peer<tokio::net::TcpStream>> = Vec::new();
    for (lock, count) in [("billing/00000/leader", 4), ("billing/00006/leader", 2)] {
        for _ in 0..count {
            waiters.push(lab.server.wait_in_line(lock, 30_000).await);
        }
    }

    let browser = Browser::start(1440, 900).await;
    let started = std::time::Instant::now();
    browser.goto(&format!("http://{}/", admin.addr)).await;
    browser
        .wait_for(
            "10,000 locks on the page",
            "return document.getElementById('count').textContent === '10000 locks'",
        )
        .await;
    let load = started.elapsed();
    let figures = browser
        .eval(
            "const m = window.__monolock;
             return {snapshot_ms: m.lastSnapshotMs, render_ms: m.lastRenderMs, rows: m.rows}",
        )
        .await;
    println!(
        "10,000 locks: page load to all shown {} ms, snapshot applied in {:.1} ms, \
         render {:.1} ms, {} rows in the DOM",
        load.as_millis(),
        figures["snapshot_ms"].as_f64().unwrap_or(f64::NAN),
        figures["render_ms"].as_f64().unwrap_or(f64::NAN),
        figures["rows"]
    );
    let rows = figures["rows"].as_u64().expect("rows");
    assert!(
        rows < 120,
        "only the rows in view are in the DOM, not {rows} of 10,000"
    );

    // Scrolling to the end and filtering both work on the whole set.
    browser
        .eval("const v = document.getElementById('viewport'); v.scrollTop = v.scrollHeight; return true")
        .await;
    browser
        .wait_for("the last lock", &row_present("shard/09994/leader"))
        .await;
    browser.type_into("#filter", "deploy/0000?/*").await;
    browser
        .wait_for(
            "the filtered view",
            "return document.getElementById('count').textContent === 'showing 2 of 10000'",
        )
        .await;

    if let Ok(path) = std::env::var("MONOLOCK_DASHBOARD_SCREENSHOT") {
        screenshot(&browser, &lab, &path).await;
    }
    drop(sessions);
    drop(waiters);
    browser.quit().await;
    admin.stop().await;
    lab.server.stop().await;
}

/// The page under load: churn on a few locks, a queue selected.
async fn screenshot(browser: &Browser, lab: &Lab, path: &str) {
    browser.eval("const f = document.getElementById('filter'); f.value = ''; f.dispatchEvent(new Event('input')); return true").await;
    let stop = CancellationToken::new();
    let mut churn = Vec::new();
    for worker in 0..4 {
        let addr = lab.server.addr;
        let stop = stop.clone();
        churn.push(tokio::spawn(async move {
            let name = format!("billing/{worker:05}/batch");
            for _ in 0..100_000 {
                if stop.is_cancelled() {
                    break;
                }
                let mut peer = Peer::connect(addr).await;
                peer.send(&acquire_bytes(1, 5_000, name.as_bytes())).await;
                let _ = peer.recv().await;
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
        }));
    }
    browser
        .wait_for(
            "grants per second",
            "return parseFloat(document.getElementById('s-grants').textContent) > 5",
        )
        .await;
    browser.click(&selector("billing/00000/leader")).await;
    browser
        .wait_for(
            "the queue panel",
            "return document.querySelectorAll('#queue tbody tr').length === 4",
        )
        .await;
    std::fs::write(path, browser.screenshot().await).expect("write the screenshot");
    println!("screenshot written to {path}");
    stop.cancel();
    for task in churn {
        let _ = task.await;
    }
}
