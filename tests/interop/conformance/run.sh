#!/usr/bin/env bash
# Runs the official MCP conformance suite (SERVER side) against one URL.
#
#   run.sh SPEC_VERSION URL OUT_DIR [SCENARIO] [EXPECTED_FAILURES]
#
#   SPEC_VERSION       2025-11-25 (suite 0.1.16) or 2026-07-28 (suite 0.2.0-alpha.12);
#                      CONFORMANCE_SUITE=2026 runs a 2025-11-25 pass on the 0.2.0 suite
#                      instead (it adds server-session-lifecycle and wire-schema checks).
#   URL                the MCP endpoint, e.g. http://127.0.0.1:8080/mcp
#   OUT_DIR            results: one server-<scenario>-<time>/checks.json per scenario (the
#                      suite's own), suite.log (its full output), summary.tsv
#                      (scenario<TAB>check<TAB>status, INFO checks left out, sorted: two runs
#                      giving the same results give the same file)
#   SCENARIO           one scenario name, or
#                        all       (default) every scenario applicable at SPEC_VERSION,
#                                  pending ones included (`--suite all --spec-version`)
#                        active    the suite's default selection (`--spec-version` only;
#                                  for 2026-07-28 this leaves out every scenario new in it)
#                        required  what the revision requires (`--requirements`, 0.2.0 only)
#   EXPECTED_FAILURES  YAML baseline (`server: [scenario | scenario:check-id, ...]`); with
#                      one, WARNINGs count as failures too and stale entries fail the run
#                      (the suite's rules)
#
# Exit status: the suite's. 0 when nothing failed unexpectedly; 1 otherwise (a FAILURE
# check; with a baseline also an unlisted WARNING or a listed check that now passes);
# 2 for bad usage or missing tools (run tests/interop/setup.sh).
# Environment: INTEROP_TOOLS (default <repo>/target/interop-tools),
# CONFORMANCE_FORCE=1 (run a scenario on no spec timeline, an extension's; 0.2.0 suite only),
# CONFORMANCE_TIMEOUT_MS (per scenario, default 30000; 0.2.0 suite only), CONFORMANCE_VERBOSE=1 (stream
# the suite's output instead of only the summary).
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}
[ $# -ge 3 ] && [ $# -le 5 ] || usage
SPEC="$1"
URL="$2"
OUT="$3"
SCENARIO="${4:-all}"
[ -n "$SCENARIO" ] || SCENARIO=all
BASELINE="${5:-}"

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(git -C "$HERE" rev-parse --show-toplevel 2>/dev/null || (cd "$HERE/../../.." && pwd))"
TOOLS="${INTEROP_TOOLS:-$REPO/target/interop-tools}"
NODE22="$TOOLS/node22/node_modules/node/bin/node"

case "$SPEC" in
  2025-11-25) SUITE="${CONFORMANCE_SUITE:-2025}" ;;
  2026-07-28) SUITE="${CONFORMANCE_SUITE:-2026}" ;;
  *) echo "run.sh: unsupported spec version '$SPEC' (2025-11-25 or 2026-07-28)" >&2; exit 2 ;;
esac
case "$SUITE" in 2025 | 2026) ;; *) echo "run.sh: CONFORMANCE_SUITE must be 2025 or 2026" >&2; exit 2 ;; esac
CLI="$TOOLS/conformance-$SUITE/node_modules/@modelcontextprotocol/conformance/dist/index.js"
for f in "$NODE22" "$CLI"; do
  [ -e "$f" ] || { echo "run.sh: $f missing: run tests/interop/setup.sh" >&2; exit 2; }
done
if [ -n "$BASELINE" ]; then
  [ -f "$BASELINE" ] || { echo "run.sh: expected-failures file $BASELINE not found" >&2; exit 2; }
  BASELINE="$(cd "$(dirname "$BASELINE")" && pwd)/$(basename "$BASELINE")"
fi

args=(server --url "$URL" -o "$OUT")
# 0.1.16 has no --timeout (its scenarios have none).
[ "$SUITE" = 2025 ] || args+=(--timeout "${CONFORMANCE_TIMEOUT_MS:-30000}")
case "$SCENARIO" in
  all) args+=(--suite all --spec-version "$SPEC") ;;
  active) args+=(--spec-version "$SPEC") ;;
  required)
    [ "$SUITE" = 2026 ] || { echo "run.sh: 'required' needs the 0.2.0 suite (CONFORMANCE_SUITE=2026)" >&2; exit 2; }
    args+=(--requirements "$SPEC")
    ;;
  *) args+=(--scenario "$SCENARIO" --spec-version "$SPEC") ;;
esac
# Extension scenarios (the tasks extension's) are on no spec timeline: run them anyway.
[ "${CONFORMANCE_FORCE:-0}" != 1 ] || args+=(--force)
[ -z "$BASELINE" ] || args+=(--expected-failures "$BASELINE")

mkdir -p "$OUT"
# Results of an earlier run in the same directory would be counted again.
find "$OUT" -mindepth 1 -maxdepth 1 -type d -name 'server-*' -exec rm -rf {} +
rm -f "$OUT/suite.log" "$OUT/summary.tsv"

suite_version="$("$NODE22" "$CLI" --version)"
echo "conformance $suite_version (node $("$NODE22" --version)) --spec-version $SPEC, $SCENARIO, against $URL"
set +e
if [ "${CONFORMANCE_VERBOSE:-0}" = 1 ]; then
  NO_COLOR=1 "$NODE22" "$CLI" "${args[@]}" 2>&1 | tee "$OUT/suite.log"
  status=${PIPESTATUS[0]}
else
  NO_COLOR=1 "$NODE22" "$CLI" "${args[@]}" >"$OUT/suite.log" 2>&1
  status=$?
fi
set -e

# Summary from the checks.json files: per scenario, then every check that did not pass.
"$NODE22" - "$OUT" "$status" <<'EOF'
const fs = require('fs');
const path = require('path');
const [out, status] = process.argv.slice(2);
const rows = [];
const per = new Map();
for (const dir of fs.readdirSync(out).sort()) {
  const file = path.join(out, dir, 'checks.json');
  if (!dir.startsWith('server-') || !fs.existsSync(file)) continue;
  const scenario = dir.replace(/^server-/, '').replace(/-\d{4}-\d{2}-\d{2}T[\d-]+Z$/, '');
  const counts = per.get(scenario) ?? { SUCCESS: 0, FAILURE: 0, WARNING: 0, SKIPPED: 0, INFO: 0 };
  per.set(scenario, counts);
  for (const c of JSON.parse(fs.readFileSync(file, 'utf8'))) {
    counts[c.status] = (counts[c.status] ?? 0) + 1;
    if (c.status === 'INFO') continue;
    rows.push({ scenario, id: c.id, status: c.status, message: (c.errorMessage ?? '').replace(/\s+/g, ' ') });
  }
}
const key = (r) => `${r.scenario}\t${r.id}\t${r.status}`;
fs.writeFileSync(path.join(out, 'summary.tsv'), rows.map(key).sort().join('\n') + (rows.length ? '\n' : ''));
let passed = 0, failed = 0, warnings = 0, skipped = 0;
for (const [scenario, c] of per) {
  passed += c.SUCCESS; failed += c.FAILURE; warnings += c.WARNING; skipped += c.SKIPPED;
  const mark = c.FAILURE ? 'FAIL' : c.WARNING ? 'warn' : 'ok  ';
  console.log(`${mark} ${scenario}: ${c.SUCCESS} passed, ${c.FAILURE} failed, ${c.WARNING} warnings, ${c.SKIPPED} skipped`);
}
const bad = rows.filter((r) => r.status === 'FAILURE' || r.status === 'WARNING');
if (bad.length) {
  console.log('\nchecks that did not pass (scenario:check-id, as an expected-failures entry takes them):');
  for (const r of bad) console.log(`  ${r.status.padEnd(7)} ${r.scenario}:${r.id}  ${r.message.slice(0, 240)}`);
}
if (per.size === 0) console.log('no checks.json was written: see suite.log');
console.log(`\nconformance: ${passed} passed, ${failed} failed, ${warnings} warnings, ${skipped} skipped (${per.size} scenarios; suite exit ${status})`);
EOF
# The suite's own verdict sections (baseline; not-scored scenarios of --requirements).
sed -E 's/\x1b\[[0-9;]*m//g' "$OUT/suite.log" |
  awk '/^(Expected failures \(in baseline\)|Stale baseline entries|Unexpected failures|Baseline check passed|Baseline is stale|Not scored for)/ { p = 1 } p'
if [ "$status" -ne 0 ] && ! ls "$OUT"/server-*/checks.json >/dev/null 2>&1; then
  tail -n 30 "$OUT/suite.log" >&2
fi
echo "full output: $OUT/suite.log"
exit "$status"
