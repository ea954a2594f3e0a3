//! Uncontended lock cycles with the Rust client (acquire, then release:
//! connect, ACQUIRE, ACQUIRED, close), one at a time on a current-thread
//! runtime. Prints `p50_us p99_us` after the warm-up.
//!
//! Usage: monolock-rust-cycle ADDR CYCLES

use std::time::{Duration, Instant};

use monolock_client::Client;

const WARM_UP: usize = 200;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args
        .next()
        .ok_or("usage: monolock-rust-cycle ADDR CYCLES")?;
    let cycles: usize = args.next().ok_or("missing CYCLES")?.parse()?;
    if cycles == 0 {
        return Err("CYCLES must be at least 1".into());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut samples = runtime.block_on(async {
        let client = Client::new(addr);
        let mut samples = Vec::with_capacity(cycles);
        for i in 0..WARM_UP + cycles {
            let start = Instant::now();
            let guard = client
                .acquire("bench/cycle", Duration::from_secs(60))
                .await?;
            guard.release().await?;
            if i >= WARM_UP {
                samples.push(start.elapsed());
            }
        }
        Ok::<_, monolock_client::Error>(samples)
    })?;
    samples.sort();
    let at = |q: usize| samples[(samples.len() - 1) * q / 100].as_secs_f64() * 1e6;
    println!("{:.1} {:.1}", at(50), at(99));
    Ok(())
}
