#!/usr/bin/env bash
# fuzz/smoke.sh [SECONDS]: builds build-fuzz (clang-14, libFuzzer, ASan+UBSan)
# if needed, generates a seed corpus from ../shared and runs fuzz-gguf for
# SECONDS (default 25). Prints `RESULT fuzz-smoke: 1 passed, 0 failed` (or
# failed); exit 77 and a skip line when clang-14 is missing.
# FUZZ_LOG=path keeps libFuzzer's output; FUZZ_CORPUS=dir keeps the corpus.
set -uo pipefail
cd "$(dirname "$0")/.."
secs="${1:-25}"
shared="${STRATA_SHARED_DIR:-$(cd .. && pwd)/shared}"

if ! command -v clang-14 >/dev/null 2>&1; then
    echo "RESULT fuzz-smoke: 0 passed, 0 failed (skipped: clang-14 not installed)"
    exit 77
fi
fail() {
    echo "fuzz-smoke: $*"
    echo "RESULT fuzz-smoke: 0 passed, 1 failed"
    exit 1
}
if [ ! -f build-fuzz/build.ninja ]; then
    CC=clang-14 meson setup build-fuzz -Dfuzz=true -Dtests=false --buildtype=debug \
        -Db_sanitize=address,undefined -Db_lundef=false >build-fuzz-setup.log 2>&1 ||
        { tail -20 build-fuzz-setup.log; fail "meson setup failed"; }
    rm -f build-fuzz-setup.log
fi
ninja -C build-fuzz fuzz/fuzz-gguf >/dev/null || fail "build failed"

work="$(mktemp -d /tmp/fuzz-smoke.XXXXXX)"
trap 'rm -rf "$work"' EXIT
corpus="${FUZZ_CORPUS:-$work/corpus}"
mkdir -p "$corpus" "$work/seeds"
python3 fuzz/make-seeds.py "$shared" "$work/seeds" >/dev/null || fail "seed generation failed"
log="${FUZZ_LOG:-$work/fuzz.log}"
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
    build-fuzz/fuzz/fuzz-gguf "$corpus" "$work/seeds" -max_total_time="$secs" -max_len=65536 \
    -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 -artifact_prefix="$work/" >"$log" 2>&1
rc=$?
grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)|cov:' "$log" | tail -4
if [ $rc -ne 0 ]; then
    grep -E 'ERROR|SUMMARY|Test unit written' "$log" | head -10
    for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
        [ -f "$a" ] && cp "$a" fuzz/ && echo "kept fuzz/$(basename "$a")"
    done
    fail "libFuzzer exited with $rc"
fi
echo "RESULT fuzz-smoke: 1 passed, 0 failed"
