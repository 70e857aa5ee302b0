#!/usr/bin/env bash
# The benchmark, end to end (see docs/performance.md):
#   setup -> build -> mhc-bench (roofline probes + C++ timings, JSON)
#   -> bench/torch_eager.py and bench/torch_eager_layer.py (PyTorch eager vs our
#      Python face, merged into the JSON)
#   -> bench/plot.py (summary table, docs/performance.png, and the table of docs/performance.md,
#      stamped with host, commit and date).
# Arguments go to mhc-bench, e.g. `scripts/bench.sh --shapes a,d --runs 5 --threads 2`.
# Environment: MHC_BUILD_DIR (default build), MHC_BENCH_JSON (default
# BUILD_DIR/bench-results.json), MHC_ISA (forces a kernel family), MHC_BENCH_SKIP_TORCH=1.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${MHC_BUILD_DIR:-build}
json=${MHC_BENCH_JSON:-$build_dir/bench-results.json}
python=/usr/bin/python3  # Debian's, with torch, numpy and matplotlib
openblas_dir=/usr/lib/x86_64-linux-gnu/openblas-pthread

bash scripts/setup.sh
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
# (The list is taken whole first: `grep -q` quits at the first match, and under
# pipefail ninja's SIGPIPE from writing the rest would fail the test.)
targets=$(ninja -C "$build_dir" -t targets all 2>/dev/null)
if ! grep -q '^mhc-bench:' <<<"$targets"; then
  echo "bench.sh: no mhc-bench target: add_subdirectory(bench) is missing from CMakeLists.txt" >&2
  exit 1
fi
ninja -C "$build_dir" mhc mhc-bench >/dev/null
build_dir=$(cd "$build_dir" && pwd)
mkdir -p "$(dirname "$json")"

echo "== mhc-bench =="
"$build_dir/bench/mhc-bench" --json "$json" --commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$@"

if [ "${MHC_BENCH_SKIP_TORCH:-0}" != 1 ]; then
  echo
  echo "== PyTorch eager vs mhc's Python face =="
  # OpenBLAS for torch's BLAS calls, without touching update-alternatives; the
  # script reports which library was loaded and times an sgemm to show it works.
  LD_LIBRARY_PATH="$openblas_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    MHC_LIBRARY="$build_dir/src/libmhc.so" \
    "$python" bench/torch_eager.py --json "$json"
  echo
  echo "== PyTorch eager vs mhc's Python face: the layer operators =="
  LD_LIBRARY_PATH="$openblas_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    MHC_LIBRARY="$build_dir/src/libmhc.so" \
    "$python" bench/torch_eager_layer.py --json "$json"
fi

echo
echo "== summary =="
"$python" bench/plot.py --json "$json" --png docs/performance.png --markdown docs/performance.md
