#!/usr/bin/env bash
# Hardening checks (docs/reliability.md), after scripts/setup.sh has installed the packages:
#   1. ASan + UBSan (clang): the C++ tests of the quick tier (tests/cpp, tests/kernels, tests/aclnn),
#      each GoogleTest binary whole, every family checked in turn inside the suites that do so;
#   2. TSan (GCC): the threaded tests (determinism, concurrency, the aclnn tests);
#   3. libFuzzer: the twenty-one fuzz targets replay their corpus (tests/fuzz/corpus), then fuzz
#      for MHC_FUZZ_SECONDS each.
# Steps 1 and 3 share one build (clang, ASan + UBSan, libFuzzer's coverage hooks on every
# target, which the test programs leave unused): the library is compiled with sanitizers once.
# Exits non-zero on any failure; the last line is "hardening: N passed, M failed",
# counting tests (ctest and GoogleTest cases) and fuzz runs.
# Environment: MHC_HARDENING_DIR (default build-hardening), MHC_FUZZ_SECONDS (default 10),
# MHC_HARDENING_STEPS (default "asan tsan fuzz").
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${MHC_HARDENING_DIR:-$root/build-hardening}
fuzz_seconds=${MHC_FUZZ_SECONDS:-10}
steps=${MHC_HARDENING_STEPS:-asan tsan fuzz}
mkdir -p "$out"
out=$(cd "$out" && pwd)

passed=0
failed=0
failures=()
note_fail() { failed=$((failed + 1)); failures+=("$1"); echo "!! hardening: FAILED: $1"; }

common=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMHC_BUILD_EXAMPLES=OFF -DMHC_BUILD_BENCH=OFF
        "-DCMAKE_PROJECT_mhc_INCLUDE=$root/cmake/sanitizers.cmake")
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:check_initialization_order=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

# Configures build dir $1 with the extra cmake arguments that follow.
configure() {
  local dir=$1
  shift
  cmake -S "$root" -B "$dir" "${common[@]}" "$@" > "$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; return 1; }
}

# The test executables under tests/ that a build dir defines (never the shared
# libmhc, whose build copies it into python/mhc/).
test_targets() {
  ninja -C "$1" -t targets all |
    awk -F': ' '$2 ~ /^CXX_EXECUTABLE_LINKER/ && $1 ~ /^tests\// && $1 !~ /\.cmake$/ {print $1}'
}

# Adds the counts of a ctest log ("NN% tests passed, F tests failed out of T").
count_ctest() {
  local line total bad
  line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$1" | tail -1)
  if [ -z "$line" ]; then note_fail "$2 (no ctest summary)"; return; fi
  bad=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<< "$line")
  total=$(sed -E 's/.* failed out of ([0-9]+).*/\1/' <<< "$line")
  passed=$((passed + total - bad))
  if [ "$bad" -ne 0 ]; then
    failed=$((failed + bad))
    failures+=("$2: $bad of $total tests")
    grep -E "^\s+[0-9]+ - " "$1" | head -40
  fi
}

# Adds the counts of a GoogleTest binary's log, given its exit code.
count_gtest_log() {
  local name=$1 log=$2 rc=$3 ok bad
  ok=$(grep -oE "\[  PASSED  \] [0-9]+" "$log" | grep -oE "[0-9]+$" || echo 0)
  bad=$(grep -oE "\[  FAILED  \] [0-9]+ test" "$log" | grep -oE "[0-9]+" || echo 0)
  passed=$((passed + ${ok:-0}))
  if [ "$rc" -ne 0 ]; then
    failed=$((failed + (${bad:-0} > 0 ? ${bad:-0} : 1)))
    failures+=("$name (exit $rc)")
    grep -E "FAILED|ERROR|WARNING: ThreadSanitizer|runtime error|SUMMARY" "$log" | head -40
  fi
}

# Runs a GoogleTest binary, adds its counts.
run_gtest() {
  local name=$1 log="$out/$2.log" rc=0
  shift 2
  echo "-- $name"
  "$@" --gtest_brief=1 > "$log" 2>&1 || rc=$?
  count_gtest_log "$name" "$log" "$rc"
}

start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start ))s"; }

fuzz_targets=(fuzz_pre_forward fuzz_pre_backward fuzz_aclnn_mhc_pre fuzz_aclnn_mhc_pre_v2
              fuzz_aclnn_mhc_pre_backward fuzz_aclnn_mhc_pre_backward_v2
              fuzz_sinkhorn fuzz_post fuzz_pre_sinkhorn fuzz_single_pass fuzz_collapse fuzz_post_pre
              fuzz_rms_norm fuzz_site_backward
              fuzz_aclnn_mhc_sinkhorn fuzz_aclnn_mhc_sinkhorn_backward fuzz_aclnn_mhc_post
              fuzz_aclnn_mhc_post_backward fuzz_aclnn_mhc_pre_sinkhorn fuzz_aclnn_mhc_pre_sinkhorn_backward
              fuzz_drivers)
asan_dir=$out/asan
asan_built=""
# Configures and builds the shared ASan + UBSan + libFuzzer tree once (steps 1 and 3).
build_asan() {
  [ -n "$asan_built" ] && return "$asan_built"
  asan_built=1
  configure "$asan_dir" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DMHC_SANITIZE=address,undefined \
      -DMHC_FUZZ=ON &&
    ninja -C "$asan_dir" $(test_targets "$asan_dir") > "$asan_dir.build.log" 2>&1 ||
    { tail -30 "$asan_dir.build.log" 2>/dev/null; return 1; }
  asan_built=0
}

# ------------------------------------------------------------------ 1. ASan + UBSan
if [[ " $steps " == *" asan "* ]]; then
  echo "== hardening: ASan + UBSan, the C++ test suite ($(elapsed))"
  if build_asan; then
    # Each GoogleTest binary whole, two at a time (a process per case costs more under ASan
    # than most cases do), then what ctest runs besides them: the pool without polling and
    # the CANN-style program.
    mapfile -t gtests < <(test_targets "$asan_dir" | grep -E '^tests/(cpp|kernels|aclnn)/mhc_[a-z_]+$')
    printf '%s\n' "${gtests[@]}" | xargs -P 2 -I{} bash -c \
      'b={}; n=$(basename "$b"); timeout 1500 "$0/$b" --gtest_brief=1 > "$1/asan-$n.log" 2>&1; echo $? > "$1/asan-$n.rc"' \
      "$asan_dir" "$out"
    MHC_SPIN_US=0 "$asan_dir/tests/cpp/mhc_concurrency_test" --gtest_brief=1 > "$out/asan-spin0.log" 2>&1
    echo $? > "$out/asan-spin0.rc"
    for b in "${gtests[@]}" spin0; do
      n=$(basename "$b")
      count_gtest_log "ASan+UBSan $n" "$out/asan-$n.log" "$(cat "$out/asan-$n.rc")"
    done
    (cd "$asan_dir" && ctest --timeout 1500 --output-on-failure -R "^aclnn_cann_style_program$" \
       > "$out/asan-ctest.log" 2>&1)
    count_ctest "$out/asan-ctest.log" "ASan+UBSan ctest"
  else
    note_fail "ASan+UBSan build"
  fi
fi

# ------------------------------------------------------------------ 2. TSan
if [[ " $steps " == *" tsan "* ]]; then
  echo "== hardening: TSan, the threaded tests ($(elapsed))"
  dir=$out/tsan
  if configure "$dir" -DCMAKE_C_COMPILER=gcc -DCMAKE_CXX_COMPILER=g++ -DMHC_SANITIZE=thread &&
     ninja -C "$dir" tests/cpp/mhc_determinism_test tests/cpp/mhc_concurrency_test tests/aclnn/mhc_aclnn_tests \
       > "$dir.build.log" 2>&1; then
    for isa in default portable; do
      env_isa=()
      [ "$isa" = default ] || env_isa=(env MHC_ISA=$isa)
      run_gtest "TSan determinism ($isa kernels)" "tsan-determinism-$isa" "${env_isa[@]}" "$dir/tests/cpp/mhc_determinism_test"
      run_gtest "TSan concurrency ($isa kernels)" "tsan-concurrency-$isa" "${env_isa[@]}" "$dir/tests/cpp/mhc_concurrency_test"
    done
    run_gtest "TSan aclnn tests" tsan-aclnn "$dir/tests/aclnn/mhc_aclnn_tests"
  else
    tail -30 "$dir.build.log" 2>/dev/null
    note_fail "TSan build"
  fi
fi

# ------------------------------------------------------------------ 3. libFuzzer
if [[ " $steps " == *" fuzz "* ]]; then
  echo "== hardening: libFuzzer targets, corpus replay then ${fuzz_seconds}s each ($(elapsed))"
  dir=$asan_dir
  if build_asan; then
    (cd "$dir" && ctest -L fuzz --timeout 900 --output-on-failure > "$out/fuzz-replay.log" 2>&1)
    grep -E "tests passed|Total Test time" "$out/fuzz-replay.log"
    count_ctest "$out/fuzz-replay.log" "fuzz corpus replay"
    mkdir -p "$out/fuzz-artifacts"
    printf "%-34s %10s %8s %8s %8s %8s\n" target executions exec/s seeds corpus crashes
    for t in "${fuzz_targets[@]}"; do
      work="$out/fuzz-corpus/$t"
      mkdir -p "$work"
      cp -n "$root/tests/fuzz/corpus/$t/"* "$work/" 2>/dev/null
      seeds=$(ls "$root/tests/fuzz/corpus/$t" | wc -l)
      log="$out/fuzz-$t.log"
      (cd "$out/fuzz-artifacts" &&
         timeout $((fuzz_seconds + 300)) "$dir/tests/fuzz/$t" -max_total_time="$fuzz_seconds" -timeout=20 \
           -rss_limit_mb=4096 -max_len=512 -print_final_stats=1 -artifact_prefix="$out/fuzz-artifacts/$t-" \
           "$work" > "$log" 2>&1)
      rc=$?
      execs=$(grep -oE "stat::number_of_executed_units: [0-9]+" "$log" | grep -oE "[0-9]+$")
      rate=$(grep -oE "exec/s: [0-9]+" "$log" | tail -1 | grep -oE "[0-9]+$")
      crashes=$(ls "$out/fuzz-artifacts" | grep -c "^$t-" || true)
      printf "%-34s %10s %8s %8s %8s %8s\n" "$t" "${execs:-?}" "${rate:-?}" "$seeds" "$(ls "$work" | wc -l)" "$crashes"
      if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
      else
        note_fail "fuzzing $t (exit $rc; reproduce: $dir/tests/fuzz/$t <artifact in $out/fuzz-artifacts>)"
        grep -E -A12 "check failed|runtime error|ERROR: AddressSanitizer|ERROR: libFuzzer" "$log" | head -30
      fi
    done
  else
    note_fail "fuzz build"
  fi
fi

echo "== hardening: done in $(elapsed)"
for f in "${failures[@]}"; do echo "   failed: $f"; done
echo "hardening: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
