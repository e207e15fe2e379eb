#!/usr/bin/env bash
# Usage: fuzz/run.sh SECONDS [TARGET...]
#
# Builds every fuzz target (cargo-fuzz, nightly), then runs each in turn for
# SECONDS seconds from a temporary copy of its seeds in corpus/<target>/
# (the committed corpus never grows). Prints each target's executions and
# rate from libFuzzer's final stats, and exits non-zero if any target
# crashed, timed out or ran out of memory; the input that did is left in
# artifacts/<target>/. One process at a time, under nice: the fuzzer gets
# one core and the machine stays usable.
set -euo pipefail

secs=${1:?usage: fuzz/run.sh SECONDS [TARGET...]}
shift
cd "$(dirname "$0")"

cargo=(cargo)
if command -v rustup >/dev/null; then cargo=(cargo +nightly); fi
if ! "${cargo[@]}" fuzz --version >/dev/null 2>&1; then
    "${cargo[@]}" install cargo-fuzz --locked
fi

if [ $# -gt 0 ]; then targets=("$@"); else mapfile -t targets < <("${cargo[@]}" fuzz list); fi
nice -n 19 "${cargo[@]}" fuzz build
bin_dir=target/$(rustc -vV | sed -n 's/^host: //p')/release

failed=()
for t in "${targets[@]}"; do
    work=$(mktemp -d)
    log=$(mktemp)
    cp corpus/"$t"/* "$work"/
    mkdir -p artifacts/"$t"
    status=0
    nice -n 19 "$bin_dir/$t" "$work" -max_total_time="$secs" -timeout=30 -print_final_stats=1 \
        -artifact_prefix=artifacts/"$t"/ >"$log" 2>&1 || status=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    if [ "$status" -eq 0 ]; then
        printf '%-16s ok      %12s execs  %8s exec/s\n' "$t" "${execs:-?}" "${rate:-?}"
    else
        printf '%-16s FAILED  %12s execs  (exit %s)\n' "$t" "${execs:-?}" "$status"
        grep -E '^(==[0-9]+==|thread .* panicked|SUMMARY|artifact_prefix|Test unit written)' "$log" | head -n 20 || true
        cp "$log" artifacts/"$t"/last-run.log
        failed+=("$t")
    fi
    rm -rf "$work" "$log"
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "failed: ${failed[*]} (inputs and logs in fuzz/artifacts/)" >&2
    exit 1
fi
