//! Every Rust example of docs/client-rust.md, as written, run against a
//! real server (the TLS one is compiled only: it names certificate files
//! under /etc/monolock; the one of values and observers runs against the
//! `monolock` binary, `MONOLOCK_BIN`).
//!
//! Each example is copied below verbatim, inside what a reader supplies
//! (the guarded work, a database handle); the one change is the server's
//! address, `"127.0.0.1:7070"` in the document and `&*ADDRESS` here (a
//! server on a free port). `examples_are_copied_verbatim` fails when a
//! document's example and its copy here drift apart.

mod common;

use std::{sync::OnceLock, time::Duration};

use common::TestServer;

/// The address of the server the examples run against.
static SERVER_ADDRESS: OnceLock<String> = OnceLock::new();

/// What the examples call the server's address.
struct Address;

impl std::ops::Deref for Address {
    type Target = str;
    fn deref(&self) -> &str {
        SERVER_ADDRESS.get().map_or("127.0.0.1:1", String::as_str)
    }
}

const ADDRESS_IN_EXAMPLES: Address = Address;

/// A server on its own runtime (its worker threads serve it while the
/// examples build runtimes of their own), its address published once.
fn server() -> &'static TestServer {
    static SERVER: OnceLock<(tokio::runtime::Runtime, TestServer)> = OnceLock::new();
    let (_, server) = SERVER.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let server = runtime.block_on(TestServer::start());
        let _ = SERVER_ADDRESS.set(server.addr.to_string());
        (runtime, server)
    });
    server
}

#[rustfmt::skip]
mod acquire_use_release {
    use super::ADDRESS_IN_EXAMPLES as ADDRESS;

    async fn import_batch(token: u64) {
        assert!(token > 0);
    }

    pub fn run() -> Result<(), monolock_client::Error> {
        main()
    }

    // docs/client-rust.md, "Acquire, use, release"
    use std::time::Duration;
    use monolock_client::{Client, Error};

    #[tokio::main]
    async fn main() -> Result<(), Error> {
        let client = Client::new(&*ADDRESS);
        let lock = client.acquire("nightly/import", Duration::from_secs(2)).await?;

        tokio::select! {
            () = import_batch(lock.token()) => {}
            reason = lock.lost() => {
                // Stop touching the resource: someone else may hold the lock now.
                eprintln!("lost {}: {reason}", lock.name());
                return Err(reason.into());
            }
        }
        lock.release().await // or simply drop `lock`
    }
}

/// A database handle as the fencing example uses it: `execute` reports
/// one row updated.
struct Db;

impl Db {
    async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn std::fmt::Debug + Sync)],
    ) -> Result<u64, std::io::Error> {
        assert!(sql.starts_with("UPDATE invoices"));
        assert_eq!(params.len(), 2);
        Ok(1)
    }
}

async fn write_chunk(chunk: u32, token: u64) {
    assert!(chunk < 3 && token > 0);
}

fn write_chunk_blocking(chunk: u32, token: u64) -> Result<(), monolock_client::Error> {
    assert!(chunk < 3 && token > 0);
    Ok(())
}

#[rustfmt::skip]
#[allow(unused_must_use)] // the borrowing example leaves its `Outcome` to the reader
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_fragments_run() -> Result<(), Box<dyn std::error::Error>> {
    use monolock_client::Client;
    let server = TestServer::start().await;
    let client = Client::new(server.addr.to_string());
    let db = Db;
    let invoice_id = 42_i64;
    let chunks = 0..3_u32;
    async {
        // docs/client-rust.md, "Fencing tokens"
        let lock = client.acquire("invoices/send", Duration::from_secs(2)).await?;
        let rows = db.execute(
            "UPDATE invoices SET status = 'sent', fence_token = $1::text::numeric \
             WHERE id = $2 AND fence_token <= $1::text::numeric",
            &[&lock.token().to_string(), &invoice_id],
        ).await?;
        if rows == 0 {
            return Ok(()); // fenced off: someone with a newer token got there first
        }
        Ok::<(), Box<dyn std::error::Error>>(())
    }
    .await?;
    // docs/client-rust.md, "The scoped form: `run_locked`"
    let outcome = client
        .run_locked("reports/daily", Duration::from_secs(2), |lock| async move {
            for chunk in chunks {
                if lock.is_cancelled() {
                    return Err("stopped: lock lost");
                }
                write_chunk(chunk, lock.token()).await;
            }
            Ok(())
        })
        .await?;               // Err: the lock was never acquired, the work never ran
    if let Some(loss) = outcome.loss {
        eprintln!("the lock was lost during the work: {loss}");
    }
    // docs/client-rust.md, "The scoped form: `run_locked`" (borrowing)
    let mut report = Vec::new();          // local, borrowed by the work
    client
        .run_locked("reports/daily", None, |lock| {
            let report = &mut report;
            async move { report.push(lock.token()) }
        })
        .await?;
    assert_eq!(report.len(), 1);
    Ok(())
}

#[test]
fn the_main_example_runs() {
    server();
    acquire_use_release::run().expect("the example");
}

#[rustfmt::skip]
#[allow(non_snake_case)]
#[test]
fn the_blocking_example_runs() -> Result<(), monolock_client::Error> {
    server();
    let ADDRESS = ADDRESS_IN_EXAMPLES;
    let chunks = 0..3_u32;
    let write_chunk = write_chunk_blocking;
    // docs/client-rust.md, "Blocking programs"
    use monolock_client::blocking::Client;

    let client = Client::new(&*ADDRESS)?.with_default_lease(Duration::from_secs(2));
    let lock = client.acquire("nightly/import", None)?;
    for chunk in chunks {
        if !lock.is_held() { break; }      // given up: stop writing
        write_chunk(chunk, lock.token())?;
    }
    lock.release()?;
    Ok(())
}

#[rustfmt::skip]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(non_snake_case)]
async fn the_values_and_observers_example_runs() -> Result<(), monolock_client::Error> {
    let server = common::BinaryServer::start().await;
    let ADDRESS = server.serving.addr.to_string();
    // docs/client-rust.md, "Values, observers and leader election"
    use std::time::Duration;
    use monolock_client::{Client, StateEvent};

    let client = Client::new(&*ADDRESS);
    let lock = client
        .acquire_with_value("service/leader", Duration::from_secs(2), "10.0.0.7:9000")
        .await?;
    lock.set_value("10.0.0.7:9001").await?; // returns once the server has it

    let follower = Client::new(&*ADDRESS);
    let now = follower.holder("service/leader").await?; // one lookup
    assert_eq!((now.event, now.value.as_str()), (StateEvent::Held, "10.0.0.7:9001"));

    let mut states = follower.observe("service/leader").await?; // a futures_core::Stream
    lock.release().await?;
    while let Some(state) = states.next().await {
        let state = state?; // the state when the watch began (initial), then every change
        println!("{} token {} value {:?}", state.event.name(), state.token, state.value);
        if !state.held {
            break; // released
        }
    }
    Ok(())
}

/// docs/client-rust.md, "TLS and mTLS": compiled, not run (it reads
/// certificate files under /etc/monolock).
#[allow(dead_code)]
#[rustfmt::skip]
mod tls_example {
    use std::time::Duration;
    use monolock_client::{Client, Error, TlsConnector};

    async fn nightly() -> Result<(), Error> {
        let tls = TlsConnector::builder()
            .with_ca_file("/etc/monolock/ca.pem")
            // mTLS: the server's ACL and audit log see this certificate's
            // identity (first URI SAN, else first DNS SAN, else the CN).
            .with_client_cert_files("/etc/monolock/worker.pem", "/etc/monolock/worker.key")
            .build()?;
        let client = Client::new("locks.internal:7070").with_connector(tls);
        let lock = client.acquire("nightly/import", Duration::from_secs(2)).await?;
        // ... guarded work, exactly as over plain TCP ...
        lock.release().await
    }
}

/// The ```rust blocks of a Markdown document.
fn rust_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_end()) {
            (None, "```rust") => current = Some(String::new()),
            (Some(_), "```") => blocks.extend(current.take()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// Lines without their indentation, blank lines dropped: the copies
/// above sit inside functions and modules.
fn normalized(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| line.replace("\"127.0.0.1:7070\"", "&*ADDRESS"))
        .collect()
}

#[test]
fn examples_are_copied_verbatim() {
    let doc = include_str!("../../../docs/client-rust.md");
    let this = normalized(include_str!("doc_examples.rs"));
    let blocks = rust_blocks(doc);
    assert_eq!(
        blocks.len(),
        7,
        "a new example in docs/client-rust.md needs a copy here"
    );
    for block in blocks {
        let lines = normalized(&block);
        let found = this
            .windows(lines.len())
            .any(|window| window == lines.as_slice());
        assert!(
            found,
            "this example of docs/client-rust.md has no verbatim copy here:\n{block}"
        );
    }
}
