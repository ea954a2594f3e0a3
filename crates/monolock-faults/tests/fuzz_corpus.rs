//! Replays the fuzz regression corpus (`fuzz/regressions/<target>/`)
//! through the same checks as the cargo-fuzz targets, then runs a bounded,
//! coverage-free fuzzer on stable: random and mutated frames, whole and in
//! chunks. Any input a fuzzer once found goes into the corpus and stays
//! checked by a plain `cargo test`.

use std::{fs, path::PathBuf, time::Instant};

use monolock_proto::Phase;
use rand::{Rng, SeedableRng, rngs::StdRng};

#[path = "../../../fuzz/src/checks.rs"]
mod checks;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(target);
    let mut inputs: Vec<(PathBuf, Vec<u8>)> = fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let bytes = fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "no inputs in {}", dir.display());
    inputs
}

fn replay(target: &str, check: impl Fn(&[u8])) {
    for (path, bytes) in corpus(target) {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&bytes)));
        assert!(outcome.is_ok(), "{} fails its check", path.display());
    }
}

#[test]
fn regressions_decode_request_acquire() {
    replay("decode_request_acquire", |b| {
        checks::check_requests(b, Phase::AwaitingAcquire)
    });
}

#[test]
fn regressions_decode_request_established() {
    replay("decode_request_established", |b| {
        checks::check_requests(b, Phase::Established)
    });
}

#[test]
fn regressions_decode_response() {
    replay("decode_response", checks::check_responses);
}

#[test]
fn regressions_decode_v2() {
    replay("decode_v2", checks::check_v2);
}

/// A structured mutation of a corpus input: flip, insert, delete, splice,
/// or overwrite a length field with an extreme value.
fn mutate(rng: &mut StdRng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = seeds[rng.random_range(0..seeds.len())].clone();
    for _ in 0..rng.random_range(1..6) {
        let len = bytes.len();
        match rng.random_range(0..6) {
            0 if len > 0 => bytes[rng.random_range(0..len)] ^= 1 << rng.random_range(0..8),
            1 => bytes.insert(rng.random_range(0..=len), rng.random()),
            2 if len > 0 => {
                bytes.remove(rng.random_range(0..len));
            }
            3 => {
                let other = &seeds[rng.random_range(0..seeds.len())];
                let at = rng.random_range(0..=len);
                bytes.splice(at..at, other.iter().copied());
            }
            4 if len > 1 => {
                let at = rng.random_range(0..len - 1);
                let extreme: [u8; 2] = match rng.random_range(0..4) {
                    0 => [0, 0],
                    1 => [0xff, 0xff],
                    2 => [0x01, 0x00],
                    _ => [0x00, 0xff],
                };
                bytes[at..at + 2].copy_from_slice(&extreme);
            }
            _ => bytes.extend((0..rng.random_range(0..16)).map(|_| rng.random::<u8>())),
        }
    }
    bytes.truncate(1024);
    bytes
}

/// Coverage-free fuzzing on stable, bounded in count and time.
#[test]
fn random_and_mutated_inputs() {
    let seed: u64 = rand::random();
    let mut rng = StdRng::seed_from_u64(seed);
    let seeds: Vec<Vec<u8>> = [
        "decode_request_acquire",
        "decode_request_established",
        "decode_response",
        "decode_v2",
    ]
    .iter()
    .flat_map(|t| corpus(t).into_iter().map(|(_, b)| b))
    .collect();
    let started = Instant::now();
    let mut runs = 0u32;
    while runs < 30_000 && started.elapsed().as_secs() < 10 {
        let input = if rng.random_bool(0.2) {
            (0..rng.random_range(0..64)).map(|_| rng.random()).collect()
        } else {
            mutate(&mut rng, &seeds)
        };
        let outcome = std::panic::catch_unwind(|| {
            checks::check_requests(&input, Phase::AwaitingAcquire);
            checks::check_requests(&input, Phase::Established);
            checks::check_responses(&input);
            checks::check_v2(&input);
        });
        assert!(
            outcome.is_ok(),
            "seed {seed}: input {input:02x?} fails a check"
        );
        runs += 1;
    }
    assert!(runs >= 1_000, "only {runs} inputs in the time bound");
}
