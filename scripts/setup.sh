#!/usr/bin/env bash
# Installs what building, testing and benchmarking mhc need on Debian 12 (apt only).
# Idempotent: does nothing when everything is already there.
set -euo pipefail
packages=(cmake ninja-build g++ clang googletest libgtest-dev libbenchmark-dev libhwy-dev
          python3-torch python3-numpy python3-pytest python3-matplotlib libopenblas0-pthread
          libtorch-dev  # libmhc_torch.so: the engines' ops registered with torch from C++
          python3-venv python3-pip python3-setuptools python3-wheel  # pip install . (tests/install)
          libclang-rt-14-dev  # libFuzzer and clang's sanitizer runtimes (scripts/hardening.sh)
          fortunes)  # examples/train_tiny.py --corpus fortunes
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
