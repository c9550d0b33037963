#!/usr/bin/env bash
# The whole test suite: Rust unit tests, then the JS tests under Node and under Bun.
set -euo pipefail
cd "$(dirname "$0")/.."
npm run --silent build
cargo test --quiet
node --test --test-concurrency=1 __test__/*.spec.mjs
node_modules/.bin/bun test --timeout 120000 ./__test__/
