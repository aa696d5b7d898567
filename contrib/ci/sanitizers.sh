#!/bin/bash
# CI stage 2: build the core (GoogleTest) suites with ThreadSanitizer and with
# AddressSanitizer + UBSan, and run them. Usage: contrib/ci/sanitizers.sh [thread|address]...
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
jobs=${MPIV_JOBS:-$(nproc)}
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(thread address)

[ -x "$src/configure" ] || "$src/autogen.sh" >/dev/null
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 history_size=4"
export ASAN_OPTIONS="halt_on_error=1 detect_stack_use_after_return=0 detect_leaks=1"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1"
# UCX's memory hooks (libucm, loaded with libucp when a program starts the UCX transport)
# crash ThreadSanitizer's runtime when a thread exits; libucm reads these
# when it is loaded, so they must be in the environment before the program starts.
export UCX_MEM_MMAP_HOOK_MODE=none UCX_MEM_MALLOC_HOOKS=no

for kind in "${kinds[@]}"; do
  build="$src/_build-$kind"
  printf '\n== %s sanitizer build in %s\n' "$kind" "$build"
  mkdir -p "$build"
  cd "$build"
  [ -f Makefile ] || "$src/configure" -q --enable-sanitizer="$kind" --with-ompi=no
  tests=$(make -s print-gtest-tests)
  make -s -j"$jobs" $tests
  "$src/contrib/ci/run_tests.sh" $tests
done
