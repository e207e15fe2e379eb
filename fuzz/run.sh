#!/usr/bin/env bash
# Usage: fuzz/run.sh SECONDS [TARGET...]
#        fuzz/run.sh --runs N [TARGET...]
#
# Builds every fuzz target (cargo-fuzz, nightly), then runs each in turn
# from a temporary copy of its seeds in corpus/<target>/ (the committed
# corpus never grows): for SECONDS seconds of wall time, or for N
# executions (`--runs`, what a long run wants: it does not count the time
# the process is stopped). Prints each target's executions, wall and CPU
# seconds, rate and final coverage from libFuzzer's final stats, and exits
# non-zero if any target crashed, timed out or ran out of memory; the input
# that did is left in artifacts/<target>/. One process at a time, under
# nice: the fuzzer gets one core and the machine stays usable.
#
# Environment: FUZZ_TIMEOUT, the seconds one input may take before it is
# reported as a hang (default 30; raise it if the fuzzer may be stopped
# with SIGSTOP for longer, as libFuzzer counts wall time); FUZZ_PID_FILE,
# a file to write each fuzzer's process id to while it runs.
set -euo pipefail

usage='usage: fuzz/run.sh SECONDS [TARGET...] | fuzz/run.sh --runs N [TARGET...]'
if [ "${1:-}" = --runs ]; then
    limit=(-runs="${2:?$usage}")
    shift 2
else
    limit=(-max_total_time="${1:?$usage}")
    shift
fi
cd "$(dirname "$0")"

cargo=(cargo)
if command -v rustup >/dev/null; then cargo=(cargo +nightly); fi
if ! "${cargo[@]}" fuzz --version >/dev/null 2>&1; then
    "${cargo[@]}" install cargo-fuzz --locked
fi

if [ $# -gt 0 ]; then targets=("$@"); else mapfile -t targets < <("${cargo[@]}" fuzz list); fi
nice -n 19 "${cargo[@]}" fuzz build
bin_dir=target/$(rustc -vV | sed -n 's/^host: //p')/release

# Sets cpu to the CPU seconds (user + system) this shell's finished
# children have used (`times` must run in this shell, not a subshell).
times_file=$(mktemp)
trap 'rm -f "$times_file"' EXIT
cpu_now() {
    times >"$times_file"
    cpu=$(awk 'NR == 2 { n = split($0, t, /[ ms]+/); s = 0
        for (i = 1; i < n; i += 2) s += t[i] * 60 + t[i + 1]; printf "%.0f", s }' "$times_file")
}

failed=()
for t in "${targets[@]}"; do
    work=$(mktemp -d)
    log=$(mktemp)
    cp corpus/"$t"/* "$work"/
    mkdir -p artifacts/"$t"
    status=0
    cpu_now
    cpu0=$cpu
    start=$SECONDS
    nice -n 19 "$bin_dir/$t" "$work" "${limit[@]}" -timeout="${FUZZ_TIMEOUT:-30}" -print_final_stats=1 \
        -artifact_prefix=artifacts/"$t"/ >"$log" 2>&1 &
    pid=$!
    if [ -n "${FUZZ_PID_FILE:-}" ]; then echo "$pid" >"$FUZZ_PID_FILE"; fi
    wait "$pid" || status=$?
    wall=$((SECONDS - start))
    cpu_now
    cpu=$((cpu - cpu0))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    cov=$(grep -E '^#[0-9]+.* cov: ' "$log" | tail -n 1 | sed -E 's/.* cov: ([0-9]+) ft: ([0-9]+) .*/cov \1 ft \2/')
    if [ "$status" -eq 0 ]; then
        printf '%-16s ok      %12s execs  %6ss wall  %6ss cpu  %8s exec/s  %s\n' \
            "$t" "${execs:-?}" "$wall" "$cpu" "${rate:-?}" "${cov:-?}"
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
