#!/usr/bin/env node
// Summarise cache-tests results of several peers.
//
//   node summarise.mjs [--suite DIR] [--results DIR] [--peers circus,nginx,varnish,squid]
//                      [--ref varnish] [--target circus] [--json FILE]
//
// Reads <results>/<peer>.json (the suite CLI's output: test id -> true | [error name, message])
// and the suite's test definitions (<suite>/tests/index.mjs), and prints
//   * per suite (one file of tests/, e.g. "cc-freshness"), how many results are exactly `true`
//     for each peer, and the totals: the count used by the issue (a test counts only when its
//     result is `true`; optimal/check tests count too), plus the totals per test kind;
//   * the tests of kind "required" (kind: 'required', or no kind, as the suite's
//     test-engine/lib/results.mjs treats it) that --ref passes and --target does not, with
//     --target's failure message.
// The same data is written as JSON to --json FILE (or to stdout with --json -).
import fs from 'node:fs'
import path from 'node:path'
import { pathToFileURL } from 'node:url'

const args = { suite: process.env.CACHE_TESTS_DIR || '/tmp/cache-tests-src', results: process.env.CACHE_TESTS_OUT || '/tmp/cache-tests-results', peers: 'circus,nginx,varnish,squid', ref: 'varnish', target: 'circus', json: '' }
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i]
  const m = a.match(/^--([a-z]+)(?:=(.*))?$/)
  if (!m || !(m[1] in args)) {
    console.error(`usage: summarise.mjs [--suite DIR] [--results DIR] [--peers a,b] [--ref PEER] [--target PEER] [--json FILE|-]\nunknown argument ${a}`)
    process.exit(2)
  }
  args[m[1]] = m[2] !== undefined ? m[2] : process.argv[++i]
}

const suites = (await import(pathToFileURL(path.resolve(args.suite, 'tests/index.mjs')).href)).default
// the suite's own verdicts (pass, fail, setup_fail, dependency_fail, retry, ...), as cache-tests.fyi shows them
const { determineTestResult, resultTypes } = await import(pathToFileURL(path.resolve(args.suite, 'test-engine/lib/results.mjs')).href)
const verdictName = v => Object.keys(resultTypes).find(k => resultTypes[k] === v) || 'unknown'
let commit = 'unknown'
let setupVia = 'unknown'
try {
  const meta = JSON.parse(fs.readFileSync(path.join(args.results, 'meta.json')))
  commit = meta.suite_commit
  setupVia = meta.setup_requests_via || 'cache'
} catch (e) {}

const peers = []
const results = {}
for (const peer of args.peers.split(',').filter(Boolean)) {
  const file = path.join(args.results, `${peer}.json`)
  if (!fs.existsSync(file)) {
    console.error(`note: no results for ${peer} (${file})`)
    continue
  }
  peers.push(peer)
  results[peer] = JSON.parse(fs.readFileSync(file))
}

const kindOf = test => test.kind || 'required'
const isTrue = (peer, id) => results[peer][id] === true

// per suite
const known = new Set()
const perSuite = []
for (const suite of suites) {
  // the CLI skips browser_only tests (test-engine/client/runner.mjs)
  const tests = suite.tests.filter(t => t.browser_only !== true)
  const row = { id: suite.id, name: suite.name, tests: tests.length, required: tests.filter(t => kindOf(t) === 'required').length, pass: {} }
  for (const peer of peers) row.pass[peer] = tests.filter(t => isTrue(peer, t.id)).length
  tests.forEach(t => known.add(t.id))
  perSuite.push(row)
}

// totals: every result exactly true (as the issue counts), and per kind
const totals = {}
for (const peer of peers) {
  const vals = Object.entries(results[peer])
  const t = { true: vals.filter(([, v]) => v === true).length, results: vals.length, by_kind: { required: 0, optimal: 0, check: 0 }, not_in_suite: vals.filter(([id]) => !known.has(id)).length }
  for (const suite of suites) {
    for (const test of suite.tests) {
      if (isTrue(peer, test.id)) t.by_kind[kindOf(test)] = (t.by_kind[kindOf(test)] || 0) + 1
    }
  }
  totals[peer] = t
}

// required tests ref passes and target fails
const gap = []
if (results[args.ref] && results[args.target]) {
  for (const suite of suites) {
    for (const test of suite.tests) {
      if (kindOf(test) !== 'required') continue
      if (isTrue(args.ref, test.id) && !isTrue(args.target, test.id)) {
        const r = results[args.target][test.id]
        const depsFailed = (test.depends_on || []).filter(d => !isTrue(args.target, d))
        const verdict = verdictName(determineTestResult(suites, test.id, results[args.target]))
        gap.push({ suite: suite.id, id: test.id, name: test.name, [`${args.target}_result`]: r === undefined ? null : r, [`${args.target}_verdict`]: verdict, depends_on: test.depends_on || [], [`${args.target}_failed_dependencies`]: depsFailed })
      }
    }
  }
}

// every required test target does not pass, with the peers that do pass it
const targetRequiredFails = []
if (results[args.target]) {
  for (const suite of suites) {
    for (const test of suite.tests) {
      if (kindOf(test) !== 'required' || test.browser_only === true || isTrue(args.target, test.id)) continue
      const r = results[args.target][test.id]
      targetRequiredFails.push({ suite: suite.id, id: test.id, name: test.name, result: r === undefined ? null : r, verdict: verdictName(determineTestResult(suites, test.id, results[args.target])), passed_by: peers.filter(p => p !== args.target && isTrue(p, test.id)) })
    }
  }
}

const summary = { suite_commit: commit, setup_requests_via: setupVia, peers, totals, suites: perSuite, required_gap: { ref: args.ref, target: args.target, tests: gap }, target_required_fails: { target: args.target, tests: targetRequiredFails } }

// ---- text output
const pad = (s, n) => String(s).padEnd(n)
const lpad = (s, n) => String(s).padStart(n)
const w0 = Math.max(5, ...perSuite.map(r => r.id.length))
const cols = peers.map(p => Math.max(p.length, 5))
let out = `cache-tests ${commit}: results exactly \`true\` per suite (setup requests via ${setupVia})\n\n`
out += `${pad('suite', w0)}  ${lpad('tests', 5)}  ${lpad('req', 4)}  ${peers.map((p, i) => lpad(p, cols[i])).join('  ')}\n`
out += `${'-'.repeat(w0)}  -----  ----  ${cols.map(c => '-'.repeat(c)).join('  ')}\n`
for (const r of perSuite) {
  out += `${pad(r.id, w0)}  ${lpad(r.tests, 5)}  ${lpad(r.required, 4)}  ${peers.map((p, i) => lpad(r.pass[p], cols[i])).join('  ')}\n`
}
out += `${'-'.repeat(w0)}  -----  ----  ${cols.map(c => '-'.repeat(c)).join('  ')}\n`
const nTests = perSuite.reduce((a, r) => a + r.tests, 0)
const nReq = perSuite.reduce((a, r) => a + r.required, 0)
out += `${pad('TOTAL true', w0)}  ${lpad(nTests, 5)}  ${lpad(nReq, 4)}  ${peers.map((p, i) => lpad(totals[p].true, cols[i])).join('  ')}\n`
for (const k of ['required', 'optimal', 'check']) {
  out += `${pad(`  of which ${k}`, w0)}  ${lpad('', 5)}  ${lpad('', 4)}  ${peers.map((p, i) => lpad(totals[p].by_kind[k] || 0, cols[i])).join('  ')}\n`
}
out += `${pad('results in file', w0)}  ${lpad('', 5)}  ${lpad('', 4)}  ${peers.map((p, i) => lpad(totals[p].results, cols[i])).join('  ')}\n`

if (results[args.ref] && results[args.target]) {
  out += `\nRequired tests ${args.ref} passes and ${args.target} does not (${gap.length}):\n`
  for (const g of gap) {
    const r = g[`${args.target}_result`]
    const why = (r === null ? 'no result' : Array.isArray(r) ? `${r[0]}: ${r[1]}` : JSON.stringify(r)).replace(/\n/g, '\\n')
    const deps = g[`${args.target}_failed_dependencies`].length ? `  [depends on failed: ${g[`${args.target}_failed_dependencies`].join(', ')}]` : ''
    out += `  ${pad(g.suite, w0)}  ${g.id}\n      ${g.name}\n      -> ${g[`${args.target}_verdict`]}: ${why}${deps}\n`
  }
}

if (results[args.target]) {
  out += `\nAll required tests ${args.target} does not pass (${targetRequiredFails.length}), with the peers that pass them:\n`
  for (const f of targetRequiredFails) {
    const r = f.result
    const why = (r === null ? 'no result' : Array.isArray(r) ? `${r[0]}: ${r[1]}` : JSON.stringify(r)).replace(/\n/g, '\\n')
    out += `  ${pad(f.suite, w0)}  ${f.id}  [passed by: ${f.passed_by.join(', ') || 'none'}]\n      ${f.name}\n      -> ${f.verdict}: ${why}\n`
  }
}

if (args.json === '-') {
  process.stderr.write(out)
  console.log(JSON.stringify(summary, null, 2))
} else {
  process.stdout.write(out)
  if (args.json) fs.writeFileSync(args.json, JSON.stringify(summary, null, 2) + '\n')
}
