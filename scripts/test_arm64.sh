#!/usr/bin/env bash
# The aarch64 check: installs what it needs with apt-get (idempotent), cross-builds the library,
# the C++ test suites and the aclnn examples for aarch64 (cmake/aarch64-linux-gnu.cmake) into
# build-arm64/, and runs them under qemu-user on emulated CPUs (sve256 only when named, below):
#   neon    -cpu max,sve=off       Armv8 with NEON and no SVE             dispatch: neon
#   sve128  -cpu a64fx,sve128=on   SVE without SVE2, 128-bit vectors      dispatch: sve
#   sve256  -cpu a64fx,sve256=on   the same, 256-bit vectors              dispatch: sve
#   sve512  -cpu a64fx,sve512=on   the same, 512-bit vectors              dispatch: sve
#   sve2    -cpu max,sve128=on     SVE2, 128-bit vectors (Neoverse N2/V2)  dispatch: sve2
# What runs where: what differs on Arm — the families' kernels, dispatch, the pool's memory
# ordering and the end-to-end bits — not the x86 run's grids again (their harness code is the
# same C++ on either architecture):
#   - neon: with the family dispatch chooses (checked: MHC_EXPECT_ISA) the kernel testers
#     (every compiled family against the float64 reference, each at its stated order), the
#     bitwise pins (neon, portable and reference in turn: the portable C++ compiled for
#     aarch64 gives x86-64's bits), the oracle agreement, the concurrency suite and the pool's
#     hand-offs under stress (MHC_POOL_STRESS_JOBS), and the aclnn examples;
#   - sve128, sve2: the kernel testers, and with the CPU's own family forced (sve; sve2) the
#     bitwise pins and the oracle's cases at D = 100;
#   - sve512, and sve256 when named: the kernel testers and the bitwise pins, forced to sve;
#   - every target: the decode path's batch invariance for bf16 x with its own family forced
#     (the lane sums are laid out by the vector width; fp16 and fp32 x differ only in the
#     load, which the kernel testers and the pins cover; portable and reference run the same
#     C++ as on x86-64).
# qemu is 10-50 times slower than the hardware, and on SVE vectors wider than 128 bits it
# makes the scalar floating-point code after any SVE instruction another 10-25 times slower.
# Never under qemu-user: EdgeSizes.WorkspaceBeyondMemory* and
# EdgeSizes.PortablePlanWithAbsurdThreadCount* (they map terabytes of PROT_NONE address
# space, for which qemu-user allocates a descriptor per page), and mhc_main_job (hours).
# Exits non-zero on any failure; the last line is "arm64: N passed, M failed (targets: ...)",
# counting GoogleTest cases of every run and the example programs.
#
# bash scripts/test_arm64.sh --record-hashes first re-records the Arm families' pinned bits
# (neon, sve/<bits>, sve2/<bits> in tests/cpp/bitwise_hashes.txt) on each CPU, keeping the
# other families' lines, then runs the check: for a change meant to alter the kernels' bits.
# Environment: MHC_ARM64_DIR (default build-arm64), MHC_ARM64_TARGETS (default neon sve128
# sve512 sve2; sve256, whose vector width sve128 and sve512 bracket, runs when named, e.g.
# MHC_ARM64_TARGETS="neon sve128 sve256 sve512 sve2").
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${MHC_ARM64_DIR:-$root/build-arm64}
record=0
[ "${1:-}" = "--record-hashes" ] && record=1
start_all=$SECONDS

# --- install (Debian 12: the cross compiler, qemu-user, the arm64 builds of the dependencies)
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
packages=(cmake ninja-build g++-aarch64-linux-gnu qemu-user libhwy-dev:arm64 libgtest-dev:arm64)
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "arm64: adding the arm64 architecture to dpkg"
  $sudo dpkg --add-architecture arm64
  added_arch=1
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "arm64: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
    { echo "arm64: apt-get install ${missing[*]} failed"; exit 1; }
elif [ -n "${added_arch:-}" ]; then
  $sudo apt-get update -qq
fi
t_install=$((SECONDS - start_all))

# The pool's hand-offs many times over (tests/cpp/thread_pool_test.cpp), on neon: under qemu a
# lost wake-up showed after 0.23 to 1.39 million jobs; about 90 s.
export MHC_POOL_STRESS_JOBS=3000000
# The decode path's batch invariance against a batch of 1200 tokens, not 4096: the batch's
# forward is most of the case's time under qemu, and any batch past 64 tokens takes the
# token-split path whose bits the decode calls must give.
export MHC_DECODE_BATCH_TOKENS=1200
neon_suites=(tests/kernels/mhc_kernel_tests tests/cpp/mhc_bitwise_identity_test tests/cpp/mhc_decode_invariance_test
             tests/cpp/mhc_oracle_agreement_test tests/cpp/mhc_concurrency_test tests/cpp/mhc_thread_pool_test)
examples=(aclnn_mhc_sinkhorn aclnn_mhc_sinkhorn_backward aclnn_mhc_post aclnn_mhc_post_backward
          aclnn_mhc_pre_sinkhorn aclnn_mhc_pre_sinkhorn_backward)
ORACLE_D100="KernelSelection.*:*_D100_*"
DECODE_BF16="*bf16"
QEMU_EXCLUDED="EdgeSizes.WorkspaceBeyondMemory*:EdgeSizes.PortablePlanWithAbsurdThreadCount*"

# --- cross build
mkdir -p "$out"
t0=$SECONDS
if ! cmake -S "$root" -B "$out" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
     -DCMAKE_BUILD_TYPE=Release -DMHC_BUILD_BENCH=OFF -DMHC_PYTHON_COPY=OFF -DMHC_TORCH_OPS=OFF > "$out/configure.log" 2>&1; then
  cat "$out/configure.log"; echo "arm64: 0 passed, 1 failed (targets: none: configure failed)"; exit 1
fi
# What the runs below use (the cross build of everything else would take as long again).
build_targets=("${neon_suites[@]}" examples/aclnn_mhc_pre examples/aclnn_mhc_pre_backward
               tests/aclnn/aclnn_example_agreement tests/aclnn/aclnn_cann_style_program)
for program in "${examples[@]}"; do build_targets+=("examples/$program"); done
if ! ninja -C "$out" "${build_targets[@]}" > "$out/build.log" 2>&1; then
  grep -E "error|FAILED" "$out/build.log" | head -40
  echo "arm64: 0 passed, 1 failed (targets: none: build failed)"; exit 1
fi
t_build=$((SECONDS - t0))
echo "== arm64: installed in ${t_install} s, built in ${t_build} s"

logs="$out/logs"
rm -rf "$logs"; mkdir -p "$logs"
passed=0
failed=0
skipped=0
failures=()
note_fail() { failed=$((failed + 1)); failures+=("$1"); echo "!! arm64: FAILED: $1"; }

declare -A cpu=([neon]="max,sve=off" [sve128]="a64fx,sve128=on" [sve256]="a64fx,sve256=on"
                [sve512]="a64fx,sve512=on" [sve2]="max,sve128=on")
declare -A dispatch=([neon]=neon [sve128]=sve [sve256]=sve [sve512]=sve [sve2]=sve2)
targets=(${MHC_ARM64_TARGETS:-neon sve128 sve512 sve2})


# glibc.cpu.name=generic: glibc's own SVE string functions (its A64FX memcpy and memset) off.
# Under qemu, every SVE instruction at vectors over 128 bits makes the scalar floating-point
# code after it 10-25 times slower, and the harness calls memcpy everywhere; the kernels'
# own SVE code is what is under test.
qemu_run() {  # qemu_run TARGET PROGRAM ARGS...
  local target=$1
  shift
  GLIBC_TUNABLES=glibc.cpu.name=generic timeout 900 qemu-aarch64 -L / -cpu "${cpu[$target]}" "$@"
}

# run_suite TARGET FAMILY BINARY FILTER: one GoogleTest binary, FAMILY "dispatch" or forced.
run_suite() {
  local target=$1 family=$2 binary=$3 filter=$4 name log rc=0 t=$SECONDS p f s
  name=$(basename "$binary")
  log="$logs/$target.$family.$name.log"
  (
    unset MHC_ISA MHC_EXPECT_ISA
    if [ "$family" = dispatch ]; then export MHC_EXPECT_ISA="${dispatch[$target]}"; else export MHC_ISA="$family"; fi
    qemu_run "$target" "$out/$binary" --gtest_filter="$filter"
  ) > "$log" 2>&1 || rc=$?
  p=$(sed -nE 's/^\[  PASSED  \] ([0-9]+) tests?\..*/\1/p' "$log" | tail -1)
  f=$(sed -nE 's/^\[  FAILED  \] ([0-9]+) tests?, listed below:.*/\1/p' "$log" | tail -1)
  s=$(sed -nE 's/^\[  SKIPPED \] ([0-9]+) tests?, listed below:.*/\1/p' "$log" | tail -1)
  p=${p:-0} f=${f:-0} s=${s:-0}
  passed=$((passed + p))
  skipped=$((skipped + s))
  printf "   %-7s %-9s %-28s %5d passed %3d failed %3d skipped %5d s\n" "$target" "$family" "$name" "$p" "$f" "$s" \
    $((SECONDS - t))
  if [ "$f" -gt 0 ]; then
    failed=$((failed + f))
    failures+=("$target $family $name: $f tests (log: $log)")
    grep -E "^\[  FAILED  \] [A-Za-z]" "$log" | head -20
  elif [ "$rc" -ne 0 ] || [ "$p" -eq 0 ]; then  # crashed, timed out, or ran nothing
    note_fail "$target $family $name: exit $rc with no failed test reported (log: $log)"
    tail -20 "$log"
  fi
}

# run_example TARGET NAME PATTERN PROGRAM ARGS...: one example program, checked by its output.
run_example() {
  local target=$1 name=$2 pattern=$3 log
  shift 3
  log="$logs/$target.example.$name.log"
  if qemu_run "$target" "$@" > "$log" 2>&1 && grep -qE "$pattern" "$log"; then
    passed=$((passed + 1))
  else
    note_fail "$target example $name (log: $log)"
    tail -10 "$log"
  fi
}

# --- re-record the Arm families' pinned bits
if [ "$record" -eq 1 ]; then
  hashes="$root/tests/cpp/bitwise_hashes.txt"
  recorded="$logs/recorded-hashes.txt"
  : > "$recorded"
  for target in "${targets[@]}"; do
    echo "== arm64: recording the pinned bits on $target"
    if ! MHC_RECORD_HASHES="$logs/$target.hashes" qemu_run "$target" "$out/tests/cpp/mhc_bitwise_identity_test" \
         --gtest_filter='BitwiseIdentity.EveryOutput*' > "$logs/$target.record.log" 2>&1; then
      tail -20 "$logs/$target.record.log"; echo "arm64: 0 passed, 1 failed (targets: recording on $target)"; exit 1
    fi
    grep -E '^(neon|sve/[0-9]+|sve2/[0-9]+) ' "$logs/$target.hashes" >> "$recorded"
  done
  # A key recorded on two CPUs (neon everywhere, sve/128 on sve128 and sve2) must agree.
  conflicts=$(sort -u "$recorded" | awk '{print $1, $2}' | uniq -d)
  if [ -n "$conflicts" ]; then
    echo "$conflicts" | head; echo "arm64: 0 passed, 1 failed (targets: recorded bits differ between CPUs)"; exit 1
  fi
  { grep -vE '^(neon|sve/[0-9]+|sve2/[0-9]+) ' "$hashes"; sort -u "$recorded"; } > "$logs/bitwise_hashes.txt"
  mv "$logs/bitwise_hashes.txt" "$hashes"
  echo "== arm64: recorded $(awk '{print $1}' "$recorded" | sort -u | tr '\n' ' ')into tests/cpp/bitwise_hashes.txt"
fi

# --- the runs: two lanes of targets side by side (the machine's two cores; most of a case's
# time under qemu is one thread of harness code), each target's results in $logs/$target.*.
# run_target TARGET: one CPU's runs (see the top); its lines are printed as they come (a lane's
# progress shows in the log) and kept in $logs/$target.summary.
run_target() {
  local target=$1 t=$SECONDS family=${dispatch[$1]} binary program sample dump
  passed=0 failed=0 skipped=0 failures=()
  {
    echo "== arm64: $target (qemu -cpu ${cpu[$target]}; dispatch: ${dispatch[$target]})"
    run_suite "$target" dispatch tests/kernels/mhc_kernel_tests "*"
    case $target in
      neon)
        for binary in "${neon_suites[@]:1}"; do
          if [ "$binary" = tests/cpp/mhc_decode_invariance_test ]; then
            run_suite "$target" neon "$binary" "$DECODE_BF16"
          elif [ "$binary" = tests/cpp/mhc_oracle_agreement_test ]; then
            # The drivers run every face on the family MHC_ISA names (the others: on x86-64).
            run_suite "$target" neon "$binary" "-$QEMU_EXCLUDED"
          else
            run_suite "$target" dispatch "$binary" "-$QEMU_EXCLUDED"
          fi
        done ;;
      sve128|sve2)
        run_suite "$target" "$family" tests/cpp/mhc_bitwise_identity_test "*"
        run_suite "$target" "$family" tests/cpp/mhc_decode_invariance_test "$DECODE_BF16"
        run_suite "$target" "$family" tests/cpp/mhc_oracle_agreement_test "$ORACLE_D100-$QEMU_EXCLUDED" ;;
      sve256|sve512)
        run_suite "$target" "$family" tests/cpp/mhc_bitwise_identity_test "*"
        run_suite "$target" "$family" tests/cpp/mhc_decode_invariance_test "$DECODE_BF16" ;;
    esac
    # The examples, on neon, as tests/aclnn/CMakeLists.txt checks them.
    [ "$target" = neon ] && for sample in forward backward; do
      program=aclnn_mhc_pre
      [ "$sample" = backward ] && program=aclnn_mhc_pre_backward
      dump="$logs/$target.$program.bin"
      run_example "$target" "$program" "." "$out/examples/$program" "$dump"
      run_example "$target" "${program}_matches_cpp_api" "all outputs identical to the C\+\+ API" \
        "$out/tests/aclnn/aclnn_example_agreement" "$sample" "$dump"
    done
    [ "$target" = neon ] && for program in "${examples[@]}"; do
      run_example "$target" "$program" ": PASSED" "$out/examples/$program"
    done
    [ "$target" = neon ] && run_example "$target" aclnn_cann_style_program \
      "all outputs agree with the double-precision computation" "$out/tests/aclnn/aclnn_cann_style_program"
    echo "== arm64: $target: $passed passed, $failed failed, $skipped skipped in $((SECONDS - t)) s"
  } > >(tee "$logs/$target.summary") 2>&1
  printf '%s\n' "$passed $failed $skipped $((SECONDS - t))" > "$logs/$target.counts"
  printf '%s\n' "${failures[@]}" > "$logs/$target.failures"
}

lanes=("neon" "sve2 sve128 sve512 sve256")  # neon carries the pool's stress test
pids=()
t_runs=$SECONDS
for lane in "${lanes[@]}"; do
  (for target in $lane; do
     [[ " ${targets[*]} " == *" $target "* ]] && run_target "$target"
   done) &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
t_runs=$((SECONDS - t_runs))

passed=0 failed=0 skipped=0 failures=()
declare -A t_target
for target in "${targets[@]}"; do
  if [ ! -s "$logs/$target.counts" ]; then note_fail "$target: no results"; continue; fi
  read -r p f s t < "$logs/$target.counts"
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  t_target[$target]=$t
  while IFS= read -r line; do [ -n "$line" ] && failures+=("$line"); done < "$logs/$target.failures"
done

times=""
for target in "${targets[@]}"; do times+=" $target ${t_target[$target]:-?} s,"; done
echo "== arm64: done in $((SECONDS - start_all)) s: install ${t_install} s, build ${t_build} s, runs ${t_runs} s" \
     "(two lanes:${times%,}); $skipped skipped"
for f in "${failures[@]}"; do echo "   failed: $f"; done
list="${targets[*]}"
echo "arm64: $passed passed, $failed failed (targets: ${list// /, })"
[ "$failed" -eq 0 ]
