// Diagnostic mode only (run.sh with CACHE_TESTS_SETUP=origin): preloaded into the
// suite's CLI (node --import) so that the harness's own bookkeeping requests,
//   PUT <base>/config/<uuid>   (the test's configuration for the origin)
//   GET <base>/state/<uuid>    (what the origin saw)
// go straight to the origin (CACHE_TESTS_ORIGIN_URL) instead of through the cache under
// test.  The test requests themselves (<base>/test/<uuid>...) still go through the
// cache, byte for byte as the suite sends them.  This isolates a cache's caching
// behaviour from its handling of PUT; it is NOT how cache-tests.fyi runs the suite.
const base = (process.env.npm_config_base || '').replace(/\/+$/, '')
const origin = (process.env.CACHE_TESTS_ORIGIN_URL || '').replace(/\/+$/, '')
if (!base || !origin) throw new Error('setup-via-origin.mjs needs npm_config_base and CACHE_TESTS_ORIGIN_URL')

const realFetch = globalThis.fetch
globalThis.fetch = function (input, init) {
  if (typeof input === 'string') {
    for (const p of ['/config/', '/state/']) {
      if (input.startsWith(base + p)) return realFetch(origin + input.slice(base.length), init)
    }
  }
  return realFetch(input, init)
}
