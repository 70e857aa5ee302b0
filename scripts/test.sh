#!/usr/bin/env bash
# The quick tier (the README's test command): set up, build with g++, and run the native
# suites through ctest — GoogleTest, pytest against PyTorch float64 autograd, the aclnn
# examples, the main job — every kernel family this CPU runs, the families checked in turn
# inside one process. What this leaves to the full tier (scripts/test_full.sh) carries the
# ctest label `full`. docs/testing.md says what each tier covers and how long it takes.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
bash scripts/setup.sh
bash scripts/build.sh
ctest --preset quick  # CMakePresets.json: build/, without the label `full`
echo "== quick tier: done in $((SECONDS - start)) s"
