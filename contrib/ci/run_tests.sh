#!/bin/bash
# Run test programs one by one (with an optional launcher such as qemu-aarch64), keep
# each one's output in <test>.log, print a PASS/FAIL line per test and a closing count.
# Usage: contrib/ci/run_tests.sh [--launcher CMD] TEST...
set -uo pipefail
launcher=()
if [ "${1:-}" = --launcher ]; then
  read -r -a launcher <<<"$2"
  shift 2
fi
pass=0
fail=0
for t in "$@"; do
  if "${launcher[@]}" "./$t" >"$t.log" 2>&1; then
    echo "PASS: $t"
    pass=$((pass + 1))
  else
    echo "FAIL: $t"
    tail -n 80 "$t.log"
    fail=$((fail + 1))
  fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
