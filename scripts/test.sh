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

run() { node --conditions=txbox-source --import tsx --test --test-timeout=1200000 "$@"; }
if [ "$#" -gt 0 ]; then
  echo "running $# test files"
  run --test-concurrency="${TXBOX_TEST_CONCURRENCY:-2}" "$@"
  exit
fi
# Two phases. First every file but the torture runs, two files at once. Then the torture files
# (test/e2e/torture*.test.ts: relay, consumer and producer processes under kill -9) one at a time,
# alone on the 2 cores: beside another torture file or a busy test file, an --inbox run over NATS
# missed its drain bound in CI. --test-timeout is also each file's limit: test/e2e/torture.test.ts
# runs its four 20,000-event runs one after another (8-14 minutes on a loaded machine).
mapfile -t files < <(find test -name '*.test.ts' ! -path 'test/e2e/torture*' | sort)
mapfile -t torture < <(find test/e2e -name 'torture*.test.ts' | sort)
echo "running ${#files[@]} test files, then ${#torture[@]} torture files one at a time"
status=0
run --test-concurrency="${TXBOX_TEST_CONCURRENCY:-2}" "${files[@]}" || status=$?
run --test-concurrency=1 "${torture[@]}" || status=$?
exit $status
