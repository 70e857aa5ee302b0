#!/usr/bin/env bash
# The main job: set up, build, run one mHC layer's operators forward and backward at
# T=4096, N=4, D=4096 (bf16, gamma, 20 Sinkhorn iterations), time each, check
# sampled tokens against float64 references.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh >/dev/null
exec ./build/examples/mhc_main_job
