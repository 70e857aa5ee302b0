#!/usr/bin/env bash
# The test command: set up, build, run every test (GoogleTest, pytest, examples) through ctest,
# the C++ suite built with clang, then the hardening checks (ASan+UBSan, TSan, bounded
# libFuzzer runs; docs/reliability.md), then the aarch64 cross build and its C++ suites and
# examples under qemu-user (scripts/test_arm64.sh; README: Which CPUs are tested how).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd build
ctest --output-on-failure --timeout 3000 -j2
cd ..
# The C++ suite again, built with clang: the library, its faces and tests build
# with either compiler (the Python suite is not repeated).
CC=clang CXX=clang++ cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_BUILD_BENCH=OFF -DMHC_PYTHON_COPY=OFF >/dev/null
ninja -C build-clang >/dev/null
(cd build-clang && ctest --output-on-failure --timeout 3000 -j2 -E "^python_")
bash scripts/hardening.sh
bash scripts/test_arm64.sh
