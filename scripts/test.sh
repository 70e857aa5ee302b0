#!/usr/bin/env bash
# The test command: set up, build, run every test (GoogleTest, pytest, examples) through ctest,
# then the hardening checks (ASan+UBSan, TSan, bounded libFuzzer runs; docs/reliability.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd build
ctest --output-on-failure --timeout 3000 -j2
cd ..
bash scripts/hardening.sh
