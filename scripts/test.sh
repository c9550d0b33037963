#!/usr/bin/env bash
# The whole test suite: Rust unit tests, then the JS tests under Node and under Bun (at once).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase says how long it took (stderr), so the slowest shows first in any CI log.
phase_start=$SECONDS
phase() {
  echo "test.sh: $1 took $((SECONDS - phase_start)) s" >&2
  phase_start=$SECONDS
}
# The release module, unless the one there is newer than every input: the first `napi build`
# (the one `npm install` runs) sets a NAPI_FORCE_BUILD_* variable the next build does not, so
# cargo would rebuild the whole crate once more for nothing (a minute on two cores).
module="$(ls -t durable-touch.*.node 2>/dev/null | head -n 1 || true)"
if [ -n "$module" ] && [ -f index.d.ts ] && [ -f binding.js ] &&
  [ -z "$(find src build.rs Cargo.toml Cargo.lock package.json -newer "$module" -print -quit)" ]; then
  echo "test.sh: $module is newer than its sources; not built again" >&2
else
  npm run --silent build
fi
npm run --silent check:js
phase "build and type check"
# The broker the fan-out tests start, Rust and JS alike: the real nats-server, installed once
# into the cache (see testkit/nats-server.mjs); the Rust tests require it.
NATS_SERVER_BIN="$(node --input-type=module -e '
  const { natsServerBinary } = await import("./testkit/nats-server.mjs");
  const r = natsServerBinary();
  if (!r.bin) { console.error(`nats-server: ${r.reason}`); process.exit(1); }
  console.log(r.bin);
')"
export NATS_SERVER_BIN DT_REQUIRE_NATS=1
cargo test --quiet
phase "cargo test"
# The JS suites under Node and under Bun run at once, Node two files at a time: their tests
# mostly wait (on timers, child processes, a broker), so on two cores this takes the time of the
# slower suite instead of the sum (measured: 174 s instead of ~460 s). Bun's output is kept in a
# file and printed when it ends, so that the two do not interleave.

# Under Bun, the files whose tests only drive child processes (the reference server, installed
# copies of it; each test picks their runtime) and edit files are not run a second time: the
# runner's runtime plays no part in them.
not_under_bun=" compat-swap compat-swap-local compat-swap-local-delivery compat-swap-oracle "
bun_files=()
for f in __test__/*.spec.mjs; do
  name="$(basename "$f" .spec.mjs)"
  [[ "$not_under_bun" == *" $name "* ]] || bun_files+=("./$f")
done
# Bun 1.3.6 itself crashes now and then (a signal in its own code, reported as "Bun has
# crashed"): such a run is repeated once, and says so. A failing test is not repeated.
bun_suite() {
  local status
  node_modules/.bin/bun test --timeout 120000 "${bun_files[@]}" >"$bun_log" 2>&1
  status=$?
  if [ "$status" -ge 128 ] && grep -q "Bun has crashed" "$bun_log"; then
    echo "bun test: Bun crashed (exit $status); running the Bun suite once more" >>"$bun_log"
    node_modules/.bin/bun test --timeout 120000 "${bun_files[@]}" >>"$bun_log" 2>&1
    status=$?
  fi
  return "$status"
}
bun_log="$(mktemp)"
trap 'rm -f "$bun_log"' EXIT
set +e
bun_suite &
bun_pid=$!
node --test --test-concurrency=2 __test__/*.spec.mjs
node_status=$?
phase "the JS suite under Node"
wait "$bun_pid"
bun_status=$?
set -e
echo "----- the JS suite under Bun -----"
cat "$bun_log"
phase "the JS suite under Bun (after Node's)"
if [ "$node_status" -ne 0 ] || [ "$bun_status" -ne 0 ]; then
  echo "test.sh: failed: Node suite exit $node_status, Bun suite exit $bun_status" >&2
  exit 1
fi
