#!/usr/bin/env bash
# The README's test command: install, build, run every test; then build with
# ASan+UBSan and run every test again, and run the concurrent components'
# tests under TSan. `--quick` skips the sanitizer passes.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1
# Each phase's wall time, printed at the end (pass or fail): CI shows only
# the end of the output, and its time limit is what these add up to.
phase="" phase_start=$SECONDS phase_times=""
begin() {
  [ -n "$phase" ] && phase_times+="  $phase: $((SECONDS - phase_start)) s\n"
  phase=$1 phase_start=$SECONDS
  echo "== $1"
}
# The assertions and sanitizer reports of the failed tests, shown again at
# the end: --output-on-failure prints them in the middle of the log.
failures=""
run_tests() {  # BUILD_DIR CTEST_ARGS...
  local dir=$1
  shift
  ctest --test-dir "$dir" --output-on-failure -j"$jobs" "$@" && return 0
  local rc=$?
  failures+=$(grep -a -B3 -A10 -E ': Failure$|^(==[0-9]+==)?ERROR: |WARNING: ThreadSanitizer|runtime error:' \
    "$dir/Testing/Temporary/LastTest.log" | head -200 || true)
  return $rc
}
report_times() {
  begin end >/dev/null
  if [ -n "$failures" ]; then
    printf "== what failed (from the test logs)\n%s\n" "$failures"
  fi
  printf "== phase times (total %d s)\n%b" "$SECONDS" "$phase_times"
}
trap report_times EXIT
begin "install dependencies"
scripts/install-deps.sh
jobs=$(nproc)

# The whole tree as users build it for production: Release (-O3), warnings
# as errors; every test runs against it.
begin "build (Release)"
scripts/build.sh build -DCMAKE_BUILD_TYPE=Release
begin "tests"
run_tests build --timeout 600

# The lock annotations (util/mutex.h), checked by clang: compile only.
begin "build (clang -Wthread-safety)"
scripts/thread_safety_build.sh build-tsa -DSROUTE_BUILD_TESTS=OFF \
  -DSROUTE_BUILD_BENCH=OFF

if [ "$quick" = 0 ]; then
  # Sanitizer builds at -O1 with line tables only: the reports keep file and
  # line, and the builds take 40 % less time than at -O2 -g (CI's budget).
  sanitizer_flags="-O1 -g1 -DNDEBUG"
  begin "build (ASan+UBSan)"
  scripts/build.sh build-asan -DSROUTE_SANITIZE=address,undefined \
    -DSROUTE_BUILD_BENCH=OFF \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$sanitizer_flags"
  begin "tests under ASan+UBSan"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_tests build-asan --timeout 900

  # The concurrent parts under ThreadSanitizer: the sSwitch, stages and
  # endpoints, the RPC layer, and the FUSE daemon and storage server (a race there
  # kills the process and fails the mount, server and trust tests; the
  # exerciser runs shorter there: the normal and ASan passes run 20000
  # operations per rule kind).
  begin "build (TSan): concurrent components"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSROUTE_WERROR=ON -DSROUTE_SANITIZE=thread -DSROUTE_BUILD_BENCH=OFF \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$sanitizer_flags" >/dev/null
  ninja -C build-tsan -j"$jobs" sswitch_test stages_test util_test rpc_test \
    fuse_unit_test fuse_test server_test controller_unit_test host_unit_test \
    controller_test trust_test sroute-fuse sroute-server sroute-controller \
    sroutectl sroute-trace
  begin "tests under TSan"
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp" \
  SROUTE_EXERCISE_OPS=3000 \
    run_tests build-tsan \
    -L 'sswitch_test|stages_test|util_test|rpc_test|fuse_unit_test|fuse_test|server_test|controller_unit_test|host_unit_test|controller_test|trust_test' \
    --timeout 900
fi
echo "== all tests passed"
