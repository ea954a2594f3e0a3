//! `decode_response`: arbitrary bytes, whole and chunked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    monolock_fuzz::checks::check_responses(data);
});
