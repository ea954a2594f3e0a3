//! Protocol v2: `v2::decode_open`, `v2::decode_request` (whole and chunked)
//! and `v2::decode_response` on arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    monolock_fuzz::checks::check_v2(data);
});
