#!/usr/bin/env bash
# The whole test suite: typecheck, then unit, integration, e2e and CLI tests
# against the real services on 127.0.0.1. `npm test` runs this.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -d node_modules ] || npm ci --no-audit --no-fund
bash scripts/services.sh
bash scripts/kafka/up.sh

echo "typecheck..."
npx tsc -p tsconfig.json --noEmit
echo "build (the CLI tests run the built CLI, as users do)..."
rm -rf dist && npx tsc -p tsconfig.build.json
export TXBOX_TEST_CLI=dist

mapfile -t files < <(find test -name '*.test.ts' | sort)
if [ "$#" -gt 0 ]; then files=("$@"); fi
echo "running ${#files[@]} test files"
exec node --conditions=txbox-source --import tsx --test --test-concurrency="${TXBOX_TEST_CONCURRENCY:-2}" --test-timeout=300000 "${files[@]}"
