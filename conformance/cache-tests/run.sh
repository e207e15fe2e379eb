#!/usr/bin/env bash
# Run the HTTP caching test suite http-tests/cache-tests (cache-tests.fyi),
# unmodified, against four caching proxies, each in front of the suite's own
# test server as origin: circus (serve --origin), nginx proxy_cache, Varnish, Squid.
#
#   conformance/cache-tests/run.sh [circus-binary]
#
# Environment:
#   CACHE_TESTS_DIR   checkout of http-tests/cache-tests   (default /tmp/cache-tests-src)
#   CACHE_TESTS_OUT   where results go                     (default /tmp/cache-tests-results)
#   CACHE_TESTS_WORK  scratch for peer configs, caches, logs (default: fresh /tmp/cache-tests-work.XXXXXX)
#   CIRCUS_BIN        circus binary if no argument given   (default target/release/circus of this checkout)
#   PEERS             peers to run, in order               (default "circus nginx varnish squid")
#   CACHE_TESTS_ID    run just this test id, with the suite's request/response dump, and save nothing
#   CACHE_TESTS_TIMEOUT  seconds one peer's run may take   (default 1800)
#   CACHE_TESTS_SETUP  "cache" (default): run the suite as cache-tests.fyi does, every request
#                      through the cache, including the harness's PUT /config/<uuid> and
#                      GET /state/<uuid>.  "origin": diagnostic mode, those two go straight to
#                      the origin (setup-via-origin.mjs) and only the test requests go through
#                      the cache; results default to /tmp/cache-tests-results-setup-origin.
#
# Output: $CACHE_TESTS_OUT/<peer>.json (the suite CLI's JSON: test id -> true | [error, message]),
# <peer>.stderr, meta.json (suite commit, peer versions), summary.json and summary.txt
# (from summarise.mjs).  Exit status: 0 when every requested peer produced results,
# 1 when one failed, 2 when the suite is missing.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CIRCUS=${1:-${CIRCUS_BIN:-$HERE/../../target/release/circus}}
SUITE=${CACHE_TESTS_DIR:-/tmp/cache-tests-src}
SETUP=${CACHE_TESTS_SETUP:-cache}
case $SETUP in
  cache) OUT=${CACHE_TESTS_OUT:-/tmp/cache-tests-results} ;;
  origin) OUT=${CACHE_TESTS_OUT:-/tmp/cache-tests-results-setup-origin} ;;
  *) echo "CACHE_TESTS_SETUP must be cache or origin" >&2; exit 2 ;;
esac
PEERS=${PEERS:-"circus nginx varnish squid"}
TEST_ID=${CACHE_TESTS_ID:-}
PEER_TIMEOUT=${CACHE_TESTS_TIMEOUT:-1800}

log() { printf '[cache-tests %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# --- the suite -------------------------------------------------------------
if [[ ! -f "$SUITE/test-engine/cli.mjs" || ! -f "$SUITE/tests/index.mjs" ]]; then
  cat >&2 <<EOF
cache-tests suite not found in $SUITE (set CACHE_TESTS_DIR).  Get it with e.g.:
  git clone https://github.com/http-tests/cache-tests.git $SUITE
  git -C $SUITE checkout b55b8bda3dbb8c927c04e85bd8d496a8caa3e4ba   # the commit these configs were tried with
  (cd $SUITE && npm install --omit=dev)
EOF
  exit 2
fi
command -v node >/dev/null || { echo "node is required (>= 20.18 for undici 7)" >&2; exit 2; }
command -v curl >/dev/null || { echo "curl is required" >&2; exit 2; }
if [[ ! -d "$SUITE/node_modules/undici" ]]; then
  log "node_modules missing in $SUITE: npm install --omit=dev"
  (cd "$SUITE" && npm install --omit=dev --no-audit --no-fund) >&2
fi
SUITE_COMMIT=$(git -C "$SUITE" rev-parse HEAD 2>/dev/null || echo unknown)

mkdir -p "$OUT"
WORK=${CACHE_TESTS_WORK:-$(mktemp -d /tmp/cache-tests-work.XXXXXX)}
mkdir -p "$WORK"
chmod 755 "$WORK"   # varnish's and squid's unprivileged users must traverse it when run as root
log "suite $SUITE at $SUITE_COMMIT; setup requests via $SETUP; results -> $OUT; scratch -> $WORK"

# --- process bookkeeping: everything we start is stopped by PID ------------
declare -A PIDS=()
stop_pid() { # name pid
  local name=$1 pid=$2 i
  kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    sleep 0.1
  done
  log "$name (pid $pid) did not stop on TERM; KILL"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
stop() { # name
  local name=$1
  [[ -n "${PIDS[$name]:-}" ]] || return 0
  stop_pid "$name" "${PIDS[$name]}"
  unset "PIDS[$name]"
}
cleanup() {
  local name
  for name in "${!PIDS[@]}"; do stop "$name"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

wait_http() { # name port : any HTTP answer on a path no test uses
  local name=$1 port=$2 i
  for i in $(seq 1 150); do
    if ! kill -0 "${PIDS[$name]}" 2>/dev/null; then
      log "$name exited during startup; see $WORK/$name/"
      return 1
    fi
    if curl -s -o /dev/null -m 2 "http://127.0.0.1:$port/cache-tests-harness-probe"; then
      return 0
    fi
    sleep 0.2
  done
  log "$name did not answer on 127.0.0.1:$port within 30 s"
  return 1
}

render() { # template dest port origin_port work
  sed -e "s|@PORT@|$3|g" -e "s|@ORIGIN_PORT@|$4|g" -e "s|@WORK@|$5|g" "$1" > "$2"
}

# --- origin: the suite's own test server -----------------------------------
ORIGIN_PORT=$(free_port)
mkdir -p "$WORK/origin"
(
  cd "$SUITE"
  export npm_config_protocol=http npm_config_port="$ORIGIN_PORT" npm_config_pidfile="$WORK/origin/server.pid"
  exec node --import "$HERE/listen-local.mjs" test-engine/server/server.mjs
) > "$WORK/origin/server.log" 2>&1 &
PIDS[origin]=$!
wait_http origin "$ORIGIN_PORT"
log "origin (suite test-engine/server/server.mjs) pid ${PIDS[origin]} on 127.0.0.1:$ORIGIN_PORT"

# --- peers ------------------------------------------------------------------
declare -A VERSIONS=()

start_peer() { # peer port -> sets PIDS[peer]
  local peer=$1 port=$2 w="$WORK/$1"
  mkdir -p "$w"
  case $peer in
    circus)
      [[ -x "$CIRCUS" ]] || { log "circus binary $CIRCUS not found"; return 1; }
      VERSIONS[circus]="$("$CIRCUS" --version 2>/dev/null | head -1 || true) ($CIRCUS, built $(date -r "$CIRCUS" '+%F %T'))"
      "$CIRCUS" serve --origin "http://127.0.0.1:$ORIGIN_PORT/" --listen "127.0.0.1:$port" --admin-listen off \
        > "$w/circus.log" 2>&1 &
      ;;
    nginx)
      command -v nginx >/dev/null || { log "nginx not installed"; return 1; }
      VERSIONS[nginx]=$(nginx -v 2>&1 | sed 's/^nginx version: //')
      render "$HERE/nginx.conf.in" "$w/nginx.conf" "$port" "$ORIGIN_PORT" "$w"
      nginx -e "$w/error.log" -p "$w/" -c "$w/nginx.conf" > "$w/stdout.log" 2>&1 &
      ;;
    varnish)
      command -v varnishd >/dev/null || { log "varnishd not installed (apt-get install -y varnish)"; return 1; }
      VERSIONS[varnish]=$(varnishd -V 2>&1 | head -1)
      render "$HERE/varnish.vcl.in" "$w/default.vcl" "$port" "$ORIGIN_PORT" "$w"
      # flags as in the suite's docker/serve.sh; -F: foreground, so $! is the manager
      varnishd -F -n "$w/state" -a "127.0.0.1:$port" -T none -f "$w/default.vcl" \
        -p default_ttl=0 -p default_grace=0 -p default_keep=3600 -s malloc,64M \
        > "$w/varnishd.log" 2>&1 &
      ;;
    squid)
      command -v squid >/dev/null || { log "squid not installed (apt-get install -y squid)"; return 1; }
      VERSIONS[squid]=$(squid -v 2>&1 | head -1)
      render "$HERE/squid.conf.in" "$w/squid.conf" "$port" "$ORIGIN_PORT" "$w"
      if [[ $(id -u) -eq 0 ]] && id proxy >/dev/null 2>&1; then chown proxy: "$w"; fi
      squid -N -f "$w/squid.conf" > "$w/squid.out" 2>&1 &
      ;;
    *)
      log "unknown peer $peer"; return 1 ;;
  esac
  PIDS[$peer]=$!
}

run_cli() { # base-url
  (
    cd "$SUITE"
    export npm_config_base="$1" npm_config_id="$TEST_ID" npm_package_config_id=""
    pre=()
    if [[ $SETUP == origin ]]; then
      export CACHE_TESTS_ORIGIN_URL="http://127.0.0.1:$ORIGIN_PORT"
      pre=(--import "$HERE/setup-via-origin.mjs")
    fi
    # same as: npm run --silent cli --base=<base-url>
    exec timeout "$PEER_TIMEOUT" node --no-warnings "${pre[@]}" test-engine/cli.mjs
  )
}

FAILED=0
for peer in $PEERS; do
  port=$(free_port)
  log "$peer: starting on 127.0.0.1:$port (origin 127.0.0.1:$ORIGIN_PORT)"
  if ! start_peer "$peer" "$port" || ! wait_http "$peer" "$port"; then
    log "$peer: FAILED to start; skipped (logs in $WORK/$peer/)"
    stop "$peer"; FAILED=1; continue
  fi
  log "$peer: pid ${PIDS[$peer]} up (${VERSIONS[$peer]:-?}); running the suite"
  base="http://127.0.0.1:$port"
  t0=$SECONDS
  if [[ -n "$TEST_ID" ]]; then
    run_cli "$base" || true
    stop "$peer"
    continue
  fi
  if run_cli "$base" > "$OUT/$peer.json.tmp" 2> "$OUT/$peer.stderr" \
     && node -e 'JSON.parse(require("fs").readFileSync(process.argv[1]))' "$OUT/$peer.json.tmp" 2>/dev/null; then
    mv "$OUT/$peer.json.tmp" "$OUT/$peer.json"
    n=$(node -e 'const r=JSON.parse(require("fs").readFileSync(process.argv[1]));const v=Object.values(r);console.log(`${v.filter(x=>x===true).length} true of ${v.length}`)' "$OUT/$peer.json")
    log "$peer: done in $((SECONDS - t0)) s: $n -> $OUT/$peer.json"
  else
    log "$peer: the suite CLI failed after $((SECONDS - t0)) s; see $OUT/$peer.stderr"
    rm -f "$OUT/$peer.json"
    FAILED=1
  fi
  stop "$peer"
done

[[ -n "$TEST_ID" ]] && exit 0

# --- metadata + summary ----------------------------------------------------
{
  printf '{\n  "suite_dir": "%s",\n  "suite_commit": "%s",\n  "setup_requests_via": "%s",\n  "date": "%s",\n  "peers": {' \
    "$SUITE" "$SUITE_COMMIT" "$SETUP" "$(date -u +%FT%TZ)"
  sep=""
  for peer in $PEERS; do
    v=${VERSIONS[$peer]:-}
    printf '%s\n    "%s": "%s"' "$sep" "$peer" "${v//\"/\\\"}"
    sep=","
  done
  printf '\n  }\n}\n'
} > "$OUT/meta.json"

log "summarising"
node "$HERE/summarise.mjs" --suite "$SUITE" --results "$OUT" --peers "${PEERS// /,}" \
  --json "$OUT/summary.json" | tee "$OUT/summary.txt"
log "results in $OUT (summary.txt, summary.json, <peer>.json); peer logs in $WORK"
exit $FAILED
