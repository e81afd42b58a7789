#!/usr/bin/env bash
# The whole test suite: typecheck, then unit, integration, e2e and CLI tests
# against the real services on 127.0.0.1. `npm test` runs this.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -d node_modules ] || npm ci --no-audit --no-fund
bash scripts/services.sh
bash scripts/kafka/up.sh
# Google's Pub/Sub emulator, where the google-cloud-cli installed it (the Pub/Sub tests skip without it).
if [ -x /usr/lib/google-cloud-sdk/platform/pubsub-emulator/bin/cloud-pubsub-emulator ]; then bash scripts/pubsub/up.sh; fi
# Google's Firestore emulator, likewise (the Firestore store's tests skip without it).
if [ -x /usr/lib/google-cloud-sdk/platform/cloud-firestore-emulator/cloud_firestore_emulator ]; then bash scripts/firestore/up.sh; fi
bash scripts/sqs/up.sh
bash scripts/tools.sh

echo "typecheck..."
npx tsc -p tsconfig.json --noEmit
echo "build (the CLI tests run the built CLI, as users do)..."
rm -rf dist && npx tsc -p tsconfig.build.json
export TXBOX_TEST_CLI=dist

mapfile -t files < <(find test -name '*.test.ts' | sort)
if [ "$#" -gt 0 ]; then files=("$@"); fi
echo "running ${#files[@]} test files"
# --test-timeout is also each file's limit: test/e2e/torture.test.ts runs its four 20,000-event torture runs
# one after another, so that two of them never compete for the 2 cores (side by side, an --inbox run missed its
# drain timeout); that file takes 8-14 minutes on a loaded machine, hence 20 minutes a file.
exec node --conditions=txbox-source --import tsx --test --test-concurrency="${TXBOX_TEST_CONCURRENCY:-2}" --test-timeout=1200000 "${files[@]}"
