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
name=fallback
trap 'rm -f "$log"' EXIT
. "$here/self_run.sh"

run_self mpiv,ob1 "--mca pml_mpiv_decline 1 --mca pml_mpiv_verbose 1 --mca pml_base_verbose 10" ||
    fail "--mca pml mpiv,ob1 with mpiv declining did not run (exit $?)"
expect "declining: pml_mpiv_decline is set" "mpiv did not say why it declined"
expect "selected ob1" "ob1 was not selected"
echo "PASS fallback: mpiv,ob1 ran on ob1 after mpiv declined"

run_self mpiv "--mca pml_mpiv_decline 1" 60 &&
    fail "--mca pml mpiv with mpiv declining must fail"
expect "cannot be selected" "no clear selection error"
echo "PASS fallback: pml mpiv alone failed with a clear error when mpiv declined"

# An out-of-range parameter is named on stderr and mpiv declines: mpiv,ob1 runs on ob1.
run_self mpiv,ob1 "--mca pml_mpiv_idle_time -5" ||
    fail "mpiv,ob1 with a bad pml_mpiv_idle_time did not run on ob1 (exit $?)"
expect "pml_mpiv_idle_time = -5 is out of range" "the bad parameter was not named"
echo "PASS fallback: a bad parameter is named and the job runs on ob1"
