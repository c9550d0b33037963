#!/usr/bin/env bash
# Runs scripts/stress.mjs under Valgrind memcheck on Node and counts the errors attributed to
# our library (a stack with a frame in durable-touch's .node file): invalid reads and writes,
# uses of uninitialised values, bad frees, and definitely lost blocks. V8's and Node's own
# findings (JIT code, their allocators) are not ours: scripts/memcheck.supp silences the known
# ones and the rest are reported apart. Exits 1 when any error is ours.
#
#   npm run check:memcheck                     # debug build (symbols), 2 iterations, 1 worker
#   ITERATIONS=4 WORKERS=2 npm run check:memcheck
#
# Not part of CI: Node under memcheck runs ~50x slower (a few minutes here).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "memcheck: valgrind is not installed (apt-get install valgrind)" >&2; exit 2; }
if [ "${SKIP_BUILD:-}" != 1 ]; then npm run --silent build:debug; fi
log="${MEMCHECK_LOG:-$(mktemp /tmp/dt-memcheck.XXXXXX.log)}"
echo "memcheck: log in $log"
set +e
valgrind --tool=memcheck --error-limit=no --num-callers=40 --smc-check=all-non-file \
  --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
  --suppressions=scripts/memcheck.supp --log-file="$log" \
  node --expose-gc scripts/stress.mjs --iterations "${ITERATIONS:-2}" --workers "${WORKERS:-1}"
status=$?
set -e
node scripts/memcheck-report.mjs "$log"
report=$?
[ "$status" -eq 0 ] || { echo "memcheck: the stress run itself failed (exit $status)" >&2; exit 1; }
exit "$report"
