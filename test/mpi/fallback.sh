#!/bin/sh
# fallback.sh: the cases in which mpiv declines a job (issue 4 §1), forced with
# pml_mpiv_decline=1:
#   --mca pml mpiv,ob1  the job runs on ob1 (mpiv's open lists ob1; Open MPI 4.1 alone
#                       would honour only the first name), and mpiv says why it declined;
#   --mca pml mpiv      the job fails at once with Open MPI's "cannot be selected" error;
# and an out-of-range MCA parameter, named on stderr, after which mpiv,ob1 runs on ob1.
# Runs the `self` test program through run.sh; environment as for run.sh.
set -u
here=$(cd "$(dirname "$0")" && pwd)
log=${TMPDIR:-/tmp}/mpiv-fallback.$$
trap 'rm -f "$log"' EXIT

MPIV_TEST_PML=mpiv,ob1 \
MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_decline 1 --mca pml_mpiv_verbose 1 --mca pml_base_verbose 10" \
    "$here/run.sh" self 2 >"$log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    cat "$log"
    echo "FAIL fallback: --mca pml mpiv,ob1 with mpiv declining did not run (exit $rc)" >&2
    exit 1
fi
grep -q "declining: pml_mpiv_decline is set" "$log" || {
    cat "$log"; echo "FAIL fallback: mpiv did not say why it declined" >&2; exit 1; }
grep -q "selected ob1" "$log" || {
    cat "$log"; echo "FAIL fallback: ob1 was not selected" >&2; exit 1; }
echo "PASS fallback: mpiv,ob1 ran on ob1 after mpiv declined"

MPIV_TEST_PML=mpiv MPIV_TEST_TIMEOUT=60 MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_decline 1" \
    "$here/run.sh" self 2 >"$log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
    cat "$log"
    echo "FAIL fallback: --mca pml mpiv with mpiv declining must fail" >&2
    exit 1
fi
grep -q "cannot be selected" "$log" || {
    cat "$log"; echo "FAIL fallback: no clear selection error" >&2; exit 1; }
echo "PASS fallback: pml mpiv alone failed with a clear error when mpiv declined"

# An out-of-range parameter is named on stderr and mpiv declines: mpiv,ob1 runs on ob1.
MPIV_TEST_PML=mpiv,ob1 MPIV_TEST_MPIRUN_ARGS="--mca pml_mpiv_idle_time -5" \
    "$here/run.sh" self 2 >"$log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    cat "$log"
    echo "FAIL fallback: mpiv,ob1 with a bad pml_mpiv_idle_time did not run on ob1 (exit $rc)" >&2
    exit 1
fi
grep -q "pml_mpiv_idle_time = -5 is out of range" "$log" || {
    cat "$log"; echo "FAIL fallback: the bad parameter was not named" >&2; exit 1; }
echo "PASS fallback: a bad parameter is named and the job runs on ob1"
