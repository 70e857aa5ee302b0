#!/usr/bin/env bash
# The full tier, after the quick tier (scripts/test.sh) has built build/:
#   1. native: the tests labelled `full` (each kernel-dependent binary once per family in its
#      own process with MHC_ISA set, the Python oracle cover per family, `pip install .`);
#   2. clang: the library, its faces and the C++ suites built with clang, the quick set run;
#   3. hardening: ASan + UBSan, TSan, libFuzzer (scripts/hardening.sh);
#   4. aarch64: the cross build under qemu-user on emulated Arm CPUs (scripts/test_arm64.sh).
# Runs every part even after a failure; the last line is "full: N passed, M failed".
# docs/testing.md says what each part covers and how long it takes.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
start=$SECONDS
passed=0
failed=0
parts=()
logs=$root/build/full-tier
mkdir -p "$logs"

# Adds the counts of a part's log: the scripts' own "NAME: P passed, F failed" line, else
# ctest's "NN% tests passed, F tests failed out of T". A non-zero exit is at least one failure.
count() {  # count NAME LOG RC SECONDS
  local name=$1 log=$2 rc=$3 t=$4 line p f
  line=$(grep -E "^$name: [0-9]+ passed, [0-9]+ failed" "$log" | tail -1)
  if [ -n "$line" ]; then
    p=$(sed -nE 's/^[a-z0-9]+: ([0-9]+) passed.*/\1/p' <<< "$line")
    f=$(sed -nE 's/^[a-z0-9]+: [0-9]+ passed, ([0-9]+) failed.*/\1/p' <<< "$line")
  else
    line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$log" | tail -1)
    f=$(sed -nE 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/p' <<< "$line")
    p=$(sed -nE 's/.* failed out of ([0-9]+).*/\1/p' <<< "$line")
    [ -n "$p" ] && p=$((p - f))
  fi
  p=${p:-0} f=${f:-0}
  [ "$rc" -ne 0 ] && [ "$f" -eq 0 ] && f=1  # crashed or failed to build: one failure
  passed=$((passed + p)) failed=$((failed + f))
  parts+=("$(printf '%-10s %6d passed %4d failed %6d s' "$name" "$p" "$f" "$t")")
}

run_part() {  # run_part NAME COMMAND...: runs it with its output shown and kept
  local name=$1 t=$SECONDS rc=0
  shift
  echo "== full tier: $name"
  "$@" 2>&1 | tee "$logs/$name.log" || rc=${PIPESTATUS[0]}
  count "$name" "$logs/$name.log" "$rc" $((SECONDS - t))
}

native() {
  [ -f build/CTestTestfile.cmake ] || { bash scripts/setup.sh && bash scripts/build.sh; } || return 1
  ctest --preset full  # CMakePresets.json: build/, the label `full`
}
clang_suite() {
  cmake --preset clang > /dev/null || return 1  # CMakePresets.json: build-clang/
  ninja -C build-clang > build-clang.log 2>&1 || { tail -40 build-clang.log; return 1; }
  ctest --preset clang  # the quick set without Python
}

run_part native native
run_part clang clang_suite
run_part hardening bash scripts/hardening.sh
run_part arm64 bash scripts/test_arm64.sh

echo "== full tier: done in $((SECONDS - start)) s"
for p in "${parts[@]}"; do echo "   $p"; done
echo "full: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
