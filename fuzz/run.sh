#!/usr/bin/env bash
# `just fuzz SECONDS [TARGET…]`: builds the fuzz targets with libFuzzer's
# coverage instrumentation on the stable toolchain and runs each for
# SECONDS (docs/decisions.md §Fuzzing). Prints one table row per target
# (executions, corpus, coverage, result) and exits non-zero when a target
# found a crash, a timeout or a memory blow-up; the input is then in
# fuzz/artifacts/<target>/, and `fuzz/run.sh replay FILE…` reruns it.
set -euo pipefail
cd "$(dirname "$0")"

host=$(rustc -vV | sed -n 's/^host: //p')
# What cargo-fuzz passes, less its -Z flags (no AddressSanitizer: safe Rust
# panics, and libfuzzer-sys turns a panic into an abort libFuzzer reports).
flags=(
    -Cpasses=sancov-module
    -Cllvm-args=-sanitizer-coverage-level=4
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters
    -Cllvm-args=-sanitizer-coverage-pc-table
    -Cllvm-args=-sanitizer-coverage-trace-compares
    --cfg fuzzing
)
export RUSTFLAGS="${flags[*]}"
# --target keeps the instrumentation off build scripts and proc macros.
cargo build -q --release -j 2 --target "$host" --bins
bin="target/$host/release"
all=$(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^echomq-fuzz$')

if [ "${1:-}" = replay ]; then
    shift
    for file in "$@"; do
        target=$(basename "$(dirname "$file")")
        "$bin/$target" "$file"
    done
    exit 0
fi

seconds=${1:-60}
shift || true
targets=${*:-$all}
failed=0
printf '| target | seconds | executions | exec/s | corpus | coverage | result |\n|---|---|---|---|---|---|---|\n'
for t in $targets; do
    mkdir -p "corpus/$t" "artifacts/$t"
    log="artifacts/$t/last.log"
    status=ok
    "$bin/$t" "corpus/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -max_len=4096 -artifact_prefix="artifacts/$t/" -print_final_stats=1 >"$log" 2>&1 || status=FAILED
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    corpus=$(find "corpus/$t" -type f | wc -l)
    if [ "$status" != ok ]; then
        failed=1
        status="FAILED: $(grep -m1 -o 'Test unit written to .*' "$log" || echo "see $log")"
    fi
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$t" "$seconds" "${runs:-?}" "${speed:-?}" "$corpus" "${cov:-?}" "$status"
done
exit "$failed"
