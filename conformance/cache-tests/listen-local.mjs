// Preloaded into the suite's origin server (node --import) so that it listens on
// 127.0.0.1 only: test-engine/server/server.mjs calls server.listen(port), which
// would bind every interface.  The suite itself is run unmodified.
import http from 'node:http'
import https from 'node:https'

for (const Server of [http.Server, https.Server]) {
  const listen = Server.prototype.listen
  Server.prototype.listen = function (...args) {
    if (args.length === 1 && (typeof args[0] === 'number' || typeof args[0] === 'string') && /^\d+$/.test(String(args[0]))) {
      return listen.call(this, Number(args[0]), process.env.CACHE_TESTS_ORIGIN_HOST || '127.0.0.1')
    }
    return listen.apply(this, args)
  }
}
