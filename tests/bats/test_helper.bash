# Loaded by every bats file: bats-support and bats-assert from node_modules, and the repo root.
REPO="$(cd -- "${BATS_TEST_DIRNAME}/../.." && pwd)"
export REPO
load "${REPO}/node_modules/bats-support/load"
load "${REPO}/node_modules/bats-assert/load"
