//! `decode_request` from the acquire phase: arbitrary bytes, whole and chunked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monolock_proto::Phase;

fuzz_target!(|data: &[u8]| {
    monolock_fuzz::checks::check_requests(data, Phase::AwaitingAcquire);
});
