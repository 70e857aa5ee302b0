#!/usr/bin/env bash
# The main job: set up, build, run forward + backward at T=4096, N=4, D=4096 (bf16,
# gamma, grad_x_post), check sampled tokens against the float64 reference, time it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh >/dev/null
exec ./build/examples/mhc_main_job
