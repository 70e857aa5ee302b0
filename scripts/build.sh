#!/usr/bin/env bash
# Configures and builds mhc (Release, Ninja) into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMHC_TORCH_OPS=ON >/dev/null
ninja -C build
