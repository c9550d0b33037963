#!/usr/bin/env bash
# The whole test suite: Rust unit tests, then the JS tests under Node and under Bun.
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
node --test --test-concurrency=1 __test__/*.spec.mjs
phase "the JS suite under Node"

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
bun_test=(node_modules/.bin/bun test --timeout 120000 "${bun_files[@]}")
bun_log="$(mktemp)"
trap 'rm -f "$bun_log"' EXIT
set +e
"${bun_test[@]}" 2>&1 | tee "$bun_log"
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ge 128 ] && grep -q "Bun has crashed" "$bun_log"; then
  echo "bun test: Bun crashed (exit $status); running the Bun suite once more" >&2
  "${bun_test[@]}"
elif [ "$status" -ne 0 ]; then
  exit "$status"
fi
phase "the JS suite under Bun"
