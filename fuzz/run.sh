#!/usr/bin/env bash
# Fuzzes the protocol decoders with cargo-fuzz (libFuzzer), for a bounded
# time per target, seeded with the committed regression corpus.
#
#   fuzz/run.sh [SECONDS_PER_TARGET]      (default 60, or $FUZZ_SECONDS)
#   FUZZ_TOOLCHAIN=stable fuzz/run.sh     (force the stable route below)
#
# Targets: decode_request_acquire, decode_request_established (the server
# decoder from each phase), decode_response (the client decoder) and
# decode_v2 (protocol v2, both sides).
#
# Toolchain: cargo-fuzz builds with unstable rustc flags. With a nightly
# toolchain installed it uses it, with AddressSanitizer. Otherwise it uses
# the stable toolchain with RUSTC_BOOTSTRAP=1 and no sanitizer (coverage
# guidance still works: it comes from -C passes=sancov-module, not from a
# sanitizer; Rust is memory-safe without one, and the decoders forbid
# unsafe code).
#
# New interesting inputs go to fuzz/corpus/<target> (not committed). A
# crash is copied into fuzz/regressions/<target>/, which
# `cargo test -p monolock-faults` replays, and the script exits 1.
set -euo pipefail
cd "$(dirname "$0")"

seconds="${1:-${FUZZ_SECONDS:-60}}"
targets=(decode_request_acquire decode_request_established decode_response decode_v2)

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

if [ "${FUZZ_TOOLCHAIN:-auto}" != stable ] && rustup run nightly rustc --version >/dev/null 2>&1; then
    toolchain=(+nightly)
    sanitizer=address
else
    toolchain=()
    sanitizer=none
    export RUSTC_BOOTSTRAP=1
fi
echo "== toolchain: $(rustc "${toolchain[@]}" --version), sanitizer: $sanitizer"

failed=0
for target in "${targets[@]}"; do
    echo "== $target for ${seconds}s"
    mkdir -p "corpus/$target"
    rm -rf "artifacts/$target"
    if ! cargo "${toolchain[@]}" fuzz run --sanitizer "$sanitizer" "$target" \
        "$PWD/corpus/$target" "$PWD/regressions/$target" -- \
        -max_total_time="$seconds" -max_len=1024 -print_final_stats=1; then
        failed=1
        for artifact in "artifacts/$target"/*; do
            [ -e "$artifact" ] || continue
            cp "$artifact" "regressions/$target/"
            echo "!! $target: $(basename "$artifact") copied to fuzz/regressions/$target/"
        done
    fi
done
exit "$failed"
